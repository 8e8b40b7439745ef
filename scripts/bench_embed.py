#!/usr/bin/env python3
"""Embedding throughput: `longread embed` vs sentence-transformers, same texts, same run.

Texts are the paragraphs (>= 5 words) of ../shared/data/hyperpartisan/train.jsonl, the first
--texts of them. Both sides use --threads threads, batch size --batch-size, mean pooling and
normalisation, and time tokenization + encoding (model loading excluded: longread reports its
own timing line; sentence-transformers is timed around `encode` after a warm-up call).
sentence-transformers runs as its users call it (`encode`, which sorts the texts by length as
longread does), under torch.inference_mode(), with transformers' default (SDPA) attention.
Runs alternate (longread, sentence-transformers, ...) --repeats times after one warm-up each;
min and median are printed, with the CPU.

Usage: python3 scripts/bench_embed.py [--texts 1000] [--threads 2] [--batch-size 32] [--repeats 3]
                                      [--model DIR] [--json-out FILE]
--model defaults to ../shared/models/all-MiniLM-L6-v2; any sentence-transformers directory
longread reads works (e.g. all-mpnet-base-v2 from ../shared/models/fetch-all-mpnet-base-v2.sh).
Needs: a release build (cargo build --release), torch, sentence-transformers.
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_cpu import cpu_description  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SHARED = os.path.join(ROOT, "..", "shared")
MODEL = os.path.join(SHARED, "models", "all-MiniLM-L6-v2")
BINARY = os.path.join(ROOT, "target", "release", "longread")


def paragraphs(n):
    out = []
    with open(os.path.join(SHARED, "data", "hyperpartisan", "train.jsonl")) as f:
        for line in f:
            for p in json.loads(line)["text"].split("\n"):
                if len(p.split()) >= 5:
                    out.append(p)
                    if len(out) == n:
                        return out
    return out


def run_longread(model, path, threads, batch_size):
    cmd = [BINARY, "embed", "--model", model, "--input", path, "--output", os.devnull, "--normalize",
           "--threads", str(threads), "--batch-size", str(batch_size)]
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    m = re.search(r"embedded (\d+) texts? \((\d+) tokens?\) in ([\d.]+) s", res.stderr)
    return int(m.group(2)), float(m.group(3))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--texts", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--model", default=MODEL, help="sentence-transformers model directory")
    ap.add_argument("--json-out", help="also write the figures as JSON to this file")
    args = ap.parse_args()

    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(args.threads)
    texts = paragraphs(args.texts)
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": i, "text": t}) + "\n")
        path = f.name

    st = SentenceTransformer(args.model, device="cpu")
    with torch.inference_mode():
        st.encode(texts, batch_size=args.batch_size, normalize_embeddings=True)  # warm-up
    run_longread(args.model, path, args.threads, args.batch_size)  # warm-up (page cache, CPU clocks)
    lr_times, st_times, tokens = [], [], 0
    for _ in range(args.repeats):
        tokens, t = run_longread(args.model, path, args.threads, args.batch_size)
        lr_times.append(t)
        start = time.perf_counter()
        with torch.inference_mode():
            st.encode(texts, batch_size=args.batch_size, normalize_embeddings=True)
        st_times.append(time.perf_counter() - start)
    os.unlink(path)

    lr, pt = statistics.median(lr_times), statistics.median(st_times)
    n = len(texts)
    print(f"model {os.path.basename(os.path.normpath(args.model))}; CPU: {cpu_description()}; texts {n}, tokens {tokens} (mean {tokens / n:.1f}), threads {args.threads}, "
          f"batch {args.batch_size}, torch {torch.__version__}")
    print("| | min (s) | median (s) | texts/s (median) | tokens/s (median) |")
    print("|---|---|---|---|---|")
    print(f"| longread | {min(lr_times):.2f} | {lr:.2f} | {n / lr:.1f} | {tokens / lr:.0f} |")
    print(f"| sentence-transformers | {min(st_times):.2f} | {pt:.2f} | {n / pt:.1f} | {tokens / pt:.0f} |")
    print(f"longread time / sentence-transformers time = {lr / pt:.2f} (texts/s {pt / lr:.2f}x; runs: longread "
          f"{[round(x, 2) for x in lr_times]}, st {[round(x, 2) for x in st_times]})")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"model": os.path.basename(os.path.normpath(args.model)), "cpu": cpu_description(), "texts": n, "tokens": tokens, "threads": args.threads,
                       "batch_size": args.batch_size, "torch": torch.__version__,
                       "runs": {"longread": lr_times, "sentence_transformers": st_times},
                       "median": {"longread": lr, "sentence_transformers": pt}, "time_ratio": lr / pt}, f, indent=1)


if __name__ == "__main__":
    main()
