"""PyTorch side of scripts/gpu_check.sh's training comparison: the hierarchical
classifier's whole training step on a GPU as a practitioner writes it, the model and step of
../shared/gpu/anchor_torch.py's `train`: transformers' RobertaModel (SDPA attention, dropout on),
CLS per chunk, tanh attention pooling, LayerNorm, 768->384->tanh->3 head, cross-entropy, backward,
clip_grad_norm_(1.0), fused AdamW; bf16 autocast or f32 with TF32; with or without gradient
checkpointing. Random weights and ids: speed does not depend on them. Median of 5 timed steps
after one warm-up; peak memory by torch.cuda.max_memory_allocated over the timed steps.

    python3 scripts/gpu_bench_torch_train.py --preset roberta-base --docs 4 --chunks 20 \
        --settings bf16:ckpt bf16:nockpt f32:ckpt       # one JSON line each
    python3 scripts/gpu_bench_torch_train.py --settings bf16:nockpt --profile 30
        # then one more step under torch.profiler: its 30 longest kernels/ops by CUDA time (a
        # table on stderr, a JSON line with "profile" rows on stdout), beside longread's
        # LONGREAD_PROFILE=1 op table (gpu_check.sh's train-profile part)
"""
import argparse
import json
import time

import torch
import torch.nn as nn
from transformers import RobertaConfig, RobertaModel

from gpu_bench_torch import Hier


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="roberta-base", choices=["roberta-base", "roberta-large"])
    ap.add_argument("--docs", type=int, default=4)
    ap.add_argument("--chunks", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--settings", nargs="+", default=["bf16:ckpt", "bf16:nockpt", "f32:ckpt"])
    ap.add_argument("--profile", type=int, default=0, metavar="N",
                    help="after the timed steps, one more under torch.profiler: its N longest ops by CUDA time")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    dev = "cuda"
    hidden, layers, heads, ffn = (768, 12, 12, 3072) if args.preset == "roberta-base" else (1024, 24, 16, 4096)
    for setting in args.settings:
        dtype, ckpt = setting.split(":")
        ckpt = ckpt == "ckpt"
        cfg = RobertaConfig(vocab_size=50265, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                            intermediate_size=ffn, max_position_embeddings=514, type_vocab_size=1, pad_token_id=1)
        cfg._attn_implementation = "sdpa"
        model = Hier(RobertaModel(cfg, add_pooling_layer=False), hidden).to(dev).train()
        if ckpt:
            model.enc.gradient_checkpointing_enable()
        opt = torch.optim.AdamW(model.parameters(), lr=2e-5, fused=True)
        ids = torch.randint(5, cfg.vocab_size, (args.docs, args.chunks, args.tokens), device=dev)
        mask = torch.ones_like(ids)
        y = torch.randint(0, 3, (args.docs,), device=dev)

        def step():
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=(dtype == "bf16")):
                loss = nn.functional.cross_entropy(model(ids, mask), y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)

        step()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        times = []
        for _ in range(args.steps):
            t0 = time.perf_counter()
            step()
            torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        s = sorted(times)[len(times) // 2]
        print(json.dumps({
            "side": "pytorch", "torch": torch.__version__, "card": torch.cuda.get_device_name(0),
            "preset": args.preset, "dtype": dtype, "checkpointing": ckpt, "docs": args.docs,
            "chunks_per_doc": args.chunks, "step_s": round(s, 4), "runs": [round(t, 4) for t in times],
            "docs_per_s": round(args.docs / s, 2),
            "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
        }), flush=True)
        if args.profile:
            profile_step(step, args, setting)
        del model, opt
        torch.cuda.empty_cache()


def profile_step(step, args, setting):
    """One step under torch.profiler: the N ops with the most CUDA time (self time, so nested
    ops are not counted twice), as a table on stderr and a JSON line on stdout."""
    import sys
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    events = prof.key_averages()
    attr = "self_device_time_total" if hasattr(events[0], "self_device_time_total") else "self_cuda_time_total"
    print(events.table(sort_by=attr, row_limit=args.profile), file=sys.stderr, flush=True)
    rows = sorted(events, key=lambda e: getattr(e, attr), reverse=True)[: args.profile]
    total = sum(getattr(e, attr) for e in events)
    print(json.dumps({
        "side": "pytorch", "setting": setting, "profile_total_device_s": round(total / 1e6, 4),
        "profile": [{"op": e.key, "device_s": round(getattr(e, attr) / 1e6, 5), "calls": e.count} for e in rows],
    }), flush=True)


if __name__ == "__main__":
    main()
