#!/usr/bin/python3
"""Batch standardisation written by hand, (x - x.mean(0)) / (x.std(0) + 1e-5), and at step 4
the batch holds one sample (an epoch's last batch without drop_last). The std over a dimension
of one value is NaN with the unbiased estimator (it divides by n - 1 = 0), and the epsilon added
after it cannot help.

Expected first anomaly: std (Standardize) at step 4, NaN, inputs finite: the origin; a norm's
zero variance, whose evidence says the one row and n - 1 = 0.
"""
import torch
import torch.nn as nn

import common


class Standardize(nn.Module):
    def forward(self, x):
        return (x - x.mean(0, keepdim=True)) / (x.std(0, keepdim=True) + 1e-5)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(6, 8)
        self.std = Standardize()
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        return self.head(self.std(self.enc(x)))


class BatchOfOne(common.Trainer):
    """Trainer whose batch at step 4 holds one sample."""

    expected_cause = "norm_zero_variance"

    def model(self):
        return Net()

    def batch(self, step, micro, gen):
        n = 1 if step == self.fault_step else 8
        return (torch.randn(n, 6, generator=gen),), torch.randn(n, 1, generator=gen)


if __name__ == "__main__":
    common.main(BatchOfOne())
