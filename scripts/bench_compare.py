#!/usr/bin/env python3
"""longread vs PyTorch on the same workloads, in one run, with ratios:
encoder forward (BERT-base shape with random weights at 4×512 and 32×128, all-MiniLM-L6-v2 at
the same shapes), a training step (forward in training mode + backward of the mean last hidden
state + AdamW over every parameter, BERT-base shape, 2×512) and an AdamW step alone. Each
workload runs in its own process (`longread bench --json`, and a Python process for PyTorch),
one warm-up run then --repeat timed runs; the median and the minimum are compared. Memory is
the workload's own: the process's peak RSS minus its RSS once the model, inputs and optimizer are
set up (so PyTorch's Python runtime and both sides' weights are left out); the whole peak is
printed too. PyTorch's AdamW is the fused CPU kernel (`fused=True`), falling back to `foreach`.

    python3 scripts/bench_compare.py [--threads 2] [--repeat 3] [--only forward,train,optimizer]
        [--markdown] [--encoder DIR]

"BERT-base shape" is RoBERTa-base (12 layers, hidden 768, 12 heads, FFN 3072, 50,265 tokens):
the same computation as BERT-base. PyTorch runs transformers' RobertaModel/BertModel with its
default attention (SDPA). Needs: a release build (cargo build --release), torch, transformers.
"""
import argparse
import json
import os
import subprocess
import sys

from bench_cpu import cpu_description

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
MINILM = os.path.join(ROOT, "..", "shared", "models", "all-MiniLM-L6-v2")
BINARY = os.path.join(ROOT, "target", "release", "longread")

TORCH = r'''
import json, sys, time, torch
from transformers import AutoModel, RobertaConfig, RobertaModel
workload, encoder, batch, tokens, threads, repeat = sys.argv[1:7]
batch, tokens, threads, repeat = int(batch), int(tokens), int(threads), int(repeat)
torch.set_num_threads(threads)
torch.manual_seed(0)
if encoder == "roberta-base":
    config = RobertaConfig(vocab_size=50265, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                           intermediate_size=3072, max_position_embeddings=514, type_vocab_size=1,
                           layer_norm_eps=1e-5, pad_token_id=1)
    model = RobertaModel(config, add_pooling_layer=False)
else:
    model = AutoModel.from_pretrained(encoder, add_pooling_layer=False)
vocab = model.config.vocab_size
ids = torch.tensor([5 + (i * 7919) % (vocab - 5) for i in range(batch * tokens)]).reshape(batch, tokens)
mask = torch.ones_like(ids)
try:
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.01, fused=True)
    adamw = "fused"
except (RuntimeError, TypeError):
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.01, foreach=True)
    adamw = "foreach"
if workload == "optimizer-step":
    for p in model.parameters():
        p.grad = torch.ones_like(p)
def rss(key):
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith(key))
loaded = rss("VmRSS:")
runs = []
for run in range(repeat + 1):
    started = time.perf_counter()
    if workload == "encoder-forward":
        model.eval()
        with torch.inference_mode():
            model(input_ids=ids, attention_mask=mask)
    elif workload == "train-step":
        model.train()
        loss = model(input_ids=ids, attention_mask=mask).last_hidden_state.mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    else:
        optimizer.step()
    if run > 0:
        runs.append(time.perf_counter() - started)
print(json.dumps({"seconds": sorted(runs)[len(runs) // 2], "runs": runs,
                  "peak_rss_bytes": rss("VmHWM:"), "loaded_rss_bytes": loaded, "adamw": adamw,
                  "torch": torch.__version__}))
'''


def longread(workload, encoder, shape, threads, repeat):
    source = ["--model", encoder] if os.path.isdir(encoder) else ["--preset", encoder]
    cmd = [BINARY, "--threads", str(threads), "bench", "--workload", workload, "--shape", shape,
           "--repeat", str(repeat), "--json"] + source
    return json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout)


