#!/usr/bin/env python3
"""Which training switches beat the default route, and the route with all the winners at once.

`scripts/gpu_check.sh`'s `train` part times the within-memory training step (4 × 20 × 512,
bf16, 10,240-token kept groups) with each change of 2026-11-28 to the route switched off by its
environment variable, one at a time, on FlashAttention-2 and on cuDNN's attention. Each row of
its `train.jsonl` carries the `LONGREAD_*` variables it ran under (`"env"`). This script reads
those rows and prints, per attention backend, each switch's documents/s against the backend's
default row; then, with `--combined`, one line per backend that names every switch that beat
its default by more than `--margin` — the settings of a row that tries them all together (the
check runs it next, so one GPU run both finds and measures them). Settings of one variable
that exclude each other (cuDNN's gradient layouts) give the faster. The attention's
non-deterministic backward (`LONGREAD_CUDA_ATTENTION_BWD=fast`) is never chosen: a resumed run
must repeat the first's bits.

    python3 scripts/gpu_switch_winners.py train.jsonl [--tokens 10240] [--margin 0.01] [--combined]

Run by hand (and by gpu_check.sh); not part of CI.
"""

import argparse
import json
import sys

# Environment variables that choose a backend or say how to run, not a change to switch off.
BACKEND = "LONGREAD_CUDA_TRAIN_ATTENTION"
NEVER = {"LONGREAD_CUDA_ATTENTION_BWD=fast"}


def rows_of(path, tokens):
    """The bf16 roberta-base 4-document rows at `tokens`-token batches that name their env."""
    rows = []
    for line in open(path):
        line = line.strip()
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if (r.get("precision") == "bf16" and r.get("docs") == 4 and "rb-model" in r.get("model", "")
                and r.get("max_batch_tokens") == tokens and r.get("recompute", True) and "env" in r):
            rows.append(r)
    return rows


def backend_of(env):
    return next((e.split("=", 1)[1] for e in env if e.startswith(BACKEND + "=")), "fa2")


def compare(rows, margin):
    """Per backend: (default row, [(extra settings, docs/s, ratio to the default, winner?)])."""
    out = {}
    for backend in ("fa2", "cudnn"):
        mine = [r for r in rows if backend_of(r["env"]) == backend]
        base_env = [] if backend == "fa2" else [f"{BACKEND}=cudnn"]
        defaults = [r for r in mine if sorted(r["env"]) == sorted(base_env)]
        if not defaults:
            continue
        default = max(defaults, key=lambda r: r["docs_per_s"])
        table = []
        for r in mine:
            extra = sorted(set(r["env"]) - set(base_env))
            if not extra or not set(base_env) <= set(r["env"]):
                continue
            ratio = r["docs_per_s"] / default["docs_per_s"]
            winner = ratio > 1 + margin and not NEVER & set(extra)
            table.append((extra, r["docs_per_s"], ratio, winner))
        out[backend] = (default, table)
    return out


def add_winners(chosen, table):
    """Adds each winning row's settings of `table` to `chosen` ({variable: (setting, docs/s)}):
    of two settings of one variable the faster stays."""
    for extra, docs, _, winner in table:
        if winner:
            for e in extra:
                key = e.split("=", 1)[0]
                if key not in chosen or chosen[key][1] < docs:
                    chosen[key] = (e, docs)


def combined(found):
    """Per backend, the settings that try every winner at once: FlashAttention-2's winners
    apply to both backends (they change the rest of the step); of two settings of one variable
    the faster stays. None where nothing won."""
    general = {}
    add_winners(general, found.get("fa2", (None, []))[1])
    result = {}
    for backend in ("fa2", "cudnn"):
        if backend not in found:
            continue
        chosen = dict(general)
        if backend == "cudnn":
            add_winners(chosen, found["cudnn"][1])
        if chosen:
            base = [] if backend == "fa2" else [f"{BACKEND}=cudnn"]
            result[backend] = base + sorted(e for e, _ in chosen.values())
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rows", help="gpu_check's train.jsonl (rows tagged with their env)")
    ap.add_argument("--tokens", type=int, default=10240, help="the rows' --max-batch-tokens (default 10240)")
    ap.add_argument("--margin", type=float, default=0.01, help="how much faster than the default a winner is (default 0.01)")
    ap.add_argument("--combined", action="store_true", help="print only the combined rows' settings, a line per backend")
    args = ap.parse_args()
    found = compare(rows_of(args.rows, args.tokens), args.margin)
    if args.combined:
        for backend, env in combined(found).items():
            print(backend, " ".join(env))
        return
    for backend, (default, table) in found.items():
        print(f"{backend}: default {default['docs_per_s']:.2f} docs/s at {args.tokens} tokens")
        for extra, docs, ratio, winner in sorted(table, key=lambda t: -t[2]):
            print(f"  {' '.join(extra):<90} {docs:7.2f} docs/s {ratio:6.3f}x{'  <- faster' if winner else ''}")
    if not found:
        print(f"no default rows at {args.tokens} tokens tagged with their env", file=sys.stderr)


if __name__ == "__main__":
    main()
