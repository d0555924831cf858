#!/usr/bin/python3
"""A normalizing flow of two linear layers, each returning its output and log|det W| taken by
torch.logdet(W). At step 4 the second layer's matrix has one row negated (as an update that
carries it through a singular matrix leaves it): its determinant is negative, and torch.logdet
of it is NaN (log of a negative), from finite inputs and parameters.

Expected first anomaly: f2 (LinearFlow) at step 4, NaN, the origin. Cause: invalid_domain, the
evidence naming the log of a determinant (slogdet, then where), the first fix
slogdet(W).logabsdet; not the input's negatives.
"""
import torch
import torch.nn as nn

import common


class LinearFlow(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.weight = nn.Parameter(torch.eye(d) + 0.01 * torch.randn(d, d))
        self.bias = nn.Parameter(torch.zeros(d))

    def forward(self, x):
        z = x @ self.weight.t() + self.bias
        return z, torch.logdet(self.weight).expand(x.shape[0])


class Flow(nn.Module):
    def __init__(self):
        super().__init__()
        self.f1 = LinearFlow(4)
        self.f2 = LinearFlow(4)

    def forward(self, x):
        z, ld1 = self.f1(x)
        z, ld2 = self.f2(z)
        return z, ld1 + ld2


class FlowNLL(nn.Module):
    """The negative log-likelihood under a standard normal base, by the change of variables."""

    def forward(self, out, target):
        z, logdet = out
        return (0.5 * (z ** 2).sum(1) - logdet).mean()


class FlowLogdet(common.Trainer):
    """Trainer whose second flow layer's determinant turns negative at step 4."""

    expected_cause = "invalid_domain"
    lr = 0.001

    def model(self):
        torch.manual_seed(3)
        self.flow = Flow()
        return self.flow

    def loss(self):
        return FlowNLL()

    def schedule(self, model, step):
        if step == self.fault_step:
            with torch.no_grad():
                self.flow.f2.weight[0].neg_()

    def batch(self, step, micro, gen):
        return (2 * torch.randn(32, 4, generator=gen) + 1,), None


if __name__ == "__main__":
    common.main(FlowLogdet())
