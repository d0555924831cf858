#!/usr/bin/python3
"""A loss written outside any module takes an op with a domain, or divides by what it computed,
and goes non-finite while every module output stays finite; or a layer takes the log of a
determinant, or of a ReLU's output, or divides a softmax's scores by a temperature of 0.

--variant corr: 1 - a Pearson correlation by hand, sum(pc * yc) / (|pc| * |yc|) with pc the
prediction minus its mean; at step 4 the head's weights and bias are zeroed, the prediction is
constant and its spread 0: 0/0 is NaN. division_by_zero (an epsilon in the denominator).
--variant angle: the angle between a prediction and a unit target, acos of their cosine over
the prediction's norm; at step 4 the head points along the target, whose stored length rounded
above 1: the cosine is past 1 and acos is NaN. invalid_domain (clamp into [-1, 1]).
--variant hyper: a hyperbolic distance from the origin, 2 * atanh of the norm clamped to 1; at
step 4 the head's output has norm 2: atanh(1) is +Inf. invalid_domain.
Expected first anomaly for those: the loss itself (phase loss) at step 4, every module output
finite.
--variant logdet: a flow layer returns x @ W and log|det W| (torch.linalg.slogdet); at step 4 a
column of W is zeroed: the determinant is 0, its log -Inf. Expected first anomaly: that layer,
inv, an origin (loss_log_zero: a log of 0).
--variant logrelu: a front end returns log-compressed features, log(relu(Linear(x))); at step
4 one unit's bias is set to -50, its relu is 0 for every sample and the log -Inf. Expected
first anomaly: that layer, feat, an origin (loss_log_zero).
--variant corrmodel: the model computes the correlation loss itself (as a Hugging Face model
given labels does) and returns it: the first anomaly is the model, an origin, whose ops hold a
sqrt of a sum of squares, no root of a negative (division_by_zero).
--variant survival: a hazard model returns log survival, log1p(-sigmoid(logit)); at step 4 the
logit head's bias is set to 60: the sigmoid rounds to exactly 1, and log1p(-1) is -Inf.
Expected first anomaly: the model, an origin (loss_log_zero: F.logsigmoid(-x)).
--variant masked: a classifier masks the classes not allowed with -inf in its forward
(masked_fill of a registered bool buffer) and the loss is a label-smoothed cross-entropy by
hand; at step 4 two classes are disallowed: the model returns -Inf alone (the fill), and the
smoothing's weight on them times a log-probability of -Inf makes the loss +Inf. Expected first
anomaly: the model, an origin (loss_log_zero: a finite fill, or no target weight on them).
--variant logdata: a first layer log-transforms the batch's features, torch.log(x) (no
autograd node: the batch needs no gradient); at step 4 one feature of one sample is 0 (a count
of none): log(0) = -Inf. Expected first anomaly: that layer, logx, an origin (loss_log_zero:
its code names log and no division).
--variant bce: a binary cross-entropy module by hand, -(y log p + (1 - y) log(1 - p)), over a
sigmoid the model applies; at step 4 the head's bias is 40: p is exactly 1, log(1 - p) -Inf
and a target of 0 times it NaN. Expected first anomaly: the loss module, an origin
(loss_log_zero: F.logsigmoid(-x) or BCE with logits).
--variant gumbel: a sampler draws F.gumbel_softmax(logits, tau) with tau a Python number
annealed to 0 at step 4: the scores divided by 0 are ±Inf, the softmax NaN. Expected first
anomaly: that layer, samp, an origin (division_by_zero: the temperature, not a count).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import common

VARIANTS = ("corr", "angle", "hyper", "logdet", "logrelu", "gumbel", "corrmodel", "survival",
            "masked", "logdata", "bce")
CAUSES = {"corr": "division_by_zero", "angle": "invalid_domain", "hyper": "invalid_domain",
          "logdet": "loss_log_zero", "logrelu": "loss_log_zero", "gumbel": "division_by_zero",
          "corrmodel": "division_by_zero", "survival": "loss_log_zero",
          "masked": "loss_log_zero", "logdata": "loss_log_zero", "bce": "loss_log_zero"}


class Encoder(nn.Module):
    def __init__(self, outs):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 16), nn.Tanh())
        self.head = nn.Linear(16, outs)

    def forward(self, x):
        return self.head(self.body(x))


class Invertible(nn.Module):
    """x @ W and log|det W|, a normalising flow's invertible linear map."""

    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.linalg.qr(torch.randn(dim, dim))[0])

    def forward(self, x):
        return x @ self.weight, torch.linalg.slogdet(self.weight)[1]


