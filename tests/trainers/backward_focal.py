#!/usr/bin/python3
"""A focal loss of gamma 0.5 over a binary classifier: -(1 - pt) ** gamma * log(pt), held by
a loss module called outside the model, whose child "modulating" makes the focal term. At
step 4 the head's bias is set to 50: the positive samples' sigmoid rounds to exactly 1, so
pt = 1, (1 - pt) ** 0.5 = 0 and log(pt) = 0; the forward pass and the loss stay finite. In
backward the power's derivative at 0, 0.5 * 0 ** -0.5, is Inf, and it multiplies the gradient
log(pt) = 0 sends it: NaN. detect_anomaly names PowBackward0.

Expected: phase "backward", step 4, node PowBackward0, layer "modulating" (Modulating);
invalid_domain, the evidence a power below 1 at 0 (a focal loss's gamma < 1), the fix a clamp
of its base.
"""
import torch
import torch.nn as nn

import common


class Modulating(nn.Module):
    """The focal term (1 - pt) ** gamma: small for the samples the model is sure of."""

    def __init__(self, gamma):
        super().__init__()
        self.gamma = gamma

    def forward(self, pt):
        return (1 - pt) ** self.gamma


class FocalLoss(nn.Module):
    def __init__(self, gamma=0.5):
        super().__init__()
        self.modulating = Modulating(gamma)

    def forward(self, logits, y):
        p = torch.sigmoid(logits.squeeze(1))
        pt = torch.where(y == 1, p, 1 - p)
        return (-self.modulating(pt) * torch.log(pt.clamp_min(1e-8))).mean()


class BackwardFocal(common.Trainer):
    """Trainer whose batch at step 4 holds a sample the model is sure of."""

    expected_cause = "invalid_domain"
    watch_backward = True
    lr = 0.01

    def model(self):
        return nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 1))

    def loss(self):
        return FocalLoss()

    def batch(self, step, micro, gen):
        x = torch.randn(8, 10, generator=gen)
        y = (x[:, 0] > 0).to(torch.float32)
        if step == self.fault_step:
            x[3] = 0.0
            y[3] = 1.0
        return (x,), y

    def schedule(self, model, step):
        if step == self.fault_step:
            with torch.no_grad():
                model[2].bias.fill_(50.0)  # the bias alone sets the zero sample's logit


if __name__ == "__main__":
    common.main(BackwardFocal())
