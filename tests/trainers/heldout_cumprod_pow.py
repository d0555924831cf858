#!/usr/bin/python3
"""Held-out: a cumulative product of growth factors raised to a fractional power.

A forecaster summarises each series of 8 periodic returns r by its running annualised growth,
cumprod(1 + r) ** (1 / t) for t = 1..8 (Compounding, a module of its own). Returns are small
(|r| < 0.3) and 1 + r is positive, until the fault step: from then on one series of each
batch holds a return of -1.5 (a value in percent where the rest are fractions: -150%), so its
growth factor is -0.5, the running product is negative from that period on, and a negative
base to a fractional power is NaN.

True cause, from the code: invalid_domain (pow of a negative base with a non-integer
exponent). No zero, no large value, no mask; the inputs (returns) are negative as often as
not on healthy steps too.
Expected first anomaly: features.compound (Compounding) at the fault step, NaN, inputs finite:
origin.
"""
import torch
import torch.nn as nn

import common

PERIODS = 8


class Compounding(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("inv_t", 1.0 / torch.arange(1, PERIODS + 1, dtype=torch.float32))

    def forward(self, returns):
        return torch.cumprod(1 + returns, dim=-1).pow(self.inv_t) - 1


class Forecaster(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential()
        self.features.add_module("compound", Compounding())
        self.features.add_module("mix", nn.Linear(PERIODS, 16))
        self.features.add_module("act", nn.Tanh())
        self.head = nn.Linear(16, 1)

    def forward(self, returns):
        return self.head(self.features(returns))


class CumprodPow(common.Trainer):
    """Trainer whose batch holds a return of -150% from the fault step."""

    steps = 3000  # an upper bound: --live stops --after-fault steps after the fault
    fault_step = None  # until asked for

    def model(self):
        return Forecaster()

    def optimizer(self, params):
        return torch.optim.Adam(params, lr=1e-3)

    def batch(self, step, micro, gen):
        r = 0.1 * torch.randn(6, PERIODS, generator=gen).clamp(-3, 3)
        if self.fault_step is not None and step >= self.fault_step:
            r[4, 3] = -1.5  # -150%, in percent where the rest are fractions
        y = r.sum(dim=1, keepdim=True)
        return (r,), y


if __name__ == "__main__":
    common.main(CumprodPow())
