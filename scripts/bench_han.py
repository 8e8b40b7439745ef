"""Times one HAN training step (forward, backward, clipping, Adam) in longread and in PyTorch on
the batch that `longread bench --workload han-step --shape 32x64` uses: 32 documents × 64 sentences × 32 words,
every word real, default sizes (embeddings 200, GRUs 2 × 50, attention 100, 1 hop, 2 labels,
12,290 words). The model is the one of make_han_fixtures.py; with no padding, nn.GRU runs on
the padded tensors directly (no packing: PyTorch's fastest path); Adam is the fused CPU kernel
(`fused=True`, falling back to `foreach`). Both sides run in this script's run: the release binary
(`longread --threads N bench --workload han-step --json`), then PyTorch in this process;
each does one warm-up step and --repeat timed steps; min and median are printed, with the CPU.
Memory: the workload's own, peak RSS minus RSS once model and batch are set up.

On a GPU (`--device cuda`: should the HAN's training move there?) both sides run on
the card: longread with `--device cuda` (its GRU time loop composed of candle ops, step by step),
PyTorch with cuDNN's GRU and the fused CUDA Adam, each step waited for; memory is then PyTorch's
max_memory_allocated (longread's JSON gives no GPU figure for this workload).

Usage: python3 scripts/bench_han.py [--threads 2] [--repeat 5] [--device cpu|cuda] [--binary PATH] [--json-out FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_cpu import cpu_description  # noqa: E402
from make_han_fixtures import HAN  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
BINARY = os.path.join(ROOT, "target", "release", "longread")

BATCH, DOC, SENT, WORDS = 32, 64, 32, 12_288


def step(model, ids, gold, optimizer, dropout):
    b, d, w = ids.shape
    mask = torch.ones(b * d, w, device=ids.device)
    x = dropout(model.embedding(ids.reshape(b * d, w)))
    words, _ = model.word_gru(x)
    sentences, _ = model.word_attention(words, mask)
    states, _ = model.sentence_gru(sentences.reshape(b, d, -1))
    doc, _ = model.sentence_attention(states, torch.ones(b, d, device=ids.device))
    logits = model.classifier(dropout(doc.reshape(b, -1)))
    loss = nn.functional.cross_entropy(logits, gold)
    optimizer.zero_grad()
    loss.backward()
    nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    optimizer.step()


def rss(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith(key))


def pytorch_steps(threads, repeat, device="cpu"):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    config = dict(vocab_size=WORDS + 2, embedding_dim=200, word_hidden=50, sentence_hidden=50,
                  word_attention_size=100, sentence_attention_size=100, attention_hops=1, dropout=0.5,
                  doc_size=DOC, sent_size=SENT, labels=["false", "true"])
    model = HAN(config).train().to(device)
    ids = torch.tensor([2 + (i * 7_919) % WORDS for i in range(BATCH * DOC * SENT)]).reshape(BATCH, DOC, SENT)
    ids, gold = ids.to(device), torch.tensor([i % 2 for i in range(BATCH)]).to(device)
    try:
        optimizer, kind = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True), "fused"
    except (RuntimeError, TypeError):
        optimizer, kind = torch.optim.Adam(model.parameters(), lr=1e-3, foreach=True), "foreach"
    dropout = nn.Dropout(0.5)
    gpu = device != "cpu"
    loaded = rss("VmRSS:")
    if gpu:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    runs = []
    for run in range(repeat + 1):
        started = time.perf_counter()
        step(model, ids, gold, optimizer, dropout)
        if gpu:
            torch.cuda.synchronize()
        if run > 0:
            runs.append(time.perf_counter() - started)
    added = torch.cuda.max_memory_allocated() if gpu else rss("VmHWM:") - loaded
    return {"runs": runs, "adam": kind, "added_bytes": added}


def longread_steps(threads, repeat, device="cpu", binary=BINARY):
    out = subprocess.run([binary, "--threads", str(threads), "--device", device, "bench", "--workload", "han-step",
                          "--shape", f"{BATCH}x{DOC}", "--repeat", str(repeat), "--json"], check=True,
                         capture_output=True, text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    added = (result["peak_rss_bytes"] or 0) - (result["loaded_rss_bytes"] or 0)
    return {"runs": result["runs"], "added_bytes": added, "device": result.get("device")}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                        help="where both sides run (cuda: the first GPU; longread with --device cuda)")
    parser.add_argument("--binary", default=BINARY, help="the longread binary (default: target/release/longread)")
    parser.add_argument("--json-out", help="also write the figures as JSON to this file")
    args = parser.parse_args()
    ours = longread_steps(args.threads, args.repeat, args.device, args.binary)
    theirs = pytorch_steps(args.threads, args.repeat, args.device)
    med = {k: statistics.median(v["runs"]) for k, v in (("longread", ours), ("pytorch", theirs))}
    where = torch.cuda.get_device_name(0) if args.device == "cuda" else "the CPU"
    print(f"CPU: {cpu_description()}; on {where}; threads {args.threads}; torch {torch.__version__}; Adam {theirs['adam']}; "
          f"{args.repeat} steps after a warm-up; batch {BATCH} × {DOC} sentences × {SENT} words")
    for name, r in (("longread", ours), ("PyTorch", theirs)):
        memory = "GPU memory (max allocated)" if args.device == "cuda" and name == "PyTorch" else "workload memory"
        print(f"{name}: median {statistics.median(r['runs']):.3f} s, min {min(r['runs']):.3f} s, {memory} "
              f"{r['added_bytes'] / 2**20:.0f} MiB (runs {[round(x, 3) for x in r['runs']]})")
    print(f"longread time / PyTorch time: {med['longread'] / med['pytorch']:.2f}×")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"cpu": cpu_description(), "device": args.device, "gpu": where if args.device == "cuda" else None,
                       "threads": args.threads, "torch": torch.__version__,
                       "adam": theirs["adam"], "longread": ours, "pytorch": theirs, "median": med,
                       "time_ratio": med["longread"] / med["pytorch"]}, f, indent=1)


if __name__ == "__main__":
    main()
