#!/usr/bin/env python3
"""Golden fixtures for longread's encoder tests (run by hand, not in CI).

Writes under tests/fixtures/:
  tiny-bert/          BertModel (no weight prefix), WordPiece tokenizer, hidden_act "gelu"
  tiny-roberta/       RobertaForSequenceClassification ("roberta." prefix), byte-level BPE,
                      hidden_act "gelu_new"
  tiny-bert-sharded/  BertForMaskedLM ("bert." prefix) saved in several shards with an index,
                      hidden_act "gelu_pytorch_tanh", pre-2019 LayerNorm names are NOT used
each with expected.safetensors = {input_ids, attention_mask, last_hidden_state} for a padded
batch of texts (transformers' eager attention, eval mode), and
  minilm/             inputs.jsonl + expected.json: sentence-transformers embeddings of
                      ../shared/models/all-MiniLM-L6-v2: "embeddings" from the model's own
                      pipeline (mean pooling + Normalize), "raw_embeddings" without Normalize.

Usage: python3 scripts/make_encoder_fixtures.py [--shared ../shared]
Needs: torch, transformers, tokenizers, sentence-transformers, safetensors.
"""
import argparse
import json
import os
import shutil

import torch
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FIXTURES = os.path.join(ROOT, "tests", "fixtures")

CORPUS = [
    "The committee met on Tuesday to discuss the budget for next year.",
    "Long documents such as transcripts and screenplays exceed what a transformer can read at once.",
    "A hierarchical model splits the text into chunks, encodes each chunk and attends over them.",
    "Rain is expected over the weekend, with strong winds along the coast.",
    "She said the results were surprising, but the method was sound.",
    "Prices rose by 3.5% in October; analysts had expected 2.9%.",
    "Ünïcödé text, emojis 🙂 and punctuation — all must survive tokenization!",
    "The quick brown fox jumps over the lazy dog while the cat watches.",
    "Teenagers and adults rated the film differently in the survey.",
    "Attention weights show which parts of a document drove the decision.",
] * 3

TEXTS = [
    "The committee met on Tuesday.",
    "Attention weights show which chunks of a long document drove the decision, and why.",
    "Ünïcödé 🙂!",
    "Rain is expected over the weekend, with strong winds along the coast; prices rose by 3.5%.",
]


def wordpiece_tokenizer():
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(
        vocab_size=300, special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    )
    tok.train_from_iterator(CORPUS, trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[("[CLS]", cls), ("[SEP]", sep)]
    )
    tok.decoder = decoders.WordPiece()
    return tok


def byte_bpe_tokenizer():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<s>", "<pad>", "</s>", "<unk>", "<mask>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(CORPUS, trainer)
    tok.post_processor = processors.RobertaProcessing(("</s>", 2), ("<s>", 0), trim_offsets=True, add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return tok


def randomize(model, seed):
    """Random weights of a useful scale (transformers' 0.02 init makes near-constant outputs),
    LayerNorm weights and biases included, so a mistake in any of them shows."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm.weight" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.2 * torch.randn(p.shape, generator=g))


def write_case(name, model_cls, config, tok, pad_id, seed, **save_kwargs):
    out = os.path.join(FIXTURES, name)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)
    torch.manual_seed(seed)
    model = model_cls(config)
    randomize(model, seed)
    model.eval()
    model.save_pretrained(out, **save_kwargs)
    tok.save(os.path.join(out, "tokenizer.json"))

    encs = tok.encode_batch(TEXTS)
    width = max(len(e.ids) for e in encs)
    ids = torch.tensor([e.ids + [pad_id] * (width - len(e.ids)) for e in encs], dtype=torch.int64)
    mask = torch.tensor([[1] * len(e.ids) + [0] * (width - len(e.ids)) for e in encs], dtype=torch.int64)
    base = getattr(model, model.base_model_prefix, model)
    with torch.no_grad():
        hidden = base(input_ids=ids, attention_mask=mask).last_hidden_state
    save_file(
        {"input_ids": ids, "attention_mask": mask, "last_hidden_state": hidden.contiguous()},
        os.path.join(out, "expected.safetensors"),
    )
    with open(os.path.join(out, "texts.json"), "w") as f:
        json.dump(TEXTS, f, ensure_ascii=False, indent=1)
    print(f"{name}: {sum(p.numel() for p in model.parameters())} parameters, batch {tuple(ids.shape)}")


def tiny_models():
    from transformers import BertConfig, BertForMaskedLM, BertModel, RobertaConfig, RobertaForSequenceClassification

    wp = wordpiece_tokenizer()
    common = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                  attn_implementation="eager")
    bert = BertConfig(vocab_size=wp.get_vocab_size(), max_position_embeddings=64, hidden_act="gelu",
                      layer_norm_eps=1e-12, **common)
    write_case("tiny-bert", BertModel, bert, wp, pad_id=0, seed=1)

    sharded = BertConfig(vocab_size=wp.get_vocab_size(), max_position_embeddings=64,
                         hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-7, type_vocab_size=2, **common)
    write_case("tiny-bert-sharded", BertForMaskedLM, sharded, wp, pad_id=0, seed=2, max_shard_size="40KB")

    bpe = byte_bpe_tokenizer()
    roberta = RobertaConfig(vocab_size=bpe.get_vocab_size(), max_position_embeddings=66, pad_token_id=1,
                            bos_token_id=0, eos_token_id=2, type_vocab_size=1, hidden_act="gelu_new",
                            layer_norm_eps=1e-5, num_labels=3, **common)
    write_case("tiny-roberta", RobertaForSequenceClassification, roberta, bpe, pad_id=1, seed=3)


MINILM_TEXTS = [
    "The committee met on Tuesday to discuss the budget.",
    "A hierarchical transformer reads long documents chunk by chunk.",
    "Ünïcödé, emojis 🙂 and punctuation — all handled.",
    "short",
    # ~170 word pieces: longer than tokenizer.json's 128, shorter than sentence-transformers' 256.
    " ".join(["Long documents such as transcripts and screenplays exceed what a transformer reads."] * 12),
    # > 256 word pieces: truncated by sentence-transformers (and by longread, with a warning).
    " ".join(["Attention weights show which parts of a document drove the decision."] * 30),
]


def minilm(shared):
    from sentence_transformers import SentenceTransformer

    path = os.path.join(shared, "models", "all-MiniLM-L6-v2")
    st = SentenceTransformer(path, device="cpu")
    # The model's own pipeline ends with a Normalize module: its output is L2-normalised.
    emb = st.encode(MINILM_TEXTS, batch_size=4, convert_to_numpy=True)
    # Transformer + Pooling only: the un-normalised mean embeddings.
    raw_model = SentenceTransformer(modules=[st[0], st[1]], device="cpu")
    raw = raw_model.encode(MINILM_TEXTS, batch_size=4, convert_to_numpy=True)
    out = os.path.join(FIXTURES, "minilm")
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "inputs.jsonl"), "w") as f:
        for i, t in enumerate(MINILM_TEXTS):
            f.write(json.dumps({"id": f"s{i}", "text": t, "source": "fixture"}, ensure_ascii=False) + "\n")
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump({"max_seq_length": st.max_seq_length, "embeddings": emb.tolist(),
                   "raw_embeddings": raw.tolist()}, f)
    print(f"minilm: {emb.shape}, max_seq_length {st.max_seq_length}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"))
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    tiny_models()
    minilm(args.shared)
