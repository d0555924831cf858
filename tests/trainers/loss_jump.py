#!/usr/bin/python3
"""A learning rate far too high: the loss grows by about ten orders of magnitude in one step and
is +Inf at the next. Only two finite losses come before the first non-finite value.

--variant a: a torch.nn.Linear regression (in a Sequential), MSELoss.
--variant b: a module of its own (Affine), the loss computed by a helper function.
Expected first anomaly: the loss at step 2 (+Inf), every module output finite.
"""
import torch
import torch.nn as nn

import common


class Affine(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.full((8, 1), 0.1))
        self.b = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        return x @ self.w + self.b


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.affine = Affine()

    def forward(self, x):
        return self.affine(x)


def squared_error(pred, target):
    return ((pred - target) ** 2).mean()


class LossJump(common.Trainer):
    """Trainer whose SGD step size makes the loss explode from the first update."""

    variant = "a"
    steps = 4
    fault_step = 2
    expected_cause = "lr_too_high"
    expected_origin = "loss_min"

    @property
    def lr(self):
        return 1e7 if self.variant == "a" else 8e6

    def model(self):
        return nn.Sequential(nn.Linear(8, 1)) if self.variant == "a" else Net()

    def loss(self):
        return nn.MSELoss() if self.variant == "a" else squared_error

    def batch(self, step, micro, gen):
        x = 10 * torch.randn(16, 8, generator=gen)
        return (x,), x.sum(dim=1, keepdim=True)


if __name__ == "__main__":
    common.main(LossJump())
