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


class NonfiniteParams(common.Trainer):
    """Trainer whose optimizer settings spike at step 4."""

    expected_cause = "nonfinite_params"  # what the daemon's diagnosis must say
    expected_origin = "params_bad"  # origin step: the update that wrote the non-finite weights
    variant = "a"

    def model(self):
        if self.variant == "a":
            return nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 1))
        return nn.Sequential(Affine(6), nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 1))

    def optimizer(self, params):
        self.opt = torch.optim.SGD(params, lr=0.05)
        return self.opt

    def schedule(self, model, step):
        for group in self.opt.param_groups:
            if self.variant == "a":
                group["lr"] = 3e38 if step == self.fault_step else 0.05
            else:
                group["weight_decay"] = decay_at(step, self.fault_step)

    def batch(self, step, micro, gen):
        x = torch.randn(8, 6, generator=gen)
        return (x,), 10 * x[:, :1]


if __name__ == "__main__":
    common.main(NonfiniteParams())
