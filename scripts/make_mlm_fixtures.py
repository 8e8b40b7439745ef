#!/usr/bin/env python3
"""Golden fixture for longread's masked-language-model head (run by hand, not in CI).

Writes tests/fixtures/tiny-roberta-mlm/: a RobertaForMaskedLM (tiny-roberta's shape and
tokenizer, hidden_act "gelu", random weights with non-trivial LayerNorm and biases) as
`save_pretrained` writes it (decoder tied to the word embeddings), and expected.safetensors =
{input_ids, attention_mask, labels, logits, loss} for a padded batch with some positions
masked (labels -100 elsewhere), in eval mode with eager attention.

Writes tests/fixtures/tiny-bert-mlm/ the same way for a BertForMaskedLM (tiny-bert's
tokenizer; hidden_act "relu", which BERT's head applies too, where RoBERTa's always uses
exact GELU), with its head under BERT's names (`cls.predictions.…`).

Also writes tests/fixtures/pretrained-mlm/: what `longread pretrain` writes for a very small
RoBERTa (config below, tokenizer of tiny-roberta, 40 steps on the synthetic corpus), with
expected.safetensors = transformers' RobertaForMaskedLM logits for a padded batch: the
pretraining output must load in transformers with no missing or unexpected keys and give
the same logits.

And tests/fixtures/continued-mlm/: what `longread pretrain --model tests/fixtures/tiny-bert`
writes (tiny-bert is a bare BertModel: a new masked-LM head), 30 steps; it must load in
transformers' BertForMaskedLM with no missing or unexpected keys, with expected.safetensors =
its logits for a padded batch.

Usage: cargo build --release -p longread-cli && python3 scripts/make_mlm_fixtures.py
Needs: torch, transformers, safetensors.
"""
import json
import os
import shutil
import subprocess
import tempfile

import torch
from safetensors.torch import save_file
from transformers import BertConfig, BertForMaskedLM, RobertaConfig, RobertaForMaskedLM

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FIXTURES = os.path.join(ROOT, "tests", "fixtures")


def golden_case(model, name, tokenizer_dir, input_ids, pad_id):
    """Perturbs `model`'s biases and LayerNorms (non-trivial), saves it as fixtures/`name` with
    `tokenizer_dir`'s tokenizer, and its logits and loss for `input_ids` with four masked
    positions labelled."""
    out = os.path.join(FIXTURES, name)
    model.eval()
    with torch.no_grad():
        for param_name, p in model.named_parameters():
            if param_name.endswith("bias") or "LayerNorm" in param_name or "layer_norm" in param_name:
                p.add_(torch.randn_like(p) * 0.1)
    shutil.rmtree(out, ignore_errors=True)
    model.save_pretrained(out)
    shutil.copy(os.path.join(FIXTURES, tokenizer_dir, "tokenizer.json"), os.path.join(out, "tokenizer.json"))
    attention_mask = (input_ids != pad_id).long()
    labels = torch.full_like(input_ids, -100)
    labels[0, 2], labels[0, 5], labels[1, 3], labels[1, 6] = 33, 250, 12, 77
    with torch.no_grad():
        res = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    save_file({"input_ids": input_ids.to(torch.int64), "attention_mask": attention_mask.to(torch.int64),
               "labels": labels.to(torch.int64), "logits": res.logits.contiguous(),
               "loss": res.loss.reshape(1)}, os.path.join(out, "expected.safetensors"))
    print(f"{name}: loss {res.loss.item():.6f}, logits {tuple(res.logits.shape)}")


def main():
    torch.manual_seed(11)
    config = RobertaConfig(vocab_size=400, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=64, max_position_embeddings=66, type_vocab_size=1,
                           layer_norm_eps=1e-5, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                           hidden_act="gelu", attn_implementation="eager")
    input_ids = torch.tensor([[0, 45, 4, 87, 120, 4, 9, 2, 1, 1],
                              [0, 300, 17, 4, 55, 66, 77, 88, 99, 2]])
    golden_case(RobertaForMaskedLM(config), "tiny-roberta-mlm", "tiny-roberta", input_ids, pad_id=1)


