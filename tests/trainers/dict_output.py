#!/usr/bin/python3
"""Modules that return dicts, as Hugging Face models do (a ModelOutput is an OrderedDict), or
namedtuples: the model divides its head's logits by a temperature annealed to 0.0 at step 4
and returns {"hidden": ..., "logits": ...}; the loss module takes the logits from it.

--variant plain: a dict; ordered: an OrderedDict subclass (ModelOutput's kind); named: a
namedtuple (hidden, logits).
Expected first anomaly: the model itself ("", Net) at step 4, tensor output['logits']
(output[1] for the namedtuple), ±Inf, inputs finite: origin (its children's outputs are
finite). Then the loss modules, their input (the dict or namedtuple) not finite.
"""
import collections

import torch
import torch.nn as nn

import common


class Output(collections.OrderedDict):
    """A dict subclass, as transformers' ModelOutput."""


Named = collections.namedtuple("Named", ["hidden", "logits"])


class Net(nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.kind = kind
        self.encoder = nn.Sequential(nn.Linear(6, 12), nn.ReLU())
        self.head = nn.Linear(12, 5)
        self.register_buffer("temperature", torch.tensor(1.0))

    def forward(self, x):
        hidden = self.encoder(x)
        logits = self.head(hidden) / self.temperature
        return self.kind(hidden=hidden, logits=logits)


class DictLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.ce = nn.CrossEntropyLoss()

    def forward(self, out, target):
        return self.ce(out["logits"] if isinstance(out, dict) else out.logits, target)


class DictOutput(common.Trainer):
    """Trainer whose model returns a dict; its temperature schedule reaches zero at step 4."""

    expected_cause = "division_by_zero"  # what the daemon's diagnosis must say
    variant = "plain"

    def model(self):
        return Net({"ordered": Output, "named": Named}.get(self.variant, dict))

    def loss(self):
        return DictLoss()

    def schedule(self, model, step):
        model.temperature.fill_(max(0.0, 1.0 - step / self.fault_step))

    def batch(self, step, micro, gen):
        x = torch.randn(6, 6, generator=gen)
        y = torch.randint(0, 5, (6,), generator=gen)
        return (x,), y


if __name__ == "__main__":
    common.main(DictOutput())
