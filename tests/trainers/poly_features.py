#!/usr/bin/python3
"""Polynomial features of a batch, torch.cat([x, x ** 2, x ** 3, x ** 4]), before a linear
regression. At step 4 one reading arrives in another unit (3.2e10): its fourth power, 1e42, is
past the float32 range, +Inf, from finite inputs and parameters. The call runs no exp (its
input needs no gradient: autograd records nothing, and its code names none): the value is
above exp's threshold, but no exp took it.

Expected first anomaly: poly (PolyFeatures) at step 4, +Inf, the origin. Cause: unknown (a
float32 overflow of a power has no cause of its own), the evidence saying the code names no
exp and which power overflows; not exp_overflow.
"""
import torch
import torch.nn as nn

import common


class PolyFeatures(nn.Module):
    def forward(self, x):
        return torch.cat([x, x ** 2, x ** 3, x ** 4], -1)


class Regression(nn.Module):
    def __init__(self):
        super().__init__()
        self.poly = PolyFeatures()
        self.lin = nn.Linear(12, 1)

    def forward(self, x):
        return self.lin(self.poly(x))


class PolyOverflow(common.Trainer):
    """Trainer whose batch at step 4 holds a reading of 3.2e10."""

    expected_cause = "unknown"
    lr = 1e-4

    def model(self):
        return Regression()

    def batch(self, step, micro, gen):
        x = torch.rand(16, 3, generator=gen)
        if step == self.fault_step:
            x[4, 1] = 3.2e10  # a reading in another unit
        return (x,), x.sum(1, keepdim=True)


if __name__ == "__main__":
    common.main(PolyOverflow())
