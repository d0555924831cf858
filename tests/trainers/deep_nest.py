#!/usr/bin/python3
"""Modules nested --variant levels deep (default 20), the innermost dividing by a buffer that
is zero from step 3: that innermost call creates the NaN/Inf.

Deeper than the daemon's per-thread stack holds (or the kernel reports returns for), the
innermost calls cannot be checked: the daemon must then say so for the deepest call it checked
(origin null, nested_unchecked true), never call that wrapper the origin.
"""
import torch
import torch.nn as nn

import common


class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.register_buffer("denom", torch.ones(8))

    def forward(self, x):
        return self.lin(x) / self.denom


class Wrap(nn.Module):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, x):
        return self.inner(x)


class DeepNest(common.Trainer):
    """Innermost of N nested modules divides by zero at step 3."""

    steps = 6
    fault_step = 3
    variant = "20"
    expected_cause = "division_by_zero"

    def model(self):
        m = Inner()
        for _ in range(int(self.variant) - 1):
            m = Wrap(m)
        return m

    def schedule(self, model, step):
        if step == self.fault_step:
            inner = model
            while isinstance(inner, Wrap):
                inner = inner.inner
            inner.denom.zero_()

    def batch(self, step, micro, gen):
        x = torch.randn(4, 8, generator=gen)
        return (x,), x.sum(dim=1, keepdim=True).repeat(1, 8)


if __name__ == "__main__":
    common.main(DeepNest())
