#!/usr/bin/env bash
# A short predict check on a GPU machine (~90 s with the machine's start): the inference GPU
# tests at the defaults, the bias passes alone, then bf16 predict (64 documents x 20 x 512,
# random roberta-base-shaped weights) with the default products and with candle's cuBLAS ones
# (LONGREAD_CUDA_GEMM=cublas), two rounds, and PyTorch eager's bf16 predict in the same run.
# For GPU time too short for scripts/gpu_check.sh; it measured commit 2a6340c on an H200 on
# 2026-11-27 (bench/gpu-check-h200-2026-11-27-after.log). Needs gpu-run/ packed
# (scripts/gpu_pack.sh). The bf16 encoder test is skipped: it needs LONGREAD_BF16_REFERENCE,
# which gpu_check.sh makes.
#   bash scripts/gpu_quick_predict.sh
set -u
cd "$(dirname "$0")/.."
# shellcheck source=scripts/gpu_env.sh
. scripts/gpu_env.sh
export LD_LIBRARY_PATH="$(gpu_library_dirs 'libcublas.so.13*')$(gpu_library_dirs 'libcudnn.so.9*')"
w=$(mktemp -d)
ux() { unxz "$1" "$2" && chmod +x "$2"; }
ux gpu-run/longread.xz $w/lr; ux gpu-run/cuda-tests.xz $w/t
lr=$w/lr
$lr --version
$lr -q encoder new --preset roberta-base --tokenizer tests/fixtures/tiny-roberta/tokenizer.json --out $w/enc
$lr -q init --encoder $w/enc --labels a,b,c --out $w/m
echo "== inference GPU tests (defaults)"
LONGREAD_REPO=$PWD LONGREAD_REQUIRE_GPU=1 LONGREAD_GPU_MODELS=$w/m timeout 60 $w/t --test-threads=1 --skip flash_attention_2 \
  --skip cuda_bf16_encoder_is_as_close_to_f32_as_pytorch_autocast 2>&1 | grep -E "^test |test result"
echo "== bias kernels"
timeout 30 $lr --device cuda bench --workload kernels --preset roberta-base --shape 128x512 --repeat 10 --json | grep -E '"bias'
echo "== predict bf16, 64x20"
for r in 1 2; do for g in default cublas; do for t in 131072 256000; do
  LONGREAD_CUDA_GEMM=$g timeout 40 $lr --device cuda bench --workload predict --model $w/m --shape 64x20 --repeat 3 --precision bf16 --max-batch-tokens $t --json \
   | python3 -c 'import json,sys;[print("longread",sys.argv[1],sys.argv[2],sys.argv[3],round(json.loads(l)["docs_per_s"],1),"docs/s") for l in sys.stdin if l.startswith("{")]' $r $g $t
done; done; done
echo "== PyTorch"
timeout 60 python3 scripts/gpu_bench_torch.py --docs 64 --chunks-per-call 128 500 2>&1 | grep '"bf16"' | cut -c1-330
