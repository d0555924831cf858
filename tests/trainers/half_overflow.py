#!/usr/bin/python3
"""float16 past its range: a half-precision layer's values exceed 65504 at step 4.

--variant a: Amplify, a product written inline (x * gain), a gain of 2 meeting x ~ 40000.
--variant b: Energy, a sum of squares inside a helper, over a row of values near 100.
Expected first anomaly: amp (the class of the variant) at step 4, +Inf, inputs finite: origin.
"""
import torch
import torch.nn as nn

import common


class Amplify(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("gain", torch.full((6,), 2.0, dtype=torch.float16))

    def forward(self, x):
        return x * self.gain


def energy(v):
    """Sum of squares along the last dimension, in v's own dtype (the bug: float16)."""
    return (v * v).sum(dim=-1, keepdim=True)


class Energy(nn.Module):
    def forward(self, x):
        return energy(x)


class Net(nn.Module):
    def __init__(self, variant):
        super().__init__()
        self.inp = nn.Linear(6, 6)
        self.amp = Amplify() if variant == "a" else Energy()
        self.out = nn.Linear(6 if variant == "a" else 1, 1)

    def forward(self, x, big):
        h = (self.inp(x) + big).half()
        return self.out(self.amp(h).float())


class HalfOverflow(common.Trainer):
    """Trainer whose half-precision layer sees large values at step 4."""

    variant = "a"
    expected_cause = "fp16_overflow"
    expected_replay_cause = "fp16_overflow"

    @property
    def expected_op(self):
        return "aten::mul" if self.variant == "a" else "aten::sum"

    def model(self):
        return Net(self.variant)

    def batch(self, step, micro, gen):
        x = torch.randn(4, 6, generator=gen)
        big = torch.zeros(4, 6)
        if step == self.fault_step:
            big[2] = 40000.0 if self.variant == "a" else 110.0
        return (x, big), torch.zeros(4, 1)


if __name__ == "__main__":
    common.main(HalfOverflow())
