#!/usr/bin/env python3
"""Long-document benchmark from real text: "bundles" of hyperpartisan news articles.

  python3 scripts/make_long_hyperpartisan.py --out data/long-hyperpartisan [--seed 0]
          [--train-bundles 400] [--test-bundles 400]

Each bundle concatenates 6–20 articles of ../shared/data/hyperpartisan (about 5,000–20,000
tokens, estimated as 1.3 tokens per word), separated by blank lines. Binary task (train.jsonl,
test.jsonl): a bundle is `partisan` when exactly one of its articles is hyperpartisan, placed
uniformly among them, and `neutral` when none is; the two labels are balanced. Ordinal task
(ordinal_train.jsonl, ordinal_test.jsonl): `none`, `one`, or `three_plus` (3 to 5) hyperpartisan
articles, balanced: ordered labels like ratings. Training bundles use training articles only,
test bundles test articles only. Every record: id, text, label, and for analysis the article
ids, the positions of the hyperpartisan ones and the token estimate. Deterministic in --seed. With --dev-bundles N, a fraction (--dev-articles 0.2) of the
training articles is held out for dev.jsonl / ordinal_dev.jsonl (the training bundles use the
rest): a dev split of the training bundles would share articles with them.
The label follows a few paragraphs anywhere in a long text — what a first-chunk reader cannot
see and a bag of words dilutes.
"""
import argparse
import json
import os
import random

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
DATA = os.path.join(ROOT, "..", "shared", "data", "hyperpartisan")
MIN_TOKENS, MAX_TOKENS = 5000, 20000
MIN_ARTICLES, MAX_ARTICLES = 6, 20


def tokens(text):
    return int(len(text.split()) * 1.3)


def load(split):
    with open(os.path.join(DATA, f"{split}.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    partisan = [r for r in rows if r["label"] == 1]
    neutral = [r for r in rows if r["label"] == 0]
    return partisan, neutral


def bundle(rng, partisan, neutral, n_partisan):
    """Articles for one bundle with exactly `n_partisan` hyperpartisan ones, within the token
    range (resampled until it is)."""
    for _ in range(1000):
        n = rng.randint(MIN_ARTICLES, MAX_ARTICLES)
        if n_partisan > n:
            continue
        chosen = rng.sample(neutral, n - n_partisan)
        positions = sorted(rng.sample(range(n), n_partisan))
        hot = rng.sample(partisan, n_partisan)
        for p, article in zip(positions, hot):
            chosen.insert(p, article)
        estimate = sum(tokens(a["text"]) for a in chosen)
        if MIN_TOKENS <= estimate <= MAX_TOKENS:
            return chosen, positions, estimate
    raise RuntimeError("no bundle fits the token range")


def make(rng, split, count, classes, articles=None):
    """`count` bundles balanced over `classes` [(label, how many partisan articles: fn(rng))],
    from the articles of `split` (or the given (partisan, neutral) lists)."""
    partisan, neutral = articles or load(split)
    records = []
    for i in range(count):
        label, how_many = classes[i % len(classes)]
        articles, positions, estimate = bundle(rng, partisan, neutral, how_many(rng))
        records.append({
            "id": f"{split}-{i:05d}",
            "text": "\n\n".join(a["text"].strip() for a in articles),
            "label": label,
            "articles": [a["id"] for a in articles],
            "partisan_positions": positions,
            "tokens_estimate": estimate,
        })
    rng.shuffle(records)
    return records


def write(path, records):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--train-bundles", type=int, default=400)
    ap.add_argument("--test-bundles", type=int, default=400)
    ap.add_argument("--dev-bundles", type=int, default=0,
                    help="also write dev.jsonl / ordinal_dev.jsonl from --dev-articles of the training articles, "
                         "held out of the training bundles (default 0: no dev files, training bundles as before)")
    ap.add_argument("--dev-articles", type=float, default=0.2)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    binary = [("neutral", lambda r: 0), ("partisan", lambda r: 1)]
    ordinal = [("none", lambda r: 0), ("one", lambda r: 1), ("three_plus", lambda r: r.randint(3, 5))]
    # Training bundles reuse training articles, so a dev split of them shares articles with the
    # training bundles and overstates accuracy: dev bundles come from held-out articles instead.
    sources = {"train": None, "test": None}
    splits = [("train", args.train_bundles), ("test", args.test_bundles)]
    if args.dev_bundles > 0:
        held = random.Random(f"{args.seed}-dev-articles")
        partisan, neutral = load("train")
        held.shuffle(partisan)
        held.shuffle(neutral)
        cut_p, cut_n = int(len(partisan) * args.dev_articles), int(len(neutral) * args.dev_articles)
        sources["dev"] = (partisan[:cut_p], neutral[:cut_n])
        sources["train"] = (partisan[cut_p:], neutral[cut_n:])
        splits.append(("dev", args.dev_bundles))
    for name, classes in [("", binary), ("ordinal_", ordinal)]:
        for split, count in splits:
            rng = random.Random(f"{args.seed}-{name}{split}")
            records = make(rng, "train" if split == "dev" else split, count, classes, sources[split])
            path = os.path.join(args.out, f"{name}{split}.jsonl")
            write(path, records)
            sizes = sorted(r["tokens_estimate"] for r in records)
            counts = {}
            for r in records:
                counts[r["label"]] = counts.get(r["label"], 0) + 1
            print(f"{path}: {len(records)} bundles {counts}, ~tokens min {sizes[0]}, "
                  f"median {sizes[len(sizes) // 2]}, max {sizes[-1]}")


if __name__ == "__main__":
    main()
