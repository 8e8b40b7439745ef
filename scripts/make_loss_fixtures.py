#!/usr/bin/env python3
"""Golden fixtures for the multi-label loss (run by hand, not in CI).

Writes tests/fixtures/loss/bce.json: logits of 5 documents × 4 labels (some large, where a naive
log(sigmoid) loses precision), 0/1 targets (a document with none, one with all), a pos_weight per
label, and PyTorch's `BCEWithLogitsLoss` on them — mean without and with `pos_weight`, sum with
it — with the gradient of the weighted mean with respect to the logits.

Usage: python3 scripts/make_loss_fixtures.py   (needs torch)
"""
import json
import os

import torch

torch.manual_seed(0)
logits = torch.randn(5, 4) * 3
logits[0, 0] = 40.0
logits[1, 1] = -35.0
targets = torch.tensor(
    [[1, 0, 0, 1], [0, 0, 0, 0], [1, 1, 1, 1], [0, 1, 0, 0], [1, 0, 1, 0]], dtype=torch.float32
)
pos_weight = torch.tensor([1.0, 2.5, 0.5, 10.0])

x = logits.clone().requires_grad_(True)
weighted = torch.nn.BCEWithLogitsLoss(pos_weight=pos_weight)(x, targets)
weighted.backward()
out = {
    "logits": logits.tolist(),
    "targets": targets.tolist(),
    "pos_weight": pos_weight.tolist(),
    "mean": torch.nn.BCEWithLogitsLoss()(logits, targets).item(),
    "mean_weighted": weighted.item(),
    "sum_weighted": torch.nn.BCEWithLogitsLoss(pos_weight=pos_weight, reduction="sum")(logits, targets).item(),
    "grad_mean_weighted": x.grad.tolist(),
    "torch": torch.__version__,
}
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "loss")
os.makedirs(root, exist_ok=True)
with open(os.path.join(root, "bce.json"), "w") as f:
    json.dump(out, f, indent=1)
print("wrote", os.path.join(root, "bce.json"))
