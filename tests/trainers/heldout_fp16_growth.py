#!/usr/bin/python3
"""Held-out: activations stored in float16 while they grow from step to step.

The model keeps its hidden activations in float16 to save memory (HalfStore casts them down,
Restore casts them back up before the ReLU). From the fault step on, the data augmentation's
random-gain stage multiplies a cached gain tensor in place instead of a copy, so the gain
compounds: x4 per step. The first Linear's outputs grow with it (finite in float32 all along),
and once one exceeds 65504 the cast to float16 makes it ±Inf. The loss grows too (x16 per
step), but only because the inputs do: the updates are small and the weights stay where they
were.

True cause, from the code: fp16_overflow (a cast to float16 of a finite float32 value beyond
float16's range). Not lr_too_high: the loss rises step after step before the overflow, but the
learning rate has nothing to do with it.
Expected first anomaly: body.store (HalfStore) output, dtype float16, ±Inf, inputs finite:
origin, a few steps after the fault step (how many the oracle says).
"""
import torch
import torch.nn as nn

import common


class HalfStore(nn.Module):
    def forward(self, x):
        return x.to(torch.float16)


class Restore(nn.Module):
    def forward(self, x):
        return x.to(torch.float32)


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential()
        self.body.add_module("proj", nn.Linear(6, 32))
        self.body.add_module("store", HalfStore())
        self.body.add_module("restore", Restore())
        self.body.add_module("act", nn.ReLU())
        self.head = nn.Linear(32, 1)

    def forward(self, x):
        return self.head(self.body(x))


class Fp16Growth(common.Trainer):
    """Trainer whose input gain compounds from the fault step."""

    steps = 3000  # an upper bound: --live stops --after-fault steps after the fault
    fault_step = None  # until asked for

    def __init__(self):
        self.gain = torch.ones(1)

    def model(self):
        return Regressor()

    def optimizer(self, params):
        return torch.optim.Adam(params, lr=1e-3)

    def batch(self, step, micro, gen):
        x = torch.randn(8, 6, generator=gen)
        y = x[:, :3].sum(dim=1, keepdim=True)
        if self.fault_step is not None and step >= self.fault_step:
            self.gain.mul_(4.0)  # the bug: the cached gain, multiplied in place each batch
            x = x * self.gain
            y = y * self.gain
        return (x,), y


if __name__ == "__main__":
    common.main(Fp16Growth())
