#!/usr/bin/python3
"""A softmax written by hand, exp(s) / sum(exp(s)) without subtracting the maximum: at step 4
the scores reach ~100, above exp's float32 threshold 88.72, and Inf/Inf makes NaN. No -Inf
anywhere, nothing masked, whatever the class is called.

--variant a: ScoreAttention, exp written inline.
--variant b: Router, exp inside a helper.
--variant c: QKAttention, scores made inside the layer by its own q and k Linears, whose
weights grow 60x at step 4: no value the layer receives is near the threshold, its ops (a div
of an exp by a sum of exps) say it.
Expected first anomaly: attn at step 4, NaN, inputs finite: origin.
"""
import torch
import torch.nn as nn

import common


class ScoreAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.temperature = 1.0

    def forward(self, s):
        e = torch.exp(s / self.temperature)
        return e / e.sum(dim=-1, keepdim=True)


def softmax_by_hand(z):
    """The bug: no z - z.max() before the exp."""
    e = z.exp()
    return e / e.sum(dim=-1, keepdim=True)


class Router(nn.Module):
    def forward(self, s):
        return softmax_by_hand(s)


class QKAttention(nn.Module):
    def __init__(self, d=6):
        super().__init__()
        self.q, self.k = nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, s):
        e = torch.exp(self.q(s) @ self.k(s).t())
        return e / e.sum(dim=-1, keepdim=True) @ s


class Net(nn.Module):
    def __init__(self, variant):
        super().__init__()
        self.attn = {"a": ScoreAttention, "c": QKAttention}.get(variant, Router)()
        self.head = nn.Linear(6, 1)

    def forward(self, s):
        return self.head(self.attn(s))


class SoftmaxOverflow(common.Trainer):
    """Trainer whose scores grow past 88.72 at step 4."""

    variant = "a"
    expected_cause = "exp_overflow"
    expected_op = "aten::exp"
    expected_replay_cause = "exp_overflow"

    def model(self):
        return Net(self.variant)

    def schedule(self, model, step):
        if self.variant == "c" and step == self.fault_step:
            with torch.no_grad():
                model.attn.q.weight.mul_(60.0)  # scores in the thousands
                model.attn.k.weight.mul_(60.0)

    def batch(self, step, micro, gen):
        s = torch.randn(4, 6, generator=gen)
        if step == self.fault_step and self.variant != "c":
            s[1, 3] = 104.25
        return (s,), torch.zeros(4, 1)


if __name__ == "__main__":
    common.main(SoftmaxOverflow())
