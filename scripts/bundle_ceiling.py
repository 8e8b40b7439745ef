#!/usr/bin/env python3
"""What an article-level detector could do on the long-hyperpartisan bundles: a ceiling for
any bundle model built on the same encoder.

Given `longread predict` output for the hyperpartisan test articles (per-article probability
of the hyperpartisan label, from a model trained on article labels) and the bundle files written
by make_long_hyperpartisan.py (each bundle lists its articles), it scores each bundle from its
articles' probabilities — the maximum (one partisan article decides) and the mean of the top k
— and reports the best test macro-F1 over every threshold, chosen on the test bundles
themselves (an oracle threshold: an upper bound, not a result). For the ordinal variant
(none / one / three_plus) it counts the articles above a threshold and picks the best
threshold and the best count boundary.

A bundle model sees only bundle labels, never which article is partisan, so it cannot beat a
detector that was trained on article labels and is given the best threshold: if this ceiling
is below a target, no pooling over the same encoder's chunks reaches it.

    python3 scripts/bundle_ceiling.py --predictions articles.jsonl --bundles data/long-hyperpartisan
        [--positive LABEL] [--json]

Standard library only.
"""
import argparse
import json
import os


def macro_f1(gold, pred, labels):
    scores = []
    for label in labels:
        tp = sum(g == label and p == label for g, p in zip(gold, pred))
        fp = sum(g != label and p == label for g, p in zip(gold, pred))
        fn = sum(g == label and p != label for g, p in zip(gold, pred))
        precision = tp / (tp + fp) if tp + fp else 0.0
        recall = tp / (tp + fn) if tp + fn else 0.0
        scores.append(2 * precision * recall / (precision + recall) if precision + recall else 0.0)
    return sum(scores) / len(scores)


def article_probabilities(path, positive):
    probs = {}
    with open(path) as f:
        for line in f:
            record = json.loads(line)
            if "error" in record:
                raise SystemExit(f"{path}: a prediction failed: {record}")
            probs[str(record["id"])] = record["scores"][positive]
    return probs


def bundles(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def binary_ceiling(rows, probs, pool):
    gold = [r["label"] for r in rows]
    scores = [pool(sorted((probs[a] for a in r["articles"]), reverse=True)) for r in rows]
    best = (0.0, None)
    for threshold in sorted(set(scores)):
        pred = ["partisan" if s >= threshold else "neutral" for s in scores]
        best = max(best, (macro_f1(gold, pred, ["neutral", "partisan"]), threshold))
    return best


def ordinal_ceiling(rows, probs):
    gold = [r["label"] for r in rows]
    labels = ["none", "one", "three_plus"]
    best = (0.0, None, None)
    for threshold in sorted({round(p, 3) for p in probs.values()}):
        counts = [sum(probs[a] >= threshold for a in r["articles"]) for r in rows]
        for boundary in range(2, 6):
            pred = ["none" if c == 0 else "one" if c < boundary else "three_plus" for c in counts]
            best = max(best, (macro_f1(gold, pred, labels), threshold, boundary))
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--predictions", required=True, help="longread predict output for the test articles")
    parser.add_argument("--bundles", required=True, help="the directory make_long_hyperpartisan.py wrote")
    parser.add_argument("--positive", default="1", help="the hyperpartisan label's name in the model (default 1)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    probs = article_probabilities(args.predictions, args.positive)
    result = {}
    binary = bundles(os.path.join(args.bundles, "test.jsonl"))
    missing = {a for r in binary for a in r["articles"]} - probs.keys()
    if missing:
        raise SystemExit(f"{len(missing)} bundle articles have no prediction (e.g. {sorted(missing)[0]})")
    for name, pool in [("max", lambda s: s[0]), ("top2_mean", lambda s: sum(s[:2]) / 2),
                       ("top3_mean", lambda s: sum(s[:3]) / 3)]:
        f1, threshold = binary_ceiling(binary, probs, pool)
        result[f"binary_{name}"] = {"macro_f1": round(f1, 4), "threshold": threshold}
    ordinal_path = os.path.join(args.bundles, "ordinal_test.jsonl")
    if os.path.exists(ordinal_path):
        f1, threshold, boundary = ordinal_ceiling(bundles(ordinal_path), probs)
        result["ordinal_count"] = {"macro_f1": round(f1, 4), "threshold": threshold,
                                   "three_plus_from_count": boundary}
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(f"{len(probs)} articles with predictions")
    for key, value in result.items():
        print(f"{key:14} ceiling macro-F1 {value['macro_f1']:.3f}  ({value})")


if __name__ == "__main__":
    main()
