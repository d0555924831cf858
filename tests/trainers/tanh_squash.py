#!/usr/bin/python3
"""A tanh-squashed Gaussian policy (as soft actor-critic writes it): the action is tanh(u) for
u = mu + std * eps, with std the exp of a log-std clamped to [-5, 2], and its log-probability
subtracts log(1 - tanh(u)^2). At step 4 one observation is 400 times its scale: u is far past
9, tanh(u) rounds to exactly 1 in float32, 1 - 1 = 0 and log(0) = -Inf (+Inf once subtracted).
The observation reaching the policy is above exp's overflow threshold, but the one exp takes
the clamped log-std: no exp overflows.

Expected first anomaly: policy (Policy) at step 4, output[1] +Inf, inputs finite: the origin;
the log of 1 minus what tanh made, fixed by computing it from u (softplus).
"""
import torch
import torch.nn as nn

import common

OBS, ACT, BATCH = 8, 2, 6


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(OBS, 32), nn.ReLU())
        self.mu = nn.Linear(32, ACT)
        self.log_std = nn.Linear(32, ACT)

    def forward(self, obs, eps):
        h = self.body(obs)
        mu = self.mu(h)
        std = self.log_std(h).clamp(-5, 2).exp()
        u = mu + std * eps
        a = torch.tanh(u)
        logp = (-0.5 * eps ** 2 - std.log()).sum(-1)
        logp = logp - torch.log(1 - a.pow(2)).sum(-1)
        return a, logp


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.policy = Policy()

    def forward(self, obs, eps):
        return self.policy(obs, eps)


class ActorLoss(nn.Module):
    """An entropy-regularised actor objective against a fixed critic's preferred action."""

    def forward(self, out, target):
        a, logp = out
        return (0.2 * logp - (a * target).sum(-1)).mean()


class TanhSquash(common.Trainer):
    """Trainer whose batch at step 4 holds an observation 400 times its scale."""

    expected_cause = "loss_log_zero"
    lr = 0.01

    def model(self):
        return Net()

    def loss(self):
        return ActorLoss()

    def batch(self, step, micro, gen):
        obs = torch.randn(BATCH, OBS, generator=gen)
        eps = torch.randn(BATCH, ACT, generator=gen)
        if step == self.fault_step:
            obs[1] *= 400.0
        return (obs, eps), torch.randn(BATCH, ACT, generator=gen).clamp(-0.9, 0.9)


if __name__ == "__main__":
    common.main(TanhSquash())
