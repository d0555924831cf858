#!/usr/bin/python3
"""Standardisation without epsilon, (x - mean) / std per row: at step 4 a row of the batch is
constant (not zero), its variance is 0 while its norm is not.

--variant a: Standardize, written inline with Tensor.std.
--variant b: RowScaler, through a helper with torch.var and sqrt.
Expected first anomaly: std (the class of the variant) at step 4, NaN, inputs finite: origin.
"""
import torch
import torch.nn as nn

import common


class Standardize(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(8))

    def forward(self, x):
        return (x - x.mean(dim=-1, keepdim=True)) / x.std(dim=-1, keepdim=True) * self.weight


def zscore(v):
    centred = v - v.mean(dim=-1, keepdim=True)
    return centred / torch.var(v, dim=-1, keepdim=True).sqrt()


class RowScaler(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(8))

    def forward(self, x):
        return zscore(x) * self.weight


class Net(nn.Module):
    def __init__(self, variant):
        super().__init__()
        self.std = Standardize() if variant == "a" else RowScaler()
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        return self.head(self.std(x))


class ZeroVariance(common.Trainer):
    """Trainer whose batch at step 4 holds a constant row."""

    variant = "a"
    expected_cause = "norm_zero_variance"
    expected_op = "aten::div"
    expected_replay_cause = "norm_zero_variance"

    def model(self):
        return Net(self.variant)

    def batch(self, step, micro, gen):
        x = torch.randn(6, 8, generator=gen)
        if step == self.fault_step:
            x[4] = 3.0
        return (x,), x.sum(dim=1, keepdim=True)


if __name__ == "__main__":
    common.main(ZeroVariance())
