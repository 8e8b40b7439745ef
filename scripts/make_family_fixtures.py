#!/usr/bin/env python3
"""Golden fixtures for the encoder families beside BERT and RoBERTa (run by hand, not in CI).

Writes under tests/fixtures/:
  tiny-distilbert/  DistilBertModel (no prefix, its own names), WordPiece, sinusoidal positions
  tiny-electra/     ElectraForSequenceClassification ("electra." prefix), embedding_size 16 <
                    hidden_size 32 (embeddings_project), WordPiece
  tiny-mpnet/       MPNetForMaskedLM ("mpnet." prefix), byte-level BPE with <pad> = 1 (RoBERTa
                    positions), 32 relative-position buckets over sequences of up to ~30 tokens
  tiny-modernbert/  ModernBertForMaskedLM ("model." prefix), byte-level BPE, 3 layers: global,
                    sliding window ±4 (local_attention 8), global
  tiny-deberta-v3/  DebertaV2ForSequenceClassification ("deberta." prefix) as v3 is set up: shared
                    attention keys, 8 log position buckets, normalised relative table, no absolute
                    positions or token types; embedding_size 24 < hidden 32 (embed_proj); a
                    SentencePiece-style Unigram tokenizer.json (Metaspace)
  tiny-deberta-v2/  DebertaV2Model as v2 is set up: pos_key_proj/pos_query_proj, "c2p|p2c",
                    16 relative positions without buckets, absolute positions, 2 token types
each with texts.json and expected.safetensors:
  input_ids, attention_mask, last_hidden_state   the padded batch in eval mode (eager attention)
  probe, loss                                    loss = Σ last_hidden_state ⊙ probe in train mode
                                                 with every dropout at 0
  grad.<tensor name>                             d loss / d tensor for a few tensors (file names)

and, with --mpnet DIR (sentence-transformers/all-mpnet-base-v2 as
../shared/models/fetch-all-mpnet-base-v2.sh installs it):
  mpnet/inputs.jsonl, expected.json  sentence-transformers' embeddings (mean pooling +
                       Normalize) of six texts (one longer than its 384 tokens), max_seq_length

Usage: python3 scripts/make_family_fixtures.py [--mpnet ~/.cache/longread/models/all-mpnet-base-v2]
Needs: torch, transformers, tokenizers, safetensors (and sentence-transformers for --mpnet).
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_encoder_fixtures import (FIXTURES, MINILM_TEXTS, TEXTS, byte_bpe_tokenizer,  # noqa: E402
                                   wordpiece_tokenizer)

COMMON = dict(num_hidden_layers=2, num_attention_heads=4, attn_implementation="eager")


def randomize(model, seed):
    """Random weights of a useful scale; norm weights near 1, biases small (any family's names)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "position_embeddings" in name and getattr(model.config, "sinusoidal_pos_embds", False):
                continue  # DistilBERT's sinusoidal table stays as initialised.
            if "norm" in name.lower() and name.endswith("weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=g))


def write_case(name, model, tok, pad_id, seed, grads):
    out = os.path.join(FIXTURES, name)
    os.makedirs(out, exist_ok=True)
    for old in os.listdir(out):
        os.remove(os.path.join(out, old))
    randomize(model, seed)
    model.eval()
    model.save_pretrained(out)
    tok.save(os.path.join(out, "tokenizer.json"))

    encs = tok.encode_batch(TEXTS)
    width = max(len(e.ids) for e in encs)
    ids = torch.tensor([e.ids + [pad_id] * (width - len(e.ids)) for e in encs], dtype=torch.int64)
    mask = torch.tensor([[1] * len(e.ids) + [0] * (width - len(e.ids)) for e in encs], dtype=torch.int64)
    prefix = model.base_model_prefix
    base = getattr(model, prefix, model)
    with torch.no_grad():
        hidden = base(input_ids=ids, attention_mask=mask).last_hidden_state

    # Gradients in train mode with no dropout (so the Rust side can reproduce them exactly).
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    model.train()
    probe = torch.randn(hidden.shape, generator=torch.Generator().manual_seed(seed + 100))
    with torch.enable_grad():
        loss = (base(input_ids=ids, attention_mask=mask).last_hidden_state * probe).sum()
        loss.backward()
    params = dict(model.named_parameters())
    tensors = {"input_ids": ids, "attention_mask": mask, "last_hidden_state": hidden.contiguous(),
               "probe": probe, "loss": loss.detach().reshape(1)}
    file_prefix = "" if base is model else prefix + "."
    for local in grads:
        tensors[f"grad.{local}"] = params[file_prefix + local].grad.contiguous()
    save_file(tensors, os.path.join(out, "expected.safetensors"))
    with open(os.path.join(out, "texts.json"), "w") as f:
        json.dump(TEXTS, f, ensure_ascii=False, indent=1)
    print(f"{name}: {sum(p.numel() for p in model.parameters())} parameters, batch {tuple(ids.shape)}, "
          f"loss {loss.item():.4f}")


def main():
    from transformers import (DistilBertConfig, DistilBertModel, ElectraConfig, ElectraForSequenceClassification,
                              MPNetConfig, MPNetForMaskedLM)

    torch.manual_seed(0)
    wp = wordpiece_tokenizer()
    distil = DistilBertConfig(vocab_size=wp.get_vocab_size(), dim=32, hidden_dim=64, n_layers=2, n_heads=4,
                              max_position_embeddings=64, sinusoidal_pos_embds=True, activation="gelu",
                              attn_implementation="eager")
    write_case("tiny-distilbert", DistilBertModel(distil), wp, pad_id=0, seed=11,
               grads=["embeddings.word_embeddings.weight", "transformer.layer.0.attention.q_lin.weight",
                      "transformer.layer.1.ffn.lin1.weight", "transformer.layer.1.output_layer_norm.weight"])

    electra = ElectraConfig(vocab_size=wp.get_vocab_size(), embedding_size=16, hidden_size=32, intermediate_size=64,
                            max_position_embeddings=64, type_vocab_size=2, hidden_act="gelu", num_labels=3,
                            **COMMON)
    write_case("tiny-electra", ElectraForSequenceClassification(electra), wp, pad_id=0, seed=12,
               grads=["embeddings.word_embeddings.weight", "embeddings.LayerNorm.weight",
                      "embeddings_project.weight", "encoder.layer.0.attention.self.key.weight"])

    bpe = byte_bpe_tokenizer()
    mpnet = MPNetConfig(vocab_size=bpe.get_vocab_size(), hidden_size=32, intermediate_size=64,
                        max_position_embeddings=66, relative_attention_num_buckets=32, layer_norm_eps=1e-5,
                        pad_token_id=1, bos_token_id=0, eos_token_id=2, hidden_act="gelu", **COMMON)
    write_case("tiny-mpnet", MPNetForMaskedLM(mpnet), bpe, pad_id=1, seed=13,
               grads=["embeddings.word_embeddings.weight", "encoder.relative_attention_bias.weight",
                      "encoder.layer.0.attention.attn.q.weight", "encoder.layer.1.attention.LayerNorm.weight"])

    from transformers import ModernBertConfig, ModernBertForMaskedLM
    modern = ModernBertConfig(vocab_size=bpe.get_vocab_size(), hidden_size=32, intermediate_size=48,
                              num_hidden_layers=3, num_attention_heads=4, global_attn_every_n_layers=2,
                              local_attention=8, max_position_embeddings=128, norm_eps=1e-5, pad_token_id=1,
                              bos_token_id=0, eos_token_id=2, cls_token_id=0, sep_token_id=2,
                              hidden_activation="gelu", attn_implementation="eager")
    write_case("tiny-modernbert", ModernBertForMaskedLM(modern), bpe, pad_id=1, seed=14,
               grads=["embeddings.tok_embeddings.weight", "layers.1.attn.Wqkv.weight", "layers.2.mlp.Wi.weight",
                      "final_norm.weight"])


def all_mpnet(path):
    from sentence_transformers import SentenceTransformer

    st = SentenceTransformer(path, device="cpu")
    # MiniLM's texts, the longest made longer than all-mpnet-base-v2's 384 tokens (~480).
    texts = MINILM_TEXTS[:-1] + [" ".join(["Attention weights show which parts of a document drove the decision."] * 37)]
    emb = st.encode(texts, batch_size=4, convert_to_numpy=True)
    out = os.path.join(FIXTURES, "mpnet")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "inputs.jsonl"), "w") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": f"s{i}", "text": t, "source": "fixture"}, ensure_ascii=False) + "\n")
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump({"max_seq_length": st.max_seq_length, "embeddings": emb.tolist()}, f)
    print(f"mpnet: {emb.shape}, max_seq_length {st.max_seq_length}")


