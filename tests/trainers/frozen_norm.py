#!/usr/bin/python3
"""A frozen BatchNorm whose running variance goes negative (a corrupted statistic).

The norm is kept in eval mode, as when fine-tuning with frozen statistics, so its output is
(x - running_mean) / sqrt(running_var + eps). At step 4 a schedule writes -0.5 into one entry of
running_var (a buffer, not a parameter): sqrt of a negative number makes that channel NaN.
Expected first anomaly: norm (BatchNorm1d) at step 4, NaN from finite inputs and finite
parameters: origin, in a standard torch.nn layer, so a capture of it can be re-run offline.
"""
import torch
import torch.nn as nn

import common


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(6, 8)
        self.norm = nn.BatchNorm1d(8)
        self.head = nn.Linear(8, 1)
        self.norm.eval()  # frozen statistics
        # attributes of the user's own, as code hangs on modules: a capture carries them
        self.norm.frozen_at = (-1, 2 ** 40)
        self.norm.note = "frozen statistics"

    def forward(self, x):
        return self.head(torch.tanh(self.norm(self.inp(x))))


class FrozenNorm(common.Trainer):
    """Trainer whose frozen norm's running variance goes negative at step 4."""

    # the variance went negative, not zero: sqrt of a negative (running_var), whatever the class
    expected_cause = "invalid_domain"

    def model(self):
        return Net()

    def schedule(self, model, step):
        if step == self.fault_step:
            with torch.no_grad():
                model.norm.running_var[3] = -0.5

    def batch(self, step, micro, gen):
        x = torch.randn(5, 6, generator=gen)
        y = torch.randn(5, 1, generator=gen)
        return (x,), y


if __name__ == "__main__":
    common.main(FrozenNorm())
