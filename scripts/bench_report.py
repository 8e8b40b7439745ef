#!/usr/bin/env python3
"""Renders a `bench/results-<cpu>.json` written by `scripts/bench_all.sh` as the Markdown table
of BENCHMARKS.md's summary: every comparison with PyTorch, longread's and PyTorch's median
(and min), the ratio, and the target it is held to.

    python3 scripts/bench_report.py bench/results-<cpu>.json

Ratios are longread's time / PyTorch's time (below 1: longread is faster), except where a
target is a throughput multiple (predict, embed), which is shown as PyTorch's time / longread's.
"""
import json
import statistics
import sys


def row(what, theirs, ours, ratio, target, met):
    status = "—" if met is None else "met" if met else "**not met**"
    return f"| {what} | {theirs} | {ours} | {ratio} | {target} | {status} |"


def seconds(median, low):
    return f"{median:.3f} ({low:.3f}) s"


def compare_rows(compare):
    for r in compare["rows"]:
        what = f"{r['workload']} {r['name']} {r['shape']}".strip()
        ratio = r["ratio"]
        if r["workload"] == "encoder-forward":
            target, met = "time ≤ 0.8×", ratio <= 0.8
        elif r["workload"] == "train-step":
            memory = r["ours_added"] / r["theirs_added"]
            target, met = "time ≤ 0.8×, memory ≤ 0.8×", ratio <= 0.8 and memory <= 0.8
            ratio_text = f"{ratio:.2f}× time, {memory:.2f}× memory"
            yield row(what, seconds(r["theirs"], r["theirs_min"]), seconds(r["ours"], r["ours_min"]), ratio_text,
                      target, met)
            continue
        else:
            target, met = "—", None
        yield row(what, seconds(r["theirs"], r["theirs_min"]), seconds(r["ours"], r["ours_min"]), f"{ratio:.2f}×",
                  target, met)


def predict_rows(predict):
    runs, med = predict["runs"], predict["median"]
    for precision in ["f32", "int8"]:
        ours, theirs = f"longread {precision}", f"PyTorch (fair) {precision}"
        if ours not in med or theirs not in med:
            continue
        speedup = med[theirs] / med[ours]
        yield row(f"predict {predict['documents']} articles, {precision}", seconds(med[theirs], min(runs[theirs])),
                  seconds(med[ours], min(runs[ours])), f"{speedup:.2f}× documents/s",
                  "≥ 2× documents/s" if precision == "f32" else "—", speedup >= 2 if precision == "f32" else None)


def embed_rows(embed):
    runs, med = embed["runs"], embed["median"]
    speedup = med["sentence_transformers"] / med["longread"]
    yield row(f"embed {embed['texts']} texts (sentence-transformers)",
              seconds(med["sentence_transformers"], min(runs["sentence_transformers"])),
              seconds(med["longread"], min(runs["longread"])), f"{speedup:.2f}× texts/s", "≥ 1.5× texts/s",
              speedup >= 1.5)


def pretrain_rows(pretrain):
    for r in pretrain["rows"]:
        ratio = r["pytorch_median"] / r["longread_median"]
        yield row(f"MLM pretraining step, {r['preset']} preset, {r['batch']}×{r['seq_len']}",
                  f"{r['pytorch_median']:.0f} ({r['pytorch_best']:.0f}) tokens/s",
                  f"{r['longread_median']:.0f} ({r['longread_best']:.0f}) tokens/s", f"{ratio:.2f}× time",
                  "time ≤ 1.0×", ratio <= 1.0)


def han_rows(han):
    ours, theirs = han["longread"]["runs"], han["pytorch"]["runs"]
    ratio = statistics.median(ours) / statistics.median(theirs)
    yield row("HAN training step, 32 × 64 × 32", seconds(statistics.median(theirs), min(theirs)),
              seconds(statistics.median(ours), min(ours)), f"{ratio:.2f}× time", "time ≤ 1.0×", ratio <= 1.0)


def train_rows(train):
    for r in train["rows"]:
        med, peak = r["median"], r["peak_rss_mib"]
        if med.get("torch") is None or med.get("recompute") is None:
            continue
        ours, theirs = r["runs"]["recompute"], r["runs"]["torch"]
        ratio = med["recompute"] / med["torch"]
        memory = peak["recompute"] / peak["torch"]
        yield row(f"hierarchical training step, one document of {r['chunks']} chunks",
                  f"{seconds(med['torch'], min(theirs))}, {peak['torch']:.0f} MiB",
                  f"{seconds(med['recompute'], min(ours))}, {peak['recompute']:.0f} MiB",
                  f"{ratio:.2f}× time, {memory:.2f}× peak RSS", "time ≤ 0.8×, memory ≤ 0.8×",
                  ratio <= 0.8 and memory <= 0.8)


def main():
    results = json.load(open(sys.argv[1]))
    cpu = results["bench_compare"]["cpu"] if "bench_compare" in results else "unknown CPU"
    print(f"{cpu}, commit {results['commit']}, {results['date']}; medians (min) of each script's runs\n")
    print("| comparison | PyTorch | longread | ratio | target | status |")
    print("|---|---|---|---|---|---|")
    renderers = [("bench_compare", compare_rows), ("bench_predict", predict_rows), ("bench_embed", embed_rows),
                 ("bench_pretrain", pretrain_rows), ("bench_han", han_rows), ("bench_train", train_rows)]
    for key, render in renderers:
        if key in results:
            for line in render(results[key]):
                print(line)


if __name__ == "__main__":
    main()
