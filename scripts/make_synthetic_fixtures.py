#!/usr/bin/env python3
"""A small separable task for training tests (run by hand; output committed).

tests/fixtures/synthetic/{train,test}.jsonl: documents of filler sentences with one telling
sentence placed anywhere; label "rain" or "prices". Reading only the start is not enough.
Usage: python3 scripts/make_synthetic_fixtures.py
"""
import json
import os

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
RAIN = ["Rain is expected over the weekend, with strong winds along the coast.",
        "Rain and strong winds along the coast this weekend.",
        "The weekend rain is expected along the coast."]
PRICES = ["Prices rose by 3.5% in October; analysts had expected 2.9%.",
          "Analysts expected prices to rise in October.",
          "Prices rose in October, analysts said."]
FILLER = ["The committee met on Tuesday to discuss the budget for next year.",
          "She said the results were surprising, but the method was sound.",
          "The quick brown fox jumps over the lazy dog while the cat watches."]


def documents(n, offset):
    for i in range(n):
        k = i + offset
        label, telling = ("rain", RAIN[k % 3]) if k % 2 == 0 else ("prices", PRICES[(k // 2) % 3])
        parts = [FILLER[(k + j) % 3] for j in range(k % 3 + 1)]
        parts.insert(k % (len(parts) + 1), telling)
        yield {"id": f"d{k}", "text": " ".join(parts), "label": label}


out = os.path.join(ROOT, "tests", "fixtures", "synthetic")
os.makedirs(out, exist_ok=True)
for name, n, offset in [("train", 32, 0), ("test", 12, 100)]:
    with open(os.path.join(out, f"{name}.jsonl"), "w") as f:
        for d in documents(n, offset):
            f.write(json.dumps(d) + "\n")
print("wrote", out)