class LogFeatures(nn.Module):
    """log-compressed features of a ReLU layer (a spectrogram-like front end)."""

    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(6, 8)
        with torch.no_grad():
            self.proj.bias.fill_(4.0)

    def forward(self, x):
        return torch.log(torch.relu(self.proj(x)))


class Featurized(nn.Module):
    def __init__(self):
        super().__init__()
        self.feat = LogFeatures()
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        return self.head(self.feat(x))


class Sampler(nn.Module):
    """A relaxed categorical sample of a Linear's logits at temperature tau."""

    def __init__(self):
        super().__init__()
        self.logits = nn.Linear(6, 5)
        self.tau = 1.0

    def forward(self, x):
        return F.gumbel_softmax(self.logits(x), tau=self.tau)


class Relaxed(nn.Module):
    def __init__(self):
        super().__init__()
        self.samp = Sampler()
        self.head = nn.Linear(5, 1)

    def forward(self, x):
        return self.head(self.samp(x))


class Hazard(nn.Module):
    """log P(survive) = log(1 - sigmoid(logit)), written with log1p."""

    def __init__(self):
        super().__init__()
        self.enc = Encoder(1)

    def forward(self, x):
        return torch.log1p(-torch.sigmoid(self.enc(x)))


class Allowed(nn.Module):
    """Logits of the classes allowed; the others masked with -inf."""

    def __init__(self):
        super().__init__()
        self.enc = Encoder(5)
        self.register_buffer("allowed", torch.ones(5, dtype=torch.bool))

    def forward(self, x):
        return self.enc(x).masked_fill(~self.allowed, float("-inf"))


def smoothed(logits, y):
    target = torch.full_like(logits, 0.1 / logits.shape[1])
    target[:, 0] += 0.9
    return -(target * F.log_softmax(logits, dim=1)).sum(1).mean()


class LogOf(nn.Module):
    """log of positive features: counts, prices, lengths."""

    def forward(self, x):
        return torch.log(x)


class LogModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.logx = LogOf()
        self.enc = Encoder(1)

    def forward(self, x):
        return self.enc(self.logx(x))


class BinaryCrossEntropy(nn.Module):
    def forward(self, p, y):
        return -(y * torch.log(p) + (1 - y) * torch.log(1 - p)).mean()


