#!/usr/bin/env python3
"""Golden fixture for longread's masked-language-model head (run by hand, not in CI).

Writes tests/fixtures/tiny-roberta-mlm/: a RobertaForMaskedLM (tiny-roberta's shape and
tokenizer, hidden_act "gelu", random weights with non-trivial LayerNorm and biases) as
`save_pretrained` writes it (decoder tied to the word embeddings), and expected.safetensors =
{input_ids, attention_mask, labels, logits, loss} for a padded batch with some positions
masked (labels -100 elsewhere), in eval mode with eager attention.

Also writes tests/fixtures/pretrained-mlm/: what `longread pretrain` writes for a very small
RoBERTa (config below, tokenizer of tiny-roberta, 40 steps on the synthetic corpus), with
expected.safetensors = transformers' RobertaForMaskedLM logits for a padded batch: the
pretraining output must load in transformers with no missing or unexpected keys and give
the same logits.

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
from transformers import RobertaConfig, RobertaForMaskedLM

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
OUT = os.path.join(FIXTURES, "tiny-roberta-mlm")


def main():
    torch.manual_seed(11)
    config = RobertaConfig(vocab_size=400, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                           intermediate_size=64, max_position_embeddings=66, type_vocab_size=1,
                           layer_norm_eps=1e-5, pad_token_id=1, bos_token_id=0, eos_token_id=2,
                           hidden_act="gelu", attn_implementation="eager")
    model = RobertaForMaskedLM(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias") or "LayerNorm" in name or "layer_norm" in name:
                p.add_(torch.randn_like(p) * 0.1)
    shutil.rmtree(OUT, ignore_errors=True)
    model.save_pretrained(OUT)
    shutil.copy(os.path.join(FIXTURES, "tiny-roberta", "tokenizer.json"), os.path.join(OUT, "tokenizer.json"))

    input_ids = torch.tensor([[0, 45, 4, 87, 120, 4, 9, 2, 1, 1],
                              [0, 300, 17, 4, 55, 66, 77, 88, 99, 2]])
    attention_mask = (input_ids != 1).long()
    labels = torch.full_like(input_ids, -100)
    labels[0, 2], labels[0, 5], labels[1, 3], labels[1, 6] = 33, 250, 12, 77
    with torch.no_grad():
        out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    save_file({"input_ids": input_ids.to(torch.int64), "attention_mask": attention_mask.to(torch.int64),
               "labels": labels.to(torch.int64), "logits": out.logits.contiguous(),
               "loss": out.loss.reshape(1)}, os.path.join(OUT, "expected.safetensors"))
    print(f"tiny-roberta-mlm: loss {out.loss.item():.6f}, logits {tuple(out.logits.shape)}")


def pretrained_case(longread):
    out = os.path.join(FIXTURES, "pretrained-mlm")
    shutil.rmtree(out, ignore_errors=True)
    config = {"model_type": "roberta", "vocab_size": 400, "hidden_size": 32, "num_hidden_layers": 2,
              "num_attention_heads": 4, "intermediate_size": 64, "max_position_embeddings": 66,
              "type_vocab_size": 1, "layer_norm_eps": 1e-5, "pad_token_id": 1, "hidden_act": "gelu",
              "architectures": ["RobertaForMaskedLM"], "tie_word_embeddings": True}
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "config.json")
        with open(path, "w") as f:
            json.dump(config, f)
        run = os.path.join(tmp, "run")
        subprocess.run([longread, "--quiet", "pretrain", "--corpus", os.path.join(FIXTURES, "synthetic"),
                        "--tokenizer", os.path.join(FIXTURES, "tiny-roberta"), "--config", path, "--out", run,
                        "--max-steps", "40", "--batch-size", "4", "--seq-len", "48", "--eval-every", "20",
                        "--lr", "3e-3", "--warmup-steps", "4", "--seed", "3"], check=True)
        os.makedirs(out)
        for name in ("config.json", "model.safetensors", "tokenizer.json"):
            shutil.copy(os.path.join(run, name), os.path.join(out, name))
    model, info = RobertaForMaskedLM.from_pretrained(out, output_loading_info=True, attn_implementation="eager")
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    model.eval()
    input_ids = torch.tensor([[0, 45, 4, 87, 120, 4, 9, 2, 1, 1], [0, 300, 17, 4, 55, 66, 77, 88, 99, 2]])
    attention_mask = (input_ids != 1).long()
    with torch.no_grad():
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
    save_file({"input_ids": input_ids.to(torch.int64), "attention_mask": attention_mask.to(torch.int64),
               "logits": logits.contiguous()}, os.path.join(out, "expected.safetensors"))
    print(f"pretrained-mlm: loaded with {info}")


if __name__ == "__main__":
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--longread", default=os.path.join(ROOT, "target", "release", "longread"))
    args = ap.parse_args()
    main()
    pretrained_case(args.longread)
