#!/usr/bin/env bash
# Attention backends on batches of varied shapes, on a GPU machine in ~2 minutes: what the fixed
# 64 x 20 x 512 benches of gpu_quick_cudnn.sh cannot show. cuDNN builds an execution plan per
# batch shape (batch, padded length) — tens of milliseconds each, about a second when a kernel
# has to be compiled (flashinfer-ai/flashinfer#5245 measured 55-70 ms) — where FlashAttention-2
# takes any shape at no cost. Real documents give batches of many shapes (each group's last
# batch, each batch of short chunks padded to its own longest), so cuDNN may win the fixed-shape
# bench and lose on real input: it becomes the default only if it wins here too.
#   1. CLI `predict` over the hyperpartisan training articles (645, 50-5,000 words: chunk counts
#      and last-chunk lengths vary), roberta-base shape with random weights, bf16, each backend
#      (cuDNN also with LONGREAD_CUDNN_SHAPES=buckets; FlashAttention-2 also with the GELU in a
#      pass of its own): the CLI's own documents/s line, and the backends' scores compared
#      document by document;
#   2. CLI `train`, one epoch over the first $TRAIN_DOCS (320) articles, batch size 4, bf16, each
#      backend (cuDNN with and without buckets): the epoch's training seconds from the JSON log
#      (kept-graph groups of varied chunk counts: a new shape per step for cuDNN's passes).
# Needs gpu-run/ packed (scripts/build_cuda.sh --tests && scripts/gpu_pack.sh: the binary and the
# articles). Lines to read: "varied-shapes:" (with cuDNN, its last "new cuDNN plan" line: how many
# plans it built and the milliseconds that took). A dry run of the script's plumbing on the CPU:
#   LONGREAD=target/release/longread DEVICE=cpu PRESET=tiny DOCS=30 TRAIN_DOCS=20 bash scripts/gpu_varied_shapes.sh
set -u
cd "$(dirname "$0")/.."
# shellcheck source=scripts/gpu_env.sh
. scripts/gpu_env.sh
export LD_LIBRARY_PATH="$(gpu_library_dirs 'libcublas.so.13*')$(gpu_library_dirs 'libcudnn.so.9*')"
w=$(mktemp -d)
trap 'rm -rf "$w"' EXIT
device=${DEVICE:-cuda}
if [ -n "${LONGREAD:-}" ]; then
  lr=$LONGREAD
else
  unxz gpu-run/longread.xz "$w/lr" && chmod +x "$w/lr"
  lr=$w/lr
fi
articles=${ARTICLES:-gpu-run/hyperpartisan-train.jsonl.xz}
[ -f "$articles" ] || { echo "varied-shapes: no $articles (scripts/gpu_pack.sh packs it)" >&2; exit 1; }
unxz "$articles" "$w/all.jsonl" 2>/dev/null || cp "$articles" "$w/all.jsonl"
head -n "${DOCS:-100000}" "$w/all.jsonl" > "$w/docs.jsonl"
head -n "${TRAIN_DOCS:-320}" "$w/all.jsonl" > "$w/train.jsonl"
$lr --version
$lr -q encoder new --preset "${PRESET:-roberta-base}" --tokenizer tests/fixtures/tiny-roberta/tokenizer.json --out "$w/enc"
$lr -q init --encoder "$w/enc" --labels 0,1 --out "$w/m" --seed 1

