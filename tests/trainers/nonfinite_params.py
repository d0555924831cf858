#!/usr/bin/python3
"""Parameters made non-finite by an update: the learning rate jumps to 3e38 for step 4.

Every output of step 4 is finite; the update overflows the weights to ±Inf (3e38 times a
gradient above ~1.2 is past the float32 range), and step 5's first anomaly is in a layer whose
inputs are finite and whose parameters are not.
Expected first anomaly: the first Linear at step 5, params_finite false: nonfinite_params, origin
step 4 (the update that wrote the weights).
"""
import torch
import torch.nn as nn

import common


class NonfiniteParams(common.Trainer):
    """Trainer whose learning rate schedule spikes at step 4."""

    expected_cause = "nonfinite_params"  # what the daemon's diagnosis must say
    expected_origin = "params_bad"  # origin step: the update that wrote the non-finite weights

    def model(self):
        return nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 1))

    def optimizer(self, params):
        self.opt = torch.optim.SGD(params, lr=0.05)
        return self.opt

    def schedule(self, model, step):
        for group in self.opt.param_groups:
            group["lr"] = 3e38 if step == self.fault_step else 0.05

    def batch(self, step, micro, gen):
        x = torch.randn(8, 6, generator=gen)
        return (x,), 10 * x[:, :1]


if __name__ == "__main__":
    common.main(NonfiniteParams())
