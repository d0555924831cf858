#!/usr/bin/python3
"""Held-out: a norm that computes the variance as E[x^2] - E[x]^2, with an epsilon, over rows
with a large offset and a small spread.

FastNorm (a module of its own, written for speed: one pass for both moments) normalises each
row by sqrt(E[x^2] - E[x]^2 + eps), eps = 1e-5. Healthy inputs are centred, and the formula is
fine. From the fault step on, the instrument reports absolute readings, about 3000 with a
spread of 0.01: E[x^2] is about 9e6, where float32's spacing is 1, so the difference of the two
moments is rounding noise of either sign, far larger than the true variance (1e-4) and the
epsilon. It comes out negative in about a third of the rows, and sqrt of a negative is NaN
(in a batch of 16 rows, at the fault step in all but about 1 batch in 700; the oracle names
the step).

True cause, from the code: invalid_domain (sqrt of a negative variance, the result of
catastrophic cancellation). Not norm_zero_variance: the row is not constant, and eps is
there. Not exp_overflow: the readings are above 88.7, but nothing takes their exp.
Expected first anomaly: blocks.0.norm (FastNorm) at the fault step, NaN, inputs finite: origin.
"""
import torch
import torch.nn as nn

import common

DIM = 16


class FastNorm(nn.Module):
    def __init__(self, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(DIM))

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        var = (x * x).mean(dim=-1, keepdim=True) - mean * mean
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = FastNorm()
        self.ff = nn.Linear(DIM, DIM)

    def forward(self, x):
        return x + self.ff(self.norm(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(DIM, 1)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class VarCancel(common.Trainer):
    """Trainer whose batch holds a row of absolute readings from the fault step."""

    steps = 3000  # an upper bound: --live stops --after-fault steps after the fault
    fault_step = None  # until asked for

    def model(self):
        return Net()

    def optimizer(self, params):
        return torch.optim.Adam(params, lr=1e-3)

    def batch(self, step, micro, gen):
        x = torch.randn(16, DIM, generator=gen)
        y = x[:, :3].mean(dim=1, keepdim=True)
        if self.fault_step is not None and step >= self.fault_step:
            x = 3000 + 0.01 * x  # absolute readings, not deviations
        return (x,), y


if __name__ == "__main__":
    common.main(VarCancel())