# The last log's cuDNN lines: the plans it built (one per batch shape and pass) and the time
# building them took, and any warning (a fallback to FlashAttention-2 names its reason).
plans() {
  local log
  log=$(ls -t "$w"/*.log | head -1)
  grep -E "new cuDNN plan" "$log" | tail -1 | sed 's/^/varied-shapes:   last plan line: /'
  grep -E "WARN.*(cuDNN|cudnn)" "$log" | head -2 | sed 's/^/varied-shapes:   /'
}

# Variants: attention backend, optionally +gelu-pass (LONGREAD_CUDA_GELU=pass: the GELU in a pass
# of its own instead of the default CUTLASS epilogue) or, for cuDNN, +buckets
# (LONGREAD_CUDNN_SHAPES=buckets: sub-batches of powers of two, fewer plans).
variants=${VARIANTS:-fa2 fa2+gelu-pass cudnn cudnn+buckets}
precision=${PRECISION:-bf16}
echo "varied-shapes: 1. predict over $(wc -l < "$w/docs.jsonl") articles, $precision"
for variant in $variants; do
  gelu=fused shapes=exact
  case $variant in *+gelu-pass) gelu=pass ;; *+buckets) shapes=buckets ;; esac
  LONGREAD_CUDA_ATTENTION=${variant%%+*} LONGREAD_CUDA_GELU=$gelu LONGREAD_CUDNN_SHAPES=$shapes \
    LONGREAD_LOG=warn,longread_kernels=debug timeout 180 "$lr" --device "$device" predict --model "$w/m" --input "$w/docs.jsonl" --precision "$precision" \
    --output "$w/pred-$variant.jsonl" 2> "$w/pred-$variant.log"
  echo "varied-shapes: predict $variant exit $? $(grep -E 'classified|error' "$w/pred-$variant.log" | tail -2 | tr '\n' ' ')"
  plans
done
# Every variant's scores against the first's: same labels, largest score difference.
python3 - "$w" $variants <<'PY'
import json, sys
work, variants = sys.argv[1], sys.argv[2:]
def load(v):
    try:
        return [json.loads(line) for line in open(f"{work}/pred-{v}.jsonl")]
    except OSError:
        return None
base = load(variants[0])
for v in variants[1:]:
    rows = load(v)
    if base is None or rows is None or len(rows) != len(base):
        print(f"varied-shapes: scores {v}: missing or of another length than {variants[0]}'s")
        continue
    same = sum(a.get("label") == b.get("label") for a, b in zip(base, rows))
    diff = max((abs(a["scores"][k] - b["scores"][k]) for a, b in zip(base, rows) if "scores" in a and "scores" in b
                for k in a["scores"]), default=float("nan"))
    print(f"varied-shapes: scores {v} vs {variants[0]}: same label {same}/{len(rows)}, largest score difference {diff:.2e}")
PY

echo "varied-shapes: 2. train one epoch over $(wc -l < "$w/train.jsonl") articles, batch size 4, $precision"
for variant in ${TRAIN_VARIANTS:-fa2 cudnn cudnn+buckets}; do
  shapes=exact
  case $variant in *+buckets) shapes=buckets ;; esac
  LONGREAD_CUDA_TRAIN_ATTENTION=${variant%%+*} LONGREAD_CUDNN_SHAPES=$shapes LONGREAD_LOG=warn,longread_kernels=debug timeout 240 "$lr" --device "$device" train --model "$w/m" --train "$w/train.jsonl" \
    --dev-split 0.1 --epochs 1 --batch-size 4 --seed 42 --precision "$precision" --out "$w/t-$variant" --log-format json \
    > "$w/train-$variant.jsonl" 2> "$w/train-$variant.log"
  status=$?
  python3 - "$w/train-$variant.jsonl" "$variant" "$status" <<'PY'
import json, sys
events = [json.loads(line) for line in open(sys.argv[1]) if line.startswith("{")]
epochs = [e for e in events if e.get("event") == "epoch"]
steps = [e for e in events if e.get("event") == "step"]
if epochs:
    e = epochs[-1]
    print(f"varied-shapes: train {sys.argv[2]} exit {sys.argv[3]}: {len(steps)} steps, train {e['train_seconds']:.2f} s, "
          f"epoch {e['seconds']:.2f} s, loss {e['train_loss']:.4f}, skipped {e.get('skipped_steps')}, "
          f"peak GPU {(e.get('peak_gpu_bytes') or 0) / 2**30:.2f} GiB")
else:
    print(f"varied-shapes: train {sys.argv[2]} exit {sys.argv[3]}: no epoch logged")
PY
  grep -E "error|Error" "$w/train-$variant.log" | tail -2
  plans
done
echo "varied-shapes: done"
