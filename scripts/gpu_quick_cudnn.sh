#!/usr/bin/env bash
# cuDNN's fused attention (LONGREAD_CUDA_ATTENTION=cudnn / LONGREAD_CUDA_TRAIN_ATTENTION=cudnn,
# vendor/cudnn-attn) against FlashAttention-2, the default, on a GPU machine in ~5 minutes: what
# decides whether cuDNN becomes the default. In order, each bounded by a timeout:
#   0. FlashAttention-2's training op test (its backward deterministic since commit fef465e), a bf16
#      run stopped and resumed bit-identically on each backend (deterministic backwards), and the
#      CUTLASS product with bias + exact GELU against its f32 reference;
#   1. the two attention op tests on cuDNN (inference; training, with dropout and gradients),
#      each asserting that cuDNN is what ran; 1b. again in sub-batches of powers of two
#      (LONGREAD_CUDNN_SHAPES=buckets: the test batches of 3 and 12 sequences run as 2 + 1, 8 + 4);
#   2. the attention alone at 128 x 512 tokens (bench --workload kernels, both backends) beside
#      PyTorch's SDPA, and the feed-forward's first product + GELU: cuBLASLt + the GELU pass, the
#      tanh epilogue, the exact GELU in longread's CUTLASS kernel's epilogue;
#   3. bf16 predict, 64 documents x 20 x 512 (random roberta-base-shaped weights), both backends
#      (bias + exact GELU in longread's CUTLASS product's epilogue, the default) and
#      FlashAttention-2 with the GELU in a pass of its own (LONGREAD_CUDA_GELU=pass) or in
#      cuBLASLt's epilogue (=tanh, tanh-approximated), two rounds, then PyTorch eager;
#   4. bf16 training steps, 4 x 20 x 512: 10,240-token batches (each document one kept batch)
#      and the whole graph (--no-recompute, 65,536), both backends (each backward deterministic,
#      the default), then each backend's non-deterministic backward at 10,240
#      (LONGREAD_CUDA_ATTENTION_BWD=fast: FlashAttention-2's atomics, cuDNN's default engine),
#      then PyTorch with and without checkpointing.
# Needs gpu-run/ packed (scripts/build_cuda.sh --tests && scripts/gpu_pack.sh) and PyTorch; the
# full check is scripts/gpu_check.sh. Lines to read: "cudnn-check:", the tests' "test result",
# and the JSON rows.
#   bash scripts/gpu_quick_cudnn.sh
set -u
cd "$(dirname "$0")/.."
# shellcheck source=scripts/gpu_env.sh
. scripts/gpu_env.sh
export LD_LIBRARY_PATH="$(gpu_library_dirs 'libcublas.so.13*')$(gpu_library_dirs 'libcudnn.so.9*')"
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
ux() { unxz "$1" "$2" && chmod +x "$2"; }
ux gpu-run/longread.xz "$w/lr"
ux gpu-run/cuda-tests.xz "$w/t"
ux gpu-run/cuda-train-tests.xz "$w/tt"
lr=$w/lr
$lr --version
echo "cudnn-check: libcudnn folders: $(find /usr /opt -name 'libcudnn.so.9*' -printf '%h ' 2>/dev/null)"
$lr -q encoder new --preset roberta-base --tokenizer tests/fixtures/tiny-roberta/tokenizer.json --out "$w/enc"
$lr -q init --encoder "$w/enc" --labels a,b,c --out "$w/m"

echo "cudnn-check: 0. FlashAttention-2's training op (the default), its backward deterministic: the same bits twice"
LONGREAD_REQUIRE_GPU=1 timeout 120 "$w/tt" --test-threads=1 --nocapture flash_attention_training 2>&1 \
  | grep -E "fused attention|panicked|^test |test result"
echo "cudnn-check: 0b. a bf16 run on the fused attention (dropout on), stopped and resumed: bit-identical, both backends"
for backend in fa2 cudnn; do
  LONGREAD_CUDA_TRAIN_ATTENTION=$backend LONGREAD_REQUIRE_GPU=1 timeout 90 "$w/tt" --test-threads=1 --nocapture \
    a_bf16_gpu_run_on_the_fused_attention 2>&1 | grep -E "resumed|panicked|^test |test result|cuDNN"
done
echo "cudnn-check: 0c. longread's CUTLASS product with bias + exact GELU against the f32 reference"
LONGREAD_REQUIRE_GPU=1 timeout 90 "$w/t" --test-threads=1 --nocapture cutlass_product 2>&1 \
  | grep -E "CUTLASS|declined|shapes ran|panicked|^test |test result"
echo "cudnn-check: 1. the attention ops on cuDNN"
LONGREAD_CUDA_ATTENTION=cudnn LONGREAD_REQUIRE_GPU=1 timeout 90 "$w/t" --test-threads=1 --nocapture flash_attention_2 2>&1 \
  | grep -E "fused attention|panicked|^test |test result|cuDNN"
LONGREAD_CUDA_TRAIN_ATTENTION=cudnn LONGREAD_REQUIRE_GPU=1 timeout 90 "$w/tt" --test-threads=1 --nocapture \
  flash_attention_training 2>&1 | grep -E "fused attention|panicked|^test |test result|cuDNN"
