#!/usr/bin/python3
"""A policy gradient with a Beta policy over actions in [0, 1], written outside any module:
-(Beta(alpha, beta).log_prob(a) * advantage).mean(). From step 4 the replay buffer holds an
action clipped to exactly 1 (the environment's bound): the Beta's log density takes log(1 - a)
of a value that needs no gradient, -Inf, and the loss is ±Inf. The model's outputs (alpha and
beta, softplus + 1) stay finite: the loss itself is the first anomaly.

Cause: loss_log_zero, said as a distribution's log_prob at the edge of its support (lgamma
among the loss's ops), fixed by keeping the action inside (0, 1); not log_softmax.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import common


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 32), nn.Tanh())
        self.head = nn.Linear(32, 2)

    def forward(self, s):
        ab = F.softplus(self.head(self.body(s))) + 1.0
        return ab[:, 0], ab[:, 1]


def policy_loss(out, target):
    actions, advantage = target
    # no validation: the run goes on past the fault (NaN parameters would raise)
    dist = torch.distributions.Beta(*out, validate_args=False)
    return -(dist.log_prob(actions) * advantage).mean()


policy_loss.top_modules = ()


class BetaPolicy(common.Trainer):
    """Trainer whose replay buffer holds a clipped action from step 4 on."""

    expected_cause = "loss_log_zero"
    lr = 0.01

    def model(self):
        torch.manual_seed(2)
        return Policy()

    def loss(self):
        return policy_loss

    def batch(self, step, micro, gen):
        s = torch.randn(32, 6, generator=gen)
        a = torch.rand(32, generator=gen) * 0.9 + 0.05
        if step >= self.fault_step:
            a[7] = 1.0  # an action clipped at the bound
        advantage = torch.randn(32, generator=gen)
        return (s,), (a, advantage)


if __name__ == "__main__":
    common.main(BetaPolicy())
