#!/usr/bin/env python3
"""MLM pretraining throughput: `longread pretrain` vs PyTorch + transformers'
RobertaForMaskedLM on the same model shape, tokenizer, packed sequences, batch and masking
recipe (15%, 80/10/10), AdamW, in one run. Prints training tokens/s and the ratio.

    python3 scripts/bench_pretrain.py [--presets tiny,small] [--steps 30] [--batch-size 8]
                                      [--seq-len 128] [--threads 2] [--docs 200] [--repeats 3]
                                      [--warmup 1] [--device cpu|cuda] [--precision f32|bf16] [--corpus FILE]
                                      [--binary PATH] [--json-out FILE]

Corpus: the first --docs texts of --corpus (JSON lines with "text"; default
../shared/data/hyperpartisan/train.jsonl); tokenizer: a byte-level BPE of 8,000 tokens trained on
them by `longread tokenizer train`. On `--device cuda` both sides train on the GPU: longread with
`--device cuda --precision P`, PyTorch with the model on the GPU, bf16 autocast for `--precision
bf16` (TF32 allowed for f32), the fused CUDA AdamW, and the GPU waited for before the clock stops. Time = all steps
(forward, backward, clipping, AdamW; masking and batching included); longread's figure is its own
`tokens_per_second` over the steps (held-out evaluation excluded); PyTorch's the same loop's.
The PyTorch side is what a practitioner would write: SDPA attention and the fused CPU AdamW
(`fused=True`, falling back to `foreach`). Each side runs --repeats times, alternating, each run
--steps steps after --warmup untimed steps (on a GPU give both sides a few: PyTorch's first run
there once took 7x its second with one); the best and the median run are printed, with the CPU.
Needs: a release build, torch, transformers, tokenizers.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_cpu import cpu_description  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
SHARED = os.path.join(ROOT, "..", "shared")
BINARY = os.path.join(ROOT, "target", "release", "longread")


def torch_tokens_per_second(encoder_dir, texts, args):
    import torch
    from tokenizers import Tokenizer
    from transformers import RobertaForMaskedLM

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device(args.device)
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=args.device == "cuda" and args.precision == "bf16")
    tok = Tokenizer.from_file(os.path.join(encoder_dir, "tokenizer.json"))
    ids = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
    bos, eos, pad, mask = (tok.token_to_id(t) for t in ("<s>", "</s>", "<pad>", "<mask>"))
    stream = []
    for i, d in enumerate(ids):
        if i:
            stream.append(eos)
        stream.extend(d)
    w = args.seq_len - 2
    seqs = [[bos] + stream[i:i + w] + [eos] for i in range(0, len(stream), w)]
    model = RobertaForMaskedLM.from_pretrained(encoder_dir, attn_implementation="sdpa").to(device).train()
    no_decay = [p for n, p in model.named_parameters() if n.endswith("bias") or "LayerNorm" in n or "layer_norm" in n]
    decay = [p for n, p in model.named_parameters() if not (n.endswith("bias") or "LayerNorm" in n or "layer_norm" in n)]
    groups = [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}]
    try:
        opt = torch.optim.AdamW(groups, lr=5e-4, fused=True)
    except (RuntimeError, TypeError):
        opt = torch.optim.AdamW(groups, lr=5e-4, foreach=True)
    vocab = tok.get_vocab_size()
    specials = torch.tensor([bos, eos, pad, mask, tok.token_to_id("<unk>")])
    tokens, start = 0, None
    def wait():
        if args.device == "cuda":
            torch.cuda.synchronize()

    for step in range(args.steps + args.warmup):
        if step == args.warmup:
            wait()
            start, tokens = time.perf_counter(), 0  # the first steps warm up
        batch = [seqs[(step * args.batch_size + k) % len(seqs)] for k in range(args.batch_size)]
        width = max(len(s) for s in batch)
        x = torch.tensor([s + [pad] * (width - len(s)) for s in batch])
        att = (x != pad).long()
        labels = x.clone()
        prob = torch.full(x.shape, 0.15)
        prob[torch.isin(x, specials)] = 0.0
        chosen = torch.bernoulli(prob).bool()
        labels[~chosen] = -100
        replace = torch.bernoulli(torch.full(x.shape, 0.8)).bool() & chosen
        x[replace] = mask
        rand = torch.bernoulli(torch.full(x.shape, 0.5)).bool() & chosen & ~replace
        x[rand] = torch.randint(vocab, x.shape)[rand]
        tokens += int(att.sum())  # counted on the CPU tensor: no wait for the GPU inside the loop
        x, att, labels = (t.to(device, non_blocking=True) for t in (x, att, labels))
        with autocast:
            loss = model(input_ids=x, attention_mask=att, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
    wait()
    return tokens / (time.perf_counter() - start)


def longread_tokens_per_second(corpus, tok_dir, preset, out, args):
    run = subprocess.run([args.binary, "--threads", str(args.threads), "--device", args.device, "pretrain", "--corpus", corpus,
                          "--tokenizer", tok_dir, "--preset", preset, "--out", out,
                          "--max-steps", str(args.steps + args.warmup), "--eval-every", "1000000",
                          "--batch-size", str(args.batch_size), "--seq-len", str(args.seq_len),
                          "--held-out", "0.01", "--log-format", "json", "--precision", args.precision],
                         check=True, capture_output=True, text=True)
    events = [json.loads(line) for line in run.stdout.splitlines() if line.strip()]
    steps = [e for e in events if e["event"] == "step"][args.warmup:]  # the first steps warm up
    # harmonic mean of per-step rates = tokens/s over the steps at a fixed batch
    return len(steps) / sum(e["tokens_per_second"] ** -1 for e in steps)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--presets", default="tiny,small")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--docs", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1, help="untimed steps before each run's timed ones (default 1)")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where both sides train (default cpu)")
    ap.add_argument("--precision", choices=["f32", "bf16"], default="f32",
                    help="f32, or bf16 (cuda only: longread --precision bf16, PyTorch bf16 autocast); default f32")
    ap.add_argument("--corpus", default=os.path.join(SHARED, "data", "hyperpartisan", "train.jsonl"),
                    help="JSON lines with a \"text\" field (default: the hyperpartisan training articles)")
    ap.add_argument("--binary", default=BINARY, help="the longread binary (default target/release/longread)")
    ap.add_argument("--json-out", help="also write the rows as JSON to this file")
    args = ap.parse_args()
    if args.precision == "bf16" and args.device != "cuda":
        ap.error("--precision bf16 is measured on --device cuda only")
    import torch
    where = f"GPU: {torch.cuda.get_device_name(0)}" if args.device == "cuda" else f"CPU: {cpu_description()}"
    print(f"{where}; threads {args.threads}; {args.precision}; torch {torch.__version__}; "
          f"{args.repeats} runs of {args.steps} steps after {args.warmup} warm-up step(s)", flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        corpus = os.path.join(tmp, "corpus.jsonl")
        texts = []
        with open(args.corpus) as f, open(corpus, "w") as g:
            for line in list(f)[:args.docs]:
                text = json.loads(line)["text"]
                texts.append(text)
                g.write(json.dumps({"text": text}) + "\n")
        tok_dir = os.path.join(tmp, "tok")
        subprocess.run([args.binary, "-q", "tokenizer", "train", "--corpus", corpus, "--vocab-size", "8000",
                        "--out", tok_dir], check=True)
        for preset in args.presets.split(","):
            encoder = os.path.join(tmp, f"enc-{preset}")
            subprocess.run([args.binary, "-q", "encoder", "new", "--preset", preset, "--tokenizer", tok_dir,
                            "--out", encoder], check=True)
            ours, theirs = [], []
            for r in range(args.repeats):
                ours.append(longread_tokens_per_second(corpus, tok_dir, preset, os.path.join(tmp, f"run-{preset}-{r}"),
                                                       args))
                theirs.append(torch_tokens_per_second(encoder, texts, args))
            row = {"preset": preset, "device": args.device, "precision": args.precision, "batch": args.batch_size, "seq_len": args.seq_len, "steps": args.steps, "warmup": args.warmup,
                   "longread_tokens_per_s": ours, "pytorch_tokens_per_s": theirs,
                   "longread_median": statistics.median(ours), "pytorch_median": statistics.median(theirs),
                   "longread_best": max(ours), "pytorch_best": max(theirs)}
            row["time_ratio"] = row["pytorch_median"] / row["longread_median"]
            rows.append(row)
            print(f"{preset}: longread {row['longread_median']:.0f} tokens/s (best {row['longread_best']:.0f}), "
                  f"PyTorch {row['pytorch_median']:.0f} (best {row['pytorch_best']:.0f}); longread time / PyTorch "
                  f"time {row['time_ratio']:.2f}× (runs: longread {[round(x) for x in ours]}, "
                  f"PyTorch {[round(x) for x in theirs]})", flush=True)
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"cpu": cpu_description(), "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else None,
                       "threads": args.threads, "torch": torch.__version__, "rows": rows},
                      f, indent=1)


if __name__ == "__main__":
    main()
