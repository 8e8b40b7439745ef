#!/usr/bin/env python3
"""`longread predict` vs the PyTorch reference and vs the seed's design, same documents and
weights, same run; and peak memory of `predict` on one very long document.

  speed:  python3 scripts/bench_predict.py speed [--docs 100] [--threads 2] [--repeats 3]
          [--precision f32,int8] [--no-seed-design] [--no-per-document] [--max-batch-tokens 2048]
          [--encoder DIR]
  memory: python3 scripts/bench_predict.py memory [--tokens 25000,50000,100000,200000]

speed: a classifier is made with `longread init` on --encoder (default ../shared/models/all-MiniLM-L6-v2;
chunks of 512, stride 256, max 20 chunks, attention pooling); the documents are the first --docs
articles of ../shared/data/hyperpartisan/test.jsonl. Timed: tokenization + chunking + encoding
+ pooling + head, model loading excluded (longread reports its own timing line; the Python
sides are timed around their loops). Systems:
  longread            the release binary, chunks of several documents batched together by length
  PyTorch (fair)      what a practitioner would write: torch.inference_mode(), SDPA attention
                      (eager where transformers has no SDPA for the encoder, e.g. MPNet),
                      the chunks of all documents sorted by length and packed into batches of at
                      most --max-batch-tokens padded tokens (as longread does), same threads;
                      with int8, torch.ao.quantization.quantize_dynamic on the same Linear layers
  PyTorch per document  scripts/reference_hierarchical.py as the golden tests use it: one padded
                      batch per document, eager attention (kept for comparison with old tables)
  seed design         the seed scripts' approach: every document padded to 20 x 512 tokens
                      (a strawman: the test articles average under 3 chunks)
Each system runs --repeats times after one warm-up run; min and median are printed.
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
from bench_cpu import cpu_description  # noqa: E402
from reference_hierarchical import Chunker, HierarchicalReference  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SHARED = os.path.join(ROOT, "..", "shared")
MINILM = os.path.join(SHARED, "models", "all-MiniLM-L6-v2")
BINARY = os.path.join(ROOT, "target", "release", "longread")


def init_model(out, *extra, encoder=MINILM):
    subprocess.run([BINARY, "-q", "init", "--encoder", encoder, "--labels", "no,yes", "--out", out, *extra], check=True)


def articles(split="test"):
    with open(os.path.join(SHARED, "data", "hyperpartisan", f"{split}.jsonl")) as f:
        return [json.loads(line) for line in f]


def run_longread(model, path, threads, precision="f32", max_batch_tokens=2048):
    res = subprocess.run([BINARY, "predict", "--model", model, "--input", path, "--output", os.devnull,
                          "--threads", str(threads), "--precision", precision,
                          "--max-batch-tokens", str(max_batch_tokens)],
                         capture_output=True, text=True, check=True)
    m = re.search(r"classified (\d+) documents? \((\d+) tokens?\) in ([\d.]+) s", res.stderr)
    return int(m.group(2)), float(m.group(3))


def run_reference(model, chunker, docs):
    """One padded batch per document, as the golden reference does (eager attention)."""
    start = time.perf_counter()
    with torch.inference_mode():
        for d in docs:
            model.predict(chunker, d["text"])
    return time.perf_counter() - start


def run_fair(model, chunker, docs, max_batch_tokens):
    """Chunks of every document sorted longest first and packed into batches of at most
    max_batch_tokens padded tokens (the plan longread uses); then pooling and head per document."""
    start = time.perf_counter()
    with torch.inference_mode():
        chunked = [chunker.chunk(d["text"]) for d in docs]
        refs = [(i, j) for i, c in enumerate(chunked) for j in range(len(c))]
        refs.sort(key=lambda r: -len(chunked[r[0]][r[1]]["ids"]))
        vectors = [[None] * len(c) for c in chunked]
        batch = []

        def flush():
            vs = model.chunk_vectors([chunked[i][j] for i, j in batch])
            for (i, j), v in zip(batch, vs):
                vectors[i][j] = v
            batch.clear()

        for r in refs:
            longest = len(chunked[batch[0][0]][batch[0][1]]["ids"]) if batch else len(chunked[r[0]][r[1]]["ids"])
            if batch and (len(batch) + 1) * longest > max_batch_tokens:
                flush()
            batch.append(r)
        if batch:
            flush()
        for c, v in zip(chunked, vectors):
            model.prediction(c, torch.stack(v))
    return time.perf_counter() - start


def run_seed_design(model, chunker, docs, n_chunks=20, width=512):
    """Every document as a [20, 512] batch: chunks padded to 512, missing chunks all padding."""
    start = time.perf_counter()
    with torch.inference_mode():
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
    precisions = args.precision.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = os.path.join(tmp, "model")
        init_model(model_dir, encoder=args.encoder)
        path = os.path.join(tmp, "docs.jsonl")
        with open(path, "w") as f:
            for d in docs:
                f.write(json.dumps(d) + "\n")
        eager = HierarchicalReference.from_dir(model_dir)
        try:
            sdpa = HierarchicalReference.from_dir(model_dir, attn_implementation="sdpa")
            attention = "sdpa"
        except ValueError:  # transformers has no SDPA for some encoders (MPNet): its default, eager
            sdpa = HierarchicalReference.from_dir(model_dir, attn_implementation="eager")
            attention = "eager"
        chunker = Chunker(os.path.join(model_dir, "tokenizer.json"), sdpa.s)
        n_chunks = sum(len(chunker.chunk(d["text"])) for d in docs)
        systems = {}
        for p in precisions:
            systems[f"longread {p}"] = lambda p=p: run_longread(model_dir, path, args.threads, p, args.max_batch_tokens)[1]
            if p == "f32":
                systems["PyTorch (fair) f32"] = lambda: run_fair(sdpa, chunker, docs, args.max_batch_tokens)
            elif p == "int8":
                quantized = HierarchicalReference.from_dir(model_dir, attn_implementation=attention)
                quantized.encoder = torch.ao.quantization.quantize_dynamic(
                    quantized.encoder, {torch.nn.Linear}, dtype=torch.qint8)
                systems["PyTorch (fair) int8"] = lambda q=quantized: run_fair(q, chunker, docs, args.max_batch_tokens)
        if not args.no_per_document:
            systems["PyTorch per document (eager)"] = lambda: run_reference(eager, chunker, docs)
        if not args.no_seed_design:
            systems["seed design (strawman)"] = lambda: run_seed_design(eager, chunker, docs)
        times = {k: [] for k in systems}
        for k, run in systems.items():
            run()  # warm-up
        for _ in range(args.repeats):
            for k, run in systems.items():
                times[k].append(run())
        tokens = run_longread(model_dir, path, args.threads)[0]
    med = {k: statistics.median(v) for k, v in times.items()}
    n = len(docs)
    print(f"encoder {os.path.basename(os.path.normpath(args.encoder))}; CPU: {cpu_description()}")
    print(f"{n} documents, {tokens} tokens, {n_chunks} chunks (max 20 per document), threads {args.threads}, "
          f"max batch tokens {args.max_batch_tokens}, torch {torch.__version__} ({attention} attention), "
          f"{args.repeats} runs after a warm-up")
    print("| system | min (s) | median (s) | documents/s (median) | time / PyTorch (fair) of the same precision |")
    print("|---|---|---|---|---|")
    for k, t in med.items():
        p = "int8" if k.endswith("int8") else "f32"
        ref = med.get(f"PyTorch (fair) {p}")
        ratio = f"{t / ref:.2f}" if ref else "-"
        print(f"| {k} | {min(times[k]):.2f} | {t:.2f} | {n / t:.2f} | {ratio} |")
    print("runs:", {k: [round(x, 2) for x in v] for k, v in times.items()})
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"cpu": cpu_description(), "documents": n, "tokens": tokens, "chunks": n_chunks,
                       "threads": args.threads, "max_batch_tokens": args.max_batch_tokens, "torch": torch.__version__,
                       "runs": times, "median": med}, f, indent=1)


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
    ap.add_argument("--json-out", help="speed: also write the timings as JSON to this file")
    ap.add_argument("--docs", type=int, default=100)
    ap.add_argument("--encoder", default=MINILM, help="speed: the encoder directory (default all-MiniLM-L6-v2)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--precision", default="f32",
                    help="longread precisions to time, comma-separated, f32 first (e.g. f32,int8)")
    ap.add_argument("--no-seed-design", action="store_true", help="skip the slow seed-design strawman")
    ap.add_argument("--no-per-document", action="store_true", help="skip the per-document eager reference")
    ap.add_argument("--max-batch-tokens", type=int, default=2048,
                    help="token budget of one encoder batch, for longread (its default) and PyTorch (fair)")
    ap.add_argument("--tokens", default="25000,50000,100000,200000")
    args = ap.parse_args()
    speed(args) if args.what == "speed" else memory(args)


if __name__ == "__main__":
    main()
