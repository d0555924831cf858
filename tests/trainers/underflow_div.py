#!/usr/bin/python3
"""A division by a sum of terms that underflow to 0.

--variant sinkhorn: a matching layer that solves entropic optimal transport by Sinkhorn
  iterations, K = exp(-C / eps) with eps 0.05, u = (1/n) / (K @ v), v = (1/m) / (K^T @ u).
  At step 4 one side of the batch lies far from the other: every cost is past 104 * eps, K is
  all 0 (exp underflows), K @ v is 0, u is Inf and the plan u * K * v is Inf * 0, NaN, from
  finite inputs and parameters. The cost is a squared distance (cdist ** 2): its pow is no
  square root of a negative. Expected first anomaly: ot (Sinkhorn) at step 4, NaN, the
  origin; division_by_zero, the division by a matrix product and the exp's underflow.
--variant pool: an attention pooling that weighs positions by softplus of a score and divides
  by the weights' sum. At step 4 one document's features point against the scorer, at a scale
  that puts every score of it far below -104: softplus is 0 for each, their sum is 0, and the
  pooled row 0/0. Expected first
  anomaly: pool (WeightedPool) at step 4, NaN, the origin; division_by_zero, the division by
  a sum of what softplus made.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import common


class Sinkhorn(nn.Module):
    def __init__(self, eps=0.05, iters=5):
        super().__init__()
        self.eps, self.iters = eps, iters

    def forward(self, a, b):
        cost = torch.cdist(a, b) ** 2
        kernel = torch.exp(-cost / self.eps)
        u = torch.ones(a.shape[0]) / a.shape[0]
        v = torch.ones(b.shape[0]) / b.shape[0]
        for _ in range(self.iters):
            u = (1.0 / a.shape[0]) / (kernel @ v)
            v = (1.0 / b.shape[0]) / (kernel.t() @ u)
        return u[:, None] * kernel * v[None, :]


class Matcher(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(8, 8)
        self.ot = Sinkhorn()

    def forward(self, x):
        z = self.enc(x)
        return self.ot(z[:8], z[8:])


class WeightedPool(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.score = nn.Linear(d, 1)

    def forward(self, h):
        w = F.softplus(self.score(h))
        return (w * h).sum(1) / w.sum(1)


class Pooler(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(6, 16)
        self.pool = WeightedPool(16)
        self.out = nn.Linear(16, 3)

    def forward(self, x):
        return self.out(self.pool(self.enc(x)))


class PlanLoss(nn.Module):
    """Matching loss: the plan's mass off the identity pairing."""

    def forward(self, plan, target):
        return (plan * (1 - target)).sum()


class UnderflowDiv(common.Trainer):
    """Trainer whose batch at step 4 makes every term of a divisor underflow."""

    expected_cause = "division_by_zero"
    variant = "sinkhorn"
    lr = 0.01

    def model(self):
        torch.manual_seed(3)
        if self.variant == "pool":
            self.pooler = Pooler()
            return self.pooler
        return Matcher()

    def loss(self):
        return nn.CrossEntropyLoss() if self.variant == "pool" else PlanLoss()

    def batch(self, step, micro, gen):
        if self.variant == "pool":
            x = torch.randn(6, 10, 6, generator=gen)
            if step == self.fault_step:
                with torch.no_grad():
                    # the direction that lowers the score most, 1000 deep
                    d = self.pooler.enc.weight.t() @ self.pooler.pool.score.weight[0]
                    x[2] = -1000 * d / d.dot(d)
            return (x,), torch.randint(0, 3, (6,), generator=gen)
        x = 0.1 * torch.randn(16, 8, generator=gen)
        if step == self.fault_step:
            x[:8] += 40.0  # one side far from the other
        return (x,), torch.eye(8)


if __name__ == "__main__":
    common.main(UnderflowDiv())
