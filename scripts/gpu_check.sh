#!/usr/bin/env bash
# The GPU check of issue 33, in one command on a machine with an NVIDIA GPU and no Rust
# toolchain: runs the GPU tests, then longread and PyTorch on the same card and workload, and
# writes bench/results-gpu-<card>.json. Fits in ~8 minutes on an H100/H200.
#
# Prepare on a CPU machine (README "GPU"):
#   scripts/build_cuda.sh --tests && scripts/gpu_pack.sh     # fills gpu-run/ (git-ignored)
# then, on the GPU machine, from the repository root:
#   scripts/gpu_check.sh
# Needs: gpu-run/longread.xz and gpu-run/cuda-tests.xz, python3 with torch + transformers
# (for the PyTorch side; PYTHON overrides), and the CUDA 13 libraries (cuBLAS, cuRAND), found
# under /usr and /opt and put on LD_LIBRARY_PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
run="$repo/gpu-run"
fail() { echo "gpu_check: $*" >&2; exit 1; }

command -v nvidia-smi >/dev/null 2>&1 || fail "no nvidia-smi: this machine has no NVIDIA GPU driver (run it on a GPU machine)"
nvidia-smi -L >/dev/null 2>&1 || fail "nvidia-smi sees no GPU"
for f in longread.xz cuda-tests.xz; do
  [ -f "$run/$f" ] || fail "missing gpu-run/$f: build and pack on a CPU machine first (scripts/build_cuda.sh --tests && scripts/gpu_pack.sh)"
done
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
slug=$(echo "$card" | tr 'A-Z' 'a-z' | sed 's/nvidia //; s/[^a-z0-9]\+/-/g; s/^-//; s/-$//')
echo "gpu_check: $card ($(nvidia-smi --query-gpu=driver_version,memory.total --format=csv,noheader | head -1))"

