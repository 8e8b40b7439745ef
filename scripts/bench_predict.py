#!/usr/bin/env python3
"""`longread predict` vs the PyTorch reference and vs the seed's design, same documents and
weights, same run; and peak memory of `predict` on one very long document.

  speed:  python3 scripts/bench_predict.py speed [--docs 100] [--threads 2] [--repeats 3]
          [--precision f32,int8] [--no-seed-design]
  memory: python3 scripts/bench_predict.py memory [--tokens 25000,50000,100000,200000]

speed: a classifier is made with `longread init` on ../shared/models/all-MiniLM-L6-v2 (defaults:
chunks of 512, stride 256, max 20 chunks, attention pooling); the documents are the first --docs
articles of ../shared/data/hyperpartisan/test.jsonl. Timed: tokenization + chunking + encoding
+ pooling + head, model loading excluded (longread reports its own timing line; the Python
sides are timed around their loops). Three systems:
  longread     the release binary, chunks of several documents batched together by length
  reference    scripts/reference_hierarchical.py: one padded batch of a document's chunks
  seed design  the seed scripts' approach: every document padded to 20 x 512 tokens
memory: documents of about N tokens (hyperpartisan articles concatenated), max_chunks 0, run
one at a time under /usr/bin/time; prints peak RSS per length.
Needs: a release build, torch, transformers, tokenizers, safetensors.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_hierarchical import Chunker, HierarchicalReference  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SHARED = os.path.join(ROOT, "..", "shared")
MINILM = os.path.join(SHARED, "models", "all-MiniLM-L6-v2")
BINARY = os.path.join(ROOT, "target", "release", "longread")


def init_model(out, *extra):
    subprocess.run([BINARY, "-q", "init", "--encoder", MINILM, "--labels", "no,yes", "--out", out, *extra], check=True)


def articles(split="test"):
    with open(os.path.join(SHARED, "data", "hyperpartisan", f"{split}.jsonl")) as f:
        return [json.loads(line) for line in f]


def run_longread(model, path, threads, precision="f32"):
    res = subprocess.run([BINARY, "predict", "--model", model, "--input", path, "--output", os.devnull,
                          "--threads", str(threads), "--precision", precision],
                         capture_output=True, text=True, check=True)
    m = re.search(r"classified (\d+) documents \((\d+) tokens\) in ([\d.]+) s", res.stderr)
    return int(m.group(2)), float(m.group(3))


@torch.no_grad()
def run_reference(model, chunker, docs):
    start = time.perf_counter()
    for d in docs:
        model.predict(chunker, d["text"])
    return time.perf_counter() - start


@torch.no_grad()
def run_seed_design(model, chunker, docs, n_chunks=20, width=512):
    """Every document as a [20, 512] batch: chunks padded to 512, missing chunks all padding."""
    start = time.perf_counter()
    for d in docs:
        chunks = chunker.chunk(d["text"])[:n_chunks]
        ids = torch.full((n_chunks, width), model.pad_id)
        mask = torch.zeros((n_chunks, width), dtype=torch.long)
        for i, c in enumerate(chunks):
            ids[i, :len(c["ids"])] = torch.tensor(c["ids"])
            mask[i, :len(c["ids"])] = 1
        hidden = model.encoder(input_ids=ids, attention_mask=mask).last_hidden_state[:, 0]
        model.classify(hidden[:len(chunks)])
    return time.perf_counter() - start


def speed(args):
    torch.set_num_threads(args.threads)
    docs = [{"id": a["id"], "text": a["text"]} for a in articles()[:args.docs]]
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = os.path.join(tmp, "model")
        init_model(model_dir)
        path = os.path.join(tmp, "docs.jsonl")
        with open(path, "w") as f:
            for d in docs:
                f.write(json.dumps(d) + "\n")
        ref = HierarchicalReference.from_dir(model_dir)
        chunker = Chunker(os.path.join(model_dir, "tokenizer.json"), ref.s)
        n_chunks = sum(len(chunker.chunk(d["text"])) for d in docs)
        run_reference(ref, chunker, docs[:3])  # warm-up
        times = {"longread": [], "reference": []}
        for p in args.precision.split(",")[1:]:
            times[f"longread --precision {p}"] = []
        if not args.no_seed_design:
            times["seed design"] = []
        tokens = 0
        for _ in range(args.repeats):
            tokens, t = run_longread(model_dir, path, args.threads)
            times["longread"].append(t)
            for p in args.precision.split(",")[1:]:
                times[f"longread --precision {p}"].append(run_longread(model_dir, path, args.threads, p)[1])
            times["reference"].append(run_reference(ref, chunker, docs))
            if not args.no_seed_design:
                times["seed design"].append(run_seed_design(ref, chunker, docs))
    med = {k: statistics.median(v) for k, v in times.items()}
    n = len(docs)
    print(f"{n} documents, {tokens} tokens, {n_chunks} chunks (max 20 per document), threads {args.threads}, "
          f"torch {torch.__version__}")
    print("| | time (s) | documents/s | tokens/s | time / longread's |")
    print("|---|---|---|---|---|")
    for k, t in med.items():
        print(f"| {k} | {t:.2f} | {n / t:.2f} | {tokens / t:.0f} | {t / med['longread']:.2f} |")
    print("runs:", {k: [round(x, 2) for x in v] for k, v in times.items()})


def memory(args):
    texts = [a["text"] for a in articles("train")]
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = os.path.join(tmp, "model")
        init_model(model_dir, "--max-chunks", "0")
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
        tok.no_truncation()
        tok.no_padding()
        print("| document tokens | chunks | peak RSS (MiB) | wall (s) |")
        print("|---|---|---|---|")
        for target in [int(x) for x in args.tokens.split(",")]:
            parts, count = [], 0
            for t in texts * 10:
                parts.append(t)
                count += len(tok.encode(t, add_special_tokens=False).ids)
                if count >= target:
                    break
            path = os.path.join(tmp, "long.jsonl")
            with open(path, "w") as f:
                f.write(json.dumps({"id": f"long-{target}", "text": "\n".join(parts)}) + "\n")
            start = time.perf_counter()
            res = subprocess.run(["/usr/bin/time", "-f", "%M", BINARY, "predict", "--model", model_dir, "--input", path,
                                  "--threads", str(args.threads), "-q"], capture_output=True, text=True, check=True)
            wall = time.perf_counter() - start
            chunks = len(json.loads(res.stdout)["chunks"])
            rss_kib = int(res.stderr.strip().splitlines()[-1])
            print(f"| {count} | {chunks} | {rss_kib / 1024:.0f} | {wall:.0f} |", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["speed", "memory"])
    ap.add_argument("--docs", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--precision", default="f32",
                    help="longread precisions to time, comma-separated, f32 first (e.g. f32,int8)")
    ap.add_argument("--no-seed-design", action="store_true", help="skip the slow seed-design baseline")
    ap.add_argument("--tokens", default="25000,50000,100000,200000")
    args = ap.parse_args()
    speed(args) if args.what == "speed" else memory(args)


if __name__ == "__main__":
    main()
