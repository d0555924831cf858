#!/usr/bin/python3
"""sqrt at 0 whose gradient is masked to 0: finite forward, NaN gradient.

The model adds a gated root of squared features to a linear head: root(h) = sqrt(h) with
h = proj(x)**2 >= 0, gated by (h != 0). At step 4 one sample of the batch is all zeros, so its
h row is 0: sqrt(0) = 0 and the gate is 0, every module output and the loss stay finite. In
backward the gate sends a zero gradient to sqrt, whose derivative divides it by 2*sqrt(0):
0/0 = NaN. detect_anomaly names SqrtBackward0; it is the grad_fn of the Root module's output.

Expected: phase "backward", step 4, node SqrtBackward0, grad[0], layer "root" (Root).
"""
import torch
import torch.nn as nn

import common


class Root(nn.Module):
    def forward(self, x):
        return torch.sqrt(x)


class Model(nn.Module):
    def __init__(self, gated):
        super().__init__()
        self.gated = gated
        self.proj = nn.Linear(6, 8, bias=False)
        self.root = Root()
        self.head = nn.Linear(6, 1)

    def forward(self, x):
        h = self.proj(x) ** 2
        r = self.root(h)
        if self.gated:
            r = r * (h != 0)
        return self.head(x) + 0.1 * r.sum(dim=1, keepdim=True)


class BackwardSqrtZero(common.Trainer):
    """Trainer whose batch has an all-zero sample at step 4."""

    expected_cause = "invalid_domain"
    watch_backward = True
    lr = 0.01
    gated = True

    def model(self):
        return Model(self.gated)

    def batch(self, step, micro, gen):
        x = torch.randn(8, 6, generator=gen)
        if step == self.fault_step:
            x[3] = 0.0
        return (x,), x.sum(dim=1, keepdim=True)


if __name__ == "__main__":
    common.main(BackwardSqrtZero())
