#!/usr/bin/python3
"""A run the daemon attaches to in flight: a small MLP trained flat out, no sleep, no wait.

With --live it trains at once and the test attaches nanwatchd (several times) while it runs,
then sends "FAULT n": the batch of step n holds one sample scaled by 1e4, finite, so the
exponential after the first Linear ("gate") overflows to +Inf from finite inputs (the origin). The oracle runs the same
fault with --fault-step n. The default optimizer is Adam, whose state holds a step count per
parameter; --variant sgd trains with plain SGD, whose state holds none.
"""
import torch
import torch.nn as nn

import common


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(32, 32)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.lin(x))


class Exp(nn.Module):
    def forward(self, x):
        return torch.exp(x)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(16, 32)
        self.gate = Exp()
        self.blocks = nn.Sequential(Block(), Block())
        self.out = nn.Linear(32, 1)

    def forward(self, x):
        return self.out(self.blocks(self.gate(self.inp(x))))


class Inflight(common.Trainer):
    """Tight-loop MLP; the fault step arrives on stdin (--live) or by --fault-step."""

    steps = 1000000
    fault_step = None  # until told (FAULT n on stdin, or --fault-step)
    lr = 1e-3

    def model(self):
        return MLP()

    def optimizer(self, params):
        if self.variant == "sgd":
            return torch.optim.SGD(params, lr=self.lr)
        return torch.optim.Adam(params, lr=self.lr)

    def batch(self, step, micro, gen):
        x = torch.randn(8, 16, generator=gen)
        y = x[:, :2].sum(dim=1, keepdim=True)
        if step == self.fault_step:
            x[3] *= 1e4  # finite, but exp() of the first layer's sums overflows
        return (x,), y


if __name__ == "__main__":
    common.main(Inflight())
