#!/usr/bin/python3
"""float16 overflow: a signed square computed in half precision. At step 4 the batch is not
normalized (features x300), the square exceeds 65504 and becomes ±Inf in float16, then the
value goes back to float32.

Expected first anomaly: amp.square (SignedSquare), dtype float16, inputs finite: origin; then
amp.to_float in float32.
"""
from collections import OrderedDict

import torch
import torch.nn as nn

import common


class ToHalf(nn.Module):
    def forward(self, x):
        return x.half()


class SignedSquare(nn.Module):
    """x * |x|, in the dtype of x (float16 here)."""

    def forward(self, x):
        return x * x.abs()


class ToFloat(nn.Module):
    def forward(self, x):
        return x.float()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(6, 8)
        self.amp = nn.Sequential(OrderedDict([
            ("to_half", ToHalf()),
            ("square", SignedSquare()),
            ("to_float", ToFloat()),
        ]))
        self.out = nn.Linear(8, 1)

    def forward(self, x):
        return self.out(self.amp(self.inp(x)))


class Fp16Overflow(common.Trainer):
    """Trainer whose float16 square overflows on an unnormalized batch at step 4."""

    expected_cause = "fp16_overflow"  # what the daemon's diagnosis must say

    lr = 0.01

    def model(self):
        return Net()

    def batch(self, step, micro, gen):
        x = torch.randn(4, 6, generator=gen)
        y = x[:, :2].sum(dim=1, keepdim=True)
        if step == 4:
            x = x * 300.0
        return (x,), y


if __name__ == "__main__":
    common.main(Fp16Overflow())
