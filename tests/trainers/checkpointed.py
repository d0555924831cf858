#!/usr/bin/python3
"""Activation checkpointing, reentrant: each block runs under torch.utils.checkpoint, which
keeps no activations and, in the backward pass, calls each block again and differentiates that
recomputed output with a backward pass of its own, run from within the engine. Those nested
passes start from no loss, and are no iteration or step.

At step 4 one row of the batch's scale is zero: the first block divides its output by it.
Expected first anomaly: blocks.0 (Block) at step 4, iteration 4, ±Inf, inputs finite: the
origin; division by zero. The recomputed calls follow in the same iteration, each named in the
block that is outermost there ("", lin, act).
"""
import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint

import common


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.act = nn.Tanh()

    def forward(self, x, scale):
        return self.act(self.lin(x)) / scale


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block() for _ in range(3)])
        self.head = nn.Linear(8, 1)

    def forward(self, x, scale):
        for b in self.blocks:
            x = checkpoint(b, x, scale, use_reentrant=True)
        return self.head(x)


class Checkpointed(common.Trainer):
    """Trainer whose checkpointed first block divides by a zero scale at step 4."""

    expected_cause = "division_by_zero"
    blocks = 3  # nested backward passes a step

    def model(self):
        return Net()

    def batch(self, step, micro, gen):
        # the input needs a gradient: a reentrant checkpoint differentiates only through one
        x = torch.randn(4, 8, generator=gen).requires_grad_()
        scale = torch.ones(4, 1)
        if step == self.fault_step:
            scale[2] = 0
        return (x, scale), torch.randn(4, 1, generator=gen)


if __name__ == "__main__":
    common.main(Checkpointed())
