#!/usr/bin/python3
"""Held-out: label smoothing switched off, in a loss that writes the smoothed cross-entropy as
a KL divergence: sum(q * (log q - log_softmax(logits))), q the smoothed one-hot target.

With smoothing eps > 0 every entry of q is at least eps / classes and the loss is finite. A
schedule turns smoothing off for the fine-tuning phase that starts at the fault step (eps = 0),
so q is the one-hot target itself: its zeros give q * log q = 0 * log 0 = 0 * -inf = NaN. The
loss is a plain function, computed outside any module: the model's outputs stay finite and
the loss backward() starts from is the first non-finite value.

True cause, from the code: loss_log_zero (the log of a zero target probability in a
hand-written loss; NaN, from 0 * log 0).
Expected first anomaly: phase "loss" at the fault step, NaN.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import common

CLASSES = 5


class SmoothedKL:
    """The smoothed cross-entropy as KL(q || p), eps set by the schedule."""

    top_modules = ()

    def __init__(self):
        self.eps = 0.1

    def __call__(self, logits, target):
        q = F.one_hot(target, CLASSES).float() * (1 - self.eps) + self.eps / CLASSES
        return (q * (q.log() - F.log_softmax(logits, dim=-1))).sum(dim=-1).mean()


class SmoothingOff(common.Trainer):
    """Trainer whose label smoothing goes to 0 at the fault step."""

    steps = 3000  # an upper bound: --live stops --after-fault steps after the fault
    fault_step = None  # until asked for

    def model(self):
        return nn.Sequential(nn.Linear(10, 20), nn.Tanh(), nn.Linear(20, CLASSES))

    def loss(self):
        self.criterion = SmoothedKL()
        return self.criterion

    def optimizer(self, params):
        return torch.optim.Adam(params, lr=1e-3)

    def schedule(self, model, step):
        finetune = self.fault_step is not None and step >= self.fault_step
        self.criterion.eps = 0.0 if finetune else 0.1

    def batch(self, step, micro, gen):
        x = torch.randn(8, 10, generator=gen)
        return (x,), x[:, :CLASSES].argmax(dim=1)


if __name__ == "__main__":
    common.main(SmoothingOff())
