#!/usr/bin/python3
"""A run the daemon joins in flight (--live): it trains from the start without waiting, and a
NaN sample enters the batch of the step the test asks for (Trainer.fault_step), long after the
attach. With Adam (the default) the optimizer keeps its own step count, so the daemon must
report the trainer's absolute step; with --sgd nothing in the target holds it, and the daemon
must find the count in the training loop (common.Harness.run's local `step`); with --manual
there is no torch.optim at all (updates by hand after clip_grad_norm_, as PyTorch's
word_language_model example does), so each backward pass is a step, and the loop's counter
gives its number. --accum N: N micro-batches (forward passes) a step; --scheduler: a StepLR
stepped once a step, as warm-up and decay schedules are; --origin: the fault sample is finite
but huge (3e38), so the first Linear makes the first non-finite value (an origin, captured).

Expected first anomaly: body.0 (Linear) at step fault_step, inputs not finite.
"""
import sys

import torch
import torch.nn as nn

import common


class ManualUpdate:
    """No optimizer: p.data.add_(p.grad, alpha=-lr) after clipping, by hand."""

    def __init__(self, params, lr):
        self.params = list(params)
        self.lr = lr

    def zero_grad(self):
        for p in self.params:
            p.grad = None

    def step(self):
        torch.nn.utils.clip_grad_norm_(self.params, 0.25)
        for p in self.params:
            p.data.add_(p.grad, alpha=-self.lr)


class MidRun(common.Trainer):
    """Trainer joined in flight; Adam, plain SGD with --sgd, updates by hand with --manual."""

    steps = 3000  # an upper bound: --live stops 3 steps after the fault
    expected_cause = "bad_input_data"
    fault_step = None  # until asked for
    sgd = False
    manual = False
    origin = False
    scheduler = False
    sched = None

    def model(self):
        return nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 1))

    def batch(self, step, micro, gen):
        x = torch.randn(4, 6, generator=gen)
        y = x[:, :2].sum(dim=1, keepdim=True).sin()
        if step == self.fault_step and self.origin:
            x[1, :] = 3e38  # finite, but the first Linear's sums overflow: an origin there
        elif step == self.fault_step:
            x[1, 3] = float("nan")  # a corrupt sample
        return (x,), y

    def optimizer(self, params):
        if self.manual:
            return ManualUpdate(params, self.lr)
        if self.sgd:
            opt = torch.optim.SGD(params, lr=self.lr)
            if self.scheduler:
                self.sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1000, gamma=0.5)
            return opt
        return torch.optim.Adam(params, lr=1e-3)

    def schedule(self, model, step):
        if self.sched is not None and step > 0:
            self.sched.step()  # once a step, after the step before


if __name__ == "__main__":
    trainer = MidRun()
    if "--sgd" in sys.argv:
        sys.argv.remove("--sgd")
        trainer.sgd = True
    if "--manual" in sys.argv:
        sys.argv.remove("--manual")
        trainer.manual = True
    if "--scheduler" in sys.argv:
        sys.argv.remove("--scheduler")
        trainer.scheduler = True
    if "--origin" in sys.argv:
        sys.argv.remove("--origin")
        trainer.origin = True
    if "--accum" in sys.argv:
        i = sys.argv.index("--accum")
        trainer.accum = int(sys.argv[i + 1])
        del sys.argv[i:i + 2]
    common.main(trainer)
