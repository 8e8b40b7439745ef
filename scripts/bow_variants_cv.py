"""Cross-validated comparison of bag-of-words variants on the hyperpartisan training articles,
in scikit-learn (to decide what is worth building into `train --arch bow`; test set untouched).

Features as `longread train --arch bow --char-ngrams 2-5` makes them: word 1-2-grams and
character 2-5-grams inside words (`char_wb`), each block TF-IDF (sublinear tf, min_df 2) and
L2-normalised. Variants:
  base  logistic regression (longread's model)
  nb    the features scaled by naive-Bayes log-count ratios (Wang & Manning 2012, NBSVM-style,
        ratios from each training fold's binarised features, alpha 1), then logistic regression
  nbn   the same, rows L2-normalised again after the scaling
  svm   a linear SVM (LinearSVC, C / 100 on the same grid)
For fold seeds 42, 43, 44: 5-fold stratified CV, the best mean macro-F1 over C in
0.1, 1, 10, 100, 1000.

Usage: .venv/bin/python scripts/bow_variants_cv.py [base,nb,nbn,svm]
"""
import json
import os
import sys

import numpy as np
import scipy.sparse as sp
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import f1_score
from sklearn.model_selection import StratifiedKFold
from sklearn.pipeline import make_union
from sklearn.preprocessing import normalize
from sklearn.svm import LinearSVC

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data", "hyperpartisan")
C_VALUES = [0.1, 1, 10, 100, 1000]


def vectorizer():
    words = TfidfVectorizer(ngram_range=(1, 2), sublinear_tf=True, min_df=2)
    chars = TfidfVectorizer(analyzer="char_wb", ngram_range=(2, 5), sublinear_tf=True, min_df=2)
    return make_union(words, chars)


def nb_ratios(x, y, alpha=1.0):
    present = (x > 0).astype(np.float64)
    p = alpha + np.asarray(present[y == 1].sum(0)).ravel()
    q = alpha + np.asarray(present[y == 0].sum(0)).ravel()
    return np.log((p / p.sum()) / (q / q.sum()))


def main():
    variants = (sys.argv[1] if len(sys.argv) > 1 else "base,nb,nbn,svm").split(",")
    with open(os.path.join(DATA, "train.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    texts, y = [r["text"] for r in rows], np.array([int(r["label"]) for r in rows])
    best = {v: [] for v in variants}
    for seed in [42, 43, 44]:
        scores = {v: {c: [] for c in C_VALUES} for v in variants}
        for train, held in StratifiedKFold(5, shuffle=True, random_state=seed).split(texts, y):
            vec = vectorizer()
            x_train = vec.fit_transform([texts[i] for i in train])
            x_held = vec.transform([texts[i] for i in held])
            scale = sp.diags(nb_ratios(x_train, y[train]))
            for v in variants:
                a, b = (x_train @ scale, x_held @ scale) if v.startswith("nb") else (x_train, x_held)
                if v == "nbn":
                    a, b = normalize(a), normalize(b)
                for c in C_VALUES:
                    model = LinearSVC(C=c / 100, max_iter=20000) if v == "svm" else LogisticRegression(C=c, max_iter=5000)
                    model.fit(a, y[train])
                    scores[v][c].append(f1_score(y[held], model.predict(b), average="macro"))
        for v in variants:
            means = {c: float(np.mean(s)) for c, s in scores[v].items()}
            c = max(means, key=means.get)
            best[v].append(means[c])
            print(f"fold seed {seed} {v}: best C {c}, CV macro-F1 {means[c]:.4f}", flush=True)
    for v in variants:
        print(f"{v}: {np.mean(best[v]):.3f} ± {np.std(best[v]):.3f} over fold seeds")


if __name__ == "__main__":
    main()
