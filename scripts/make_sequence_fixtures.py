"""Golden fixtures for the single-chunk baseline (`longread train --arch sequence`).

For each tiny encoder (tiny-bert, tiny-roberta, tiny-distilbert, tiny-electra, tiny-mpnet,
tiny-modernbert, tiny-deberta-v3) this trains a sequence classifier with the Rust
CLI, then loads the output with transformers' `AutoModelForSequenceClassification.from_pretrained`
(which must report no missing, unexpected or mismatched keys and pick the
`BertForSequenceClassification` / `RobertaForSequenceClassification` class) and records its logits
on the documents of `tests/fixtures/hier/documents.jsonl`, truncated to the model's chunk size by
the HF tokenizer:

  tests/fixtures/seq/{bert,roberta,distilbert,electra,mpnet,modernbert,deberta}/  config.json, model.safetensors, tokenizer.json,
                                      provenance.json, expected.json ({id, ids, logits} per document)

Usage: cargo build --release -p longread-cli &&
       python3 scripts/make_sequence_fixtures.py [--longread target/release/longread] [--cases bert,mpnet]
"""
import argparse
import json
import os
import shutil
import subprocess
import tempfile

import torch
from tokenizers import Tokenizer
from transformers import AutoModelForSequenceClassification

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
OUT = os.path.join(FIXTURES, "seq")
CASES = {"bert": ("tiny-bert", "BertForSequenceClassification"),
         "roberta": ("tiny-roberta", "RobertaForSequenceClassification"),
         "distilbert": ("tiny-distilbert", "DistilBertForSequenceClassification"),
         "electra": ("tiny-electra", "ElectraForSequenceClassification"),
         "mpnet": ("tiny-mpnet", "MPNetForSequenceClassification"),
         "modernbert": ("tiny-modernbert", "ModernBertForSequenceClassification"),
         "deberta": ("tiny-deberta-v3", "DebertaV2ForSequenceClassification"),
         "bert-multilabel": ("tiny-bert", "BertForSequenceClassification")}
# Trained with --multi-label on label sets made from the synthetic texts' words (below): config.json
# must carry problem_type "multi_label_classification", so that transformers computes its loss
# with BCEWithLogitsLoss; expected.json then also holds each document's set and that loss.
MULTI_LABEL = {"bert-multilabel"}
WORD_LABELS = {"committee": "committee", "prices": "prices", "rain": "rain"}


def word_labels(text):
    """A document's labels: each of WORD_LABELS whose word it contains (any case)."""
    lower = text.lower()
    return sorted(label for word, label in WORD_LABELS.items() if word in lower)
TRAIN_FLAGS = ["--arch", "sequence", "--dev-split", "0.25", "--epochs", "2", "--lr", "1e-3", "--batch-size", "4",
               "--seed", "7", "--train-embeddings"]


def train(longread, encoder, out, multi_label=False):
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "train.jsonl")
        with open(os.path.join(FIXTURES, "synthetic", "train.jsonl")) as f, open(data, "w") as g:
            lines = list(f)[:16]
            if multi_label:
                docs = [json.loads(l) for l in lines]
                lines = [json.dumps({"id": d["id"], "text": d["text"], "labels": word_labels(d["text"])}) + "\n"
                         for d in docs]
            g.writelines(lines)
        run = os.path.join(tmp, "run")
        flags = TRAIN_FLAGS + (["--multi-label"] if multi_label else [])
        subprocess.run([longread, "--quiet", "train", "--model", os.path.join(FIXTURES, encoder), "--train", data,
                        "--out", run, *flags], check=True)
        os.makedirs(out)
        for file in ("config.json", "model.safetensors", "tokenizer.json"):
            shutil.copy(os.path.join(run, file), os.path.join(out, file))
    with open(os.path.join(out, "provenance.json"), "w") as f:
        json.dump({"trained_from": encoder, "data": "synthetic/train.jsonl, first 16", "train_flags": TRAIN_FLAGS},
                  f, indent=1)


def expected(out, architecture):
    model, info = AutoModelForSequenceClassification.from_pretrained(out, output_loading_info=True)
    assert type(model).__name__ == architecture, type(model).__name__
    for kind in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        assert not info[kind], f"{out}: {kind} {info[kind]}"
    model.eval()
    chunk_size = json.load(open(os.path.join(out, "config.json")))["longread"]["chunk_size"]
    tokenizer = Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=chunk_size)
    rows = []
    with open(os.path.join(FIXTURES, "hier", "documents.jsonl")) as f:
        for line in f:
            doc = json.loads(line)
            ids = tokenizer.encode(doc["text"]).ids
            logits = model(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long))
            row = {"id": doc["id"], "ids": ids, "logits": logits.logits[0].tolist()}
            if model.config.problem_type == "multi_label_classification":
                gold = word_labels(doc["text"])
                target = torch.tensor([[1.0 if l in gold else 0.0 for l in model.config.id2label.values()]])
                loss = model(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             labels=target).loss
                row.update(labels=gold, loss=loss.item(), probabilities=torch.sigmoid(logits.logits[0]).tolist())
            rows.append(row)
    return rows


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--longread", default=os.path.join(ROOT, "target", "release", "longread"))
    ap.add_argument("--cases", default=",".join(CASES), help="which of them to (re)write")
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    for name in args.cases.split(","):
        encoder, architecture = CASES[name]
        out = os.path.join(OUT, name)
        shutil.rmtree(out, ignore_errors=True)
        train(args.longread, encoder, out, multi_label=name in MULTI_LABEL)
        rows = expected(out, architecture)
        with open(os.path.join(out, "expected.json"), "w") as f:
            json.dump(rows, f, indent=1)
        print(f"{name}: {architecture}, tokens per document {[len(r['ids']) for r in rows]}")