def bert_case():
    torch.manual_seed(12)
    config = BertConfig(vocab_size=300, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64, type_vocab_size=2,
                        layer_norm_eps=1e-12, pad_token_id=0, hidden_act="relu", attn_implementation="eager")
    # [CLS] = 2, [SEP] = 3, [MASK] = 4, [PAD] = 0 in tiny-bert's vocabulary.
    input_ids = torch.tensor([[2, 45, 4, 87, 120, 4, 9, 3, 0, 0],
                              [2, 200, 17, 4, 55, 66, 77, 88, 99, 3]])
    golden_case(BertForMaskedLM(config), "tiny-bert-mlm", "tiny-bert", input_ids, pad_id=0)


def pretraining_case(longread, name, flags, model_class, input_ids, pad_id):
    """Runs `longread pretrain FLAGS --out …` and keeps its config, weights and tokenizer as
    fixtures/`name`; they must load in `model_class` with no missing or unexpected keys, and its
    logits for `input_ids` are saved as expected.safetensors."""
    out = os.path.join(FIXTURES, name)
    shutil.rmtree(out, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        run = os.path.join(tmp, "run")
        subprocess.run([longread, "--quiet", "pretrain", "--corpus", os.path.join(FIXTURES, "synthetic"),
                        "--out", run, "--batch-size", "4", "--seq-len", "48", "--lr", "3e-3"] + flags(tmp),
                       check=True)
        os.makedirs(out)
        for file in ("config.json", "model.safetensors", "tokenizer.json"):
            shutil.copy(os.path.join(run, file), os.path.join(out, file))
    model, info = model_class.from_pretrained(out, output_loading_info=True, attn_implementation="eager")
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    model.eval()
    attention_mask = (input_ids != pad_id).long()
    with torch.no_grad():
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
    save_file({"input_ids": input_ids.to(torch.int64), "attention_mask": attention_mask.to(torch.int64),
               "logits": logits.contiguous()}, os.path.join(out, "expected.safetensors"))
    print(f"{name}: loaded with {info}")


def pretrained_case(longread):
    config = {"model_type": "roberta", "vocab_size": 400, "hidden_size": 32, "num_hidden_layers": 2,
              "num_attention_heads": 4, "intermediate_size": 64, "max_position_embeddings": 66,
              "type_vocab_size": 1, "layer_norm_eps": 1e-5, "pad_token_id": 1, "hidden_act": "gelu",
              "architectures": ["RobertaForMaskedLM"], "tie_word_embeddings": True}

    def flags(tmp):
        path = os.path.join(tmp, "config.json")
        with open(path, "w") as f:
            json.dump(config, f)
        return ["--tokenizer", os.path.join(FIXTURES, "tiny-roberta"), "--config", path, "--max-steps", "40",
                "--eval-every", "20", "--warmup-steps", "4", "--seed", "3"]

    input_ids = torch.tensor([[0, 45, 4, 87, 120, 4, 9, 2, 1, 1], [0, 300, 17, 4, 55, 66, 77, 88, 99, 2]])
    pretraining_case(longread, "pretrained-mlm", flags, RobertaForMaskedLM, input_ids, pad_id=1)


def continued_case(longread):
    def flags(_tmp):
        return ["--model", os.path.join(FIXTURES, "tiny-bert"), "--max-steps", "30", "--eval-every", "15",
                "--warmup-steps", "3", "--seed", "5"]

    input_ids = torch.tensor([[2, 45, 4, 87, 120, 4, 9, 3, 0, 0], [2, 200, 17, 4, 55, 66, 77, 88, 99, 3]])
    pretraining_case(longread, "continued-mlm", flags, BertForMaskedLM, input_ids, pad_id=0)


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--longread", default=os.path.join(ROOT, "target", "release", "longread"))
    args = ap.parse_args()
    main()
    bert_case()
    pretrained_case(args.longread)
    continued_case(args.longread)
