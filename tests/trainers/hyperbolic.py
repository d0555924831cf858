#!/usr/bin/python3
"""Poincare-ball embeddings trained to a target distance, d(u, v) = acosh(1 + 2|u - v|^2 /
((1 - |u|^2)(1 - |v|^2))), with no projection back into the ball. At step 4 an update (here
written by the schedule, as a step too large leaves it) takes point 3 just outside the unit
ball: 1 - |u|^2 is negative, the argument of acosh falls below 1, and acosh of it is NaN, from
finite inputs and parameters.

Expected first anomaly: dist (PoincareDistance) at step 4, NaN, the origin. Cause:
invalid_domain, the evidence naming acosh's domain [1, Inf) and the point off the ball; not a
variance by hand.
"""
import torch
import torch.nn as nn

import common


class PoincareDistance(nn.Module):
    def __init__(self, n, d):
        super().__init__()
        self.emb = nn.Embedding(n, d)
        nn.init.uniform_(self.emb.weight, -0.1, 0.1)

    def forward(self, pairs):
        u, v = self.emb(pairs[:, 0]), self.emb(pairs[:, 1])
        uu, vv = (u * u).sum(1), (v * v).sum(1)
        gap = ((u - v) ** 2).sum(1)
        return torch.acosh(1 + 2 * gap / ((1 - uu) * (1 - vv)))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.dist = PoincareDistance(20, 5)

    def forward(self, pairs):
        return self.dist(pairs)


class Hyperbolic(common.Trainer):
    """Trainer whose point 3 leaves the Poincare ball at step 4."""

    expected_cause = "invalid_domain"
    lr = 0.01

    def model(self):
        torch.manual_seed(3)
        return Model()

    def schedule(self, model, step):
        if step == self.fault_step:
            with torch.no_grad():
                model.dist.emb.weight[3] = torch.tensor([0.808, 0.606, 0.0, 0.0, 0.0])

    def batch(self, step, micro, gen):
        first = torch.randint(0, 20, (16,), generator=gen)
        second = (first + 1 + torch.randint(0, 18, (16,), generator=gen)) % 20
        pairs = torch.stack([first, second], 1)
        pairs[0] = torch.tensor([3, 7])
        return (pairs,), torch.ones(16)


if __name__ == "__main__":
    common.main(Hyperbolic())
