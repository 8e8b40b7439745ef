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
# Which code the binaries are (gpu_check.sh prints it first): the commit, and the files that
# differed from it when they were packed (none: the commit's code).
{
  echo "commit $(git rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "packed $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "changed files $(git status --porcelain --untracked-files=no 2>/dev/null | wc -l)"
} > gpu-run/BUILD
# For the `unfreeze` part: all-MiniLM-L6-v2's config and tokenizer (not its weights: a random
# encoder of its shape is made there) and the hyperpartisan training articles (~0.7 MB with xz).
shared=${SHARED:-../shared}
if [ -f "$shared/models/all-MiniLM-L6-v2/config.json" ] && [ -f "$shared/data/hyperpartisan/train.jsonl" ]; then
  mkdir -p gpu-run/minilm
  cp "$shared/models/all-MiniLM-L6-v2/config.json" "$shared/models/all-MiniLM-L6-v2/tokenizer.json" gpu-run/minilm/
  xz -c -T0 -6 "$shared/data/hyperpartisan/train.jsonl" > gpu-run/hyperpartisan-train.jsonl.xz
else
  echo "gpu_pack: $shared lacks all-MiniLM-L6-v2 or the hyperpartisan data; the unfreeze part will be skipped" >&2
fi
ls -la gpu-run gpu-run/minilm 2>/dev/null || ls -la gpu-run
