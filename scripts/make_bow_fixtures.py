"""Golden fixture for the bag-of-words baseline (longread-bow), from scikit-learn itself:

  tests/fixtures/bow/expected.json: train texts and labels, test texts, and for C = 10 the
      vocabulary size and test probabilities of
      TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2) +
      LogisticRegression(C=10, solver="lbfgs") on a binary task (the real hyperpartisan labels)
      and a 3-class task (labels i % 3: a multinomial fit, parity only); and, under
      "multilabel", OneVsRestClassifier(LogisticRegression(C=10)) on three labels a document
      carries any number of (the real label, i % 3 == 0, "trump" in the text);
      and for the word tasks, each test text's five terms that raised its predicted label most
      ("evidence": [term, coefficient × TF-IDF value], the coefficient in the sense of
      longread_bow::evidence: ±coef_[0] for two labels, coef_[k] minus the mean of the other
      rows for more).

Texts: the first 120 words of 60 training and 20 test articles of ../shared/data/hyperpartisan.
Usage: .venv/bin/python scripts/make_bow_fixtures.py
"""
import json
import os

from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.multiclass import OneVsRestClassifier
from sklearn.pipeline import make_union

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
DATA = os.path.join(ROOT, "..", "shared", "data", "hyperpartisan")
OUT = os.path.join(ROOT, "tests", "fixtures", "bow")


def texts(split, n):
    with open(os.path.join(DATA, f"{split}.jsonl")) as f:
        rows = [json.loads(line) for line, _ in zip(f, range(n))]
    return [" ".join(r["text"].split()[:120]) for r in rows], [int(r["label"]) for r in rows]


def evidence(vec, lr, test):
    """Each test text's predicted label and its five largest positive term contributions."""
    names = vec.get_feature_names_out()
    x = vec.transform(test)
    coef = lr.coef_
    rows = []
    for d, k in enumerate(lr.predict(x)):
        if coef.shape[0] == 1:
            w = coef[0] if k == 1 else -coef[0]
        else:
            others = [j for j in range(coef.shape[0]) if j != k]
            w = coef[k] - coef[others].mean(axis=0)
        row = x[d].tocoo()
        terms = [(names[c], float(w[c] * v)) for c, v in zip(row.col, row.data) if w[c] * v > 0]
        terms.sort(key=lambda t: -t[1])
        rows.append({"label": int(k), "terms": terms[:5]})
    return rows


def main():
    train, train_labels = texts("train", 60)
    test, _ = texts("test", 20)
    out = {"c": 10.0, "train": train, "test": test, "tasks": {}}
    three = [i % 3 for i in range(len(train))]
    for name, labels, char_ngrams in [
        ("binary", train_labels, None),
        ("three", three, None),
        ("binary_chars", train_labels, [2, 5]),
    ]:
        vec = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2)
        if char_ngrams:
            chars = TfidfVectorizer(
                analyzer="char_wb", ngram_range=tuple(char_ngrams), sublinear_tf=True, min_df=2
            )
            vec = make_union(vec, chars)
        x = vec.fit_transform(train)
        lr = LogisticRegression(C=10.0, tol=1e-12, max_iter=100000).fit(x, labels)
        out["tasks"][name] = {
            "labels": labels,
            "char_ngrams": char_ngrams,
            "features": x.shape[1],
            "probabilities": lr.predict_proba(vec.transform(test)).tolist(),
        }
        if not char_ngrams:
            out["tasks"][name]["evidence"] = evidence(vec, lr, test)
    carried = [
        [name for name, on in (("hyperpartisan", y == 1), ("third", i % 3 == 0), ("trump", "trump" in t.lower())) if on]
        for i, (t, y) in enumerate(zip(train, train_labels))
    ]
    names = ["hyperpartisan", "third", "trump"]
    indicator = [[int(n in c) for n in names] for c in carried]
    vec = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2)
    x = vec.fit_transform(train)
    ovr = OneVsRestClassifier(LogisticRegression(C=10.0, tol=1e-12, max_iter=100000)).fit(x, indicator)
    out["multilabel"] = {
        "names": names,
        "labels": carried,
        "probabilities": ovr.predict_proba(vec.transform(test)).tolist(),
    }
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(out, f)


if __name__ == "__main__":
    main()
