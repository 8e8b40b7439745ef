#!/usr/bin/env bash
# Runs the benchmarks that compare longread with PyTorch on this machine and writes their
# figures, machine-readable, to bench/results-<cpu>.json (one file per CPU model), so that
# BENCHMARKS.md's tables can be regenerated rather than retyped.
#
#   bash scripts/bench_all.sh [PYTHON]        # PYTHON: an interpreter with torch + transformers
#
# Needs ../shared (MiniLM, hyperpartisan). Builds the release binary first. Takes about 15
# minutes on 2 cores. OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE are unset for the Python side (they
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
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$PYTHON" scripts/bench_compare.py --threads 2 --repeat 3 \
  --markdown --json-out "$tmp/compare.json"
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$PYTHON" scripts/bench_predict.py speed --docs 40 --threads 2 \
  --repeats 3 --precision f32,int8 --no-seed-design --json-out "$tmp/predict.json"
"$PYTHON" - "$tmp" "$out" "$(git rev-parse --short HEAD)" <<'PY'
import json, sys, time
tmp, out, commit = sys.argv[1:4]
result = {"commit": commit, "date": time.strftime("%Y-%m-%d"),
          "bench_compare": json.load(open(f"{tmp}/compare.json")),
          "bench_predict": json.load(open(f"{tmp}/predict.json"))}
with open(out, "w") as f:
    json.dump(result, f, indent=1)
print("wrote", out)
PY
