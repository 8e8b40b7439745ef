#!/usr/bin/env bash
# The GPU check, in one command on a machine with an NVIDIA GPU and no Rust
# toolchain: runs the GPU tests, then longread and PyTorch on the same card and workload, and
# writes bench/results-gpu-<card>.json. Fits in ~8 minutes on an H100/H200.
#
# Prepare on a CPU machine (README "GPU"):
#   scripts/build_cuda.sh --tests && scripts/gpu_pack.sh     # fills gpu-run/ (git-ignored)
# then, on the GPU machine, from the repository root:
#   scripts/gpu_check.sh
# GPU_CHECK_PARTS picks what runs (default all: "tests train-tests predict compile kernels embed train train-profile pretrain unfreeze han serve";
# all of them take more than one command's 10 minutes: split them over two calls, or set
# GPU_CHECK_DEADLINE=SECONDS to skip the parts that would start after it):
#   tests    the inference GPU tests (crates/longread-classifier/tests/cuda.rs), at the defaults
#            and again under each other kernel choice (cuDNN's attention among them)
#   train-tests  the training GPU tests (crates/longread-train/tests/cuda_train.rs), the attention
#            ones again on cuDNN (LONGREAD_CUDA_TRAIN_ATTENTION=cudnn)
#   predict  longread vs PyTorch predict (bench/results-gpu-<card>.json), with diagnostics and
#            variant rows (cuDNN's attention: `predict_bf16_cudnn_ratio`)
#   compile  (within predict) PyTorch's bf16 predict under torch.compile too (~2 minutes, most of
#            it compiling): `predict_bf16_compile_ratio`
#   kernels  one bf16 layer's blocks alone (products, casts, bias passes, attention, residual
#            LayerNorm; training's attention forward + backward on FlashAttention-2 and cuDNN),
#            longread vs PyTorch at 128 x 512 tokens (bench/results-gpu-<card>-kernels.json)
#   embed    longread embed vs sentence-transformers
#   train    longread vs PyTorch training steps (bench/results-gpu-<card>-train.json), with
#            rows on cuDNN's attention (`train_bf16_cudnn_*`, `train_large_bf16_cudnn_ratio`);
#            each change of 2026-11-28 switched off at 10,240-token batches, then every switch
#            that beat its backend's default there, all together (scripts/gpu_switch_winners.py:
#            `train_bf16_winners_combined`, outside the official ratios);
#            TRAIN_ABLATIONS=1 adds rows with each earlier change switched off (~1.5 minutes)
#   train-profile  one training step in parts and op by op (candle's op_profile), beside PyTorch's
#            step under torch.profiler (bench/train-profile-<card>.jsonl, tables in the log)
#   pretrain MLM pretraining steps, small preset, 8 x 512, bf16: longread vs PyTorch's
#            RobertaForMaskedLM (bench/results-gpu-<card>-pretrain.json, `pretrain_bf16_ratio`)
#   unfreeze the gradual-unfreezing recipe (4 epochs) on the hyperpartisan articles with a random
#            all-MiniLM-L6-v2-shaped encoder, bf16 (scripts/bench_unfreeze.sh;
#            bench/results-gpu-<card>-unfreeze-bf16.json), against 16.8 minutes on 2 CPU cores
#   han      the HAN's training step (32 documents x 64 sentences x 32 words) on the GPU and on the
#            machine's CPU, each against PyTorch on the same device (scripts/bench_han.py;
#            bench/results-gpu-<card>-han.json): should `train --arch han` move to GPUs?
#   serve    serve at concurrency 32 vs predict, GPU memory over a soak (bench/results-gpu-<card>-serve.json)
# Needs: gpu-run/longread.xz, gpu-run/cuda-tests.xz and gpu-run/cuda-train-tests.xz, python3 with torch + transformers
# (for the PyTorch side; PYTHON overrides), and the CUDA 13 libraries (cuBLAS, cuRAND; cuDNN 9
# for the rows and tests of LONGREAD_CUDA_ATTENTION=cudnn), found under /usr and /opt and put on
# LD_LIBRARY_PATH.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/gpu_env.sh
. scripts/gpu_env.sh
repo=$PWD
run="$repo/gpu-run"
fail() { echo "gpu_check: $*" >&2; exit 1; }

command -v nvidia-smi >/dev/null 2>&1 || fail "no nvidia-smi: this machine has no NVIDIA GPU driver (run it on a GPU machine)"
nvidia-smi -L >/dev/null 2>&1 || fail "nvidia-smi sees no GPU"
parts=" ${GPU_CHECK_PARTS:-tests train-tests predict compile kernels embed train train-profile pretrain unfreeze han serve} "
# Whether part $1 runs; says so with the seconds since the start (to size the parts per call).
# With GPU_CHECK_DEADLINE=S, a part not yet started is skipped once S seconds have passed (a
# started part always finishes, its results included), so that one call of a limited length
# runs the parts in order and returns before its limit.
started_parts=" "
skipped_parts=" "
part() {
  case "$parts" in *" $1 "*) ;; *) return 1 ;; esac
  case "$started_parts" in *" $1 "*) return 0 ;; esac
  case "$skipped_parts" in *" $1 "*) return 1 ;; esac
  if [ -n "${GPU_CHECK_DEADLINE:-}" ] && [ "$SECONDS" -ge "$GPU_CHECK_DEADLINE" ]; then
    echo "-- $1 skipped: ${SECONDS}s passed, GPU_CHECK_DEADLINE is ${GPU_CHECK_DEADLINE}s"
    skipped_parts="$skipped_parts$1 "
    return 1
  fi
  started_parts="$started_parts$1 "
  echo "-- $1 (${SECONDS}s since the start)"
  return 0
}
for f in longread.xz cuda-tests.xz cuda-train-tests.xz; do
  [ -f "$run/$f" ] || fail "missing gpu-run/$f: build and pack on a CPU machine first (scripts/build_cuda.sh --tests && scripts/gpu_pack.sh)"
done
card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
slug=$(echo "$card" | tr 'A-Z' 'a-z' | sed 's/nvidia //; s/[^a-z0-9]\+/-/g; s/^-//; s/-$//')
echo "gpu_check: $card ($(nvidia-smi --query-gpu=driver_version,memory.total --format=csv,noheader | head -1))"
# The build measured (gpu_pack.sh's stamp; the checkout's commit where an older pack has none).
if [ -f "$run/BUILD" ]; then
  echo "gpu_check: binaries of $(tr '\n' ';' < "$run/BUILD")"
else
  echo "gpu_check: binaries without a BUILD stamp; checkout at $(git -C "$repo" rev-parse HEAD 2>/dev/null || echo unknown)"
fi

# The CUDA 13 libraries candle loads at run time (cuBLAS, cuBLASLt, cuRAND).
libdirs=$(gpu_library_dirs 'libcublas.so.13*')
[ -n "$libdirs" ] || fail "libcublas.so.13 not found under /usr or /opt"
# cuDNN 9 (PyTorch's, for LONGREAD_CUDA_ATTENTION=cudnn; opened at run time, optional).
cudnn_dirs=$(gpu_library_dirs 'libcudnn.so.9*')
[ -n "$cudnn_dirs" ] || echo "gpu_check: libcudnn.so.9 not found under /usr or /opt: the cuDNN rows fall back to FlashAttention-2" >&2
export LD_LIBRARY_PATH="${libdirs}${cudnn_dirs}${LD_LIBRARY_PATH:-}"

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
unxz "$run/longread.xz" "$work/longread" && chmod +x "$work/longread"
unxz "$run/cuda-tests.xz" "$work/cuda-tests" && chmod +x "$work/cuda-tests"
unxz "$run/cuda-train-tests.xz" "$work/cuda-train-tests" && chmod +x "$work/cuda-train-tests"
lr="$work/longread"
"$lr" --version

