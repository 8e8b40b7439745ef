#!/usr/bin/env python3
"""Training-step memory and time: longread (with and without chunk recomputation) vs PyTorch,
same model (all-MiniLM-L6-v2 + attention head), same chunks, one document per step.

    python3 scripts/bench_train.py [--chunks 8,32,64] [--threads 2] [--torch-max 32]

For each N, one document of exactly N chunks (512 tokens, stride 256; hyperpartisan training
articles concatenated) is trained on for one optimizer step (batch 1; embeddings frozen, all
layers train, as `longread train`'s defaults); peak RSS is the whole process's
(/usr/bin/time), step time is longread's own `train_seconds` (dev evaluation excluded) and, for
PyTorch, forward + backward + AdamW step of the same computation (full graph, as PyTorch users
run it). --torch-max skips PyTorch (and longread --no-recompute) above that many chunks.
Needs: a release build, torch, transformers, tokenizers, safetensors.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SHARED = os.path.join(ROOT, "..", "shared")
MINILM = os.path.join(SHARED, "models", "all-MiniLM-L6-v2")
BINARY = os.path.join(ROOT, "target", "release", "longread")

TORCH_STEP = r'''
import json, resource, sys, time, torch
sys.path.insert(0, sys.argv[1])
from reference_hierarchical import Chunker, HierarchicalReference
torch.set_num_threads(int(sys.argv[4]))
model = HierarchicalReference.from_dir(sys.argv[2])
chunker = Chunker(sys.argv[2] + "/tokenizer.json", model.s)
text = json.loads(open(sys.argv[3]).readline())["text"]
chunks = chunker.chunk(text)
head = {k: torch.nn.Parameter(v.clone()) for k, v in model.head.items()}
model.head = head
model.encoder.train()
params = [p for n, p in model.encoder.named_parameters() if not n.startswith("embeddings.")] + list(head.values())
for n, p in model.encoder.named_parameters():
    p.requires_grad_(not n.startswith("embeddings."))
opt = torch.optim.AdamW(params, lr=2e-5)
start = time.perf_counter()
logits, _ = model.classify(model.chunk_vectors(chunks))
loss = torch.nn.functional.cross_entropy(logits.unsqueeze(0), torch.tensor([1]))
loss.backward()
opt.step()
print(json.dumps({"chunks": len(chunks), "seconds": time.perf_counter() - start,
                  "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
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
    args = ap.parse_args()
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(MINILM, "tokenizer.json"))
    tok.no_truncation()
    tok.no_padding()
    print("| chunks | longread recompute: step s, peak MiB | longread full graph: step s, peak MiB | PyTorch: step s, peak MiB | time ratio (recompute / PyTorch) | memory ratio |")
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
                                  "--dev", data, "--out", out, "--epochs", "1", "--batch-size", "1",
                                  "--max-batch-tokens", str(args.max_batch_tokens)] + extra)
                secs = None
                if rss is not None:
                    secs = json.loads(open(os.path.join(out, "metrics.jsonl")).readline())["train_seconds"]
                row[mode] = (secs, rss)
            if n <= args.torch_max:
                res = subprocess.run([sys.executable, "-c", TORCH_STEP, os.path.join(ROOT, "scripts"), model, data,
                                      str(args.threads)], capture_output=True, text=True)
                t = json.loads(res.stdout.strip().splitlines()[-1]) if res.returncode == 0 else None
                row["torch"] = (t["seconds"], t["rss_mib"]) if t else (None, None)
            else:
                row["torch"] = (None, None)
            fmt = lambda v: "—" if v[0] is None else f"{v[0]:.1f} s, {v[1]:.0f}"  # noqa: E731
            ratio = lambda i: "—" if row["torch"][i] is None or row["recompute"][i] is None else f"{row['recompute'][i] / row['torch'][i]:.2f}"  # noqa: E731
            print(f"| {n} | {fmt(row['recompute'])} | {fmt(row['full'])} | {fmt(row['torch'])} | {ratio(0)} | {ratio(1)} |", flush=True)


if __name__ == "__main__":
    main()
