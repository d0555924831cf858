#!/usr/bin/python3
"""Held-out: a learning-rate warm-up whose peak is far too high, under SGD with momentum and a
torch.optim.lr_scheduler.LambdaLR.

The run trains at the base learning rate (0.01) until the fault step, where its second stage
begins with a linear warm-up over 8 steps. The stage's peak was meant to be 1x the base (back
to it after a restart) and was written as 100x (a percentage given as a factor): as the
warm-up ramps the learning rate past what the regression's curvature allows, every update
overshoots further, the loss and the weights grow step over step, and the squared error
overflows float32 from finite (huge) predictions.

True cause, from the code: lr_too_high (a divergence of the updates; the scheduler's warm-up
raised the learning rate too far). Optimizer: SGD, whose state holds no step count.
Expected first anomaly: the MSELoss module's output (+Inf), or the last Linear's, 5 to 8 steps
after the fault step (measured over fault steps 140-150; it depends on the weights the
warm-up starts from); the loss grows x5 to x3e11 per step over the steps before it.
"""
import torch
import torch.nn as nn

import common

BASE_LR = 0.01
PEAK = 100.0  # meant 1.0
WARMUP = 8


class WarmupPeak(common.Trainer):
    """Trainer whose second stage warms the learning rate up to 100x the base."""

    steps = 3000  # an upper bound: --live stops --after-fault steps after the fault
    fault_step = None  # until asked for

    def model(self):
        return nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 16), nn.ReLU(),
                             nn.Linear(16, 1))

    def factor(self, step):
        """LambdaLR's multiplier of the base learning rate at an optimizer step."""
        if self.fault_step is None or step < self.fault_step:
            return 1.0
        ramp = min(1.0, (step - self.fault_step + 1) / WARMUP)
        return 1.0 + (PEAK - 1.0) * ramp

    def optimizer(self, params):
        opt = torch.optim.SGD(params, lr=BASE_LR, momentum=0.9)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(opt, self.factor)
        return opt

    def schedule(self, model, step):
        if step > 0:
            self.scheduler.step()  # after the previous step's optimizer.step()

    def batch(self, step, micro, gen):
        x = torch.randn(16, 6, generator=gen)
        return (x,), 3 * x[:, :2].sum(dim=1, keepdim=True)


if __name__ == "__main__":
    common.main(WarmupPeak())
