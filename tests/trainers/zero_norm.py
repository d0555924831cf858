#!/usr/bin/python3
"""Division by a norm that is zero: rows scaled to unit length, and at step 4 the batch holds an
all-zero row (0/0). Nothing computes a variance, whatever the class is called.

--variant a: L2Norm, the division written inline (x / x.norm(dim=-1)).
--variant b: Direction, the division inside a helper (torch.linalg.vector_norm).
Expected first anomaly: norm (the class of the variant) at step 4, NaN, inputs finite: origin.
"""
import torch
import torch.nn as nn

import common


class L2Norm(nn.Module):
    def __init__(self):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(8))

    def forward(self, x):
        return x / x.norm(dim=-1, keepdim=True) * self.gain


def unit(v):
    """v scaled to length 1 along its last dimension (the bug: no epsilon)."""
    return v / torch.linalg.vector_norm(v, dim=-1, keepdim=True)


class Direction(nn.Module):
    def __init__(self):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(8))

    def forward(self, x):
        return unit(x) * self.gain


class Net(nn.Module):
    def __init__(self, variant):
        super().__init__()
        self.norm = L2Norm() if variant == "a" else Direction()
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        return self.head(self.norm(x))


class ZeroNorm(common.Trainer):
    """Trainer whose batch at step 4 holds an all-zero row."""

    variant = "a"
    expected_cause = "division_by_zero"  # live: 0/0 on an all-zero row
    expected_op = "aten::div"  # the replay's first operation to make NaN
    expected_replay_cause = "division_by_zero"

    def model(self):
        return Net(self.variant)

    def batch(self, step, micro, gen):
        x = torch.randn(6, 8, generator=gen)
        if step == self.fault_step:
            x[2] = 0.0
        return (x,), x.sum(dim=1, keepdim=True)


if __name__ == "__main__":
    common.main(ZeroNorm())
