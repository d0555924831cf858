#!/usr/bin/python3
"""Held-out: a negative log-likelihood written from probabilities, inside a loss module that
takes the logits: -log(softmax(logits)[target]).

From the fault step on, one image of each batch is a 16-bit scan read without scaling (pixel
values 0..65535 where the model was trained on 0..1), so the classifier's logits for it lie
thousands apart.
torch.softmax subtracts the row maximum and never overflows, but the probability of a class
whose logit lies more than ~104 below the maximum underflows to exactly 0 in float32, and
log(0) = -inf: the loss module returns +Inf.

True cause, from the code: loss_log_zero (the log of a probability that underflowed to 0). Not
exp_overflow: the logits exceed exp's threshold (88.7), but no exp of them is taken, the
softmax's exponents are all <= 0.
Expected first anomaly: the loss module (ProbNLL, layer "") at the fault step, +Inf, inputs
finite: origin; every module of the model stays finite.
"""
import torch
import torch.nn as nn

import common

CLASSES = 10


class ProbNLL(nn.Module):
    """-log p(target), with p from a softmax of the logits."""

    def forward(self, logits, target):
        probs = torch.softmax(logits, dim=-1)
        return -torch.log(probs.gather(1, target.unsqueeze(1))).mean()


class NllLogits(common.Trainer):
    """Trainer that meets an unnormalised image from the fault step."""

    steps = 3000  # an upper bound: --live stops --after-fault steps after the fault
    fault_step = None  # until asked for

    def model(self):
        return nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, CLASSES))

    def loss(self):
        return ProbNLL()

    def optimizer(self, params):
        return torch.optim.Adam(params, lr=1e-3)

    def batch(self, step, micro, gen):
        x = torch.rand(8, 1, 8, 8, generator=gen)
        y = torch.randint(0, CLASSES, (8,), generator=gen)
        if self.fault_step is not None and step >= self.fault_step:
            x[5] = torch.floor(x[5] * 65535)  # a raw 16-bit image: not divided by 65535
        return (x,), y


if __name__ == "__main__":
    common.main(NllLogits())
