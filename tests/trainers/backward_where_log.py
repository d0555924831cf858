#!/usr/bin/python3
"""log(0) on the branch torch.where throws away: finite forward, NaN gradient.

A hand-written loss takes log(p) of the predicted probabilities but keeps it only where a
mask says the class is present. At step 4 the head's logits grow so that softmax underflows
to exactly 0 for the classes the mask drops (it keeps each sample's top class): log(0) = -inf there, which torch.where discards, so the
loss is finite. In backward, where sends a zero gradient to those entries and the log's
derivative 1/p turns 0 * (1/0) into NaN. detect_anomaly names LogBackward0; the log is
computed outside any module, so there is no layer.

Expected: phase "backward", step 4, node LogBackward0, grad[0], layer null.
"""
import torch
import torch.nn as nn

import common


class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 16), nn.Tanh())
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        return self.head(self.body(x))


def masked_nll(logits, target):
    """target < 0: the sample's own top class (what a pseudo-labelling loss does)."""
    top = logits.detach().argmax(dim=1)
    mask = nn.functional.one_hot(torch.where(target < 0, top, target), 4).bool()
    p = torch.softmax(logits, dim=1)
    logp = torch.log(p)
    return -torch.where(mask, logp, torch.zeros_like(logp)).sum() / mask.sum()


class BackwardWhereLog(common.Trainer):
    """Trainer whose softmax underflows on masked-out classes at step 4."""

    expected_cause = "invalid_domain"
    watch_backward = True
    lr = 0.01

    def model(self):
        return Classifier()

    def loss(self):
        return masked_nll

    def schedule(self, model, step):
        if step == self.fault_step:
            with torch.no_grad():
                model.head.weight.mul_(1e4)  # logits in the thousands: exp underflows to 0

    def batch(self, step, micro, gen):
        x = torch.randn(8, 6, generator=gen)
        target = (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()
        if step == self.fault_step:
            target = torch.full_like(target, -1)  # keep each sample's top class: p = 1 there
        return (x,), target


if __name__ == "__main__":
    common.main(BackwardWhereLog())