# A random-weight roberta-base-shaped classifier, made here (no weights are copied over).
"$lr" -q encoder new --preset roberta-base --tokenizer tests/fixtures/tiny-roberta/tokenizer.json --out "$work/rb-encoder"
"$lr" -q init --encoder "$work/rb-encoder" --labels general,teen,mature --out "$work/rb-model"

tests_status=0
# Read by the predict summary whether or not the compile part runs.
: > "$work/compiled.jsonl"
if part tests; then
echo "== PyTorch's own bf16 error on the test models (the reference of a GPU test)"
refs=()
for m in hier/roberta-attention hier/bert-attention hier/bert-mean hier/trained-multitask seq/bert seq/roberta; do
  refs+=("$repo/tests/fixtures/$m")
done
${PYTHON:-python3} scripts/gpu_bf16_reference.py "$work/bf16-reference.json" "${refs[@]}" "$work/rb-encoder" 2>&1 \
  | grep -v -i "warn\|unused\|initialized\|TRAIN this model\|^- \|^$" || true

echo "== GPU tests"
set +e
# inference_tests CHOICE [FILTER...]: the inference GPU tests with CHOICE (an environment
# assignment, or "" for the defaults), appended to the tests log.
inference_tests() {
  local choice=$1
  shift
  # shellcheck disable=SC2086  # an empty CHOICE adds nothing
  env $choice LONGREAD_REPO="$repo" LONGREAD_REQUIRE_GPU=1 LONGREAD_GPU_MODELS="$work/rb-model" \
    LONGREAD_BF16_REFERENCE="$work/bf16-reference.json" "$work/cuda-tests" --test-threads=1 --nocapture "$@" 2>&1 \
    | tee -a "$work/tests.log"
  [ "${PIPESTATUS[0]}" = 0 ] || tests_status=1
}
: > "$work/tests.log"
# The kernels' own tests first, each in a process of its own (a kernel fault poisons its
# process's CUDA context and would fail the tests after it); then the rest; then all again with
# each other kernel choice.
for group in flash_attention_2 cublaslt cutlass_product; do
  inference_tests "" "$group"
done
inference_tests "" --skip flash_attention_2 --skip cublaslt --skip cutlass_product
# cuDNN's fused attention (vendor/cudnn-attn): its op test in a process of its own, then the rest.
echo "== GPU tests again with LONGREAD_CUDA_ATTENTION=cudnn"
inference_tests LONGREAD_CUDA_ATTENTION=cudnn flash_attention_2
inference_tests LONGREAD_CUDA_ATTENTION=cudnn --skip flash_attention_2
for choice in LONGREAD_CUDA_ATTENTION=materialized LONGREAD_CUDA_GELU=tanh LONGREAD_CUDA_GELU=pass; do
  echo "== GPU tests again with $choice"
  inference_tests "$choice"
done
echo "== the memory pool test with LONGREAD_CUDA_POOL=release"
inference_tests LONGREAD_CUDA_POOL=release the_gpu_memory_pool
set -e
fi
if part train-tests; then
echo "== GPU training tests"
set +e
# The new kernels' own tests first, each group in a process of its own (see above).
for group in flash_attention_training cuda_column_sums cuda_embedding_lookups cuda_block_end cuda_gradient_norm cuda_adamw_in_one_launch \
  cuda_qkv_bias_in_the_product cuda_cast_gradients_add_into; do
  LONGREAD_REQUIRE_GPU=1 "$work/cuda-train-tests" --test-threads=1 --nocapture "$group" 2>&1 | tee -a "$work/tests.log"
  [ "${PIPESTATUS[0]}" = 0 ] || tests_status=1
done
LONGREAD_REQUIRE_GPU=1 "$work/cuda-train-tests" --test-threads=1 --nocapture --skip flash_attention_training \
  --skip cuda_column_sums --skip cuda_embedding_lookups --skip cuda_block_end --skip cuda_gradient_norm --skip cuda_adamw_in_one_launch \
  --skip cuda_qkv_bias_in_the_product --skip cuda_cast_gradients_add_into 2>&1 | tee -a "$work/tests.log"
[ "${PIPESTATUS[0]}" = 0 ] || tests_status=1
echo "== GPU training with cuDNN's attention (LONGREAD_CUDA_TRAIN_ATTENTION=cudnn): the op, bf16 follows f32, resuming"
for group in flash_attention_training "cuda_bf16_ a_gpu_run_stopped"; do
  # shellcheck disable=SC2086  # the second group is two filters
  LONGREAD_CUDA_TRAIN_ATTENTION=cudnn LONGREAD_REQUIRE_GPU=1 "$work/cuda-train-tests" --test-threads=1 --nocapture $group 2>&1 \
    | tee -a "$work/tests.log"
  [ "${PIPESTATUS[0]}" = 0 ] || tests_status=1
done
echo "== cuDNN's attention op with its gradients in blocks of their own (LONGREAD_CUDNN_GRADS=dense|heads), deterministic and atomic"
for grads in dense heads; do
  for bwd in deterministic fast; do
    LONGREAD_CUDA_TRAIN_ATTENTION=cudnn LONGREAD_CUDNN_GRADS=$grads LONGREAD_CUDA_ATTENTION_BWD=$bwd LONGREAD_REQUIRE_GPU=1 \
      "$work/cuda-train-tests" --test-threads=1 --nocapture flash_attention_training 2>&1 | tee -a "$work/tests.log"
    [ "${PIPESTATUS[0]}" = 0 ] || tests_status=1
  done
done
echo "== GPU bf16 training with longread's attention op (LONGREAD_CUDA_TRAIN_ATTENTION=fused): bf16 follows f32"
LONGREAD_CUDA_TRAIN_ATTENTION=fused LONGREAD_REQUIRE_GPU=1 "$work/cuda-train-tests" --test-threads=1 --nocapture \
  cuda_bf16_ 2>&1 | tee -a "$work/tests.log"
[ "${PIPESTATUS[0]}" = 0 ] || tests_status=1
set -e
fi
tests_ok=$([ "$tests_status" = 0 ] && echo true || echo false)

if part predict; then
echo "== longread"
: > "$work/longread.jsonl"
for precision in bf16 f32; do
  for tokens in 65536 256000; do
    "$lr" --device cuda bench --workload predict --model "$work/rb-model" --shape 64x20 --repeat 3 \
      --precision "$precision" --max-batch-tokens "$tokens" --json | tee -a "$work/longread.jsonl"
  done
done
# bf16 with the scores materialised (LONGREAD_CUDA_ATTENTION=materialized, the default until
# FlashAttention-2 measured faster, commit 2c20134): rows of their own, marked "attention", to compare.
: > "$work/materialized.jsonl"
for tokens in 65536 256000; do
  LONGREAD_CUDA_ATTENTION=materialized "$lr" --device cuda bench --workload predict --model "$work/rb-model" \
    --shape 64x20 --repeat 3 --precision bf16 --max-batch-tokens "$tokens" --json \
    | ${PYTHON:-python3} -c 'import json, sys; [print(json.dumps({**json.loads(l), "attention": "materialized"})) for l in sys.stdin if l.startswith("{")]' \
    | tee -a "$work/materialized.jsonl"
