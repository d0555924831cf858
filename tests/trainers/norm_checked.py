#!/usr/bin/python3
"""A small CNN in torch's Sequential whose Conv2d and Linear hand their outputs straight to a
BatchNorm2d and a LayerNorm: the daemon does not scan those two outputs while the norm's output
is finite (stats.norm_checked), since one NaN or Inf in a norm's input makes some of its output
non-finite. Each --variant makes a call go non-finite at step 4, and the daemon must name the
layer the forward hooks name first, with the same counts.
Steps 1 to 4 begin with a pause (time for the daemon to vouch for the modules it saw at step 0).

  conv      one of the Conv2d's weights set to Inf: its output is non-finite, so is the
            BatchNorm2d's (the cause: non-finite parameters)
  input     a NaN in the batch: the Conv2d's output is NaN (bad input data)
  linear    one of the Linear's weights set to Inf, the Linear before the LayerNorm
  norm      the Linear's output made constant (its weights 0, its bias 1) and the LayerNorm's
            eps 0: the norm divides 0 by 0, NaN from a finite input (zero variance)
  prehook   as conv, and a forward pre-hook registered on the BatchNorm2d at step 4 replaces
            its input's NaN and Inf with 0: the norm's output stays finite
  global    as prehook, with a global forward pre-hook (register_module_forward_pre_hook)
  seqpatch  as conv, and at step 4 nn.Sequential.forward is replaced by a function of this
            file that replaces the Conv2d's NaN and Inf with 0 in place before the BatchNorm2d
            takes them (the daemon vouched for torch's forward before)
"""
import time

import torch
import torch.nn as nn

import common

VARIANTS = ("conv", "input", "linear", "norm", "prehook", "global", "seqpatch")
CAUSES = {"input": "bad_input_data", "norm": "norm_zero_variance"}


def cleaned(inputs):
    return (torch.nan_to_num(inputs[0], nan=0.0, posinf=0.0, neginf=0.0),)


def cleaning_forward(seq, x):
    for i, module in enumerate(seq):
        x = module(x)
        if i == 0:  # the convolution's output: the one autograd does not keep
            x.nan_to_num_(nan=0.0, posinf=0.0, neginf=0.0)
    return x


class NormChecked(common.Trainer):
    steps = 8
    variant = "conv"

    def __init__(self):
        self.net = None

    @property
    def expected_cause(self):
        return CAUSES.get(self.variant, "nonfinite_params")

    def model(self):
        if self.variant not in VARIANTS:
            raise SystemExit("norm_checked: --variant is one of %s" % ", ".join(VARIANTS))
        self.net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                 nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 4 * 4, 16),
                                 nn.LayerNorm(16), nn.ReLU(), nn.Linear(16, 5))
        return self.net

    def schedule(self, model, step):
        if 0 < step <= self.fault_step:
            # the daemon vouches for the Sequential's children after their first call
            time.sleep(0.4)
        if step != self.fault_step:
            return
        conv, bn, lin = self.net[0], self.net[1], self.net[5]
        with torch.no_grad():
            if self.variant in ("conv", "prehook", "global", "seqpatch"):
                conv.weight[0, 0, 1, 1] = float("inf")
            elif self.variant == "linear":
                lin.weight[0, 0] = float("inf")
            elif self.variant == "norm":
                lin.weight.zero_()
                lin.bias.fill_(1.0)
        if self.variant == "norm":
            self.net[6].eps = 0.0
        elif self.variant == "prehook":
            bn.register_forward_pre_hook(lambda m, inputs: cleaned(inputs))
        elif self.variant == "global":
            nn.modules.module.register_module_forward_pre_hook(
                lambda m, inputs: cleaned(inputs) if m is bn else None)
        elif self.variant == "seqpatch":
            nn.Sequential.forward = cleaning_forward

    def loss(self):
        return nn.CrossEntropyLoss()

    def batch(self, step, micro, gen):
        x = torch.randn(6, 3, 8, 8, generator=gen)
        if self.variant == "input" and step == self.fault_step:
            x[2, 1, 3, 4] = float("nan")
        y = torch.randint(0, 5, (6,), generator=gen)
        return (x,), y


if __name__ == "__main__":
    common.main(NormChecked())