def unigram_tokenizer():
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    from make_encoder_fixtures import CORPUS
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFKC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.UnigramTrainer(vocab_size=300, special_tokens=["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"],
                                      unk_token="[UNK]")
    tok.train_from_iterator(CORPUS, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", 1), ("[SEP]", 2)])
    tok.decoder = decoders.Metaspace()
    return tok


def deberta():
    from transformers import DebertaV2Config, DebertaV2ForSequenceClassification, DebertaV2Model

    sp = unigram_tokenizer()
    v3 = DebertaV2Config(vocab_size=sp.get_vocab_size(), hidden_size=32, embedding_size=24, intermediate_size=64,
                         max_position_embeddings=64, relative_attention=True, position_buckets=8,
                         max_relative_positions=-1, pos_att_type=["p2c", "c2p"], share_att_key=True,
                         norm_rel_ebd="layer_norm", position_biased_input=False, type_vocab_size=0,
                         layer_norm_eps=1e-7, hidden_act="gelu", pad_token_id=0, num_labels=3, **COMMON)
    write_case("tiny-deberta-v3", DebertaV2ForSequenceClassification(v3), sp, pad_id=0, seed=15,
               grads=["embeddings.word_embeddings.weight", "embeddings.embed_proj.weight",
                      "encoder.rel_embeddings.weight", "encoder.layer.0.attention.self.query_proj.weight"])
    v2 = DebertaV2Config(vocab_size=sp.get_vocab_size(), hidden_size=32, intermediate_size=64,
                         max_position_embeddings=64, relative_attention=True, max_relative_positions=16,
                         pos_att_type="c2p|p2c", share_att_key=False, position_biased_input=True, type_vocab_size=2,
                         layer_norm_eps=1e-7, hidden_act="gelu", pad_token_id=0, **COMMON)
    write_case("tiny-deberta-v2", DebertaV2Model(v2), sp, pad_id=0, seed=16,
               grads=["embeddings.position_embeddings.weight", "encoder.rel_embeddings.weight",
                      "encoder.layer.1.attention.self.pos_key_proj.weight",
                      "encoder.layer.0.attention.self.pos_query_proj.weight"])


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--mpnet", help="all-mpnet-base-v2 directory: also write mpnet/expected.json")
    args = ap.parse_args()
    main()
    deberta()
    if args.mpnet:
        all_mpnet(args.mpnet)