done
# The GELU in a pass of its own or in cuBLASLt's epilogue (tanh-approximated), cuBLAS's own
# default workspace instead of the 32 MiB one (LONGREAD_CUBLAS_WORKSPACE=default), and the
# driver's memory pool that gives freed memory back at each synchronisation
# (LONGREAD_CUDA_POOL=release): comparison rows, marked "variant".
# cuDNN's fused attention (LONGREAD_CUDA_ATTENTION=cudnn, PyTorch's SDPA kernels on Hopper) first.
for variant in LONGREAD_CUDA_ATTENTION=cudnn LONGREAD_CUDA_GELU=pass LONGREAD_CUDA_GELU=tanh LONGREAD_CUBLAS_WORKSPACE=default \
  LONGREAD_CUDA_POOL=release; do
  # At the default budget on an H100/H200 only (each row costs a model load and four passes).
  for tokens in 256000; do
    env "$variant" "$lr" --device cuda bench --workload predict --model "$work/rb-model" \
      --shape 64x20 --repeat 3 --precision bf16 --max-batch-tokens "$tokens" --json \
      | ${PYTHON:-python3} -c 'import json, sys; [print(json.dumps({**json.loads(l), "variant": sys.argv[1]})) for l in sys.stdin if l.startswith("{")]' "$variant" \
      | tee -a "$work/materialized.jsonl"
  done
done
# Diagnostics: the time per step with LONGREAD_PROFILE=1 (each step waited for on its own).
# (Rows of one document of 1,280 chunks for the head's share are no longer run.)
: > "$work/diagnostics.jsonl"
LONGREAD_PROFILE=1 "$lr" --device cuda bench --workload predict --model "$work/rb-model" --shape 8x20 --repeat 1 \
  --precision bf16 --json | tee -a "$work/diagnostics.jsonl"

echo "== PyTorch"
${PYTHON:-python3} scripts/gpu_bench_torch.py --docs 64 --chunks-per-call 128 500 | tee "$work/torch.jsonl"
if part compile; then
  echo "== PyTorch under torch.compile (bf16; the first pass compiles)"
  timeout 300 ${PYTHON:-python3} scripts/gpu_bench_torch.py --docs 64 --chunks-per-call 500 --dtypes bf16 --compile \
    | tee "$work/compiled.jsonl" || echo "torch.compile bench failed or timed out" >&2
fi

fi
if part kernels; then
echo "== one bf16 layer's blocks alone: longread vs PyTorch (roberta-base shape, 128 x 512 tokens)"
mkdir -p bench
"$lr" --device cuda bench --workload kernels --preset roberta-base --shape 128x512 --repeat 10 --json \
  | tee "$work/kernels.jsonl" || echo "kernels bench failed" >&2
# candle's products again with cuBLAS's own default workspace (LONGREAD_CUBLAS_WORKSPACE=default).
LONGREAD_CUBLAS_WORKSPACE=default "$lr" --device cuda bench --workload kernels --preset roberta-base --shape 128x512 \
  --repeat 10 --json | ${PYTHON:-python3} -c 'import json, sys; [print(json.dumps({**r, "kernel": r["kernel"] + " [cuBLAS default workspace]"})) for r in map(json.loads, filter(lambda l: l.startswith("{"), sys.stdin)) if r["kernel"].startswith("product") and "cuBLASLt" not in r["kernel"]]' \
  | tee -a "$work/kernels.jsonl" || echo "kernels bench (default workspace) failed" >&2
# Training's attention forward + backward on cuDNN (LONGREAD_CUDA_TRAIN_ATTENTION=cudnn; its row is marked).
LONGREAD_CUDA_TRAIN_ATTENTION=cudnn "$lr" --device cuda bench --workload kernels --preset roberta-base --shape 128x512 \
  --repeat 10 --json | ${PYTHON:-python3} -c 'import json, sys; [print(l.strip()) for l in sys.stdin if l.startswith("{") and "attention training" in json.loads(l)["kernel"]]' \
  | tee -a "$work/kernels.jsonl" || echo "kernels bench (cuDNN training attention) failed" >&2
# ... and with its atomic backward (cuDNN's default engine, PyTorch's default; marked [atomic dq]).
LONGREAD_CUDA_TRAIN_ATTENTION=cudnn LONGREAD_CUDA_ATTENTION_BWD=fast "$lr" --device cuda bench --workload kernels \
  --preset roberta-base --shape 128x512 --repeat 10 --json \
  | ${PYTHON:-python3} -c 'import json, sys; [print(l.strip()) for l in sys.stdin if l.startswith("{") and "forward + backward" in json.loads(l)["kernel"]]' \
  | tee -a "$work/kernels.jsonl" || echo "kernels bench (cuDNN training attention, atomic) failed" >&2
# ... and with its gradients in three blocks of their own, interleaved after (LONGREAD_CUDNN_GRADS:
# dense, PyTorch's layout in transformers' model; heads, head-major as PyTorch's SDPA allocates
# them for views of one q/k/v product), deterministic and atomic; rows marked [dense grads] /
# [head-major grads].
for grads in dense heads; do
  for bwd in deterministic fast; do
    LONGREAD_CUDA_TRAIN_ATTENTION=cudnn LONGREAD_CUDNN_GRADS=$grads LONGREAD_CUDA_ATTENTION_BWD=$bwd "$lr" --device cuda \
      bench --workload kernels --preset roberta-base --shape 128x512 --repeat 10 --json \
      | ${PYTHON:-python3} -c 'import json, sys; [print(l.strip()) for l in sys.stdin if l.startswith("{") and "forward + backward" in json.loads(l)["kernel"]]' \
      | tee -a "$work/kernels.jsonl" || echo "kernels bench (cuDNN training attention, $grads gradients, $bwd) failed" >&2
  done
done
${PYTHON:-python3} scripts/gpu_bench_kernels_torch.py --sequences 128 --seq 512 --repeat 10 \
  | tee -a "$work/kernels.jsonl" || echo "PyTorch kernels bench failed" >&2
# Training's attention at a kept group's size (one document: 20 x 512 tokens, as the 10,240-token
# step runs it), each backend and PyTorch's; rows marked @20x512.
for env in LONGREAD_CUDA_TRAIN_ATTENTION=fa2 LONGREAD_CUDA_TRAIN_ATTENTION=cudnn \
  "LONGREAD_CUDA_TRAIN_ATTENTION=cudnn LONGREAD_CUDA_ATTENTION_BWD=fast" \
  "LONGREAD_CUDA_TRAIN_ATTENTION=cudnn LONGREAD_CUDNN_GRADS=dense LONGREAD_CUDA_ATTENTION_BWD=fast" \
  "LONGREAD_CUDA_TRAIN_ATTENTION=cudnn LONGREAD_CUDNN_GRADS=heads LONGREAD_CUDA_ATTENTION_BWD=fast"; do
  # shellcheck disable=SC2086  # the variables are words
  env $env "$lr" --device cuda bench --workload kernels --preset roberta-base --shape 20x512 --repeat 20 --json \
    | ${PYTHON:-python3} -c 'import json, sys; [print(json.dumps({**r, "kernel": r["kernel"] + " @20x512"})) for r in map(json.loads, filter(lambda l: l.startswith("{"), sys.stdin)) if r["kernel"].startswith("attention training")]' \
    | tee -a "$work/kernels.jsonl" || echo "kernels bench at 20 x 512 ($env) failed" >&2
