#!/usr/bin/env bash
# Documents of 25k+ tokens on 2 cores (docs/recipes.md §2): how long reading them
# takes with all-MiniLM-L6-v2 in f32 and int8, every chunk or 32 spread chunks. 12 documents of
# ~27k tokens made of hyperpartisan training articles; prints predict's timing line per setting.
#   scripts/long_documents_speed.sh [WORKDIR]      # default: a temporary directory
set -euo pipefail
cd "$(dirname "$0")/.."
L=target/release/longread
M=../shared/models/all-MiniLM-L6-v2
W=${1:-$(mktemp -d)}
python3 - "$W" <<'PY'
import json, sys
arts = [json.loads(l)["text"] for l in open("../shared/data/hyperpartisan/train.jsonl")]
docs, cur, words = [], [], 0
for a in arts:
    cur.append(a); words += len(a.split())
    if words >= 20000:
        docs.append(" ".join(cur)); cur, words = [], 0
    if len(docs) == 12:
        break
with open(sys.argv[1] + "/docs.jsonl", "w") as f:
    for i, d in enumerate(docs):
        f.write(json.dumps({"id": f"d{i}", "text": d}) + "\n")
print(len(docs), "documents of", [len(d.split()) for d in docs][:3], "... words")
PY
[ -d $W/all ] || $L -q init --encoder $M --labels a,b --out $W/all --max-chunks 0
[ -d $W/spread32 ] || $L -q init --encoder $M --labels a,b --out $W/spread32 --max-chunks 32 --chunk-selection spread
for model in all spread32; do
  for p in f32 int8; do
    echo "== $model $p"
    $L --threads 2 predict --model $W/$model --input $W/docs.jsonl --precision $p --output $W/$model-$p.jsonl 2>&1 | tail -1
  done
done
