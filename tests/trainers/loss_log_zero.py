#!/usr/bin/python3
"""log(0) in a hand-written loss: every module output stays finite, the loss does not.

The classifier's logits grow at step 4 (a schedule scales the head), softmax computed outside
any module underflows to exactly 0 for the target class, and -log(p) is +Inf. Forward hooks see
nothing; the loss passed to backward() is the first non-finite tensor.

--variant a: a module of its own (Classifier), the loss a helper function: the log is outside
  any module.
--variant b: built-in modules (a Sequential ending in nn.Softmax), the loss a module of its own
  (ProbNLL) that takes the probabilities and writes the log inline.

Expected first anomaly: a: phase "loss", step 4, iteration 4, tensor "loss", +Inf. b: ProbNLL's
output at step 4 (+Inf), from finite inputs (probabilities, some exactly 0): the origin, where a
replay finds aten::log of 0.
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


def nll_by_hand(logits, target):
    """-log(softmax(logits)[target]), the way it should not be written (log of a softmax)."""
    probs = torch.softmax(logits, dim=1)
    picked = probs.gather(1, target.unsqueeze(1))
    return -torch.log(picked).mean()


class ProbNLL(nn.Module):
    """Negative log-likelihood of the target class, from probabilities."""

    def forward(self, probs, target):
        return -torch.log(probs.gather(1, target.unsqueeze(1))).mean()


class LossLogZero(common.Trainer):
    """Trainer whose hand-written loss takes log(0) at step 4."""

    expected_cause = "loss_log_zero"  # what the daemon's diagnosis must say

    lr = 0.01
    variant = "a"

    def model(self):
        if self.variant == "a":
            return Classifier()
        return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 4), nn.Softmax(dim=1))

    def loss(self):
        return nll_by_hand if self.variant == "a" else ProbNLL()

    def schedule(self, model, step):
        if step == self.fault_step:
            head = model.head if self.variant == "a" else model[2]
            with torch.no_grad():
                head.weight.mul_(1e4)  # logits in the thousands: exp underflows to 0

    def batch(self, step, micro, gen):
        x = torch.randn(8, 6, generator=gen)
        target = (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()
        if step == self.fault_step:
            target = 3 - target  # the least likely class for this input
        return (x,), target


if __name__ == "__main__":
    common.main(LossLogZero())
