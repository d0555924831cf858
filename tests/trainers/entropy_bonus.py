#!/usr/bin/python3
"""An entropy bonus written by hand, -(p * log p).sum(-1) with p = softmax(logits), as policy
gradient and semi-supervised trainers add it. At step 4 a sample of the batch carries a reading
thousands of times its usual scale (a sensor spike): its logits lie so far apart that softmax
gives probabilities that are exactly 0, and 0 * log(0) is NaN. The logits are finite and the
log's argument is never negative.

Expected first anomaly: "" (Entropy, called at top level by the loss) at step 4, NaN, inputs
finite: the origin; the log of a zero probability (0 * log 0).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import common


class Entropy(nn.Module):
    def forward(self, logits):
        p = torch.softmax(logits, -1)
        return -(p * torch.log(p)).sum(-1).mean()


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(6, 16)
        self.cls = nn.Linear(16, 5)

    def forward(self, x):
        return self.cls(torch.relu(self.enc(x)))


class Objective:
    """Cross-entropy to the labels, less a tenth of the prediction's entropy."""

    def __init__(self):
        self.entropy = Entropy()
        self.top_modules = [self.entropy]

    def __call__(self, out, y):
        return F.cross_entropy(out, y) - 0.1 * self.entropy(out)


class EntropyBonus(common.Trainer):
    """Trainer whose batch at step 4 holds a reading far out of scale."""

    expected_cause = "loss_log_zero"

    def model(self):
        return Net()

    def loss(self):
        return Objective()

    def batch(self, step, micro, gen):
        x = torch.randn(6, 6, generator=gen)
        if step == self.fault_step:
            x[2, 1] = 5e3
        return (x,), torch.randint(0, 5, (6,), generator=gen)


if __name__ == "__main__":
    common.main(EntropyBonus())
