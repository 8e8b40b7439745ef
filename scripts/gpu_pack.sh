#!/usr/bin/env bash
# Packs what scripts/gpu_check.sh needs from a CPU machine's `cuda` build into gpu-run/
# (git-ignored; a few MB with xz): the longread binary and the GPU test executables
# (crates/longread-classifier/tests/cuda.rs, crates/longread-train/tests/cuda_train.rs), stripped.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=target-cuda/release/longread
tests=$(ls -t target-cuda/release/deps/cuda-* 2>/dev/null | grep -v '\.d$' | head -1 || true)
train_tests=$(ls -t target-cuda/release/deps/cuda_train-* 2>/dev/null | grep -v '\.d$' | head -1 || true)
[ -x "$bin" ] || { echo "gpu_pack: no $bin (run scripts/build_cuda.sh --tests)" >&2; exit 1; }
[ -n "$tests" ] && [ -n "$train_tests" ] || { echo "gpu_pack: no GPU test executables (run scripts/build_cuda.sh --tests)" >&2; exit 1; }
mkdir -p gpu-run
strip -o gpu-run/longread "$bin"
strip -o gpu-run/cuda-tests "$tests"
strip -o gpu-run/cuda-train-tests "$train_tests"
xz -f -T0 -6 gpu-run/longread gpu-run/cuda-tests gpu-run/cuda-train-tests
ls -la gpu-run
