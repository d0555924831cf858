#!/usr/bin/python3
"""A learning rate too high for the data: SGD at lr 0.5 on a regression whose inputs make the
loss's curvature far above 1/lr, so every update overshoots further.

The loss falls once, then rises at every step (170, 27.7, 1.2e4, 8.6e9, 1.3e29); the weights
grow with it, and at step 5 the last Linear's output overflows float32 on finite inputs and
finite (but huge) weights.
Expected first anomaly: "2" (Linear) at step 5; cause lr_too_high, origin step 1: the update
that began the divergence (the step with the lowest loss before it).
"""
import torch
import torch.nn as nn

import common


class LrTooHigh(common.Trainer):
    """Trainer whose learning rate makes the loss diverge over a few steps."""

    expected_cause = "lr_too_high"  # what the daemon's diagnosis must say
    expected_origin = "loss_min"  # origin step: the lowest loss before the first anomaly
    lr = 0.5

    def model(self):
        return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 1))

    def batch(self, step, micro, gen):
        x = torch.randn(8, 6, generator=gen)
        return (x,), 10 * x[:, :1]


if __name__ == "__main__":
    common.main(LrTooHigh())
