#!/usr/bin/python3
"""A small CNN whose torch ReLU, MaxPool2d and Flatten keep a finite input finite: the daemon
does not scan their outputs while nothing but torch's own code makes them. Each --variant makes
the ReLU's call return Inf/NaN from a finite input at step 4 in a way that is not torch's own
forward, which the daemon must see (and name that ReLU first, as the forward hooks do).
Steps 1 to 4 begin with a pause (time for the daemon to vouch for the modules it saw at step 0).

  hook      a forward hook on the ReLU, registered with the model, returns output * inf
  global    a global forward hook (register_module_forward_hook) registered at step 4, after
            the daemon has seen the ReLU run, returns that ReLU's output * inf
  userrelu  the model's ReLU is a class of this file named ReLU
  override  the ReLU instance's own forward (an attribute of the instance)
  patched   nn.ReLU.forward replaced by a function of this file
  replaced  at step 4 the ReLU's _forward_hooks dict replaced by assignment with a new one
            holding such a hook (before the hooks it had)
"""
import collections
import time

import torch
import torch.nn as nn

import common

VARIANTS = ("hook", "global", "userrelu", "override", "patched", "replaced")


class ReLU(nn.Module):
    """Not torch's: a class of the user's that happens to be named ReLU."""

    def __init__(self, trainer):
        super().__init__()
        self.trainer = trainer

    def forward(self, x):
        return self.trainer.spoil(torch.relu(x))


class Net(nn.Module):
    def __init__(self, relu):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), relu,
                                      nn.MaxPool2d(2), nn.Flatten())
        self.head = nn.Linear(8 * 4 * 4, 5)

    def forward(self, x):
        return self.head(self.features(x))


class KeptFinite(common.Trainer):
    steps = 8
    variant = "hook"
    expected_cause = "unknown"  # an output times inf names no cause the diagnosis knows

    def __init__(self):
        self.step = 0
        self.relu = None

    def spoil(self, y):
        return y * float("inf") if self.step >= self.fault_step else y

    def model(self):
        if self.variant not in VARIANTS:
            raise SystemExit("kept_finite: --variant is one of %s" % ", ".join(VARIANTS))
        if self.variant == "userrelu":
            self.relu = ReLU(self)
        else:
            self.relu = nn.ReLU()
        if self.variant == "hook":
            self.relu.register_forward_hook(lambda m, i, out: self.spoil(out))
        elif self.variant == "override":
            plain = self.relu.forward
            self.relu.forward = lambda x: self.spoil(plain(x))
        elif self.variant == "patched":
            torch_forward = nn.ReLU.forward

            def forward(module, x):
                return self.spoil(torch_forward(module, x))
            nn.ReLU.forward = forward
        return Net(self.relu)

    def schedule(self, model, step):
        self.step = step
        if 0 < step <= self.fault_step:
            # the daemon vouches for a module after its first call: a pause to let it (the
            # counts of kept outputs the test checks come from steps 1 to 3)
            time.sleep(0.4)
        if self.variant == "global" and step == self.fault_step:
            nn.modules.module.register_module_forward_hook(
                lambda m, i, out: self.spoil(out) if m is self.relu else None)
        if self.variant == "replaced" and step == self.fault_step:
            hooks = collections.OrderedDict(spoil=lambda m, i, out: self.spoil(out))
            hooks.update(self.relu._forward_hooks)
            self.relu._forward_hooks = hooks

    def loss(self):
        return nn.CrossEntropyLoss()

    def batch(self, step, micro, gen):
        x = torch.randn(6, 3, 8, 8, generator=gen)
        y = torch.randint(0, 5, (6,), generator=gen)
        return (x,), y


if __name__ == "__main__":
    common.main(KeptFinite())
