#!/usr/bin/env python3
"""Embedding throughput: `longread embed` vs sentence-transformers, same texts, same run.

Texts are the paragraphs (>= 5 words) of ../shared/data/hyperpartisan/train.jsonl, the first
--texts of them. Both sides use --threads threads, batch size --batch-size, mean pooling and
normalisation, and time tokenization + encoding (model loading excluded: longread reports its
own timing line; sentence-transformers is timed around `encode` after a warm-up call).
Runs alternate (longread, sentence-transformers, ...) --repeats times; medians are reported.

Usage: python3 scripts/bench_embed.py [--texts 1000] [--threads 2] [--batch-size 32] [--repeats 3]
Needs: a release build (cargo build --release), torch, sentence-transformers.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import tempfile
import time

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


def run_longread(path, threads, batch_size):
    cmd = [BINARY, "embed", "--model", MODEL, "--input", path, "--output", os.devnull, "--normalize",
           "--threads", str(threads), "--batch-size", str(batch_size)]
    res = subprocess.run(cmd, capture_output=True, text=True, check=True)
    m = re.search(r"embedded (\d+) texts \((\d+) tokens\) in ([\d.]+) s", res.stderr)
    return int(m.group(2)), float(m.group(3))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--texts", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()

    import torch
    from sentence_transformers import SentenceTransformer

    torch.set_num_threads(args.threads)
    texts = paragraphs(args.texts)
    with tempfile.NamedTemporaryFile("w", suffix=".jsonl", delete=False) as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": i, "text": t}) + "\n")
        path = f.name

    st = SentenceTransformer(MODEL, device="cpu")
    st.encode(texts[:64], batch_size=args.batch_size)  # warm-up
    lr_times, st_times, tokens = [], [], 0
    for _ in range(args.repeats):
        tokens, t = run_longread(path, args.threads, args.batch_size)
        lr_times.append(t)
        start = time.perf_counter()
        with torch.inference_mode():
            st.encode(texts, batch_size=args.batch_size, normalize_embeddings=True)
        st_times.append(time.perf_counter() - start)
    os.unlink(path)

    lr, pt = statistics.median(lr_times), statistics.median(st_times)
    n = len(texts)
    print(f"texts {n}, tokens {tokens} (mean {tokens / n:.1f}), threads {args.threads}, batch {args.batch_size}, "
          f"torch {torch.__version__}")
    print(f"| | time (s) | texts/s | tokens/s |")
    print(f"|---|---|---|---|")
    print(f"| longread | {lr:.2f} | {n / lr:.1f} | {tokens / lr:.0f} |")
    print(f"| sentence-transformers | {pt:.2f} | {n / pt:.1f} | {tokens / pt:.0f} |")
    print(f"longread time / sentence-transformers time = {lr / pt:.2f} (runs: longread {lr_times}, st {st_times})")


if __name__ == "__main__":
    main()
