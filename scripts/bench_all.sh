#!/usr/bin/env bash
# Runs the benchmarks that compare longread with PyTorch on this machine and writes their
# figures, machine-readable, to bench/results-<cpu>.json (one file per CPU model), so that
# BENCHMARKS.md's tables can be regenerated rather than retyped.
#
#   bash scripts/bench_all.sh [PYTHON]        # PYTHON: an interpreter with torch + transformers
#
# Covers: encoder forward, training step and AdamW step (bench_compare.py), predict against
# the fair reference in f32 and int8 (bench_predict.py), embed against sentence-transformers
# (bench_embed.py), MLM pretraining (bench_pretrain.py), the HAN step (bench_han.py) and the
# hierarchical training step with its memory (bench_train.py). Every script runs both sides in
# one run, min and median of at least 3 runs after a warm-up, and records the CPU.
#
# Needs ../shared (MiniLM, hyperpartisan) and, for PYTHON, torch, transformers,
# sentence-transformers, tokenizers and safetensors. Builds the release binary first. Takes
# about 25 minutes on 2 cores. OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE are unset for the Python side (they
# slow a current numpy; see the workplace notes), as the tables were measured.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${1:-python3}"
cargo build --release -p longread-cli
cpu=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//; s/[^A-Za-z0-9]\+/-/g; s/-$//' | tr 'A-Z' 'a-z')
family=$(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')
model=$(grep -m1 '^model\s*:' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')
out="bench/results-${cpu}-f${family}m${model}.json"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p bench
py() { env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$PYTHON" "$@"; }
py scripts/bench_compare.py --threads 2 --repeat 3 --markdown --json-out "$tmp/compare.json"
py scripts/bench_predict.py speed --docs 40 --threads 2 --repeats 3 --precision f32,int8 --no-seed-design \
  --json-out "$tmp/predict.json"
py scripts/bench_embed.py --texts 1000 --threads 2 --batch-size 32 --repeats 3 --json-out "$tmp/embed.json"
py scripts/bench_pretrain.py --presets tiny,small --steps 20 --repeats 3 --json-out "$tmp/pretrain.json"
py scripts/bench_han.py --threads 2 --repeat 10 --json-out "$tmp/han.json"
py scripts/bench_train.py --chunks 8,32 --torch-max 32 --repeat 3 --json-out "$tmp/train.json"
"$PYTHON" - "$tmp" "$out" "$(git rev-parse --short HEAD)" <<'PY'
import json, sys, time
tmp, out, commit = sys.argv[1:4]
result = {"commit": commit, "date": time.strftime("%Y-%m-%d")}
for name in ["compare", "predict", "embed", "pretrain", "han", "train"]:
    result[f"bench_{name}"] = json.load(open(f"{tmp}/{name}.json"))
with open(out, "w") as f:
    json.dump(result, f, indent=1)
print("wrote", out)
PY
"$PYTHON" scripts/bench_report.py "$out"