done
${PYTHON:-python3} scripts/gpu_bench_kernels_torch.py --sequences 20 --seq 512 --repeat 20 --only-attention-training \
  --suffix " @20x512" | tee -a "$work/kernels.jsonl" || echo "PyTorch kernels bench at 20 x 512 failed" >&2
${PYTHON:-python3} - "$work/kernels.jsonl" "bench/results-gpu-$slug-kernels.json" <<'PY' || true
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
ours = {r["kernel"]: r for r in rows if r["side"] == "longread"}
theirs = {r["kernel"]: r for r in rows if r["side"] == "pytorch"}
table = []
for name in list(ours) + [k for k in theirs if k not in ours]:
    a, b = ours.get(name), theirs.get(name)
    entry = {"kernel": name, "longread_ms": a and round(a["seconds"] * 1e3, 4), "pytorch_ms": b and round(b["seconds"] * 1e3, 4)}
    if a and b:
        entry["longread_time_over_pytorch"] = round(a["seconds"] / b["seconds"], 3)
    table.append(entry)
    rate = lambda r: "" if not r else (f'{r["tflops"]:.0f} TFLOP/s' if "tflops" in r else f'{r.get("gbps", 0):.0f} GB/s')
    print(f'{name:<52} longread {entry["longread_ms"]!s:>9} ms {rate(a):>12}   pytorch {entry["pytorch_ms"]!s:>9} ms {rate(b):>12}')
json.dump({"workload": "one roberta-base-shaped layer's bf16 inference blocks, 128 x 512 tokens", "table": table, "rows": rows},
          open(sys.argv[2], "w"), indent=1)
PY
fi
# Read by the predict summary whether or not the embed part runs.
: > "$work/embed.jsonl"
if part embed; then
echo "== embed: longread vs sentence-transformers"
${PYTHON:-python3} scripts/gpu_bench_embed.py "$lr" "$work" 2>&1 | grep '^{' | tee "$work/embed.jsonl" || true

fi
mkdir -p bench
if part predict; then
out="bench/results-gpu-$slug.json"
${PYTHON:-python3} - "$work/longread.jsonl" "$work/torch.jsonl" "$out" "$card" "$tests_ok" "$work/diagnostics.jsonl" "$work/embed.jsonl" "$work/materialized.jsonl" "$work/compiled.jsonl" <<'PY'
import json, sys
ours = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
materialized = [json.loads(l) for l in open(sys.argv[8]) if l.strip()]
embed = [json.loads(l) for l in open(sys.argv[7]) if l.strip()]
def embed_rate(side, dtype):
    rows = [r for r in embed if r["side"] == side and r["dtype"] == dtype]
    return rows[0]["texts_per_s"] if rows else None
diagnostics = [json.loads(l) for l in open(sys.argv[6]) if l.strip()]
torch = [json.loads(l) for l in open(sys.argv[2]) if l.strip()]
compiled = [json.loads(l) for l in open(sys.argv[9]) if l.startswith("{")]
def best(rows, key, value):
    rows = [r for r in rows if r.get(key) == value]
    return max(rows, key=lambda r: r["docs_per_s"]) if rows else None
ours_bf16, torch_bf16 = best(ours, "precision", "bf16"), best(torch, "dtype", "bf16")
ours_f32, torch_f32 = best(ours, "precision", "f32"), best(torch, "dtype", "f32")
limit = 405.0 if "H200" in sys.argv[4] else None  # ../shared/gpu/README.md: 783 TFLOP/s bf16 GEMM on an H200
def variant_ratio(variant):
    """bf16 documents/s of the best row run with `variant` (an environment switch) ÷ PyTorch eager's."""
    row = best(materialized, "variant", variant)
    return round(row["docs_per_s"] / torch_bf16["docs_per_s"], 3) if row else None
