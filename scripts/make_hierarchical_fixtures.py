#!/usr/bin/env python3
"""Golden fixtures for the hierarchical classifier (run by hand, not in CI).

Writes tests/fixtures/hier/:
  documents.jsonl              documents of 1, 2, many and > max_chunks windows (+ Unicode)
  <case>/                      a model directory (format v1) on the tiny BERT or RoBERTa encoder
                               with a random head, and expected.json = the reference's outputs
                               for chunk_selection "head" and "spread"
  trained-bert-attention/      bert-attention after 3 epochs of `longread train` (embeddings,
                               encoder and head all trained) + expected.json: proves that what
                               training writes loads in the reference with the same predictions
  trained-multitask/           the same with a second task ("size") and its own head: every
                               task's logits and attention
  minilm/                      head.safetensors + section.json + documents.jsonl + expected.json:
                               a random head on ../shared/models/all-MiniLM-L6-v2 (the Rust test
                               assembles the model directory, 90 MB, at run time)
Chunk size 16 (stride 4) on the tiny encoders gives many windows from short texts.

Usage: cargo build --release -p longread-cli &&
       python3 scripts/make_hierarchical_fixtures.py [--shared ../shared] [--longread target/release/longread]
       python3 scripts/make_hierarchical_fixtures.py --only bert-label-attention   (one tiny case)
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_hierarchical import SECTION_DEFAULTS, Chunker, HierarchicalReference  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
OUT = os.path.join(FIXTURES, "hier")
LABELS = ["general", "teen", "mature"]

DOCUMENTS = [
    {"id": "one-window", "text": "The committee met on Tuesday."},
    {"id": "two-windows", "text": "Rain is expected over the weekend, with strong winds along the coast and more."},
    {"id": "many-windows", "text": "Long documents such as transcripts and screenplays exceed what a transformer "
                                    "can read at once. A hierarchical model splits the text into chunks, encodes "
                                    "each chunk and attends over them. Ünïcödé 🙂 survives."},
    {"id": "beyond-max", "text": " ".join([
        "She said the results were surprising, but the method was sound.",
        "Prices rose by 3.5% in October; analysts had expected 2.9%.",
        "The quick brown fox jumps over the lazy dog while the cat watches.",
        "Teenagers and adults rated the film differently in the survey.",
        "Attention weights show which parts of a document drove the decision.",
    ] * 2)},
]

CASES = {
    # name: (encoder fixture, section overrides)
    "bert-attention": ("tiny-bert", dict(pooling_strategy="attention", chunk_pooling="cls", attention_hidden_size=8)),
    "bert-multihead": ("tiny-bert", dict(pooling_strategy="multihead", attention_heads=3, chunk_pooling="mean",
                                         attention_hidden_size=8, classifier_hidden_size=12)),
    "bert-mean": ("tiny-bert", dict(pooling_strategy="mean")),
    "bert-max": ("tiny-bert", dict(pooling_strategy="max", chunk_pooling="mean")),
    "bert-first": ("tiny-bert", dict(pooling_strategy="first")),
    "roberta-attention": ("tiny-roberta", dict(pooling_strategy="attention", attention_hidden_size=8)),
    "bert-max-logits": ("tiny-bert", dict(pooling_strategy="max_logits", chunk_pooling="mean")),
    "bert-top2-sharp": ("tiny-bert", dict(pooling_strategy="attention", attention_hidden_size=8, attention_top_k=2,
                                          attention_temperature=0.5)),
    "bert-multihead-top2": ("tiny-bert", dict(pooling_strategy="multihead", attention_heads=2, attention_top_k=2,
                                              attention_hidden_size=8, attention_temperature=2.0)),
    "bert-ordinal": ("tiny-bert", dict(pooling_strategy="attention", attention_hidden_size=8, ordinal=True)),
    "bert-max-logits-ordinal": ("tiny-bert", dict(pooling_strategy="max_logits", chunk_pooling="mean", ordinal=True)),
    "bert-label-attention": ("tiny-bert", dict(pooling_strategy="label_attention", attention_hidden_size=8,
                                               multi_label=True, chunk_pooling="mean")),
}


def random_head(hidden, section, n_labels, seed):
    g = torch.Generator().manual_seed(seed)
    rnd = lambda *shape, s=0.3: s * torch.randn(*shape, generator=g)  # noqa: E731
    a, k = section["attention_hidden_size"], section["attention_heads"]
    if section["pooling_strategy"] == "label_attention":
        k = n_labels
    elif section["pooling_strategy"] != "multihead":
        k = 1
    ch = section["classifier_hidden_size"] or hidden // 2
    head = {}
    if section["pooling_strategy"] in ("attention", "multihead", "label_attention"):
        head["pooler.projection.weight"] = rnd(a, hidden)
        head["pooler.projection.bias"] = rnd(a, s=0.1)
        head["pooler.context.weight"] = rnd(k, a, s=1.0)
        if k > 1 and section["pooling_strategy"] == "multihead":
            head["pooler.merge.weight"] = rnd(hidden, k * hidden, s=0.1)
            head["pooler.merge.bias"] = rnd(hidden, s=0.1)
    head["norm.weight"] = 1.0 + rnd(hidden, s=0.1)
    head["norm.bias"] = rnd(hidden, s=0.1)
    head["classifier.dense.weight"] = rnd(ch, hidden)
    head["classifier.dense.bias"] = rnd(ch, s=0.1)
    outputs = 1 if section.get("ordinal") else n_labels
    head["classifier.out_proj.weight"] = rnd(outputs, ch)
    head["classifier.out_proj.bias"] = rnd(outputs, s=0.1)
    if section.get("ordinal"):
        head["classifier.thresholds"] = rnd(n_labels - 1, s=0.3)
    return head


def write_model_dir(out, encoder_dir, section, head):
    with open(os.path.join(encoder_dir, "config.json")) as f:
        cfg = json.load(f)
    prefix = "roberta." if cfg["model_type"] == "roberta" else "bert."
    tensors = {}
    for name in sorted(os.listdir(encoder_dir)):
        if name.startswith("model") and name.endswith(".safetensors"):
            for k, v in load_file(os.path.join(encoder_dir, name)).items():
                local = k[len(prefix):] if k.startswith(prefix) else k
                if local.startswith(("embeddings.", "encoder.")) and not local.endswith("position_ids"):
                    tensors[prefix + local] = v
    tensors.update(head)
    cfg["architectures"] = ["LongreadHierarchicalClassifier"]
    cfg["id2label"] = {str(i): l for i, l in enumerate(LABELS)}
    cfg["label2id"] = {l: i for i, l in enumerate(LABELS)}
    cfg["longread"] = section
    os.makedirs(out)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(out, "model.safetensors"))
    shutil.copy(os.path.join(encoder_dir, "tokenizer.json"), os.path.join(out, "tokenizer.json"))


def expected_for(model_dir, docs, selections=("head", "spread")):
    model = HierarchicalReference.from_dir(model_dir)
    out = {}
    for selection in selections:
        model.s["chunk_selection"] = selection
        chunker = Chunker(os.path.join(model_dir, "tokenizer.json"), model.s)
        out[selection] = [{"id": d["id"], **model.predict(chunker, d["text"])} for d in docs]
    return out


def tiny_cases(only=None):
    if only is None:
        shutil.rmtree(OUT, ignore_errors=True)
        os.makedirs(OUT)
        with open(os.path.join(OUT, "documents.jsonl"), "w") as f:
            for d in DOCUMENTS:
                f.write(json.dumps(d, ensure_ascii=False) + "\n")
    for i, (name, (encoder, overrides)) in enumerate(CASES.items()):
        if only is not None and name not in only:
            continue
        shutil.rmtree(os.path.join(OUT, name), ignore_errors=True)
        section = {**SECTION_DEFAULTS, "chunk_size": 16, "stride": 4, "max_chunks": 4, **overrides}
        encoder_dir = os.path.join(FIXTURES, encoder)
        hidden = json.load(open(os.path.join(encoder_dir, "config.json")))["hidden_size"]
        out = os.path.join(OUT, name)
        write_model_dir(out, encoder_dir, section, random_head(hidden, section, len(LABELS), seed=100 + i))
        expected = expected_for(out, DOCUMENTS)
        with open(os.path.join(out, "expected.json"), "w") as f:
            json.dump(expected, f, indent=1, ensure_ascii=False)
        windows = [len(e["chunks"]) for e in expected["head"]]
        print(f"{name}: chunks kept per document {windows}")


def minilm_case(shared):
    encoder_dir = os.path.join(shared, "models", "all-MiniLM-L6-v2")
    docs = []
    with open(os.path.join(shared, "data", "hyperpartisan", "test.jsonl")) as f:
        for line in f:
            d = json.loads(line)
            n = len(d["text"].split())
            if (len(docs) == 0 and n < 250) or (len(docs) == 1 and 600 < n < 900) or (len(docs) == 2 and n > 1500):
                docs.append({"id": d["id"], "text": d["text"]})
            if len(docs) == 3:
                break
    section = {**SECTION_DEFAULTS, "max_chunks": 0, "attention_hidden_size": 64, "classifier_hidden_size": 32}
    head = random_head(384, section, len(LABELS), seed=7)
    out = os.path.join(OUT, "minilm")
    os.makedirs(out, exist_ok=True)
    save_file(head, os.path.join(out, "head.safetensors"))
    with open(os.path.join(out, "section.json"), "w") as f:
        json.dump(section, f, indent=1)
    with open(os.path.join(out, "documents.jsonl"), "w") as f:
        for d in docs:
            f.write(json.dumps(d, ensure_ascii=False) + "\n")
    tmp = os.path.join(OUT, "_minilm_model")
    shutil.rmtree(tmp, ignore_errors=True)
    write_model_dir(tmp, encoder_dir, section, head)
    expected = expected_for(tmp, docs, selections=("head",))
    shutil.rmtree(tmp)
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
    print(f"minilm: chunks per document {[len(e['chunks']) for e in expected['head']]}")


def trained_case(longread, name="trained-bert-attention", multi_task=False):
    """Trains bert-attention with the Rust trainer, then records the reference's outputs.
    With `multi_task`, a second task ("size": short/long text, every third document unlabelled)
    gets its own head."""
    out = os.path.join(OUT, name)
    shutil.rmtree(out, ignore_errors=True)
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "train.jsonl")
        with open(os.path.join(FIXTURES, "synthetic", "train.jsonl")) as f, open(data, "w") as g:
            rows = [json.loads(line) for line in list(f)[:16]]
            median = sorted(len(r["text"]) for r in rows)[len(rows) // 2]
            for i, r in enumerate(rows):
                r["label"] = {"rain": "teen", "prices": "mature"}[r["label"]]
                if multi_task and i % 3:
                    r["size"] = "long" if len(r["text"]) >= median else "short"
                g.write(json.dumps(r) + "\n")
        args = ["--dev-split", "0.25", "--epochs", "3", "--lr", "1e-3", "--head-lr", "3e-3", "--batch-size", "4",
                "--seed", "7", "--train-embeddings"]
        if multi_task:
            args += ["--task", "topic=label", "--task", "size=size", "--task-weight", "size=0.5"]
        run = os.path.join(tmp, "run")
        subprocess.run([longread, "--quiet", "train", "--model", os.path.join(OUT, "bert-attention"),
                        "--train", data, "--out", run, *args], check=True)
        os.makedirs(out)
        for file in ("config.json", "model.safetensors", "tokenizer.json"):
            shutil.copy(os.path.join(run, file), os.path.join(out, file))
        with open(os.path.join(out, "provenance.json"), "w") as f:
            json.dump({"trained_from": "bert-attention", "data": "synthetic/train.jsonl, first 16, labels mapped "
                       "rain→teen, prices→mature" + (", size = long/short by median length on 2 of 3 documents"
                                                      if multi_task else ""), "train_flags": args}, f, indent=1)
    expected = expected_for(out, DOCUMENTS)
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, ensure_ascii=False)
    print(f"{name}: done")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"))
    ap.add_argument("--longread", default=os.path.join(ROOT, "target", "release", "longread"))
    ap.add_argument("--only", nargs="+", help="remake only these tiny cases (e.g. bert-label-attention)")
    args = ap.parse_args()
    torch.set_grad_enabled(False)
    if args.only:
        tiny_cases(args.only)
        sys.exit(0)
    tiny_cases()
    trained_case(args.longread)
    trained_case(args.longread, "trained-multitask", multi_task=True)
    minilm_case(args.shared)
