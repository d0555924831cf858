#!/usr/bin/python3
"""A value outside an operation's domain reaches the layer at step 4.

--variant a: Compress, log of its input through a helper; the input turns negative at step 4.
--variant b: torch.nn.BatchNorm1d frozen (eval), whose running variance is set negative at
             step 4: the variance is not zero, sqrt of it is NaN.
Expected first anomaly: the variant's layer at step 4, NaN, inputs finite: origin.
"""
import torch
import torch.nn as nn

import common


def log_scale(v):
    """The bug: no clamp before the log."""
    return torch.log(v)


class Compress(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(6))

    def forward(self, x):
        return log_scale(x) * self.weight


class Net(nn.Module):
    def __init__(self, variant):
        super().__init__()
        self.feature = Compress() if variant == "a" else nn.BatchNorm1d(6)
        if variant == "b":
            self.feature.eval()
        self.head = nn.Linear(6, 1)

    def forward(self, x):
        return self.head(self.feature(x))


class Domain(common.Trainer):
    """Trainer whose layer meets a negative value at step 4."""

    variant = "a"
    expected_cause = "invalid_domain"
    expected_replay_cause = "invalid_domain"

    @property
    def expected_op(self):
        return "aten::log" if self.variant == "a" else None  # the batch norm's aten op varies

    def model(self):
        return Net(self.variant)

    def schedule(self, model, step):
        if self.variant == "b" and step == self.fault_step:
            with torch.no_grad():
                model.feature.running_var[2] = -0.5

    def batch(self, step, micro, gen):
        x = torch.rand(5, 6, generator=gen) + 0.5  # positive: the log is defined
        if self.variant == "a" and step == self.fault_step:
            x[1, 4] = -0.25
        return (x,), x.sum(dim=1, keepdim=True)


if __name__ == "__main__":
    common.main(Domain())