result = {
    "card": sys.argv[4],
    "gpu_tests_passed": sys.argv[5] == "true",
    "predict_bf16_ratio": round(ours_bf16["docs_per_s"] / torch_bf16["docs_per_s"], 3),
    "predict_f32_ratio": round(ours_f32["docs_per_s"] / torch_f32["docs_per_s"], 3),
    "predict_bf16_docs_per_s": round(ours_bf16["docs_per_s"], 1),
    # Peak GPU memory of that run (the memory pool's high-water mark over its warm-up and timed
    # runs), beside PyTorch's max_memory_allocated at its best setting.
    "predict_bf16_peak_gib": round(ours_bf16["peak_gpu_bytes"] / 2**30, 2) if ours_bf16.get("peak_gpu_bytes") else None,
    "pytorch_bf16_peak_gib": torch_bf16.get("peak_gib"),
    # The untimed first run (kernels loaded, memory pool filled), held to "no warm-up longer
    # than a few seconds" (reported since commit 6e74b74).
    "predict_bf16_first_run_s": ours_bf16.get("warmup_seconds"),
    "pytorch_eager_bf16_docs_per_s": torch_bf16["docs_per_s"],
    # The same against PyTorch under torch.compile (the `compile` part; the target: "at least
    # torch.compile's"), with the seconds its first pass spent compiling.
    "predict_bf16_compile_ratio": round(ours_bf16["docs_per_s"] / compiled[0]["docs_per_s"], 3) if compiled else None,
    "pytorch_compile_bf16_docs_per_s": compiled[0]["docs_per_s"] if compiled else None,
    "pytorch_compile_first_pass_s": compiled[0].get("first_pass_s") if compiled else None,
    "bf16_share_of_gemm_limit": round(ours_bf16["docs_per_s"] / limit, 3) if limit else None,
    # The same with materialised scores (LONGREAD_CUDA_ATTENTION=materialized), its best batch size.
    "predict_bf16_materialized_ratio":
        round(best([r for r in materialized if "variant" not in r], "precision", "bf16")["docs_per_s"] / torch_bf16["docs_per_s"], 3)
        if best([r for r in materialized if "variant" not in r], "precision", "bf16") else None,
    # The same with each variant (an environment switch; variant_ratio below).
    **{f"predict_bf16_{key}_ratio": variant_ratio(var) for key, var in [
        ("cudnn", "LONGREAD_CUDA_ATTENTION=cudnn"),
        # The GELU in a pass of its own (the default before commit d48ea7e made the CUTLASS
        # product's epilogue the default on Hopper).
        ("gelu_pass", "LONGREAD_CUDA_GELU=pass"),
        # Bias + GELU in cuBLASLt's epilogue: the tanh approximation of GELU (not the default).
        ("gelu_tanh_epilogue", "LONGREAD_CUDA_GELU=tanh"),
        ("default_workspace", "LONGREAD_CUBLAS_WORKSPACE=default"),
        ("pool_release", "LONGREAD_CUDA_POOL=release"),
    ]},
    "longread_materialized": materialized,
    "workload": "roberta-base shape, 64 documents x 20 chunks x 512 tokens, random weights",
    "embed_bf16_ratio": round(embed_rate("longread", "bf16") / embed_rate("sentence-transformers", "bf16"), 3)
        if embed_rate("longread", "bf16") and embed_rate("sentence-transformers", "bf16") else None,
    "embed": embed,
    "longread": ours,
    "pytorch": torch,
    "longread_diagnostics": diagnostics,
}
json.dump(result, open(sys.argv[3], "w"), indent=1)
print(json.dumps({k: v for k, v in result.items() if k not in ("longread", "pytorch", "longread_diagnostics", "embed", "longread_materialized")}, indent=1))
PY
fi
if part train; then
  echo "== training: longread (hierarchical roberta-base shape, 4 documents x 20 chunks x 512 tokens per step)"
  : > "$work/train.jsonl"
  # Each row is tagged with the LONGREAD_* switches it ran under ("env"; not the ones that only
  # log or locate), so that scripts/gpu_switch_winners.py can compare and combine them.
  tag_env() {
    ${PYTHON:-python3} -c '
import json, os, sys
quiet = {"LONGREAD_LOG", "LONGREAD_REPO", "LONGREAD_REQUIRE_GPU", "LONGREAD_GPU_MODELS"}
env = sorted(f"{k}={v}" for k, v in os.environ.items() if k.startswith("LONGREAD_") and k not in quiet)
for line in sys.stdin:
    if line.startswith("{"):
        row = json.loads(line)
        row["env"] = env
        line = json.dumps(row) + "\n"
    sys.stdout.write(line)
'
  }
  bench_train() { timeout 240 "$lr" --device cuda bench --workload train --repeat "${TRAIN_REPEAT:-3}" --json "$@" | tag_env | tee -a "$work/train.jsonl" || echo "bench_train $*: failed or timed out" >&2; }
  bench_train --model "$work/rb-model" --shape 4x20 --precision bf16 --max-batch-tokens 65536
  # (This row also logs how many blocks of the grid-sized kernels each multiprocessor holds.)
  LONGREAD_LOG=warn,longread_kernels::layers::cuda::waves=debug \
    bench_train --model "$work/rb-model" --shape 4x20 --precision bf16 --max-batch-tokens 10240
  bench_train --model "$work/rb-model" --shape 4x20 --precision bf16 --max-batch-tokens 4096
  # Two documents per kept batch (since commit 1326f73 a document that fits a batch is not recomputed).
  bench_train --model "$work/rb-model" --shape 4x20 --precision bf16 --max-batch-tokens 20480
  bench_train --model "$work/rb-model" --shape 4x20 --precision bf16 --no-recompute --max-batch-tokens 65536
  # cuDNN's fused attention (LONGREAD_CUDA_TRAIN_ATTENTION=cudnn): rows marked "attention: cudnn".
  for args in "--max-batch-tokens 10240" "--max-batch-tokens 20480" "--no-recompute --max-batch-tokens 65536"; do
    # shellcheck disable=SC2086  # the arguments are words
    LONGREAD_CUDA_TRAIN_ATTENTION=cudnn bench_train --model "$work/rb-model" --shape 4x20 --precision bf16 $args
  done
  # AdamW with a launch per parameter instead of one for all.
  LONGREAD_CUDA_ADAMW=per-tensor bench_train --model "$work/rb-model" --shape 4x20 --precision bf16 --max-batch-tokens 10240
  # The embedding tables' gradient with each id's positions in one block (before the
  # pieces, commit 8d8483b), at 10,240 and on the whole step.
  for args in "--max-batch-tokens 10240" "--no-recompute --max-batch-tokens 65536"; do
    # shellcheck disable=SC2086  # the arguments are words
    LONGREAD_CUDA_EMBEDDING_GRAD=unsplit bench_train --model "$work/rb-model" --shape 4x20 --precision bf16 $args
  done
  # The q/k/v bias added by the attention op in passes of its own (before the epilogue, commit 8fa6078).
  for args in "--max-batch-tokens 10240" "--no-recompute --max-batch-tokens 65536"; do
    # shellcheck disable=SC2086  # the arguments are words
    LONGREAD_CUDA_TRAIN_QKV_BIAS=separate bench_train --model "$work/rb-model" --shape 4x20 --precision bf16 $args
  done
  # Each kept group's cast gradients cast to f32 and added into new totals (before the
  # in-place accumulation, commit 5693e84).
  LONGREAD_CAST_ACCUMULATE=off bench_train --model "$work/rb-model" --shape 4x20 --precision bf16 --max-batch-tokens 10240
  # cuDNN's atomic (non-deterministic) attention backward, PyTorch's default, at 10,240.
  LONGREAD_CUDA_TRAIN_ATTENTION=cudnn LONGREAD_CUDA_ATTENTION_BWD=fast \
    bench_train --model "$work/rb-model" --shape 4x20 --precision bf16 --max-batch-tokens 10240
  # The joined q/k/v and block-end weights back-propagated through in every kept group (before
  # the joined leaves, commit df10736), at 10,240 and on the whole step.
  for args in "--max-batch-tokens 10240" "--no-recompute --max-batch-tokens 65536"; do
    # shellcheck disable=SC2086  # the arguments are words
    LONGREAD_JOINED_LEAVES=off bench_train --model "$work/rb-model" --shape 4x20 --precision bf16 $args
  done
  # candle's product of the transposed weight (its gradient copied into the weight's layout per
  # kept group) instead of the product op (ProductTrain), at 10,240.
  LONGREAD_CUDA_TRAIN_PRODUCT=candle bench_train --model "$work/rb-model" --shape 4x20 --precision bf16 --max-batch-tokens 10240
  # The GELU's gradient written, then read again for its bias's gradient (before the
  # one pass, commit 4565a13), at 10,240.
  LONGREAD_CUDA_GELU_BIAS_GRAD=apart bench_train --model "$work/rb-model" --shape 4x20 --precision bf16 --max-batch-tokens 10240
  # The block end's backward kernel with its running sums in registers (2 blocks per
  # multiprocessor; the shared-memory sums allow 4), at 10,240 and on the whole step.
  for args in "--max-batch-tokens 10240" "--no-recompute --max-batch-tokens 65536"; do
    # shellcheck disable=SC2086  # the arguments are words
    LONGREAD_CUDA_NORM_GRAD_SUMS=registers bench_train --model "$work/rb-model" --shape 4x20 --precision bf16 $args
  done
  # cuDNN's gradients in blocks of their own (LONGREAD_CUDNN_GRADS=dense|heads, PyTorch's layouts),
  # deterministic and atomic, at 10,240 (rows marked "separate: cudnn-packed-grads").
  for grads in dense heads; do
    for bwd in deterministic fast; do
      LONGREAD_CUDA_TRAIN_ATTENTION=cudnn LONGREAD_CUDNN_GRADS=$grads LONGREAD_CUDA_ATTENTION_BWD=$bwd \
        bench_train --model "$work/rb-model" --shape 4x20 --precision bf16 --max-batch-tokens 10240
    done
  done
  # Every switch above that beat its backend's default at 10,240 by more than 1%, all at once
  # (one row per backend; none where nothing won): what the defaults would give if the winners
  # were flipped together. Rows tagged with all their switches ("env"), outside the official ratios.
  echo "== training switches against the default at 10,240 tokens"
  ${PYTHON:-python3} scripts/gpu_switch_winners.py "$work/train.jsonl" || true
  ${PYTHON:-python3} scripts/gpu_switch_winners.py "$work/train.jsonl" --combined > "$work/winners.txt" || : > "$work/winners.txt"
  while read -r backend settings; do
    echo "-- all the winners together on $backend: $settings"
    (for setting in $settings; do export "${setting?}"; done
      bench_train --model "$work/rb-model" --shape 4x20 --precision bf16 --max-batch-tokens 10240 < /dev/null)
  done < "$work/winners.txt"
  # Earlier routes, each change switched off (TRAIN_ABLATIONS=1; ~1.5 minutes): what each is worth.
  if [ "${TRAIN_ABLATIONS:-0}" = 1 ]; then
    LONGREAD_CUDA_PROBS_KERNEL=rows bench_train --model "$work/rb-model" --shape 4x20 --precision bf16 --max-batch-tokens 10240
    # The attention's non-deterministic backward (FlashAttention-2's atomics, the default before
    # commit fef465e; cuDNN's default engine), rows marked "separate: deterministic-backward".
    for backend in fa2 cudnn; do
      LONGREAD_CUDA_ATTENTION_BWD=fast LONGREAD_CUDA_TRAIN_ATTENTION=$backend \
        bench_train --model "$work/rb-model" --shape 4x20 --precision bf16 --max-batch-tokens 10240
    done
    # The driver's memory pool that gives freed memory back at each synchronisation (before commit f8d3196).
    LONGREAD_CUDA_POOL=release bench_train --model "$work/rb-model" --shape 4x20 --precision bf16 --max-batch-tokens 10240
    # longread's own attention op (AttentionTrain) instead of FlashAttention-2: the default until
    # FlashAttention-2 measured faster on an H200 (commit 2c20134).
    for tokens in 10240 65536; do
      LONGREAD_CUDA_TRAIN_ATTENTION=fused bench_train --model "$work/rb-model" --shape 4x20 --precision bf16 --max-batch-tokens "$tokens"
    done
    LONGREAD_CUDA_TRAIN_ATTENTION=fused bench_train --model "$work/rb-model" --shape 4x20 --precision bf16 --no-recompute --max-batch-tokens 65536
  fi
  bench_train --model "$work/rb-model" --shape 4x20 --precision f32 --max-batch-tokens 65536
  # Peak memory against document length (chunk batches of 20 chunks, recomputation on).
  for chunks in 8 32 128; do
    bench_train --model "$work/rb-model" --shape "1x$chunks" --precision bf16 --max-batch-tokens 10240
  done
  "$lr" -q encoder new --preset roberta-large --tokenizer tests/fixtures/tiny-roberta/tokenizer.json --out "$work/rl-encoder"
  "$lr" -q init --encoder "$work/rl-encoder" --labels general,teen,mature --out "$work/rl-model"
  bench_train --model "$work/rl-model" --shape 4x20 --precision bf16 --max-batch-tokens 10240
  LONGREAD_CUDA_TRAIN_ATTENTION=cudnn bench_train --model "$work/rl-model" --shape 4x20 --precision bf16 --max-batch-tokens 10240
  echo "== training: PyTorch"
  (cd scripts && timeout 240 ${PYTHON:-python3} gpu_bench_torch_train.py --preset roberta-base --settings bf16:ckpt bf16:nockpt f32:ckpt \
    && timeout 120 ${PYTHON:-python3} gpu_bench_torch_train.py --preset roberta-large --settings bf16:ckpt) | tee "$work/torch-train.jsonl" || true
