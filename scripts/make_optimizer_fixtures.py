#!/usr/bin/env python3
"""Golden fixture for longread's AdamW: torch.optim.AdamW on small tensors (run by hand).

Writes tests/fixtures/optim/adamw.safetensors with, for two groups (lr 1e-2 with weight decay
0.1; lr 3e-3 without), the initial parameters, the gradients of 4 steps (parameter `b` gets
no gradient at step 2) and the parameters after each step.
Usage: python3 scripts/make_optimizer_fixtures.py
"""
import json
import os

import torch
from safetensors.torch import save_file

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
OUT = os.path.join(ROOT, "tests", "fixtures", "optim")

g = torch.Generator().manual_seed(0)
params = {"a": torch.randn(37, 5, generator=g), "b": torch.randn(20_001, generator=g), "c": torch.randn(3, 3, generator=g)}
tensors = {f"init.{k}": v.clone() for k, v in params.items()}
ps = {k: torch.nn.Parameter(v.clone()) for k, v in params.items()}
opt = torch.optim.AdamW([
    {"params": [ps["a"], ps["b"]], "lr": 1e-2, "weight_decay": 0.1},
    {"params": [ps["c"]], "lr": 3e-3, "weight_decay": 0.0},
], betas=(0.9, 0.999), eps=1e-8)
for step in range(4):
    opt.zero_grad(set_to_none=True)
    for k, p in ps.items():
        if k == "b" and step == 1:
            continue
        grad = torch.randn(p.shape, generator=g) * (10.0 if k == "c" else 1.0)
        p.grad = grad
        tensors[f"grad.{step}.{k}"] = grad.clone()
    opt.step()
    for k, p in ps.items():
        tensors[f"after.{step}.{k}"] = p.detach().clone()
os.makedirs(OUT, exist_ok=True)
save_file(tensors, os.path.join(OUT, "adamw.safetensors"), metadata={"torch": torch.__version__})
print(f"wrote {len(tensors)} tensors, torch {torch.__version__}")
