#!/usr/bin/python3
"""Division by zero: logits are divided by a temperature annealed linearly to 0.0 at step 4.

Two micro-batches per optimizer step (gradient accumulation), so iteration = 2 * step + micro.
Expected first anomaly: scale (TempScale) at step 4, iteration 8, ±Inf, inputs finite: origin.
"""
import torch
import torch.nn as nn

import common


class TempScale(nn.Module):
    """Divides by a temperature buffer (the bug: the schedule lets it reach zero)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("temperature", torch.tensor(1.0))

    def forward(self, x):
        return x / self.temperature


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stages = nn.ModuleDict({
            "embed": nn.Sequential(nn.Linear(6, 12), nn.ReLU()),
            "proj": nn.Linear(12, 5),
        })
        self.scale = TempScale()

    def forward(self, x):
        x = self.stages["embed"](x)
        x = self.stages["proj"](x)
        return self.scale(x)


class DivZero(common.Trainer):
    """Trainer whose temperature schedule reaches zero at step 4."""

    expected_cause = "division_by_zero"  # what the daemon's diagnosis must say

    accum = 2

    def model(self):
        return Net()

    def loss(self):
        return nn.CrossEntropyLoss()

    def schedule(self, model, step):
        model.scale.temperature.fill_(max(0.0, 1.0 - step / self.fault_step))

    def batch(self, step, micro, gen):
        x = torch.randn(6, 6, generator=gen)
        y = torch.randint(0, 5, (6,), generator=gen)
        return (x,), y


if __name__ == "__main__":
    common.main(DivZero())