fi
if part train-profile; then
  echo "== training step in parts and op by op (LONGREAD_PROFILE=1: each part and each op waited for on its own)"
  : > "$work/train-profile.jsonl"
  for tokens in 10240 65536; do
    LONGREAD_PROFILE=1 timeout 120 "$lr" --device cuda bench --workload train --repeat 1 --json --model "$work/rb-model" \
      --shape 4x20 --precision bf16 --max-batch-tokens "$tokens" | tee -a "$work/train-profile.jsonl" | cut -c1-600 || true
  done
  # cuDNN's attention at 10,240 (its own op rows: the attention's time per step beside PyTorch's
  # cuDNN kernels below), deterministic with packed gradients, then atomic with dense ones.
  for env in "LONGREAD_CUDA_TRAIN_ATTENTION=cudnn" \
    "LONGREAD_CUDA_TRAIN_ATTENTION=cudnn LONGREAD_CUDA_ATTENTION_BWD=fast LONGREAD_CUDNN_GRADS=heads"; do
    # shellcheck disable=SC2086  # the variables are words
    env LONGREAD_PROFILE=1 $env timeout 120 "$lr" --device cuda bench --workload train --repeat 1 --json \
      --model "$work/rb-model" --shape 4x20 --precision bf16 --max-batch-tokens 10240 \
      | tee -a "$work/train-profile.jsonl" | cut -c1-600 || true
  done
  # The host's CPU time by function over 20 steps at 10,240 (LONGREAD_HOST_PROFILE): where the
  # host's time goes while it queues a step, when the timelines above say the GPU waits for it.
  LONGREAD_BENCH_HEAD_START=off LONGREAD_HOST_PROFILE="bench/host-profile-$slug-10240.txt" timeout 120 "$lr" --device cuda bench --workload train \
    --repeat 20 --json --model "$work/rb-model" --shape 4x20 --precision bf16 --max-batch-tokens 10240 | cut -c1-300 || true
  head -40 "bench/host-profile-$slug-10240.txt" 2>/dev/null || echo "no host profile (built without host-profile?)"
  # The first run's op table for people (batches of 20 chunks), read from its JSON line rather
  # than measured again; then PyTorch's step under its profiler (no checkpointing: the speed
  # target's side), kernels by CUDA time.
  ${PYTHON:-python3} - "$work/train-profile.jsonl" <<'PY' || true
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
first = next((r for r in rows if r.get("max_batch_tokens") == 10240 and "profile" in r), None)
ops = first["profile"]["ops"] if first else []
total = sum(r["seconds"] for r in ops) or 1.0
print(f"ops of one forward + backward (10,240-token batches), {total:.3f} s in all (the 40 longest):")
for r in ops[:40]:
    print(f"{r['phase']:<9} {r['op']:<40} {r['dtype']:<5} {r['seconds']:>9.4f} {100 * r['seconds'] / total:>5.1f}% "
          f"{r['calls']:>7} {r['elements']:>14}")
# The same passes on the GPU's clock (a CUDA event after each op, nothing waited for): each kind
# of op's GPU time and the GPU's possible wait for the host, at the step's own pace and behind a
# hold of the GPU (the host out of the way).
for r in rows:
    for key, how in (("timeline", "own pace"), ("timeline_head_start", "behind a hold")):
        t = (r.get("profile") or {}).get(key)
        if not t:
            continue
        print(f'{r["max_batch_tokens"]} tokens, attention {r.get("gpu_attention")}, switched: {",".join(r.get("gpu_separate") or []) or "none"}, {how}: '
              f'GPU {t["gpu_s"]:.4f} s, waiting for the host up to {t["waited_s"]:.4f} s, host {t["host_s"]:.4f} s')
        if r is first:
            for o in t["ops"][:30]:
                print(f"  {o['phase']:<9} {o['op']:<40} {o['dtype']:<5} {1e3 * o['gpu_s']:>8.2f} ms  waited {1e3 * o['waited_s']:>7.2f} ms {o['calls']:>6}")
