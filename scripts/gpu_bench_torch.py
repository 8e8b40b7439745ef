"""PyTorch side of scripts/gpu_check.sh: the hierarchical classifier's predict throughput on a GPU,
written as a practitioner would (transformers' RobertaModel with SDPA attention, inference_mode,
bf16 autocast or f32 with TF32), on the same workload `longread bench --workload predict` times:
DOCS documents of 20 chunks x 512 random token ids, CLS per chunk, tanh attention pooling,
LayerNorm, 768->384->tanh->3 head. Random weights: speed does not depend on them.
Same model and measurement as ../shared/gpu/anchor_torch.py (median of 3 timed passes after one
warm-up), with the chunks per forward call as an argument so both sides run the same batches.

    python3 scripts/gpu_bench_torch.py --docs 64 --chunks-per-call 128 500   # one JSON line each
    python3 scripts/gpu_bench_torch.py --compile --dtypes bf16             # the same under torch.compile

With --compile the model runs under `torch.compile` (default mode, as ../shared/gpu/anchor_compile.py):
the untimed first pass compiles every batch shape, and its seconds are reported as `first_pass_s`.
"""
import argparse
import json
import time

import torch
import torch.nn as nn
from transformers import RobertaConfig, RobertaModel


class Hier(nn.Module):
    def __init__(self, enc, hidden, labels=3):
        super().__init__()
        self.enc = enc
        self.proj = nn.Linear(hidden, 256)
        self.v = nn.Linear(256, 1, bias=False)
        self.norm = nn.LayerNorm(hidden)
        self.head = nn.Sequential(nn.Linear(hidden, hidden // 2), nn.Tanh(), nn.Dropout(0.3), nn.Linear(hidden // 2, labels))

    def forward(self, ids, mask):  # ids: [B, C, T]
        b, c, t = ids.shape
        h = self.enc(input_ids=ids.view(b * c, t), attention_mask=mask.view(b * c, t)).last_hidden_state[:, 0]
        h = h.view(b, c, -1)
        a = torch.softmax(self.v(torch.tanh(self.proj(h))).squeeze(-1), dim=1)
        return self.head(self.norm((a.unsqueeze(-1) * h).sum(1)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=64)
    ap.add_argument("--chunks", type=int, default=20)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--chunks-per-call", type=int, nargs="+", default=[500])
    ap.add_argument("--dtypes", nargs="+", default=["bf16", "f32"])
    ap.add_argument("--preset", default="roberta-base", choices=["roberta-base", "roberta-large"])
    ap.add_argument("--compile", action="store_true", help="run the model under torch.compile")
    args = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    dev = "cuda"
    hidden, layers, heads, ffn = (768, 12, 12, 3072) if args.preset == "roberta-base" else (1024, 24, 16, 4096)
    cfg = RobertaConfig(vocab_size=50265, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=ffn, max_position_embeddings=514, type_vocab_size=1, pad_token_id=1)
    cfg._attn_implementation = "sdpa"
    model = Hier(RobertaModel(cfg, add_pooling_layer=False), hidden).to(dev).eval()
    forward = torch.compile(model) if args.compile else model
    nonemb = sum(p.numel() for n, p in model.enc.named_parameters() if "embeddings" not in n)
    flops_per_token = 2 * nonemb + 4 * layers * args.tokens * hidden
    ids = torch.randint(5, cfg.vocab_size, (args.docs, args.chunks, args.tokens), device=dev)
    mask = torch.ones_like(ids)
    for dtype in args.dtypes:
        for per_call in args.chunks_per_call:
            step = max(1, per_call // args.chunks)

            def run():
                with torch.inference_mode(), torch.autocast("cuda", dtype=torch.bfloat16, enabled=(dtype == "bf16")):
                    for i in range(0, args.docs, step):
                        forward(ids[i:i + step], mask[i:i + step])

            t0 = time.perf_counter()
            run()
            torch.cuda.synchronize()
            first_s = time.perf_counter() - t0
            torch.cuda.reset_peak_memory_stats()
            times = []
            for _ in range(3):
                t0 = time.perf_counter()
                run()
                torch.cuda.synchronize()
                times.append(time.perf_counter() - t0)
            s = sorted(times)[1]
            tokens = args.docs * args.chunks * args.tokens
            print(json.dumps({
                "side": "pytorch", "torch": torch.__version__, "card": torch.cuda.get_device_name(0),
                "preset": args.preset, "dtype": dtype, "compiled": args.compile, "first_pass_s": round(first_s, 1),
                "docs": args.docs, "chunks_per_doc": args.chunks,
                "chunks_per_call": step * args.chunks, "seconds": round(s, 4), "runs": [round(t, 4) for t in times],
                "docs_per_s": round(args.docs / s, 1), "tokens_per_s": round(tokens / s),
                "tflops": round(tokens * flops_per_token / s / 1e12, 1),
                "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
            }), flush=True)


if __name__ == "__main__":
    main()
