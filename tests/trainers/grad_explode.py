#!/usr/bin/python3
"""Exploding gradients: a learning rate far too high for the problem.

A two-layer linear regression model trained with plain SGD at lr 0.03 on inputs of scale 4:
from about step 4 every update overshoots, the weights and the gradients grow faster and
faster (gradient norm 30, 50, 95, 200, 1.7e3, ... 1e38), and at step 11 the forward pass
overflows to Inf. Before that every tensor is finite: only the trend
of the gradient norm shows what is coming.

Expected: gradient norms per backward pass (stats.grad_norm.trend) that grow step after step,
each within the daemon's stated bounds of the norm torch computes, reported while the
parameters are still finite; the first anomaly comes later.
"""
import torch
import torch.nn as nn

import common


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(16, 8)
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        return self.head(self.body(x))


class GradExplode(common.Trainer):
    """Trainer whose learning rate makes every update overshoot."""

    expected_cause = "lr_too_high"
    watch_backward = True
    steps = 30
    lr = 0.03

    def model(self):
        return Regressor()

    def batch(self, step, micro, gen):
        x = 4 * torch.randn(32, 16, generator=gen)
        return (x,), x[:, :1] - x[:, 1:2]


if __name__ == "__main__":
    common.main(GradExplode())
