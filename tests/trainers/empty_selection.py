#!/usr/bin/python3
"""A mean over what a mask selected, of nothing: x[mask].mean() of an empty selection is 0/0,
NaN, from finite values, and no division is written.

--variant loop: a class-balanced loss in a plain function, the mean BCE of the positives plus
that of the negatives (l[y == 1].mean() + l[y == 0].mean()); at step 4 the batch holds no
positive. The loss itself is the first anomaly, every module output finite.
--variant module: a prototype layer ("proto") subtracts the mean feature of the positives
(feats[labels == 1].mean(0)) from every sample; at step 4 the batch holds no positive. The
layer is the first anomaly, NaN from finite inputs: the origin.
Cause: division_by_zero (a mean over nothing), not a log's (BCE takes log-sigmoids of finite
logits: finite).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import common


class Prototype(nn.Module):
    def forward(self, feats, labels):
        return feats - feats[labels == 1].mean(0)


class Net(nn.Module):
    def __init__(self, proto):
        super().__init__()
        self.enc = nn.Linear(10, 16)
        self.proto = Prototype() if proto else None
        self.head = nn.Linear(16, 1)

    def forward(self, x, labels):
        h = torch.relu(self.enc(x))
        if self.proto is not None:
            h = self.proto(h, labels)
        return self.head(h).squeeze(1)


def balanced_bce(logits, y):
    """Positives and negatives weigh alike, however many of each the batch holds."""
    loss = F.binary_cross_entropy_with_logits(logits, y, reduction="none")
    return loss[y == 1].mean() + loss[y == 0].mean()


class EmptySelection(common.Trainer):
    """Trainer whose batch at step 4 holds no positive sample."""

    variant = "loop"
    expected_cause = "division_by_zero"
    lr = 0.01

    def model(self):
        return Net(self.variant == "module")

    def loss(self):
        return balanced_bce

    def batch(self, step, micro, gen):
        x = torch.randn(16, 10, generator=gen)
        y = torch.zeros(16)
        if step != self.fault_step:
            y[::4] = 1  # a quarter positive
        return (x, y), y


if __name__ == "__main__":
    common.main(EmptySelection())