# The CUDA 13 libraries candle loads at run time (cuBLAS, cuBLASLt, cuRAND).
libdirs=$(find /usr /opt -name 'libcublas.so.13*' -printf '%h\n' 2>/dev/null | sort -u | tr '\n' ':')
[ -n "$libdirs" ] || fail "libcublas.so.13 not found under /usr or /opt"
export LD_LIBRARY_PATH="${libdirs}${LD_LIBRARY_PATH:-}"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unxz() { ${PYTHON:-python3} -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' "$1" "$2"; }
unxz "$run/longread.xz" "$work/longread" && chmod +x "$work/longread"
unxz "$run/cuda-tests.xz" "$work/cuda-tests" && chmod +x "$work/cuda-tests"
lr="$work/longread"
"$lr" --version

# A random-weight roberta-base-shaped classifier, made here (no weights are copied over).
"$lr" -q encoder new --preset roberta-base --tokenizer tests/fixtures/tiny-roberta/tokenizer.json --out "$work/rb-encoder"
"$lr" -q init --encoder "$work/rb-encoder" --labels general,teen,mature --out "$work/rb-model"

echo "== PyTorch's own bf16 error on the test models (the reference of a GPU test)"
refs=()
for m in hier/roberta-attention hier/bert-attention hier/bert-mean hier/trained-multitask seq/bert seq/roberta; do
  refs+=("$repo/tests/fixtures/$m")
done
${PYTHON:-python3} scripts/gpu_bf16_reference.py "$work/bf16-reference.json" "${refs[@]}" "$work/rb-encoder" 2>&1 \
  | grep -v -i "warn\|unused\|initialized\|TRAIN this model\|^- \|^$" || true

echo "== GPU tests"
set +e
LONGREAD_REPO="$repo" LONGREAD_REQUIRE_GPU=1 LONGREAD_GPU_MODELS="$work/rb-model" \
  LONGREAD_BF16_REFERENCE="$work/bf16-reference.json" \
  "$work/cuda-tests" --test-threads=1 --nocapture 2>&1 | tee "$work/tests.log"
tests_status=${PIPESTATUS[0]}
echo "== GPU tests again with the flash attention kernel (LONGREAD_CUDA_ATTENTION=flash)"
LONGREAD_CUDA_ATTENTION=flash LONGREAD_REPO="$repo" LONGREAD_REQUIRE_GPU=1 LONGREAD_GPU_MODELS="$work/rb-model" \
  LONGREAD_BF16_REFERENCE="$work/bf16-reference.json" \
  "$work/cuda-tests" --test-threads=1 --nocapture 2>&1 | tee -a "$work/tests.log"
[ "${PIPESTATUS[0]}" = 0 ] || tests_status=1
set -e
tests_ok=$([ "$tests_status" = 0 ] && echo true || echo false)

echo "== longread"
: > "$work/longread.jsonl"
for precision in bf16 f32; do
  for tokens in 65536 256000; do
    "$lr" --device cuda bench --workload predict --model "$work/rb-model" --shape 64x20 --repeat 3 \
      --precision "$precision" --max-batch-tokens "$tokens" --json | tee -a "$work/longread.jsonl"
  done
done
# Diagnostics: bf16 with the flash attention kernel instead of materialised scores; one document of 1,280 chunks (one head call instead of 64: the head's share),
# and the time per step with LONGREAD_PROFILE=1 (each step waited for on its own).
: > "$work/diagnostics.jsonl"
LONGREAD_CUDA_ATTENTION=flash "$lr" --device cuda bench --workload predict --model "$work/rb-model" --shape 64x20 \
  --repeat 3 --precision bf16 --max-batch-tokens 65536 --json | tee -a "$work/diagnostics.jsonl"
"$lr" --device cuda bench --workload predict --model "$work/rb-model" --shape 1x1280 --repeat 3 \
  --precision bf16 --json | tee -a "$work/diagnostics.jsonl"
LONGREAD_PROFILE=1 "$lr" --device cuda bench --workload predict --model "$work/rb-model" --shape 8x20 --repeat 1 \
  --precision bf16 --json | tee -a "$work/diagnostics.jsonl"

echo "== PyTorch"
${PYTHON:-python3} scripts/gpu_bench_torch.py --docs 64 --chunks-per-call 128 500 | tee "$work/torch.jsonl"

echo "== embed: longread vs sentence-transformers"
${PYTHON:-python3} scripts/gpu_bench_embed.py "$lr" "$work" 2>&1 | grep '^{' | tee "$work/embed.jsonl" || true

mkdir -p bench
out="bench/results-gpu-$slug.json"
${PYTHON:-python3} - "$work/longread.jsonl" "$work/torch.jsonl" "$out" "$card" "$tests_ok" "$work/diagnostics.jsonl" "$work/embed.jsonl" <<'PY'
import json, sys
ours = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
embed = [json.loads(l) for l in open(sys.argv[7]) if l.strip()]
def embed_rate(side, dtype):
    rows = [r for r in embed if r["side"] == side and r["dtype"] == dtype]
    return rows[0]["texts_per_s"] if rows else None
diagnostics = [json.loads(l) for l in open(sys.argv[6]) if l.strip()]
torch = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
def best(rows, key, value):
    rows = [r for r in rows if r[key] == value]
    return max(rows, key=lambda r: r["docs_per_s"]) if rows else None
ours_bf16, torch_bf16 = best(ours, "precision", "bf16"), best(torch, "dtype", "bf16")
ours_f32, torch_f32 = best(ours, "precision", "f32"), best(torch, "dtype", "f32")
limit = 405.0 if "H200" in sys.argv[4] else None  # ../shared/gpu/README.md: 783 TFLOP/s bf16 GEMM on an H200
result = {
    "card": sys.argv[4],
    "gpu_tests_passed": sys.argv[5] == "true",
    "predict_bf16_ratio": round(ours_bf16["docs_per_s"] / torch_bf16["docs_per_s"], 3),
    "predict_f32_ratio": round(ours_f32["docs_per_s"] / torch_f32["docs_per_s"], 3),
    "predict_bf16_docs_per_s": round(ours_bf16["docs_per_s"], 1),
    "pytorch_eager_bf16_docs_per_s": torch_bf16["docs_per_s"],
    "bf16_share_of_gemm_limit": round(ours_bf16["docs_per_s"] / limit, 3) if limit else None,
    "workload": "roberta-base shape, 64 documents x 20 chunks x 512 tokens, random weights",
    "embed_bf16_ratio": round(embed_rate("longread", "bf16") / embed_rate("sentence-transformers", "bf16"), 3)
        if embed_rate("longread", "bf16") and embed_rate("sentence-transformers", "bf16") else None,
    "embed": embed,
    "longread": ours,
    "pytorch": torch,
    "longread_diagnostics": diagnostics,
}
json.dump(result, open(sys.argv[3], "w"), indent=1)
print(json.dumps({k: v for k, v in result.items() if k not in ("longread", "pytorch", "longread_diagnostics", "embed")}, indent=1))
PY
cp "$work/tests.log" "bench/gpu-tests-$slug.log"
echo "gpu_check: wrote $out"
[ "$tests_ok" = true ] || fail "GPU tests failed (bench/gpu-tests-$slug.log)"
