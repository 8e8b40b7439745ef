#!/usr/bin/env bash
# Times docs/recipes.md's gradual-unfreezing recipe (the GPU target: "one epoch of the
# gradual-unfreezing recipe with all-MiniLM-L6-v2 on the GPU against the 16.8 minutes it takes
# on 2 CPU cores"):
# `init` + `train --unfreeze 0:head,1:top2,2:all --layer-lr-decay 0.9 --epochs 4 --lr 5e-5
# --head-lr 2e-3 --batch-size 8 --seed 42` on the hyperpartisan training articles, as BENCHMARKS.md
# "gradual unfreezing" runs it on the CPU.
#
#   scripts/bench_unfreeze.sh LONGREAD DEVICE PRECISION OUT.json
#
# The encoder is all-MiniLM-L6-v2's shape: with WEIGHTS=random (the default) a BertModel with
# random weights made by transformers from MODEL_DIR's config.json (with MODEL_DIR's
# tokenizer.json) — the weights do not travel to a GPU machine, and the time does not depend on
# them (accuracy does: the dev figures of a random encoder mean nothing); WEIGHTS=real uses
# MODEL_DIR itself. Environment (defaults): MODEL_DIR (../shared/models/all-MiniLM-L6-v2), DATA
# (../shared/data/hyperpartisan/train.jsonl), DOCS (all: the first N articles only, for a quick
# trial), EPOCHS (4), PYTHON (python3, with torch and transformers when WEIGHTS=random).
# Writes OUT.json: wall seconds of init and train, each epoch's wall seconds and dev figures from
# the JSON log, the device, precision and settings.
set -euo pipefail
[ $# = 4 ] || { echo "usage: $0 LONGREAD DEVICE PRECISION OUT.json" >&2; exit 2; }
lr=$1 device=$2 precision=$3 out=$4
model_dir=${MODEL_DIR:-../shared/models/all-MiniLM-L6-v2}
data=${DATA:-../shared/data/hyperpartisan/train.jsonl}
[ -f "$model_dir/config.json" ] && [ -f "$model_dir/tokenizer.json" ] \
  || { echo "bench_unfreeze: $model_dir lacks config.json or tokenizer.json" >&2; exit 1; }
[ -f "$data" ] || { echo "bench_unfreeze: no training data at $data" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

if [ "${DOCS:-}" ]; then
  head -n "$DOCS" "$data" > "$work/train.jsonl"
else
  cp "$data" "$work/train.jsonl"
fi
encoder=$model_dir
if [ "${WEIGHTS:-random}" = random ]; then
  encoder="$work/encoder"
  ${PYTHON:-python3} - "$model_dir" "$encoder" <<'PY'
import shutil, sys
import torch
from transformers import BertConfig, BertModel
torch.manual_seed(0)
config = BertConfig.from_pretrained(sys.argv[1])
BertModel(config, add_pooling_layer=False).save_pretrained(sys.argv[2], safe_serialization=True)
shutil.copy(f"{sys.argv[1]}/tokenizer.json", f"{sys.argv[2]}/tokenizer.json")
PY
fi

started=$(date +%s.%N)
"$lr" -q --device "$device" init --encoder "$encoder" --labels 0,1 --out "$work/init" --seed 1
init_done=$(date +%s.%N)
"$lr" --device "$device" train --model "$work/init" --train "$work/train.jsonl" --dev-split 0.1 \
  --out "$work/gradual" --unfreeze 0:head,1:top2,2:all --layer-lr-decay 0.9 --epochs "${EPOCHS:-4}" \
  --lr 5e-5 --head-lr 2e-3 --batch-size 8 --seed 42 --precision "$precision" --log-format json \
  > "$work/log.jsonl"
train_done=$(date +%s.%N)

${PYTHON:-python3} - "$work/log.jsonl" "$out" "$device" "$precision" "${WEIGHTS:-random}" \
  "$(wc -l < "$work/train.jsonl")" "$started" "$init_done" "$train_done" <<'PY'
import json, sys
log, out, device, precision, weights, docs, started, init_done, train_done = sys.argv[1:]
events = [json.loads(line) for line in open(log) if line.strip().startswith("{")]
epochs = [e for e in events if e.get("event") == "epoch"]
result = {
    "workload": "gradual unfreezing recipe (docs/recipes.md), all-MiniLM-L6-v2 shape, hyperpartisan train",
    "device": device, "precision": precision, "weights": weights, "articles": int(docs),
    "init_s": round(float(init_done) - float(started), 2),
    "train_s": round(float(train_done) - float(init_done), 2),
    "epochs": epochs,
    "last_event": events[-1] if events else None,
}
json.dump(result, open(out, "w"), indent=1)
print(json.dumps({k: v for k, v in result.items() if k != "epochs"}))
for e in epochs:
    print(json.dumps(e))
PY
