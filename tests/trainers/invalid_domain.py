#!/usr/bin/python3
"""sqrt of a negative: a feature sqrt(x - floor) whose floor a schedule raises at step 4.

Expected first anomaly: feature (SqrtFeature) at step 4, NaN from finite inputs and no Inf:
invalid_domain.
"""
import torch
import torch.nn as nn

import common


class SqrtFeature(nn.Module):
    """sqrt(x - floor) without clamping (the bug: the floor can exceed x)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("floor", torch.tensor(-2.0))

    def forward(self, x):
        return torch.sqrt(x - self.floor)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Sequential(nn.Linear(6, 12), nn.Tanh())
        self.feature = SqrtFeature()
        self.head = nn.Linear(12, 1)

    def forward(self, x):
        return self.head(self.feature(self.proj(x)))


class InvalidDomain(common.Trainer):
    """Trainer whose sqrt floor rises above some inputs at step 4."""

    expected_cause = "invalid_domain"  # what the daemon's diagnosis must say

    def model(self):
        return Net()

    def schedule(self, model, step):
        model.feature.floor.fill_(0.0 if step == self.fault_step else -2.0)

    def batch(self, step, micro, gen):
        x = torch.randn(8, 6, generator=gen)
        return (x,), x[:, :1].cos()


if __name__ == "__main__":
    common.main(InvalidDomain())
