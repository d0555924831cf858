#!/usr/bin/python3
"""A regression loss written outside any module goes non-finite while every module output
stays finite: what the loss's ops tell of why.

--variant label: F.smooth_l1_loss against targets read from a dataset; at step 4 one label is
NaN (a missing value). smooth_l1_loss of finite predictions is NaN only where its target is:
bad_input_data.
--variant mask: a squared error averaged by hand over the positions a padding mask keeps,
(err * keep).sum() / keep.sum(); at step 4 the batch is all padding: 0/0, division_by_zero.
--variant overflow: a squared error by hand, ((pred - y) ** 2).mean(); at step 4 the head's
weights are scaled by 1e25 (a recurrence's gain, an initialisation gone wrong): its output is
finite, about 1e25, and its square overflows float32. No log, division or exp made it, and no
cause of the vocabulary fits: unknown, with the output past the range's square root said.
--variant accum: a mean squared error divided by the gradient accumulation steps, a Python
number a config reload sets to 0 at step 4: the loss is +Inf, every output small.
division_by_zero (the divisor, not an overflow).
--variant kl: a KL divergence by hand against soft targets, (t * (t.log() - logp)).sum(-1)
with logp = log_softmax(pred); at step 4 the targets come one-hot (hard labels where soft ones
were meant): t.log() is -Inf where t is 0, needs no gradient and leaves no node, and
0 * -Inf is NaN. loss_log_zero, said as the KL's 0 * log 0 with torch.xlogy / F.kl_div.
Expected first anomaly: the loss itself (phase loss) at step 4, every module output finite.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import common

VARIANTS = ("label", "mask", "overflow", "accum", "kl")
CAUSES = {"label": "bad_input_data", "mask": "division_by_zero", "overflow": "unknown",
          "accum": "division_by_zero", "kl": "loss_log_zero"}
ACCUM = {"steps": 4}


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 16), nn.Tanh())
        self.head = nn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.body(x))


def smooth_l1(pred, target):
    return F.smooth_l1_loss(pred, target)


def masked_squared_error(pred, target):
    y, keep = target
    err = (pred - y) ** 2
    return (err * keep).sum() / keep.sum()


def squared_error(pred, target):
    return ((pred - target) ** 2).mean()


def accumulated(pred, target):
    return F.mse_loss(pred, target) / ACCUM["steps"]


def kl_by_hand(pred, target):
    logp = F.log_softmax(pred, dim=-1)
    return (target * (target.log() - logp)).sum(-1).mean()


for fn in (smooth_l1, masked_squared_error, squared_error, accumulated, kl_by_hand):
    fn.top_modules = ()


class LossTargets(common.Trainer):
    """Trainer whose loss, computed outside any module, is the first non-finite tensor."""

    lr = 0.01
    variant = "label"

    @property
    def expected_cause(self):
        return CAUSES.get(self.variant)

    def model(self):
        if self.variant not in VARIANTS:
            raise SystemExit("loss_targets: --variant is one of %s" % ", ".join(VARIANTS))
        return Regressor()

    def loss(self):
        return {"label": smooth_l1, "mask": masked_squared_error,
                "overflow": squared_error, "accum": accumulated,
                "kl": kl_by_hand}[self.variant]

    def schedule(self, model, step):
        if self.variant == "accum" and step == self.fault_step:
            ACCUM["steps"] = 0  # a config reload
        if self.variant == "overflow" and step == self.fault_step:
            with torch.no_grad():
                model.head.weight.mul_(1e25)

    def batch(self, step, micro, gen):
        x = torch.randn(8, 6, generator=gen)
        y = x[:, :3] * 0.5
        if self.variant == "kl":
            if step == self.fault_step:  # hard labels: zeros in every row
                return (x,), F.one_hot(y.argmax(-1), 3).float()
            return (x,), torch.softmax(y, -1)
        if self.variant == "label" and step == self.fault_step:
            y[5, 1] = float("nan")  # a missing value in the dataset
        if self.variant != "mask":
            return (x,), y
        keep = (torch.rand(8, 3, generator=gen) > 0.3).float()
        if step == self.fault_step:
            keep.zero_()  # a batch of padding only
        return (x,), (y, keep)


if __name__ == "__main__":
    common.main(LossTargets())