def pytorch(workload, encoder, shape, threads, repeat):
    batch, tokens = shape.split("x")
    cmd = [sys.executable, "-c", TORCH, workload, encoder, batch, tokens, str(threads), str(repeat)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--only", default="forward,train,optimizer")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--json-out", help="also write the rows as JSON to this file")
    parser.add_argument("--encoder", help="instead of the default cases: forward (4x512, 32x128) and a training "
                        "step (2x512) of this encoder directory (e.g. all-mpnet-base-v2)")
    args = parser.parse_args()
    wanted = set(args.only.split(","))
    cases = []
    if args.encoder:
        cases = [("encoder-forward", args.encoder, "4x512"), ("encoder-forward", args.encoder, "32x128"),
                 ("train-step", args.encoder, "2x512")]
        wanted = set()
    if "forward" in wanted:
        for encoder in ["roberta-base", MINILM]:
            for shape in ["4x512", "32x128"]:
                cases.append(("encoder-forward", encoder, shape))
    if "train" in wanted:
        cases.append(("train-step", "roberta-base", "2x512"))
    if "optimizer" in wanted:
        cases.append(("optimizer-step", "roberta-base", "1x8"))
    rows = []
    print(f"CPU: {cpu_description()}; threads {args.threads}; {args.repeat} runs after a warm-up", flush=True)
    for workload, encoder, shape in cases:
        ours = longread(workload, encoder, shape, args.threads, args.repeat)
        theirs = pytorch(workload, encoder, shape, args.threads, args.repeat)
        name = "BERT-base shape" if encoder == "roberta-base" else os.path.basename(encoder)
        shape_text = "" if workload == "optimizer-step" else shape.replace("x", "×")
        added = lambda r: (r["peak_rss_bytes"] - r["loaded_rss_bytes"]) / 2**30
        row = dict(workload=workload, name=name, shape=shape_text, torch=theirs["torch"], adamw=theirs["adamw"],
                   theirs=theirs["seconds"], ours=ours["seconds"], theirs_min=min(theirs["runs"]),
                   ours_min=min(ours["runs"]), ratio=ours["seconds"] / theirs["seconds"],
                   theirs_added=added(theirs), ours_added=added(ours),
                   theirs_peak=theirs["peak_rss_bytes"] / 2**30, ours_peak=ours["peak_rss_bytes"] / 2**30)
        rows.append(row)
        print(f"{workload:16} {name:16} {shape_text:7} PyTorch {row['theirs']:.3f} s (min {row['theirs_min']:.3f}), "
              f"longread {row['ours']:.3f} s (min {row['ours_min']:.3f}): {row['ratio']:.2f}×; workload memory "
              f"{row['theirs_added']:.2f} vs {row['ours_added']:.2f} GiB (peak {row['theirs_peak']:.2f} vs "
              f"{row['ours_peak']:.2f})", flush=True)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"cpu": cpu_description(), "threads": args.threads, "repeat": args.repeat, "rows": rows}, f,
                      indent=1)
    if args.markdown and rows:
        print(f"\n| workload | encoder | batch | PyTorch {rows[0]['torch']} median (min) | longread median (min) | "
              "time ratio | workload memory PyTorch | workload memory longread | memory ratio |")
        print("|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            mem_ratio = f"{r['ours_added'] / r['theirs_added']:.2f}×" if r["theirs_added"] > 0.01 else "-"
            print(f"| {r['workload']} | {r['name']} | {r['shape']} | {r['theirs']:.3f} ({r['theirs_min']:.3f}) s | "
                  f"{r['ours']:.3f} ({r['ours_min']:.3f}) s | {r['ratio']:.2f}× | {r['theirs_added']:.2f} GiB | "
                  f"{r['ours_added']:.2f} GiB | {mem_ratio} |")
        print(f"PyTorch AdamW: {rows[0]['adamw']}")


if __name__ == "__main__":
    main()
