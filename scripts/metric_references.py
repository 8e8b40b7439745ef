"""Prints the scikit-learn values that `crates/longread-metrics/src/scores.rs`'s tests expect
(ROC-AUC and log loss of predicted probabilities), and writes
tests/fixtures/metrics/multilabel.json, the multi-label metrics that
`crates/longread-metrics/tests/multilabel_golden.rs` compares with. Run by hand, not in CI:

    python3 -m venv /tmp/skv && /tmp/skv/bin/pip install scikit-learn
    /tmp/skv/bin/python scripts/metric_references.py
"""

import numpy as np
import sklearn
from sklearn.metrics import log_loss, roc_auc_score

print(f"scikit-learn {sklearn.__version__}")

# binary_scores_match_scikit_learn
y = np.array([0, 1, 1, 0, 1, 0, 0, 1])
p1 = np.array([0.3, 0.6, 0.5, 0.5, 0.9, 0.1, 0.7, 0.7], dtype=np.float32)
p = np.stack([1 - p1, p1], axis=1).astype(np.float32)
print("binary roc_auc", repr(roc_auc_score(y, p[:, 1])))
print("binary roc_auc of label 0", repr(roc_auc_score(y == 0, p[:, 0])))
print("binary log_loss", repr(log_loss(y, p, labels=[0, 1])))

# multiclass_scores_match_scikit_learn
y = np.array([0, 1, 2, 2, 1, 0, 2, 1, 0])
p = np.array(
    [
        [0.6, 0.3, 0.1],
        [0.2, 0.5, 0.3],
        [0.1, 0.2, 0.7],
        [0.3, 0.4, 0.3],
        [0.3, 0.3, 0.4],
        [0.5, 0.4, 0.1],
        [0.2, 0.2, 0.6],
        [0.4, 0.4, 0.2],
        [0.2, 0.7, 0.1],
    ],
    dtype=np.float32,
)
print("multiclass roc_auc (ovr, macro)", repr(roc_auc_score(y, p, multi_class="ovr", average="macro")))
print("multiclass per label", [repr(roc_auc_score(y == c, p[:, c])) for c in range(3)])
print("multiclass log_loss", repr(log_loss(y, p)))


def expected_calibration_error(y, p, bins=15):
    """Guo et al. 2017's ECE of the most probable label (their reference code's binning:
    a confidence c falls in (lower, upper])."""
    confidences = p.max(axis=1).astype(np.float64)
    correct = (p.argmax(axis=1) == y).astype(np.float64)
    edges = np.linspace(0, 1, bins + 1)
    ece = 0.0
    for lower, upper in zip(edges[:-1], edges[1:]):
        in_bin = (confidences > lower) & (confidences <= upper)
        if in_bin.any():
            ece += in_bin.mean() * abs(correct[in_bin].mean() - confidences[in_bin].mean())
    return ece


# the scores' expected calibration error (binary and multiclass above)
y = np.array([0, 1, 1, 0, 1, 0, 0, 1])
p1 = np.array([0.3, 0.6, 0.5, 0.5, 0.9, 0.1, 0.7, 0.7], dtype=np.float32)
print("binary ece", repr(expected_calibration_error(y, np.stack([1 - p1, p1], axis=1))))
y = np.array([0, 1, 2, 2, 1, 0, 2, 1, 0])
print("multiclass ece", repr(expected_calibration_error(y, p)))

# Multi-label metrics (crates/longread-metrics/src/multilabel.rs): written as a fixture,
# tests/fixtures/metrics/multilabel.json, that tests/multilabel_golden.rs reads.
import json
import os

from sklearn.metrics import (
    accuracy_score,
    hamming_loss,
    label_ranking_average_precision_score,
    precision_recall_fscore_support,
)

rng = np.random.default_rng(5)
cases = []
for n_docs, n_labels, density in [(40, 5, 0.3), (25, 8, 0.15), (60, 3, 0.5)]:
    y_true = (rng.random((n_docs, n_labels)) < density).astype(int)
    y_true[:3] = 0  # documents without a label
    y_true[:, -1] = 0  # a label no document has (left out of the macro ROC-AUC)
    y_true[5, -1] = 1 if n_labels > 3 else 0
    scores = np.clip(y_true * 0.35 + rng.random((n_docs, n_labels)) * 0.65, 0, 1).astype(np.float32)
    y_pred = (scores >= 0.5).astype(int)
    case = {"truth": y_true.tolist(), "predicted": y_pred.tolist(), "scores": scores.tolist()}
    for average in ["micro", "macro", "weighted", "samples"]:
        p, r, f, _ = precision_recall_fscore_support(y_true, y_pred, average=average, zero_division=0)
        case[average] = {"precision": float(p), "recall": float(r), "f1": float(f)}
    p, r, f, s = precision_recall_fscore_support(y_true, y_pred, average=None, zero_division=0)
    case["per_label"] = {"precision": p.tolist(), "recall": r.tolist(), "f1": f.tolist(), "support": s.tolist()}
    case["subset_accuracy"] = float(accuracy_score(y_true, y_pred))
    case["hamming_loss"] = float(hamming_loss(y_true, y_pred))
    case["lrap"] = float(label_ranking_average_precision_score(y_true, scores))
    case["roc_auc_micro"] = float(roc_auc_score(y_true, scores, average="micro"))
    both = [l for l in range(n_labels) if 0 < y_true[:, l].sum() < n_docs]
    case["roc_auc_macro"] = float(roc_auc_score(y_true[:, both], scores[:, both], average="macro"))
    # Log loss of each label's column (scikit-learn clips to the float32 epsilon), averaged over
    # labels: the mean binary cross-entropy over every (document, label) probability.
    case["log_loss"] = float(np.mean([log_loss(y_true[:, l], scores[:, l], labels=[0, 1]) for l in range(n_labels)]))
    flat = scores.reshape(-1)
    case["ece"] = float(expected_calibration_error(y_true.reshape(-1), np.stack([1 - flat, flat], axis=1)))
    case["roc_auc_per_label"] = [
        float(roc_auc_score(y_true[:, l], scores[:, l])) if l in both else None for l in range(n_labels)
    ]
    cases.append(case)
out = os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures", "metrics", "multilabel.json")
os.makedirs(os.path.dirname(out), exist_ok=True)
with open(out, "w") as f:
    json.dump({"scikit_learn": sklearn.__version__, "cases": cases}, f)
print("wrote", out)
