#!/usr/bin/python3
"""A branch first taken at the fault step: its module's first call is the anomaly.

A sharpening head, switched on at step 4, divides the logits by its temperature, a frozen
parameter left at 0.0. BPF meets the module for the first time in the very call that goes bad,
so the daemon cannot have listed its parameters: it must read and check them when it gets the
anomaly (params_late true) and still find them finite (0.0 is finite), the layer an origin.
Expected first anomaly: sharpen (Sharpen) at step 4, ±Inf, inputs and parameters finite:
division_by_zero.
"""
import torch
import torch.nn as nn

import common


class Sharpen(nn.Module):
    """Divides by a frozen temperature parameter (the bug: it was never set)."""

    def __init__(self):
        super().__init__()
        self.temperature = nn.Parameter(torch.tensor(0.0), requires_grad=False)

    def forward(self, x):
        return x / self.temperature


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Sequential(nn.Linear(6, 12), nn.ReLU())
        self.proj = nn.Linear(12, 5)
        self.sharpen = Sharpen()
        self.sharpen_on = False

    def forward(self, x):
        x = self.proj(self.embed(x))
        return self.sharpen(x) if self.sharpen_on else x


class LateBranch(common.Trainer):
    """Trainer whose sharpening head is first used at step 4."""

    expected_cause = "division_by_zero"

    def model(self):
        return Net()

    def loss(self):
        return nn.CrossEntropyLoss()

    def schedule(self, model, step):
        model.sharpen_on = step >= self.fault_step

    def batch(self, step, micro, gen):
        x = torch.randn(6, 6, generator=gen)
        y = torch.randint(0, 5, (6,), generator=gen)
        return (x,), y


if __name__ == "__main__":
    common.main(LateBranch())
