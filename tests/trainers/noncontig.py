#!/usr/bin/python3
"""The first non-finite output is a non-contiguous view, which the daemon reads by its span.

gate (Gate) computes sqrt(h * h + bias) over twice the features and returns the first half
transposed (y[:, :10].t(): a view with strides (1, 20), not dense: the daemon scans dense
permutations such as a plain .t() as they are, and a view with holes by its span, then run by
run where the span holds NaN/±Inf). At step 4 the schedule
sets three entries of the bias (row 1, columns 2-4) to -1e6, so sqrt of a negative number gives
three NaN: the first non-finite output, non-contiguous. mix (Linear over the batch dimension)
consumes that view at once and returns a dense (10, 4) tensor whose rows 2-4 are all NaN (12
values).

Expected first anomaly: gate (Gate) output, not contiguous, nan 3, inputs finite: the origin,
step 4, iteration 4 (invalid_domain: sqrt of a negative buffer); then mix (Linear).
"""
import torch
import torch.nn as nn

import common

BATCH, FEATURES, HIDDEN = 4, 6, 10


class Gate(nn.Module):
    """Magnitude with a learned floor (the bug: a schedule drives the floor negative)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("bias", torch.ones(BATCH, 2 * HIDDEN))

    def forward(self, h):
        h = torch.cat([h, h], dim=1)
        y = torch.sqrt(h * h + self.bias)
        return y[:, :HIDDEN].t()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(FEATURES, HIDDEN)
        self.gate = Gate()
        self.mix = nn.Linear(BATCH, BATCH)
        self.head = nn.Linear(HIDDEN, 1)

    def forward(self, x):
        h = self.embed(x)
        g = self.gate(h)  # (HIDDEN, BATCH), non-contiguous
        z = self.mix(g)  # (HIDDEN, BATCH), dense
        return self.head(z.t())


class NonContig(common.Trainer):
    """Trainer whose first NaN is in a transposed (non-contiguous) module output at step 4."""

    expected_cause = "invalid_domain"  # what the daemon's diagnosis must say

    def model(self):
        return Net()

    def schedule(self, model, step):
        model.gate.bias.fill_(1.0)
        if step == self.fault_step:
            model.gate.bias[1, 2:5] = -1e6

    def batch(self, step, micro, gen):
        x = torch.randn(BATCH, FEATURES, generator=gen)
        y = x.sum(dim=1, keepdim=True)
        return (x,), y


if __name__ == "__main__":
    common.main(NonContig())
