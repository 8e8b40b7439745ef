"""Prints the scikit-learn values that `crates/longread-metrics/src/scores.rs`'s tests expect
(ROC-AUC and log loss of predicted probabilities). Run by hand, not in CI:

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
