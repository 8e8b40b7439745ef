#!/usr/bin/env python3
"""PyTorch's counterparts of `longread bench --workload kernels`: the building blocks of one bf16
encoder layer in inference (and training's attention, forward and backward), each timed alone on random data with the same names and shapes, so
that one table says which of longread's blocks is slower than PyTorch's and by how much.

    python3 scripts/gpu_bench_kernels_torch.py [--sequences 128] [--seq 512] [--hidden 768]
                                               [--inner 3072] [--heads 12] [--repeat 10]
                                               [--device cuda|cpu] [--only-attention-training]
                                               [--suffix ' @20x512']

One JSON object per block on stdout ("side": "pytorch", "kernel", "shape", "seconds", and
"tflops" or "gbps" counted as longread counts them). Where PyTorch's model does a block
differently, the row says so: its linear layers add the bias in cuBLASLt's epilogue (the
"linear ... with bias" rows; longread adds it in a pass of its own), its residual LayerNorm is an
add and a layer_norm, and its GELU follows such a product. Needs torch with CUDA (`--device cpu`
runs the same code small and slow, to try the script without a GPU).
"""
import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sequences", type=int, default=128)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--inner", type=int, default=3072)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--only-attention-training", action="store_true",
                    help="print the training attention's rows only (the others are still timed)")
    ap.add_argument("--suffix", default="", help="appended to every row's kernel name (e.g. ' @20x512')")
    args = ap.parse_args()
    dev = torch.device(args.device)
    wait = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    torch.backends.cuda.matmul.allow_tf32 = True
    tokens, h, inner, heads = args.sequences * args.seq, args.hidden, args.inner, args.heads
    gen = torch.Generator(device=dev).manual_seed(0)

    def random(*shape, dtype=torch.bfloat16):
        return (torch.randn(*shape, device=dev, generator=gen) * 0.05).to(dtype)

    def time_it(f):
        runs = []
        for i in range(args.repeat + 2):
            wait()
            start = time.perf_counter()
            f()
            wait()
            if i >= 2:
                runs.append(time.perf_counter() - start)
        return statistics.median(runs)

    def row(kernel, shape, seconds, flops=None, nbytes=None):
        if args.only_attention_training and not kernel.startswith("attention training"):
            return
        out = {"side": "pytorch", "kernel": kernel + args.suffix, "shape": shape, "seconds": seconds,
               "device": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu", "torch": torch.__version__}
        if flops:
            out["tflops"] = flops / seconds / 1e12
        if nbytes:
            out["gbps"] = nbytes / seconds / 1e9
        print(json.dumps(out), flush=True)

    with torch.inference_mode():
        stream = random(tokens, h, dtype=torch.float32)
        row("cast f32 to bf16", f"[{tokens}, {h}]", time_it(lambda: stream.to(torch.bfloat16)), nbytes=tokens * h * 6)
        x = stream.to(torch.bfloat16)
        for kernel, k, n in [("product q/k/v", h, 3 * h), ("product attention out", h, h),
                             ("product feed-forward in", h, inner), ("product feed-forward out", inner, h)]:
            inp = x if k == h else random(tokens, k)
            w, b = random(n, k), random(n)
            flops = 2.0 * tokens * k * n
            row(kernel, f"[{tokens}, {k}] x [{n}, {k}]T", time_it(lambda: torch.matmul(inp, w.t())), flops=flops)
            row("linear " + kernel[len("product "):] + " with bias (PyTorch's model)", f"[{tokens}, {k}] x [{n}, {k}]T",
                time_it(lambda: F.linear(inp, w, b)), flops=flops)
        qkv = random(tokens, 3 * h)
        bias = random(3 * h)
        row("bias in place", f"[{tokens}, {3 * h}]", time_it(lambda: qkv.add_(bias)), nbytes=tokens * 3 * h * 4)
        act = random(tokens, inner)
        act_bias = random(inner)
        row("bias + GELU in place", f"[{tokens}, {inner}]", time_it(lambda: F.gelu(act.add_(act_bias))),
            nbytes=tokens * inner * 4)
        row("GELU alone (PyTorch's model)", f"[{tokens}, {inner}]", time_it(lambda: F.gelu(act)),
            nbytes=tokens * inner * 4)
        b, s, d = args.sequences, args.seq, h // heads
        q, k, v = (qkv.view(b, s, 3, heads, d)[:, :, i].transpose(1, 2) for i in range(3))
        row("attention", f"{b} x {s} tokens, {heads} heads",
            time_it(lambda: F.scaled_dot_product_attention(q, k, v)), flops=4.0 * tokens * s * h)
        # The model's bias came with the product; the bf16 + f32 sum promotes to f32 in one kernel.
        gamma, beta = random(h, dtype=torch.float32), random(h, dtype=torch.float32)
        row("residual + LayerNorm (bf16 + f32 into f32)", f"[{tokens}, {h}]",
            time_it(lambda: F.layer_norm(torch.add(x, stream), (h,), gamma, beta, 1e-5)), nbytes=tokens * h * 10)
    # Training's attention, forward and backward with dropout 0.1, as the model runs it: the heads
    # split from the q/k/v product, SDPA, the heads merged back (the copy the output product
    # needs), the gradient of the output's sum back into the q/k/v product.
    b, s, d = args.sequences, args.seq, h // heads
    trained = random(tokens, 3 * h).requires_grad_()

    def attention_train():
        trained.grad = None
        q, k, v = (trained.view(b, s, 3, heads, d)[:, :, i].transpose(1, 2) for i in range(3))
        out = F.scaled_dot_product_attention(q, k, v, dropout_p=0.1).transpose(1, 2).reshape(tokens, h)
        out.sum().backward()

    def attention_forward():
        q, k, v = (trained.view(b, s, 3, heads, d)[:, :, i].transpose(1, 2) for i in range(3))
        F.scaled_dot_product_attention(q, k, v, dropout_p=0.1).transpose(1, 2).reshape(tokens, h)

    def attention_rows(mark=""):
        row("attention training, forward only, dropout 0.1" + mark, f"{b} x {s} tokens, {heads} heads",
            time_it(attention_forward), flops=4.0 * tokens * s * h)
        row("attention training, forward + backward, dropout 0.1" + mark, f"{b} x {s} tokens, {heads} heads",
            time_it(attention_train), flops=3.5 * 4.0 * tokens * s * h)

    # SDPA's own choice (cuDNN's kernels on Hopper with cuDNN > 9.15 since PyTorch 2.10; else
    # FlashAttention-2), then each backend pinned: "[cuDNN]" pairs with longread's cuDNN rows,
    # "[PyTorch FlashAttention-2]" is PyTorch's build of the kernels longread's unmarked rows run.
    attention_rows()
    if args.device == "cuda":
        from torch.nn.attention import SDPBackend, sdpa_kernel
        for backend, mark in [(SDPBackend.CUDNN_ATTENTION, " [cuDNN]"),
                              (SDPBackend.FLASH_ATTENTION, " [PyTorch FlashAttention-2]")]:
            try:
                with sdpa_kernel(backend):
                    attention_rows(mark)
            except RuntimeError as err:
                print(f"attention training with SDPA pinned to{mark}: skipped ({str(err)[:200]})", file=sys.stderr)


if __name__ == "__main__":
    main()
