#!/usr/bin/python3
"""exp overflow: a gate computes exp(k * x) with a sharpness k that a schedule raises at step 4.

Expected first anomaly: gate (ExpGate) at step 4, +Inf from finite inputs, with finite outputs
up to ~1e38 next to them: exp_overflow.
"""
import torch
import torch.nn as nn

import common


class ExpGate(nn.Module):
    """exp(k * x) without subtracting the maximum first (the bug)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("k", torch.tensor(1.0))

    def forward(self, x):
        return torch.exp(self.k * x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(6, 16)
        self.gate = ExpGate()
        self.head = nn.Linear(16, 1)

    def forward(self, x):
        return self.head(self.gate(torch.tanh(self.proj(x))))


class ExpOverflow(common.Trainer):
    """Trainer whose gate sharpness jumps at step 4."""

    expected_cause = "exp_overflow"  # what the daemon's diagnosis must say

    lr = 0.01

    def model(self):
        return Net()

    def schedule(self, model, step):
        # tanh keeps the gate's inputs in (-1, 1): k = 95 puts exp(k x) across the float32
        # range, from tiny through ~1e38 to +Inf
        model.gate.k.fill_(95.0 if step == self.fault_step else 1.0)

    def batch(self, step, micro, gen):
        x = 3 * torch.randn(8, 6, generator=gen)
        return (x,), x[:, :1].sin()


if __name__ == "__main__":
    common.main(ExpOverflow())
