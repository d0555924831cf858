#!/usr/bin/python3
"""Distillation to a teacher's logits recovered from its probabilities: the loss module takes
F.mse_loss(student, torch.logit(p)), p the teacher's sigmoid outputs. At step 4 the teacher is
sharpened (its logits scaled by 60): some p round to exactly 1 in float32, logit(1) = log(1/0)
is +Inf, and the loss module returns +Inf from finite inputs. The logit is of a tensor that
needs no gradient: autograd records only mse_loss; the code names logit.

Expected first anomaly: the loss module (Distill) at step 4, +Inf, the origin. Cause:
loss_log_zero, the evidence naming logit and the input that reaches exactly 1, the fix
torch.logit's eps.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import common


class Distill(nn.Module):
    def forward(self, student, probs):
        return F.mse_loss(student, torch.logit(probs))


class LogitTarget(common.Trainer):
    """Trainer whose teacher is sharpened at step 4."""

    expected_cause = "loss_log_zero"
    lr = 0.01

    def model(self):
        torch.manual_seed(3)
        # the teacher's logits, precomputed as a fixed projection of the batch
        self.teacher = torch.randn(8, 4) / 3
        return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))

    def loss(self):
        return Distill()

    def batch(self, step, micro, gen):
        x = torch.randn(16, 8, generator=gen)
        with torch.no_grad():
            sharp = 60.0 if step == self.fault_step else 1.0
            probs = torch.sigmoid((x @ self.teacher) * sharp)
        return (x,), probs


if __name__ == "__main__":
    common.main(LogitTarget())
