#!/usr/bin/python3
"""Weight normalization over a direction with an all-zero row: the weight is g * v / ||v||
(each output row of v divided by its norm), and at step 4 a pruning schedule zeroes the
weakest output row of v: its norm is 0, and 0/0 is NaN in that row of the weight.

--variant hook: nn.utils.weight_norm (weight_g and weight_v parameters of the layer, the
weight computed by a forward pre-hook inside the layer's call).
--variant param: nn.utils.parametrizations.weight_norm (torch 2.1 and later: original0 and
original1 of a parametrization module, called to compute the weight).
Expected first anomaly: fc (Linear) for hook, fc.parametrizations.weight.0 (_WeightNorm) for
param, at step 4, NaN, inputs and parameters finite: origin. Cause: division_by_zero.
"""
import torch
import torch.nn as nn

import common


class Net(nn.Module):
    def __init__(self, variant):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(8, 16), nn.Tanh())
        if variant == "param":
            self.fc = nn.utils.parametrizations.weight_norm(nn.Linear(16, 4))
        else:
            self.fc = nn.utils.weight_norm(nn.Linear(16, 4))
        self.head = nn.Linear(4, 1)

    def forward(self, x):
        return self.head(self.fc(self.enc(x)))


class WeightNorm(common.Trainer):
    """Trainer whose pruning schedule zeroes a row of the normalized layer's direction."""

    variant = "hook"
    expected_cause = "division_by_zero"

    def model(self):
        return Net(self.variant)

    def schedule(self, model, step):
        if step != self.fault_step:
            return
        v = model.fc.parametrizations.weight.original1 if self.variant == "param" \
            else model.fc.weight_v
        with torch.no_grad():
            v[int(v.norm(dim=1).argmin())].zero_()

    def batch(self, step, micro, gen):
        x = torch.randn(6, 8, generator=gen)
        return (x,), x.sum(dim=1, keepdim=True)


if __name__ == "__main__":
    common.main(WeightNorm())