# Each profiled run's attention op, forward and backward, per step (PyTorch's cuDNN kernels below).
for r in rows:
    if not isinstance(r.get("profile"), dict):
        continue
    attention = {(o["phase"], o["op"]): o["seconds"] for o in r["profile"]["ops"] if "flash-attention" in o["op"]}
    print(f'{r["max_batch_tokens"]:>6} tokens, attention {r.get("gpu_attention")}, switched: {",".join(r.get("gpu_separate") or []) or "none"}:',
          ", ".join(f"{phase} {op} {1e3 * t:.2f} ms" for (phase, op), t in sorted(attention.items())))
PY
  (cd scripts && timeout 180 ${PYTHON:-python3} gpu_bench_torch_train.py --preset roberta-base --settings bf16:nockpt \
    --steps 2 --profile 40) | tee -a "$work/train-profile.jsonl" | cut -c1-600 || true
  mkdir -p bench && cp "$work/train-profile.jsonl" "bench/train-profile-$slug.jsonl"
fi
if part unfreeze; then
  echo "== gradual-unfreezing recipe on the GPU (all-MiniLM-L6-v2's shape, random weights, hyperpartisan train, 4 epochs)"
  if [ -f "$run/minilm/config.json" ] && [ -f "$run/hyperpartisan-train.jsonl.xz" ]; then
    unxz "$run/hyperpartisan-train.jsonl.xz" "$work/hyperpartisan-train.jsonl"
    mkdir -p bench
    for precision in ${UNFREEZE_PRECISIONS:-bf16}; do
      MODEL_DIR="$run/minilm" DATA="$work/hyperpartisan-train.jsonl" timeout 420 \
        scripts/bench_unfreeze.sh "$lr" cuda "$precision" "bench/results-gpu-$slug-unfreeze-$precision.json" \
        2> >(grep -v "Writing model shards" >&2) | cut -c1-700 || echo "unfreeze ($precision) failed or timed out" >&2
    done
  else
    echo "unfreeze: gpu-run/minilm or gpu-run/hyperpartisan-train.jsonl.xz missing (scripts/gpu_pack.sh packs them)" >&2
  fi
fi
if part han; then
  echo "== HAN training step: longread and PyTorch on the GPU, then both on this machine's CPU cores"
  threads=$(nproc)
  for where in cuda cpu; do
    (cd scripts && timeout 240 ${PYTHON:-python3} bench_han.py --device "$where" --binary "$lr" --threads "$threads" \
      --repeat 3 --json-out "$work/han-$where.json") || echo "han ($where) failed or timed out" >&2
  done
  mkdir -p bench
  ${PYTHON:-python3} - "$work/han-cuda.json" "$work/han-cpu.json" "bench/results-gpu-$slug-han.json" <<'PY'
import json, os, sys
runs = {name: json.load(open(path)) for name, path in (("cuda", sys.argv[1]), ("cpu", sys.argv[2])) if os.path.exists(path)}
result = {"workload": "HAN training step, 32 documents x 64 sentences x 32 words, default sizes", **{
    f"{where}": {"longread_s": r["median"]["longread"], "pytorch_s": r["median"]["pytorch"],
                 "time_ratio": round(r["time_ratio"], 3), "threads": r["threads"]} for where, r in runs.items()}}
if "cuda" in runs and "cpu" in runs:
    # > 1: longread's HAN step is faster on the GPU than on this machine's CPU cores.
    result["longread_cpu_over_gpu"] = round(runs["cpu"]["median"]["longread"] / runs["cuda"]["median"]["longread"], 3)
result["raw"] = runs
json.dump(result, open(sys.argv[3], "w"), indent=1)
print(json.dumps({k: v for k, v in result.items() if k != "raw"}))
PY
fi
if part pretrain; then
  echo "== MLM pretraining: longread vs PyTorch (small preset, 8 sequences x 512 tokens, bf16)"
  # The corpus: this repository's own prose (README, BENCHMARKS, docs), paragraphs as texts.
  ${PYTHON:-python3} - "$work/prose.jsonl" <<'PY'
import glob, json, sys
with open(sys.argv[1], "w") as out:
    for path in ["README.md", "BENCHMARKS.md"] + sorted(glob.glob("docs/*.md")):
        for para in open(path, encoding="utf-8").read().split("\n\n"):
            if len(para.split()) >= 20:
                out.write(json.dumps({"text": para}) + "\n")
PY
  mkdir -p bench
  timeout 240 ${PYTHON:-python3} scripts/bench_pretrain.py --device cuda --precision bf16 --binary "$lr" \
    --corpus "$work/prose.jsonl" --docs 100000 --presets small --batch-size 8 --seq-len 512 --steps 20 --warmup 3 --repeats 3 \
    --json-out "$work/pretrain.json" || echo "pretrain bench failed or timed out" >&2
  [ -f "$work/pretrain.json" ] && ${PYTHON:-python3} - "$work/pretrain.json" "bench/results-gpu-$slug-pretrain.json" <<'PY'
import json, sys
result = json.load(open(sys.argv[1]))
row = next((r for r in result["rows"] if r["preset"] == "small"), None)
result["pretrain_bf16_ratio"] = round(row["longread_median"] / row["pytorch_median"], 3) if row else None
json.dump(result, open(sys.argv[2], "w"), indent=1)
print("pretrain_bf16_ratio (longread tokens/s / PyTorch tokens/s):", result["pretrain_bf16_ratio"])
PY
  true
fi
if part serve; then
  echo "== serve at concurrency 32 vs predict (roberta-base shape, bf16)"
  # The timeout leaves the soak (SERVE_SOAK_SECONDS) 4 minutes for start-up and the measured part.
  timeout $(( ${SERVE_SOAK_SECONDS:-60} + 240 )) ${PYTHON:-python3} scripts/gpu_bench_serve.py "$lr" "$work/rb-model" "$work" --docs 384 --words 4000 \
    --concurrency 32 --soak-seconds "${SERVE_SOAK_SECONDS:-60}" | tee "$work/serve.jsonl" || echo "serve bench failed" >&2
fi
if part serve; then
  mkdir -p bench
  grep '^{' "$work/serve.jsonl" | tail -1 > "bench/results-gpu-$slug-serve.json" || true
fi
if part train; then
  touch "$work/train.jsonl" "$work/torch-train.jsonl"
  touch "$work/winners.txt"
  ${PYTHON:-python3} - "$work/train.jsonl" "$work/torch-train.jsonl" "bench/results-gpu-$slug-train.json" "$card" "$tests_status" "$work/winners.txt" <<'PY'
import json, sys
rows = lambda p: [json.loads(l) for l in open(p) if l.strip().startswith("{")]
ours, torch = rows(sys.argv[1]), rows(sys.argv[2])
def pick(side, **kw):
    found = [r for r in side if all(r.get(k) == v for k, v in kw.items())]
    return found[0] if found else None
torch_nockpt = pick(torch, preset="roberta-base", dtype="bf16", checkpointing=False)
torch_ckpt = pick(torch, preset="roberta-base", dtype="bf16", checkpointing=True)
# The default route only (FlashAttention-2; the rows with ops switched off are there for comparison).
def route(attention):
    return [r for r in ours if r.get("precision") == "bf16" and r.get("docs") == 4 and "rb-model" in r.get("model", "")
            and not r.get("gpu_separate") and r.get("gpu_attention") == attention
            and all(e.startswith("LONGREAD_CUDA_TRAIN_ATTENTION=") for e in r.get("env") or [])]
