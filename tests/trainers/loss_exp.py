#!/usr/bin/python3
"""A loss written outside any module takes an exp of the model's outputs, and goes non-finite
while every module output stays finite: where the exp's value goes tells why.

--variant softmax: an InfoNCE by hand, -log(exp(pos) / exp(sim).sum(1)), over embeddings that
are not normalised; at step 4 the head's weights are scaled by 40 (embeddings that grew), the
similarities pass exp's threshold: Inf/Inf is NaN. exp_overflow (log_softmax or cross_entropy
subtract the row maximum first).
--variant scale: a Gaussian negative log-likelihood by hand whose scale is exp of the head's
log-scale, log(sigma) + ((y - mu) / sigma) ** 2 / 2; at step 4 the log-scale's bias is set to
-120, exp underflows to 0: the log is -Inf, the division +Inf, their sum NaN. A division by
0 (the loss's division by the exp): division_by_zero.
--variant rate: a Poisson loss by hand, exp(log_rate) - y * log_rate; at step 4 the head's
bias is set to 120, exp overflows: +Inf. exp_overflow.
--variant ratelog: the same Poisson loss written from the rate, rate - y * log(rate) with rate
= exp(log_rate): the exp's value goes both to a log and to a difference; at step 4 the bias is
120 again, exp overflows, log(Inf) is Inf and Inf - Inf NaN. exp_overflow (a NaN loss is the
overflow's Inf - Inf, not the log of an exp that underflowed).
--variant logit: a binary cross-entropy by hand over a sigmoid the model returns,
-(y * log(p) + (1 - y) * log(1 - p)); at step 4 the head's bias is set to 40, the sigmoid
rounds to 1 and log(1 - p) is -Inf: loss_log_zero (F.logsigmoid(-x) for the fix).
Expected first anomaly: the loss itself (phase loss) at step 4, every module output finite.
"""
import torch
import torch.nn as nn

import common

VARIANTS = ("softmax", "scale", "rate", "ratelog", "logit")
CAUSES = {"softmax": "exp_overflow", "scale": "division_by_zero", "rate": "exp_overflow",
          "ratelog": "exp_overflow", "logit": "loss_log_zero"}


class Encoder(nn.Module):
    def __init__(self, outs, squash=False):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 16), nn.Tanh())
        self.head = nn.Linear(16, outs)
        self.squash = squash

    def forward(self, x):
        out = self.head(self.body(x))
        return torch.sigmoid(out) if self.squash else out


def info_nce(z, target):
    """Two views' embeddings side by side; the positive is the same sample's other view."""
    a, b = z[:, :4], z[:, 4:]
    sim = a @ b.t()
    pos = (a * b).sum(1)
    return -torch.log(torch.exp(pos) / torch.exp(sim).sum(1)).mean()


def gaussian_nll(out, y):
    mu, log_sigma = out[:, :2], out[:, 2:]
    sigma = torch.exp(log_sigma)
    return (torch.log(sigma) + ((y - mu) / sigma) ** 2 / 2).mean()


def poisson_nll(log_rate, y):
    return (torch.exp(log_rate) - y * log_rate).mean()


def poisson_nll_rate(log_rate, y):
    rate = torch.exp(log_rate)
    return (rate - y * torch.log(rate)).mean()


def bce(p, y):
    return -(y * torch.log(p) + (1 - y) * torch.log(1 - p)).mean()


for fn in (info_nce, gaussian_nll, poisson_nll, poisson_nll_rate, bce):
    fn.top_modules = ()


class LossExp(common.Trainer):
    """Trainer whose loss, an exp of the model's outputs outside any module, goes non-finite."""

    lr = 0.01
    variant = "softmax"

    @property
    def expected_cause(self):
        return CAUSES.get(self.variant)

    def model(self):
        if self.variant not in VARIANTS:
            raise SystemExit("loss_exp: --variant is one of %s" % ", ".join(VARIANTS))
        return Encoder({"softmax": 8, "scale": 4, "rate": 3, "ratelog": 3, "logit": 1}[self.variant],
                       squash=self.variant == "logit")

    def loss(self):
        return {"softmax": info_nce, "scale": gaussian_nll, "rate": poisson_nll,
                "ratelog": poisson_nll_rate, "logit": bce}[self.variant]

    def schedule(self, model, step):
        if step != self.fault_step:
            return
        with torch.no_grad():
            if self.variant == "softmax":
                model.head.weight.mul_(40)  # similarities in the thousands
            elif self.variant == "scale":
                model.head.bias[2:] = -120.0  # the log-scale: exp(-120) is 0 in float32
            elif self.variant == "logit":
                model.head.bias[:] = 40.0  # sigmoid(40) is 1 in float32
            else:
                model.head.bias[:] = 120.0  # the log-rate: exp(120) is Inf

    def batch(self, step, micro, gen):
        x = torch.randn(8, 6, generator=gen)
        if self.variant == "scale":
            return (x,), x[:, :2] * 0.5
        if self.variant == "logit":
            return (x,), (x[:, :1] > 0).float()
        return (x,), torch.poisson(torch.full((8, 3), 2.0), generator=gen)


if __name__ == "__main__":
    common.main(LossExp())
