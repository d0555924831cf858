#!/usr/bin/python3
"""A masked average, sum(x * mask) / sum(mask): at step 4 one sample's mask selects nothing,
0/0. Its other inputs are negative as often as not; that is not the cause.

--variant a: MaskedMean, a float mask, written inline.
--variant b: Pool, a bool mask (True: keep), the average inside a helper.
Expected first anomaly: pool at step 4, NaN, inputs finite: origin.
"""
import torch
import torch.nn as nn

import common


class MaskedMean(nn.Module):
    def forward(self, x, mask):
        return (x * mask).sum(dim=-1) / mask.sum(dim=-1)


def average(x, keep):
    """Mean of the kept positions (the bug: a row with none kept)."""
    keep = keep.to(x.dtype)
    return (x * keep).sum(dim=-1) / keep.sum(dim=-1)


class Pool(nn.Module):
    def forward(self, x, keep):
        return average(x, keep)


class Net(nn.Module):
    def __init__(self, variant):
        super().__init__()
        self.proj = nn.Linear(6, 6)
        self.pool = MaskedMean() if variant == "a" else Pool()

    def forward(self, x, mask):
        return self.pool(self.proj(x), mask)


class MaskedMeanTrainer(common.Trainer):
    """Trainer whose mask selects nothing in one row at step 4."""

    variant = "a"
    expected_cause = "division_by_zero"
    expected_op = "aten::div"
    expected_replay_cause = "division_by_zero"

    def model(self):
        return Net(self.variant)

    def batch(self, step, micro, gen):
        x = torch.randn(4, 6, generator=gen)
        keep = torch.rand(4, 6, generator=gen) > 0.3
        keep[:, 0] = True
        if step == self.fault_step:
            keep[2] = False
        mask = keep.float() if self.variant == "a" else keep
        return (x, mask), torch.zeros(4)


if __name__ == "__main__":
    common.main(MaskedMeanTrainer())
