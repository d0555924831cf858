#!/usr/bin/python3
"""Batch standardisation written by hand, (x - x.mean(0)) / (x.std(0) + 1e-5), and at step 4
the batch holds one sample (an epoch's last batch without drop_last). The std over a dimension
of one value is NaN with the unbiased estimator (it divides by n - 1 = 0), and the epsilon added
after it cannot help.

Expected first anomaly: std (Standardize) at step 4, NaN, inputs finite: the origin; a norm's
zero variance, whose evidence says the one row and n - 1 = 0.

--variant groups: the batch keeps its eight samples and the layer standardises each group of
them apart (x[groups == g], a group id the model takes as a second input), and at step 4 one
group holds one sample: the same NaN from an input of several rows, told by the epsilon added
to the std (no 0/0 from a spread of 0) and the rows taken by index.
"""
import torch
import torch.nn as nn

import common


class Standardize(nn.Module):
    def forward(self, x):
        return (x - x.mean(0, keepdim=True)) / (x.std(0, keepdim=True) + 1e-5)


class GroupStandardize(nn.Module):
    def forward(self, x, groups):
        out = torch.empty_like(x)
        for g in groups.unique():
            rows = x[groups == g]
            out[groups == g] = (rows - rows.mean(0)) / (rows.std(0) + 1e-5)
        return out


class Net(nn.Module):
    def __init__(self, grouped):
        super().__init__()
        self.enc = nn.Linear(6, 8)
        self.std = GroupStandardize() if grouped else Standardize()
        self.head = nn.Linear(8, 1)

    def forward(self, x, *groups):
        return self.head(self.std(self.enc(x), *groups))


class BatchOfOne(common.Trainer):
    """Trainer whose batch at step 4 holds one sample."""

    variant = "batch"
    expected_cause = "norm_zero_variance"

    def model(self):
        return Net(self.variant == "groups")

    def batch(self, step, micro, gen):
        if self.variant == "groups":
            # two groups of four; at the fault step, seven and one
            groups = torch.tensor([0, 1] * 4)
            if step == self.fault_step:
                groups = torch.tensor([0] * 7 + [1])
            x = torch.randn(8, 6, generator=gen)
            return (x, groups), torch.randn(8, 1, generator=gen)
        n = 1 if step == self.fault_step else 8
        return (torch.randn(n, 6, generator=gen),), torch.randn(n, 1, generator=gen)


if __name__ == "__main__":
    common.main(BatchOfOne())
