#!/usr/bin/python3
"""Parameters made non-finite by an update: the learning rate jumps to 3e38 for step 4.

Every output of step 4 is finite; the update overflows the weights to ±Inf (3e38 times a
gradient above ~1.2 is past the float32 range), and step 5's first anomaly is in a layer whose
inputs are finite and whose parameters are not.
Expected first anomaly: the first Linear at step 5, params_finite false: nonfinite_params, origin
step 4 (the update that wrote the weights).

--variant a: built-in modules (a Sequential of Linear), the learning rate set inline.
--variant b: a module of its own (Affine, its parameters scale and shift, the scale from 2), the
  SGD weight decay taken from a helper whose schedule yields 3e38 at step 4: the decay term of
  the scale, 2 x 3e38, is past the float32 range (the gradients themselves stay ordinary). Expected first anomaly:
  "0" (Affine) at step 5, params_finite false, origin step 4.
--variant c: an Embedding under Adam whose eps becomes 0 at step 2 (as an eps of 1e-8 is in
  float16 optimizer state); tokens 14 and 15 occur from step 4 only, so their rows (and any
  row not looked up before step 2) had gradients of 0 at every step: Adam's moments are 0 and
  the update of step 2 is 0/0, NaN. No output is non-finite until a batch looks one up.
  Expected first anomaly: "0" (Embedding) at step 4 at the latest, params_finite false; no
  origin step (an Embedding reads only the rows it looks up: the last update did not
  necessarily write them).
--variant d: Adam written by hand (not a torch.optim.Optimizer), whose step count goes back to
  0 at step 4 (a resume that restores the moments but not the count): the bias correction
  1 - beta**0 is 0, the update divides the moments by it, and the weights become NaN from
  ordinary gradients and learning rate. Expected first anomaly: the first Linear at step 5,
  params_finite false, origin step 4; the diagnosis says the update's own arithmetic (not a
  gradient to clip).
--variant e: SGD with the gradients normalised by hand to a total norm of 1 (each scaled by
  max_norm / total_norm, the norm unguarded); at step 4 the loss is weighted by 0 (a batch the
  weighting leaves out), every gradient is 0, and the scale 1 / 0 = Inf times 0 is NaN: the
  weights become NaN from a gradient of 0. Expected first anomaly: the first Linear at step 5,
  params_finite false, origin step 4; the diagnosis says every gradient was 0 and the
  normalisation by hand, not a gradient too large.
"""
import torch
import torch.nn as nn

import common


class Affine(nn.Module):
    """x * scale + shift, per feature."""

    def __init__(self, n):
        super().__init__()
        self.scale = nn.Parameter(torch.full((n,), 2.0))
        self.shift = nn.Parameter(torch.zeros(n))

    def forward(self, x):
        return x * self.scale + self.shift


def decay_at(step, fault_step):
    """Weight decay by step: 1e-4, and 3e38 at the fault step (a factor meant for another
    schedule): any weight above 1.14 times it is past the float32 range."""
    return 1e-4 * (3e42 if step == fault_step else 1.0)


class HandAdam:
    """Adam as training code sometimes writes it: the moments divided by their bias
    corrections, 1 - beta**t, t the steps taken counted from 1."""

    def __init__(self, params, lr=0.01, betas=(0.9, 0.999), eps=1e-8):
        self.params = list(params)
        self.lr, self.betas, self.eps = lr, betas, eps
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]
        self.t = 1

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self):
        b1, b2 = self.betas
        for p, m, v in zip(self.params, self.m, self.v):
            if p.grad is None:
                continue
            m.mul_(b1).add_(p.grad, alpha=1 - b1)
            v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            m_hat = m / (1 - b1 ** self.t)
            v_hat = v / (1 - b2 ** self.t)
            p.sub_(self.lr * m_hat / (v_hat.sqrt() + self.eps))
        self.t += 1


class NormalizedSGD:
    """SGD with the gradients scaled by hand to a total norm of max_norm, the scale
    max_norm / total_norm taken as it comes."""

    def __init__(self, params, lr=0.05, max_norm=1.0):
        self.params = list(params)
        self.lr, self.max_norm = lr, max_norm

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self):
        grads = [p.grad for p in self.params if p.grad is not None]
        total = torch.sqrt(sum((g ** 2).sum() for g in grads))
        for p in self.params:
            if p.grad is not None:
                p.sub_(self.lr * p.grad * (self.max_norm / total))


class WeightedMSE(nn.Module):
    """Mean squared error times a weight the schedule sets."""

    weight = 1.0

    def forward(self, out, target):
        return self.weight * ((out - target) ** 2).mean()


class NonfiniteParams(common.Trainer):
    """Trainer whose optimizer settings spike at step 4."""

    expected_cause = "nonfinite_params"  # what the daemon's diagnosis must say
    variant = "a"

    @property
    def expected_origin(self):
        # origin step: the update that wrote the non-finite weights; none for an Embedding's
        return None if self.variant == "c" else "params_bad"

    def model(self):
        if self.variant in ("a", "d", "e"):
            return nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 1))
        if self.variant == "c":
            return nn.Sequential(nn.Embedding(16, 6), nn.Linear(6, 1))
        return nn.Sequential(Affine(6), nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 1))

    def optimizer(self, params):
        if self.variant == "c":
            self.opt = torch.optim.Adam(params, lr=0.01)
        elif self.variant == "d":
            self.opt = HandAdam(params)
        elif self.variant == "e":
            self.opt = NormalizedSGD(params)
        else:
            self.opt = torch.optim.SGD(params, lr=0.05)
        return self.opt

    def loss(self):
        self.weighted = WeightedMSE()
        return self.weighted if self.variant == "e" else nn.MSELoss()

    def schedule(self, model, step):
        if self.variant == "e":
            self.weighted.weight = 0.0 if step == self.fault_step else 1.0
            return
        if self.variant == "d":
            if step == self.fault_step:
                self.opt.t = 0  # the count restarts, the moments do not
            return
        for group in self.opt.param_groups:
            if self.variant == "a":
                group["lr"] = 3e38 if step == self.fault_step else 0.05
            elif self.variant == "c":
                group["eps"] = 0.0 if step >= 2 else 1e-8
            else:
                group["weight_decay"] = decay_at(step, self.fault_step)

    def batch(self, step, micro, gen):
        if self.variant == "c":
            ids = torch.randint(0, 16 if step >= self.fault_step else 14, (8, 1),
                                generator=gen)
            return (ids,), (ids % 3).float()
        x = torch.randn(8, 6, generator=gen)
        return (x,), 10 * x[:, :1]


if __name__ == "__main__":
    common.main(NonfiniteParams())
