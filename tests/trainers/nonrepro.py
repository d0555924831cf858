#!/usr/bin/python3
"""A fault the capture cannot hold: the layer divides by a module-level setting that the
trainer sets to 0 for step 4 only and back to 1 after it. Its inputs and parameters are the
same bits in a replay, and the replay (which imports this file: the setting is 1) is finite,
as a hardware fault, a race or uninitialised memory would leave it.

Expected first anomaly: rescale (Rescale) at step 4, ±Inf, inputs finite: origin. Live cause:
division_by_zero, from the call's ops (a div) with no zero among the captured tensors; the
replay's: unknown, not reproducible.
"""
import torch
import torch.nn as nn

import common

SETTINGS = {"divisor": 1.0}  # changed under the layer, outside anything captured


class Rescale(nn.Module):
    def __init__(self):
        super().__init__()
        self.gain = nn.Parameter(torch.ones(6))

    def forward(self, x):
        return x * self.gain / SETTINGS["divisor"]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.rescale = Rescale()
        self.head = nn.Linear(6, 1)

    def forward(self, x):
        return self.head(self.rescale(x))


class NonRepro(common.Trainer):
    """Trainer whose layer reads a global that is 0 at step 4 only."""

    # no captured value explains it, but the call's ops do: a div, and ±Inf of both signs with
    # no zero among the captured tensors (the divisor is a Python number)
    expected_cause = "division_by_zero"
    expected_reproducible = False

    def model(self):
        return Net()

    def schedule(self, model, step):
        SETTINGS["divisor"] = 0.0 if step == self.fault_step else 1.0

    def batch(self, step, micro, gen):
        x = torch.randn(5, 6, generator=gen)
        return (x,), x.sum(dim=1, keepdim=True)


if __name__ == "__main__":
    common.main(NonRepro())
