#!/usr/bin/python3
"""A model whose module names are built to mislead a reader of them, run by an unprivileged
user: where its caller holds each module is read by BPF at the module's first call
(bpf/pyobj.bpf.h, held_key), and the daemon names modules from it once the model is gone.

  HOSTILE     a direct child's key with a quote, a newline, a control byte and a terminal
              escape: named as written (the stream escapes it, nanwatch-tail prints no
              control byte)
  box         a ModuleDict of 300 entries: box.k5 is named, box.k299 (past the 256 entries
              looked through) is not
  LONG        a 40-character key holding a ModuleDict whose "a" is called: past the 31
              characters a holder's key may have, not named
  self        the model holds itself: a cycle for every walk

At step 3 every leaf divides by zero: each called leaf's output is +Inf.
"""
import torch
import torch.nn as nn

import common

HOSTILE = 'q"uo\nte\x01\x1b[2J'
LONG = "c" * 40


class Leaf(nn.Module):
    bad = False

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(4))

    def forward(self, x):
        y = x * self.w
        return y / torch.zeros(()) if Leaf.bad else y


class Holder(nn.Module):
    def __init__(self):
        super().__init__()
        self.add_module(HOSTILE, Leaf())
        self.add_module(LONG, nn.ModuleDict({"a": Leaf()}))
        self.box = nn.ModuleDict({"k%d" % i: Leaf() for i in range(300)})
        self._modules["self"] = self

    def forward(self, x):
        x = self._modules[HOSTILE](x)
        x = self.box["k5"](x)
        x = self.box["k299"](x)
        return self._modules[LONG]["a"](x)


class HostileNames(common.Trainer):
    """Misleading module names; every leaf divides by zero from step 3."""

    steps = 5
    fault_step = 3

    def model(self):
        return Holder()

    def schedule(self, model, step):
        Leaf.bad = step >= self.fault_step

    def batch(self, step, micro, gen):
        x = torch.randn(2, 4, generator=gen)
        return (x,), x


if __name__ == "__main__":
    common.main(HostileNames())
