#!/usr/bin/python3
"""A speech model trained with CTC: a strided convolution halves the frames, a GRU and a
linear layer give log-probabilities over 12 labels (0 the blank). At step 4 the batch's
utterances are short: 14 frames, 7 after the stride, for targets of 10 labels. No alignment of
a target fits in fewer frames than it has labels: the loss is -log(0), +Inf, from finite
log-probabilities.

--variant module: the loss is an nn.CTCLoss (the loss module, "", the first anomaly, +Inf
from finite inputs: the origin). --variant loop: a plain function calls F.ctc_loss (the loss
itself is the first anomaly, every module output finite). Cause: loss_log_zero (a log of a
zero probability), not a division by zero (the mean over the target lengths divides).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import common

LABELS = 12
TARGET = 10


class Speech(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(13, 24, 3, stride=2, padding=1)
        self.rnn = nn.GRU(24, 24, batch_first=True)
        self.out = nn.Linear(24, LABELS)

    def forward(self, feats):
        h = torch.relu(self.conv(feats)).transpose(1, 2)
        return self.out(self.rnn(h)[0]).log_softmax(-1)


def ctc_args(log_probs, targets):
    """CTC's arguments from the model's (batch, frames, labels) output: (frames, batch,
    labels), the targets, every input's frames and every target's labels."""
    frames = torch.full((log_probs.shape[0],), log_probs.shape[1], dtype=torch.long)
    lengths = torch.full((targets.shape[0],), targets.shape[1], dtype=torch.long)
    return log_probs.transpose(0, 1), targets, frames, lengths


class ModuleCTC(nn.Module):
    """nn.CTCLoss over the model's output."""

    def __init__(self):
        super().__init__()
        self.ctc = nn.CTCLoss(blank=0)

    def forward(self, log_probs, targets):
        return self.ctc(*ctc_args(log_probs, targets))


def ctc_loss(log_probs, targets):
    """The loss as a training loop computes it, outside any module."""
    return F.ctc_loss(*ctc_args(log_probs, targets))


class CTCShort(common.Trainer):
    """Trainer whose batch at step 4 holds utterances shorter than their targets."""

    variant = "module"
    expected_cause = "loss_log_zero"
    lr = 0.01

    def model(self):
        return Speech()

    def loss(self):
        return ctc_loss if self.variant == "loop" else ModuleCTC()

    def batch(self, step, micro, gen):
        frames = 14 if step == self.fault_step else 40
        feats = torch.randn(4, 13, frames, generator=gen)
        targets = torch.randint(1, LABELS, (4, TARGET), generator=gen)
        return (feats,), targets


if __name__ == "__main__":
    common.main(CTCShort())
