#!/usr/bin/python3
"""Held-out: torch.nn.LayerNorm with eps=0 over a sample whose features are all the same.

The model normalises its raw features with nn.LayerNorm(12, eps=0.0) (eps set to 0 to match a
reference implementation bit for bit), inside a ModuleDict of input branches. From the fault
step on, one sample of each batch comes from a sensor that failed and reports its fill value,
7.5, for every feature: that row's variance is 0, and (x - mean) / sqrt(var + 0) is 0/0 = NaN.

True cause, from the code: norm_zero_variance (a normalisation over a constant, non-zero row
without an epsilon).
Expected first anomaly: branches.sensor.norm (LayerNorm) at the fault step, NaN, inputs finite:
origin.
"""
import torch
import torch.nn as nn

import common


class Fusion(nn.Module):
    def __init__(self):
        super().__init__()
        self.branches = nn.ModuleDict({
            "sensor": nn.Sequential(), "meta": nn.Linear(3, 8)})
        self.branches["sensor"].add_module("norm", nn.LayerNorm(12, eps=0.0))
        self.branches["sensor"].add_module("proj", nn.Linear(12, 8))
        self.head = nn.Linear(16, 1)

    def forward(self, sensor, meta):
        s = self.branches["sensor"](sensor)
        m = self.branches["meta"](meta)
        return self.head(torch.relu(torch.cat([s, m], dim=-1)))


class LayerNormConstant(common.Trainer):
    """Trainer whose batch holds a constant sensor row from the fault step."""

    steps = 3000  # an upper bound: --live stops --after-fault steps after the fault
    fault_step = None  # until asked for

    def model(self):
        return Fusion()

    def optimizer(self, params):
        return torch.optim.Adam(params, lr=1e-3)

    def batch(self, step, micro, gen):
        sensor = 5 + 2 * torch.randn(6, 12, generator=gen)
        meta = torch.randn(6, 3, generator=gen)
        y = sensor[:, :4].mean(dim=1, keepdim=True) - 5 + meta[:, :1]
        if self.fault_step is not None and step >= self.fault_step:
            sensor[2] = 7.5  # a failed sensor reports its fill value everywhere
        return (sensor, meta), y


if __name__ == "__main__":
    common.main(LayerNormConstant())
