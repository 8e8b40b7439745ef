#!/usr/bin/env bash
# Peak memory of `longread predict` on a large input: 10,000 documents of ~23 KB
# (231 MB of JSON lines) through the bag-of-words model trained on hyperpartisan, whose
# per-document work is small, so that what the input costs shows. Read from the file and from
# standard input (both streamed), and from standard input with --strict, which reads the input
# whole before classifying (as every input was read before commit 9ec1201). The three outputs must
# be identical; prints the time and peak RSS of each.
#   scripts/predict_input_memory.sh [WORKDIR]      # default: a temporary directory
set -euo pipefail
cd "$(dirname "$0")/.."
L=$PWD/target/release/longread
W=${1:-$(mktemp -d)}
mkdir -p "$W"
python3 - "$W/big.jsonl" <<'PY'
import json, random, sys
random.seed(1)
words = "rain wind coast storm market price analyst committee meeting transcript screenplay scene actor night city river".split()
with open(sys.argv[1], "w") as f:
    for i in range(10000):
        f.write(json.dumps({"id": i, "text": " ".join(random.choice(words) for _ in range(3300))}) + "\n")
PY
ls -l "$W/big.jsonl"
[ -d "$W/bow" ] || $L -q train --arch bow --labels no,yes --train ../shared/data/hyperpartisan/train.jsonl --out "$W/bow"
run() {
  local name=$1; shift
  /usr/bin/time -f "$name: %e s, peak RSS %M KB" "$@" 2>&1 | grep -v '^classified'
}
run "file, streamed" $L predict --model "$W/bow" --input "$W/big.jsonl" --output "$W/file.jsonl"
run "stdin, streamed" sh -c "$L predict --model $W/bow --input - --output $W/stdin.jsonl < $W/big.jsonl"
run "stdin --strict, read whole" sh -c "$L predict --model $W/bow --input - --strict --output $W/strict.jsonl < $W/big.jsonl"
cmp "$W/file.jsonl" "$W/stdin.jsonl" && cmp "$W/file.jsonl" "$W/strict.jsonl" && echo "outputs identical"
