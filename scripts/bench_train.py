#!/usr/bin/env python3
"""Training-step memory and time: longread (with and without chunk recomputation) vs PyTorch,
same model (all-MiniLM-L6-v2 + attention head), same chunks, one document per step.

    python3 scripts/bench_train.py [--chunks 8,32,64] [--threads 2] [--torch-max 32] [--repeat 3]
                                   [--json-out FILE]

For each N, one document of exactly N chunks (512 tokens, stride 256; hyperpartisan training
articles concatenated) is trained on, one optimizer step per epoch (batch 1; embeddings frozen,
all layers train, as `longread train`'s defaults), for 1 + --repeat steps: the first warms up,
min and median of the others are printed. Step time is longread's own `train_seconds` per epoch
(dev evaluation and checkpoint writing excluded) and, for PyTorch, forward + backward + AdamW
step of the same computation as PyTorch users run it: full graph, SDPA attention, the fused
CPU AdamW. Memory is the whole process's peak RSS (/usr/bin/time for longread, VmHWM for
PyTorch, whose figure includes its Python runtime: its RSS after imports and model load is
printed too). --torch-max skips PyTorch (and longread --no-recompute) above that many chunks.
Needs: a release build, torch, transformers, tokenizers, safetensors.
"""
import argparse
import json
import os
import subprocess
import sys
import statistics
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_cpu import cpu_description  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SHARED = os.path.join(ROOT, "..", "shared")
MINILM = os.path.join(SHARED, "models", "all-MiniLM-L6-v2")
BINARY = os.path.join(ROOT, "target", "release", "longread")

TORCH_STEP = r'''
import json, statistics, sys, time, torch
sys.path.insert(0, sys.argv[1])
from reference_hierarchical import Chunker, HierarchicalReference
torch.set_num_threads(int(sys.argv[4]))
repeat = int(sys.argv[5])
def rss(key):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) / 1024 for l in f if l.startswith(key))
model = HierarchicalReference.from_dir(sys.argv[2], attn_implementation="sdpa")
chunker = Chunker(sys.argv[2] + "/tokenizer.json", model.s)
text = json.loads(open(sys.argv[3]).readline())["text"]
chunks = chunker.chunk(text)
head = {k: torch.nn.Parameter(v.clone()) for k, v in model.head.items()}
model.head = head
model.encoder.train()
params = [p for n, p in model.encoder.named_parameters() if not n.startswith("embeddings.")] + list(head.values())
for n, p in model.encoder.named_parameters():
    p.requires_grad_(not n.startswith("embeddings."))
try:
    opt = torch.optim.AdamW(params, lr=2e-5, fused=True)
except (RuntimeError, TypeError):
    opt = torch.optim.AdamW(params, lr=2e-5, foreach=True)
loaded = rss("VmRSS:")
runs = []
for run in range(repeat + 1):
    start = time.perf_counter()
    logits, _ = model.classify(model.chunk_vectors(chunks))
    loss = torch.nn.functional.cross_entropy(logits.unsqueeze(0), torch.tensor([1]))
    loss.backward()
    opt.step()
    opt.zero_grad()
    if run > 0:
        runs.append(time.perf_counter() - start)
print(json.dumps({"chunks": len(chunks), "runs": runs, "rss_mib": rss("VmHWM:"), "loaded_mib": loaded}))
'''


def document(n_chunks, tok):
    target = 254 * (n_chunks - 1) + 510
    parts, count = [], 0
    with open(os.path.join(SHARED, "data", "hyperpartisan", "train.jsonl")) as f:
        for line in f:
            t = json.loads(line)["text"]
            parts.append(t)
            count += len(tok.encode(t, add_special_tokens=False).ids)
            if count >= target:
                return "\n".join(parts)
    raise SystemExit("not enough text")


def timed(cmd):
    res = subprocess.run(["/usr/bin/time", "-f", "%M"] + cmd, capture_output=True, text=True)
    if res.returncode != 0:
        return None, res.stderr[-500:]
    return int(res.stderr.strip().splitlines()[-1]) / 1024, res.stderr


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunks", default="8,32,64")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--torch-max", type=int, default=32)
    ap.add_argument("--max-batch-tokens", type=int, default=512, help="longread's encoder batch budget")
    ap.add_argument("--repeat", type=int, default=3, help="timed steps after a warm-up step")
    ap.add_argument("--json-out", help="also write the rows as JSON to this file")
    args = ap.parse_args()
    print(f"CPU: {cpu_description()}; threads {args.threads}; {args.repeat} steps after a warm-up step")
    rows = []
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(MINILM, "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    print("| chunks | longread recompute: step s median (min), peak MiB | longread full graph | PyTorch (loaded MiB) | "
          "time ratio (recompute / PyTorch) | peak memory ratio |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in [int(x) for x in args.chunks.split(",")]:
            model = os.path.join(tmp, f"m{n}")
            subprocess.run([BINARY, "-q", "init", "--encoder", MINILM, "--labels", "a,b", "--out", model,
                            "--max-chunks", str(n)], check=True)
            data = os.path.join(tmp, f"d{n}.jsonl")
            with open(data, "w") as f:
                f.write(json.dumps({"text": document(n, tok), "label": "b"}) + "\n")
            row = {}
            for mode, extra in [("recompute", []), ("full", ["--no-recompute"])]:
                if mode == "full" and n > args.torch_max:
                    row[mode] = (None, None)
                    continue
                out = os.path.join(tmp, f"o{n}{mode}")
                rss, err = timed([BINARY, "--threads", str(args.threads), "-q", "train", "--model", model, "--train", data,
                                  "--dev", data, "--out", out, "--epochs", str(args.repeat + 1), "--batch-size", "1",
                                  "--patience", "0", "--max-batch-tokens", str(args.max_batch_tokens)] + extra)
                runs = None
                if rss is not None:
                    epochs = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl")) if line.strip()]
                    runs = [e["train_seconds"] for e in epochs if "train_seconds" in e][1:]
                row[mode] = (runs, rss)
            if n <= args.torch_max:
                res = subprocess.run([sys.executable, "-c", TORCH_STEP, os.path.join(ROOT, "scripts"), model, data,
                                      str(args.threads), str(args.repeat)], capture_output=True, text=True)
                t = json.loads(res.stdout.strip().splitlines()[-1]) if res.returncode == 0 else None
                row["torch"] = (t["runs"], t["rss_mib"]) if t else (None, None)
                torch_loaded = t["loaded_mib"] if t else None
            else:
                row["torch"] = (None, None)
                torch_loaded = None
            med = {k: statistics.median(v[0]) if v[0] else None for k, v in row.items()}

            def fmt(key):
                runs, rss = row[key]
                return "—" if not runs else f"{med[key]:.2f} s ({min(runs):.2f}), {rss:.0f} MiB"

            def ratio(a, b):
                return "—" if a is None or b is None else f"{a / b:.2f}"
            torch_text = fmt("torch") + (f" (loaded {torch_loaded:.0f})" if torch_loaded else "")
            print(f"| {n} | {fmt('recompute')} | {fmt('full')} | {torch_text} | {ratio(med['recompute'], med['torch'])} | "
                  f"{ratio(row['recompute'][1], row['torch'][1])} |", flush=True)
            rows.append({"chunks": n, "runs": {k: v[0] for k, v in row.items()},
                         "peak_rss_mib": {k: v[1] for k, v in row.items()}, "median": med,
                         "pytorch_loaded_mib": torch_loaded})
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"cpu": cpu_description(), "threads": args.threads, "repeat": args.repeat, "rows": rows}, f,
                      indent=1)


if __name__ == "__main__":
    main()