base = route("fa2")
best = max(base, key=lambda r: r["docs_per_s"]) if base else None
measured = [r for r in base if r.get("peak_gpu_bytes")]
lean = min(measured, key=lambda r: r["peak_gpu_bytes"]) if measured else None
# The GPU training target as one figure: the fastest row whose peak memory is within PyTorch's
# checkpointed peak, against PyTorch's speed without checkpointing (met at >= 1.0).
within = [r for r in measured if torch_ckpt and r["peak_gpu_bytes"] / 2**30 <= torch_ckpt["peak_gib"]]
fastest_within = max(within, key=lambda r: r["docs_per_s"]) if within else None
# The same on cuDNN's attention (LONGREAD_CUDA_TRAIN_ATTENTION=cudnn).
cudnn = route("cudnn")
best_cudnn = max(cudnn, key=lambda r: r["docs_per_s"]) if cudnn else None
within_cudnn = [r for r in cudnn if r.get("peak_gpu_bytes") and torch_ckpt and r["peak_gpu_bytes"] / 2**30 <= torch_ckpt["peak_gib"]]
fastest_within_cudnn = max(within_cudnn, key=lambda r: r["docs_per_s"]) if within_cudnn else None
large = lambda attention: next((r for r in ours if "rl-model" in r.get("model", "") and r.get("gpu_attention") == attention), None)
torch_large = pick(torch, preset="roberta-large", dtype="bf16", checkpointing=True)
# The same with longread's attention op (LONGREAD_CUDA_TRAIN_ATTENTION=fused).
fused = route("longread")
best_fused = max(fused, key=lambda r: r["docs_per_s"]) if fused else None
lean_fused = min([r for r in fused if r.get("peak_gpu_bytes")], key=lambda r: r["peak_gpu_bytes"], default=None)
gib = lambda b: round(b / 2**30, 2) if b else None
result = {
    "card": sys.argv[4],
    "gpu_tests_passed": sys.argv[5] == "0",
    "workload": "hierarchical roberta-base shape, 4 documents x 20 chunks x 512 tokens per training step, random weights",
    "train_bf16_speed_ratio": round(best["docs_per_s"] / torch_nockpt["docs_per_s"], 3) if best and torch_nockpt else None,
    # Memory at longread's leanest setting (the smallest recomputation batches), beside the
    # speed at its fastest: PyTorch offers one or the other too.
    "train_bf16_memory_ratio": round(gib(lean["peak_gpu_bytes"]) / torch_ckpt["peak_gib"], 3) if lean and torch_ckpt else None,
    "train_bf16_memory_ratio_docs_per_s": round(lean["docs_per_s"], 2) if lean else None,
    "train_bf16_speed_ratio_within_memory": round(fastest_within["docs_per_s"] / torch_nockpt["docs_per_s"], 3)
        if fastest_within and torch_nockpt else None,
    "train_bf16_within_memory_row": {k: fastest_within.get(k) for k in ("docs_per_s", "max_batch_tokens", "recompute", "peak_gpu_bytes", "kept_documents", "host", "head_start")}
        if fastest_within else None,
    "train_bf16_first_step_s": best.get("warmup_seconds") if best else None,
    "train_bf16_cudnn_speed_ratio": round(best_cudnn["docs_per_s"] / torch_nockpt["docs_per_s"], 3) if best_cudnn and torch_nockpt else None,
    "train_bf16_cudnn_speed_ratio_within_memory": round(fastest_within_cudnn["docs_per_s"] / torch_nockpt["docs_per_s"], 3)
        if fastest_within_cudnn and torch_nockpt else None,
    "train_bf16_cudnn_within_memory_row": {k: fastest_within_cudnn.get(k) for k in ("docs_per_s", "max_batch_tokens", "recompute", "peak_gpu_bytes", "kept_documents", "host", "head_start")}
        if fastest_within_cudnn else None,
    # roberta-large at 10,240-token batches against PyTorch's checkpointed step (the GPU training target).
    **{f"train_large_bf16_{attention}_ratio": round(large(attention)["docs_per_s"] / torch_large["docs_per_s"], 3)
       if large(attention) and torch_large else None for attention in ("fa2", "cudnn")},
    "train_bf16_fused_speed_ratio": round(best_fused["docs_per_s"] / torch_nockpt["docs_per_s"], 3) if best_fused and torch_nockpt else None,
    "train_bf16_fused_memory_ratio": round(gib(lean_fused["peak_gpu_bytes"]) / torch_ckpt["peak_gib"], 3) if lean_fused and torch_ckpt else None,
    "longread_best_bf16": {k: best[k] for k in ("docs_per_s", "max_batch_tokens", "recompute", "peak_gpu_bytes")} if best else None,
    # The rows with every switch that beat its backend's default at 10,240 flipped together
    # (scripts/gpu_switch_winners.py): not the defaults, so outside the ratios above.
    "train_bf16_winners_combined": [
        {"backend": backend, "env": env.split(), "docs_per_s": r["docs_per_s"], "peak_gib": gib(r.get("peak_gpu_bytes")),
         "speed_ratio": round(r["docs_per_s"] / torch_nockpt["docs_per_s"], 3) if torch_nockpt else None,
         "within_memory": bool(torch_ckpt and r.get("peak_gpu_bytes") and r["peak_gpu_bytes"] / 2**30 <= torch_ckpt["peak_gib"])}
        for backend, env in (l.split(None, 1) for l in open(sys.argv[6]) if l.strip())
        for r in [next((r for r in ours if r.get("max_batch_tokens") == 10240 and sorted(r.get("env") or []) == sorted(env.split())), None)]
        if r
    ],
    "longread": ours,
    "pytorch": torch,
}
json.dump(result, open(sys.argv[3], "w"), indent=1)
print(json.dumps({k: v for k, v in result.items() if k not in ("longread", "pytorch")}, indent=1))
for r in ours:
    print("longread", r.get("model", "").split("/")[-1], r["precision"], "attention:" + str(r.get("gpu_attention")), "separate:" + (",".join(r.get("gpu_separate") or []) or "none"), ("recompute" if r["recompute"] else "no-recompute") + f' (kept {r.get("kept_documents")}, chunked {r.get("chunked_documents")})',
          r["max_batch_tokens"], f'{r["docs"]}x{r["chunks_per_doc"]}', round(r["docs_per_s"], 2), "docs/s", gib(r.get("peak_gpu_bytes")), "GiB",
          f'(train\'s budget model: {gib(r.get("estimated_peak_gpu_bytes"))} GiB)',
          # The host's time to queue forward + backward against the GPU's to finish them.
          f'queued {r["host"]["queued_s"]:.4f} s of {r["host"]["gradients_s"]:.4f} s' if r.get("host") else "",
          # The GPU's own time for the same passes, queued behind a hold (no wait for the host).
          f'GPU alone {r["head_start"]["gpu_s"]:.4f} s (host alone {r["head_start"]["host_s"] or 0:.4f} s)' if r.get("head_start") else "")
for r in torch:
    print("pytorch", r["preset"], r["dtype"], "ckpt" if r["checkpointing"] else "no-ckpt", r["docs_per_s"], "docs/s", r["peak_gib"], "GiB")
PY
fi
[ -f "$work/tests.log" ] && cp "$work/tests.log" "bench/gpu-tests-$slug.log"
echo "gpu_check: results in bench/ (parts:$parts)"
[ "$tests_status" = 0 ] || fail "GPU tests failed (bench/gpu-tests-$slug.log)"
