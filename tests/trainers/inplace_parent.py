#!/usr/bin/python3
"""A parent module that returns its child's output, and at step 4 writes NaN into it in place
(under no_grad, so its grad_fn stays the same; only its version counter moves).

The daemon does not scan a child's output again when the parent returns it unchanged: this
trainer checks that "unchanged" includes the in-place write, which must be found in the parent.
Expected first anomaly: "0" (Patch) at step 4, origin (its inputs and parameters were finite):
invalid_domain, the cause rule for NaN from finite inputs in a module of no known kind.
"""
import torch
import torch.nn as nn

import common


class Patch(nn.Module):
    """Returns its Linear's output itself, patched in place when told to."""

    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(6, 6)
        self.fault = False

    def forward(self, x):
        y = self.inner(x)
        if self.fault:
            with torch.no_grad():
                y[0, 0] = float("nan")
        return y


class InplaceParent(common.Trainer):
    """Trainer whose parent module corrupts its child's output in place at step 4."""

    expected_cause = "invalid_domain"  # what the daemon's diagnosis must say

    def model(self):
        self.patch = Patch()
        return nn.Sequential(self.patch, nn.ReLU(), nn.Linear(6, 1))

    def schedule(self, model, step):
        self.patch.fault = step == self.fault_step

    def batch(self, step, micro, gen):
        x = torch.randn(8, 6, generator=gen)
        return (x,), x[:, :1]


if __name__ == "__main__":
    common.main(InplaceParent())
