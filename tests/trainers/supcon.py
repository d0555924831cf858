#!/usr/bin/python3
"""A supervised contrastive loss (SupCon) held by a loss module called outside the model: each
anchor's mean log-probability over its positives, (pos * log_prob).sum(1) / pos.sum(1), where
pos marks the other samples of its class. At step 4 one class is seen once in the batch: its
anchor has no positive, and its mean is 0/0, NaN, from finite features.

The log the loss takes is of a sum of exps (a softmax's normaliser), never negative: the
features' negatives are no log's domain. Expected first anomaly: the loss module ("") at step
4, NaN, inputs finite: the origin. Cause: division_by_zero, not invalid_domain.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import common

CLASSES = 4
PER_CLASS = 4


class SupConLoss(nn.Module):
    def __init__(self, temperature=0.1):
        super().__init__()
        self.temperature = temperature

    def forward(self, features, labels):
        z = F.normalize(features, dim=1)
        logits = z @ z.t() / self.temperature
        logits = logits - logits.max(1, keepdim=True)[0].detach()
        others = 1 - torch.eye(z.shape[0])
        pos = (labels[:, None] == labels[None, :]).float() * others
        log_prob = logits - torch.log((torch.exp(logits) * others).sum(1, keepdim=True))
        return -((pos * log_prob).sum(1) / pos.sum(1)).mean()


class SupCon(common.Trainer):
    """Trainer whose batch at step 4 holds a class seen once."""

    expected_cause = "division_by_zero"
    lr = 0.05

    def model(self):
        return nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 8))

    def loss(self):
        return SupConLoss()

    def batch(self, step, micro, gen):
        labels = torch.arange(CLASSES).repeat(PER_CLASS)
        if step == self.fault_step:
            labels[-1] = CLASSES  # a class of one sample
        x = torch.randn(len(labels), 12, generator=gen) + \
            3 * F.one_hot(labels, 12).to(torch.float32)
        return (x,), labels


if __name__ == "__main__":
    common.main(SupCon())
