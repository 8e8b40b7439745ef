#!/usr/bin/env python3
"""Golden fixtures for per-label temperature scaling (run by hand, not in CI).

Writes tests/fixtures/calibration/label_temperatures.json: 300 documents × 4 labels with
logits miscalibrated each in its own way (overconfident, timid, calibrated, shifted), the
probabilities σ(z) a multi-label model gives, the documents' label sets, and, per label, the
temperature T of least mean `BCEWithLogitsLoss(z / T, y)` found by PyTorch's L-BFGS on ln T in
float64, the loss there and the calibrated probabilities σ(z / T).

Usage: python3 scripts/make_calibration_fixtures.py   (needs torch)
"""
import json
import os

import torch

torch.manual_seed(0)
documents, labels = 300, 4
true_logits = torch.randn(documents, labels, dtype=torch.float64) * 2
carried = torch.rand(documents, labels, dtype=torch.float64) < torch.sigmoid(true_logits)
# What the model says: label 0 three times too sure, label 1 a third as sure, label 2 right,
# label 3 twice as sure and shifted.
scale = torch.tensor([3.0, 1.0 / 3.0, 1.0, 2.0], dtype=torch.float64)
shift = torch.tensor([0.0, 0.0, 0.0, 0.5], dtype=torch.float64)
logits = (true_logits * scale + shift).float().double()
probabilities = torch.sigmoid(logits).float()
# The logits as the probabilities say them (what longread reads back from a prediction).
logits = torch.logit(probabilities.double())
y = carried.double()

temperatures, losses, calibrated = [], [], []
for label in range(labels):
    z, t = logits[:, label], y[:, label]
    log_t = torch.zeros((), dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS([log_t], lr=1, max_iter=500, tolerance_grad=1e-14, tolerance_change=1e-16,
                                  line_search_fn="strong_wolfe")
    loss_fn = torch.nn.BCEWithLogitsLoss()

    def closure():
        optimizer.zero_grad()
        loss = loss_fn(z / log_t.exp(), t)
        loss.backward()
        return loss

    optimizer.step(closure)
    temperature = log_t.exp().item()
    temperatures.append(temperature)
    losses.append(loss_fn(z / temperature, t).item())
    calibrated.append(torch.sigmoid(z / temperature).tolist())

out = {
    "labels": ["over", "timid", "right", "shifted"],
    "probabilities": probabilities.tolist(),
    "truth": carried.tolist(),
    "temperatures": temperatures,
    "losses": losses,
    "calibrated": [list(row) for row in zip(*calibrated)],
    "torch": torch.__version__,
}
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "calibration")
os.makedirs(root, exist_ok=True)
with open(os.path.join(root, "label_temperatures.json"), "w") as f:
    json.dump(out, f)
print("temperatures", temperatures)
