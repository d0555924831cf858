#!/usr/bin/python3
"""A likelihood summed in probability space, whose every term underflows to 0: log(0).

--variant loss (default): a mixture density network's negative log-likelihood written in a
plain function, -log(sum_k pi_k * exp(-z_k**2 / 2) / (sigma_k * sqrt(2 pi))), sigma_k =
exp(log_sigma_k) made by the model. At step 4 one target is a sensor glitch, 80 where the
others lie near 0: its z is large for every component, every density's exp is exactly 0 in
float32, the sum is 0, and the loss is +Inf. The model's outputs stay finite: the loss itself is
the first anomaly. Not a division by sigma's exp (sigma is near 1): loss_log_zero, fixed in log
space with torch.logsumexp.
--variant module: the same likelihood in a loss module (MixtureNLL): the module is the origin.
--variant hmm: an HMM's forward algorithm in probability space as the model, alpha = (alpha @
T) * emission over each sequence; from step 4 the sequences are 90 symbols long instead of 20,
alpha underflows to 0 and the model returns log(0) = -Inf: the origin is the model, and the fix
carries log-alphas or rescales alpha at each step (not log_softmax: no softmax is logged).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import common

K = 4
STATES, SYMBOLS = 5, 12


class Mixture(nn.Module):
    """A mixture density network: weights, means and scales of K Gaussians."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(3, 32), nn.Tanh())
        self.pi = nn.Linear(32, K)
        self.mu = nn.Linear(32, K)
        self.log_sigma = nn.Linear(32, K)

    def forward(self, x):
        h = self.body(x)
        return F.softmax(self.pi(h), -1), self.mu(h), self.log_sigma(h).exp()


def mixture_nll(out, y):
    pi, mu, sigma = out
    density = torch.exp(-0.5 * ((y - mu) / sigma) ** 2) / (sigma * math.sqrt(2 * math.pi))
    return -torch.log((pi * density).sum(-1)).mean()


mixture_nll.top_modules = ()


class MixtureNLL(nn.Module):
    def forward(self, out, y):
        return mixture_nll(out, y)


class HMM(nn.Module):
    """The log-likelihood of each sequence by the forward algorithm, in probability space."""

    def __init__(self):
        super().__init__()
        self.trans = nn.Parameter(torch.randn(STATES, STATES))
        self.emit = nn.Parameter(torch.randn(STATES, SYMBOLS))
        self.start = nn.Parameter(torch.zeros(STATES))

    def forward(self, obs):
        t = F.softmax(self.trans, -1)
        e = F.softmax(self.emit, -1)
        alpha = F.softmax(self.start, -1) * e[:, obs[:, 0]].t()
        for i in range(1, obs.shape[1]):
            alpha = (alpha @ t) * e[:, obs[:, i]].t()
        return torch.log(alpha.sum(-1))


def neg_mean(out, y):
    return -out.mean()


neg_mean.top_modules = ()


class MixtureTrainer(common.Trainer):
    """Trainer whose batch at step 4 lies where every term of its likelihood is 0."""

    expected_cause = "loss_log_zero"
    lr = 0.01
    variant = "loss"

    def model(self):
        if self.variant not in ("loss", "module", "hmm"):
            raise SystemExit("mixture_nll: --variant is one of loss, module, hmm")
        torch.manual_seed(5)
        return HMM() if self.variant == "hmm" else Mixture()

    def loss(self):
        return {"loss": mixture_nll, "module": MixtureNLL(), "hmm": neg_mean}[self.variant]

    def optimizer(self, params):
        return torch.optim.Adam(params, lr=self.lr)

    def batch(self, step, micro, gen):
        if self.variant == "hmm":
            n = 90 if step >= self.fault_step else 20  # longer documents from here on
            return (torch.randint(0, SYMBOLS, (8, n), generator=gen),), None
        x = torch.randn(16, 3, generator=gen)
        y = x.sum(-1, keepdim=True) * 0.3
        if step == self.fault_step:
            y[5] = 80.0  # a sensor glitch
        return (x,), y


if __name__ == "__main__":
    common.main(MixtureTrainer())
