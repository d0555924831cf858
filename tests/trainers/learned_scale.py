#!/usr/bin/python3
"""A CLIP-style contrastive model whose learned temperature is never clamped: logits =
logit_scale.exp() * img @ txt.T. At step 4 logit_scale is where an unclamped run drifts to (95,
past exp's threshold 88.72 in float32): its exp is +Inf, and Inf times the normalised
similarities, of both signs, makes the logits ±Inf and the cross-entropy's softmax NaN. Inside
the model's own call: the model is the origin, a parameter above the threshold.

Cause: exp_overflow, with the parameter's value, and the fix bounds the learned log-scale
(CLIP's clamp to log(100)), not a row maximum (no softmax by hand).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import common


class Clip(nn.Module):
    def __init__(self):
        super().__init__()
        self.img = nn.Linear(16, 32)
        self.txt = nn.Linear(12, 32)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))

    def forward(self, img, txt):
        i = F.normalize(self.img(img), dim=-1)
        t = F.normalize(self.txt(txt), dim=-1)
        return self.logit_scale.exp() * i @ t.t()


def symmetric_ce(logits, labels):
    return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.t(), labels)) / 2


symmetric_ce.top_modules = ()


class LearnedScale(common.Trainer):
    """Trainer whose temperature has drifted past exp's threshold at step 4."""

    expected_cause = "exp_overflow"
    lr = 0.05

    def model(self):
        torch.manual_seed(4)
        return Clip()

    def loss(self):
        return symmetric_ce

    def schedule(self, model, step):
        if step == self.fault_step:
            with torch.no_grad():
                model.logit_scale.fill_(95.0)

    def batch(self, step, micro, gen):
        z = torch.randn(16, 8, generator=gen)
        img = torch.cat([z, torch.randn(16, 8, generator=gen)], 1)
        txt = torch.cat([z, torch.randn(16, 4, generator=gen)], 1)
        return (img, txt), torch.arange(16)


if __name__ == "__main__":
    common.main(LearnedScale())
