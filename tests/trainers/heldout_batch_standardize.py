#!/usr/bin/python3
"""Held-out: a batch standardisation of its own, (x - mean) / std over the batch dimension
(a BatchNorm without eps or running statistics), meets a feature that is the same for every
sample of the batch.

The features are a few continuous values and four one-hot indicators of a category; a
balanced sampler puts each category in every batch. From the fault step on, the sampler draws
batches of a single category (a sort by category left in the data loader), so each indicator
column is constant across the batch: its standard deviation is 0, and (x - mean) / std is
0/0 = NaN in those columns. No row is constant, zero or unusual: the constant values run down
a column, across the samples.

True cause, from the code: norm_zero_variance (a normalisation over a feature with zero
variance, without an epsilon).
Expected first anomaly: encoder.0 (BatchStandardize) at the fault step, NaN, inputs finite:
origin.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import common


class BatchStandardize(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(features))
        self.bias = nn.Parameter(torch.zeros(features))

    def forward(self, x):
        z = (x - x.mean(dim=0, keepdim=True)) / x.std(dim=0, keepdim=True)
        return z * self.weight + self.bias


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(BatchStandardize(7), nn.Linear(7, 12), nn.SiLU())
        self.head = nn.Linear(12, 1)

    def forward(self, x):
        return self.head(self.encoder(x))


class BatchStandardizeTrainer(common.Trainer):
    """Trainer whose batches hold one category only from the fault step."""

    steps = 3000  # an upper bound: --live stops --after-fault steps after the fault
    fault_step = None  # until asked for

    def model(self):
        return Net()

    def optimizer(self, params):
        return torch.optim.Adam(params, lr=1e-3)

    def batch(self, step, micro, gen):
        cont = torch.randn(12, 3, generator=gen)
        cat = torch.arange(12) % 4  # a balanced sampler: each category three times
        cat = cat[torch.randperm(12, generator=gen)]
        if self.fault_step is not None and step >= self.fault_step:
            cat[:] = cat[0]  # every sample of the batch in one category
        x = torch.cat([cont, F.one_hot(cat, 4).float()], dim=1)
        y = cont[:, :1] + cat.unsqueeze(1).float() * 0.5
        return (x,), y


if __name__ == "__main__":
    common.main(BatchStandardizeTrainer())
