#!/usr/bin/env python3
"""longread vs PyTorch on the same workloads, in one run, with ratios (issue 7's bench):
encoder forward (BERT-base shape with random weights at 4×512 and 32×128, all-MiniLM-L6-v2 at
the same shapes), a training step (forward in training mode + backward of the mean last hidden
state + AdamW over every parameter, BERT-base shape, 2×512) and an AdamW step alone. Each
workload runs in its own process (`longread bench --json`, and a Python process for PyTorch),
one warm-up run then --repeat timed runs; the median is compared, peak RSS is the process's.

    python3 scripts/bench_compare.py [--threads 2] [--repeat 3] [--only forward,train,optimizer]
        [--markdown]

"BERT-base shape" is RoBERTa-base (12 layers, hidden 768, 12 heads, FFN 3072, 50,265 tokens):
the same computation as BERT-base. PyTorch runs transformers' RobertaModel/BertModel with its
default attention (SDPA). Needs: a release build (cargo build --release), torch, transformers.
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
MINILM = os.path.join(ROOT, "..", "shared", "models", "all-MiniLM-L6-v2")
BINARY = os.path.join(ROOT, "target", "release", "longread")

TORCH = r'''
import json, resource, sys, time, torch
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
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, weight_decay=0.01)
if workload == "optimizer-step":
    for p in model.parameters():
        p.grad = torch.ones_like(p)
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
                  "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
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
    args = parser.parse_args()
    wanted = set(args.only.split(","))
    cases = []
    if "forward" in wanted:
        for encoder in ["roberta-base", MINILM]:
            for shape in ["4x512", "32x128"]:
                cases.append(("encoder-forward", encoder, shape))
    if "train" in wanted:
        cases.append(("train-step", "roberta-base", "2x512"))
    if "optimizer" in wanted:
        cases.append(("optimizer-step", "roberta-base", "1x8"))
    rows = []
    for workload, encoder, shape in cases:
        ours = longread(workload, encoder, shape, args.threads, args.repeat)
        theirs = pytorch(workload, encoder, shape, args.threads, args.repeat)
        name = "BERT-base shape" if encoder == "roberta-base" else os.path.basename(encoder)
        shape_text = "" if workload == "optimizer-step" else shape.replace("x", "×")
        rows.append((workload, name, shape_text, theirs["seconds"], ours["seconds"],
                     ours["seconds"] / theirs["seconds"], theirs["peak_rss_bytes"] / 2**30,
                     ours["peak_rss_bytes"] / 2**30, theirs["torch"]))
        print(f"{workload:16} {name:16} {shape_text:7} PyTorch {theirs['seconds']:.3f} s, "
              f"longread {ours['seconds']:.3f} s: {ours['seconds'] / theirs['seconds']:.2f}×; peak RSS "
              f"{theirs['peak_rss_bytes'] / 2**30:.2f} vs {ours['peak_rss_bytes'] / 2**30:.2f} GiB", flush=True)
    if args.markdown:
        print(f"\n| workload | encoder | batch | PyTorch {rows[0][8] if rows else ''} | longread | ratio | "
              "peak RSS PyTorch | peak RSS longread |")
        print("|---|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]:.3f} s | {r[4]:.3f} s | {r[5]:.2f}× | "
                  f"{r[6]:.2f} GiB | {r[7]:.2f} GiB |")


if __name__ == "__main__":
    main()
