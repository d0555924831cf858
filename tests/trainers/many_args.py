#!/usr/bin/python3
"""A module called with more arguments than the daemon reads, the one past them NaN at step 4.

The model's forward makes NINE tensors from its input with torch ops, the last times a gate
buffer that turns NaN at step 4, and hands them to mix (Mix), which sums them:

  --variant args    mix(t0, ..., t8): nine positional arguments
  --variant list    mix([t0, ..., t8]): one list of nine

Expected: the hooks' first anomaly is mix at step 4, its inputs not finite. The daemon reads
the first 8 positional arguments and 8 items of a list: it names mix first with the hooks'
counts and never says its inputs were finite (nor that it is the origin).
"""
import torch
import torch.nn as nn

import common

NINE = 9


class Mix(nn.Module):
    def forward(self, *args):
        if len(args) == 1 and isinstance(args[0], list):
            args = tuple(args[0])
        return sum(args)


class Net(nn.Module):
    def __init__(self, variant):
        super().__init__()
        self.variant = variant
        self.lift = nn.Linear(4, 8)
        self.mix = Mix()
        self.head = nn.Linear(8, 1)
        self.register_buffer("gate", torch.tensor(1.0))

    def forward(self, x):
        h = self.lift(x)
        parts = [h * (i + 1) / NINE for i in range(NINE - 1)] + [h * self.gate]
        m = self.mix(*parts) if self.variant == "args" else self.mix(parts)
        return self.head(m)


class ManyArgs(common.Trainer):
    """Trainer whose ninth argument of mix turns NaN at step 4."""

    expected_cause = None
    variant = "args"

    def model(self):
        return Net(self.variant)

    def schedule(self, model, step):
        model.gate.fill_(float("nan") if step >= self.fault_step else 1.0)

    def batch(self, step, micro, gen):
        x = torch.randn(8, 4, generator=gen)
        return (x,), torch.randn(8, 1, generator=gen)


if __name__ == "__main__":
    common.main(ManyArgs())
