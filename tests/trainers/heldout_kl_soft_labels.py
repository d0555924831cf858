#!/usr/bin/python3
"""Held-out: knowledge distillation with a KL divergence written by hand, over soft labels
that hold exact zeros.

The student learns from a teacher's class probabilities (soft labels, stored with the data).
The loss module computes KL(teacher || student) as sum(t * (log t - log q)), the textbook
formula, instead of F.kl_div (which treats 0 * log 0 as 0). The teacher is confident, so its
smallest probabilities are tiny (1e-22 to 1e-9) but not zero in float32. From the fault step on
the batches come from a shard that was written in float16: every probability below float16's
smallest subnormal (6e-8) was rounded to exactly 0, and t * log t is 0 * -inf = NaN there.

True cause, from the code: loss_log_zero (the log of a zero probability; the NaN is 0 * log 0,
not a +Inf). Nothing overflows, nothing is divided, no input is negative (log q is, as always).
Expected first anomaly: the loss module (SoftTargetKL, layer "") at the fault step, NaN, inputs
finite: origin.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import common

CLASSES = 8


class SoftTargetKL(nn.Module):
    """KL(teacher || student) from the teacher's probabilities and the student's logits."""

    def forward(self, logits, teacher):
        log_q = F.log_softmax(logits, dim=-1)
        return (teacher * (teacher.log() - log_q)).sum(dim=-1).mean()


class Student(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Linear(12, 24), nn.GELU())
        self.classifier = nn.Linear(24, CLASSES)

    def forward(self, x):
        return self.classifier(self.features(x))


class KlSoftLabels(common.Trainer):
    """Trainer whose soft labels go through float16 from the fault step."""

    steps = 3000  # an upper bound: --live stops --after-fault steps after the fault
    fault_step = None  # until asked for

    def __init__(self):
        self.teacher = torch.randn(12, CLASSES, generator=torch.Generator().manual_seed(7))

    def model(self):
        return Student()

    def loss(self):
        return SoftTargetKL()

    def optimizer(self, params):
        return torch.optim.Adam(params, lr=1e-3)

    def batch(self, step, micro, gen):
        x = torch.randn(6, 12, generator=gen)
        logits = x @ self.teacher
        # a confident teacher: its smallest probabilities are 1e-22 to 1e-9, never 0 in
        # float32, and below float16's range in every batch of the first 3000 steps
        soft = torch.softmax(7.0 * logits / logits.std(), dim=-1)
        if self.fault_step is not None and step >= self.fault_step:
            soft = soft.half().float()  # the shard stored in float16
        return (x,), soft


if __name__ == "__main__":
    common.main(KlSoftLabels())