echo "cudnn-check: 1b. the same on cuDNN in sub-batches of powers of two (LONGREAD_CUDNN_SHAPES=buckets)"
LONGREAD_CUDNN_SHAPES=buckets LONGREAD_CUDA_ATTENTION=cudnn LONGREAD_REQUIRE_GPU=1 timeout 90 "$w/t" --test-threads=1 \
  --nocapture flash_attention_2 2>&1 | grep -E "panicked|^test |test result"
LONGREAD_CUDNN_SHAPES=buckets LONGREAD_CUDA_TRAIN_ATTENTION=cudnn LONGREAD_REQUIRE_GPU=1 timeout 90 "$w/tt" \
  --test-threads=1 --nocapture flash_attention_training 2>&1 | grep -E "panicked|^test |test result"

echo "cudnn-check: 2. attention alone, 128 x 512 tokens (ms); the feed-forward's first product with its GELU three ways"
for backend in fa2 cudnn; do
  LONGREAD_CUDA_ATTENTION=$backend timeout 60 $lr --device cuda bench --workload kernels --preset roberta-base \
    --shape 128x512 --repeat 10 --json | grep -E '"attention|feed-forward in|GELU'
done
timeout 60 python3 scripts/gpu_bench_kernels_torch.py --sequences 128 --seq 512 --repeat 10 | grep -E '"attention|feed-forward in|gelu'

echo "cudnn-check: 3. predict bf16, 64 x 20 x 512, 256,000-token batches"
for round in 1 2; do
  for backend in fa2 cudnn fa2+gelu-pass fa2+gelu-tanh; do
    # The default (since commit d48ea7e): bias + exact GELU in longread's CUTLASS product's epilogue
    # (LONGREAD_CUDA_GELU=fused); +gelu-pass: the GELU in a pass of its own (the default before);
    # +gelu-tanh: bias + GELU in cuBLASLt's epilogue (LONGREAD_CUDA_GELU=tanh, tanh-approximated).
    gelu=fused
    case $backend in *+gelu-pass) gelu=pass ;; *+gelu-tanh) gelu=tanh ;; esac
    LONGREAD_CUDA_ATTENTION=${backend%%+*} LONGREAD_CUDA_GELU=$gelu timeout 60 $lr --device cuda bench --workload predict \
      --model "$w/m" --shape 64x20 --repeat 3 --precision bf16 --max-batch-tokens 256000 --json \
      | python3 -c 'import json,sys;[print("cudnn-check: predict", sys.argv[1], sys.argv[2], json.loads(l)["gpu_attention"], round(json.loads(l)["docs_per_s"],1), "docs/s, first run", round(json.loads(l)["warmup_seconds"],2), "s") for l in sys.stdin if l.startswith("{")]' "$round" "$backend"
  done
done
timeout 90 python3 scripts/gpu_bench_torch.py --docs 64 --chunks-per-call 128 500 --dtypes bf16 2>&1 | grep '^{' | cut -c1-330

echo "cudnn-check: 4. training bf16, 4 x 20 x 512"
for args in "--max-batch-tokens 10240" "--no-recompute --max-batch-tokens 65536"; do
  for backend in fa2 cudnn; do
    # shellcheck disable=SC2086  # the arguments are words
    LONGREAD_CUDA_TRAIN_ATTENTION=$backend timeout 120 $lr --device cuda bench --workload train --model "$w/m" --shape 4x20 \
      --precision bf16 --repeat 3 --json $args \
      | python3 -c 'import json,sys;[print("cudnn-check: train", sys.argv[1], sys.argv[2], r["gpu_attention"], "kept", r["kept_documents"], round(r["docs_per_s"],2), "docs/s", round(r["peak_gpu_bytes"]/2**30,2), "GiB (estimated", round(r["estimated_peak_gpu_bytes"]/2**30,2), "), first step", round(r["warmup_seconds"],2), "s") for r in map(json.loads, filter(lambda l: l.startswith("{"), sys.stdin))]' "$args" "$backend"
  done
done
# The non-deterministic backward of each (FlashAttention-2's atomics, the default before commit fef465e).
for backend in fa2 cudnn; do
  LONGREAD_CUDA_ATTENTION_BWD=fast LONGREAD_CUDA_TRAIN_ATTENTION=$backend timeout 120 $lr --device cuda bench \
    --workload train --model "$w/m" --shape 4x20 --precision bf16 --repeat 3 --json --max-batch-tokens 10240 \
    | python3 -c 'import json,sys;[print("cudnn-check: train 10240 fast backward", r["gpu_attention"], r["gpu_separate"], round(r["docs_per_s"],2), "docs/s", round(r["peak_gpu_bytes"]/2**30,2), "GiB") for r in map(json.loads, filter(lambda l: l.startswith("{"), sys.stdin))]'
done
(cd scripts && timeout 150 python3 gpu_bench_torch_train.py --preset roberta-base --settings bf16:ckpt bf16:nockpt) 2>&1 \
  | grep '^{' | cut -c1-330
echo "cudnn-check: done"