class Probability(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = Encoder(1)

    def forward(self, x):
        return torch.sigmoid(self.enc(x))


class Correlated(nn.Module):
    """An Encoder that returns its own loss, 1 - the correlation of its prediction with y."""

    def __init__(self):
        super().__init__()
        self.enc = Encoder(1)

    def forward(self, x, y):
        return correlation(self.enc(x), y)


class Flow(nn.Module):
    def __init__(self):
        super().__init__()
        self.inv = Invertible(6)
        self.shift = nn.Linear(6, 6)

    def forward(self, x):
        z, logdet = self.inv(x)
        return self.shift(z), logdet


def correlation(pred, y):
    pc = pred[:, 0] - pred[:, 0].mean()
    yc = y[:, 0] - y[:, 0].mean()
    return 1 - (pc * yc).sum() / (pc.pow(2).sum().sqrt() * yc.pow(2).sum().sqrt())


def angle(pred, y):
    return torch.acos((F.normalize(pred, dim=1) * y).sum(1)).mean()


def hyperbolic(pred, y):
    return (2 * torch.atanh(pred.norm(dim=1).clamp(max=1.0)) - y[:, 0]).pow(2).mean()


def flow_nll(out, y):
    z, logdet = out
    return 0.5 * z.pow(2).sum(1).mean() - logdet


def own_loss(out, y):
    return out


for fn in (correlation, angle, hyperbolic, flow_nll, own_loss, smoothed):
    fn.top_modules = ()


class LossDomain(common.Trainer):
    """Trainer whose loss (or a flow layer) takes an op outside its domain, or a divisor of 0."""

    lr = 0.01
    variant = "corr"

    @property
    def expected_cause(self):
        return CAUSES.get(self.variant)

    def model(self):
        if self.variant not in VARIANTS:
            raise SystemExit("loss_domain: --variant is one of %s" % ", ".join(VARIANTS))
        if self.variant == "logdet":
            return Flow()
        if self.variant == "logrelu":
            return Featurized()
        if self.variant == "gumbel":
            return Relaxed()
        if self.variant == "corrmodel":
            return Correlated()
        if self.variant == "survival":
            return Hazard()
        if self.variant == "masked":
            return Allowed()
        if self.variant == "logdata":
            return LogModel()
        if self.variant == "bce":
            return Probability()
        return Encoder({"corr": 1, "angle": 3, "hyper": 4}[self.variant])

    def loss(self):
        if self.variant in ("logrelu", "gumbel", "survival"):
            return nn.MSELoss()
        if self.variant == "corrmodel":
            return own_loss
        if self.variant == "masked":
            return smoothed
        if self.variant == "logdata":
            return nn.MSELoss()
        if self.variant == "bce":
            return BinaryCrossEntropy()
        return {"corr": correlation, "angle": angle, "hyper": hyperbolic,
                "logdet": flow_nll}[self.variant]

    def schedule(self, model, step):
        if step != self.fault_step:
            return
        with torch.no_grad():
            if self.variant == "logdet":
                model.inv.weight[:, 2] = 0.0  # singular: log|det| is -Inf
                return
            if self.variant == "logrelu":
                model.feat.proj.bias[3] = -50.0  # its relu is 0 for every sample
                return
            if self.variant == "gumbel":
                model.samp.tau = 0.0  # annealed all the way
                return
            if self.variant == "bce":
                model.enc.head.bias.fill_(40.0)  # sigmoid(40) is 1 in float32
                return
            if self.variant == "logdata":
                return  # its fault is in the batch
            if self.variant == "masked":
                model.allowed[3:] = False  # two classes no longer allowed
                return
            if self.variant == "survival":
                model.enc.head.bias.fill_(60.0)  # sigmoid(60) is 1 in float32
                return
            head = model.enc.head if self.variant == "corrmodel" else model.head
            head.weight.zero_()
            head.bias.zero_()
            if self.variant == "angle":
                model.head.bias[0] = 1.0  # along the target
            elif self.variant == "hyper":
                model.head.bias[0] = 2.0  # a norm of 2, clamped to 1

    def batch(self, step, micro, gen):
        x = torch.randn(8, 6, generator=gen)
        if self.variant == "angle":
            y = F.normalize(torch.randn(8, 3, generator=gen), dim=1)
            if step == self.fault_step:
                y = torch.tensor([[1.000001, 0.0, 0.0]]).expand(8, 3).clone()
            return (x,), y
        y = x[:, :1] * 0.5 + 0.1 * torch.randn(8, 1, generator=gen)
        if self.variant == "corrmodel":
            return (x, y), y
        if self.variant == "logdata":
            x = x.abs() + 0.1
            if step == self.fault_step:
                x[2, 4] = 0.0  # a count of none
            return (x,), y
        if self.variant == "bce":
            return (x,), (x[:, :1] > 0).float()
        return (x,), y


if __name__ == "__main__":
    common.main(LossDomain())
