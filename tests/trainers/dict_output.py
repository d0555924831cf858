#!/usr/bin/python3
"""Modules that return dicts, as Hugging Face models do (a ModelOutput is an OrderedDict), or
namedtuples: the model divides its head's logits by a temperature annealed to 0.0 at step 4
and returns {"hidden": ..., "logits": ...}; the loss module takes the logits from it.

--variant plain: a dict; ordered: an OrderedDict subclass (ModelOutput's kind); named: a
namedtuple (hidden, logits); fields: a dataclass (hidden, logits), no dict.
Expected first anomaly: the model itself ("", Net) at step 4, tensor output['logits']
(output[1] for the namedtuple, output.logits for the dataclass), ±Inf, inputs finite: origin
(its children's outputs are finite). Then the loss modules, their input (the dict, namedtuple
or dataclass) not finite.
--variant head: the dataclass comes from the model's head (FieldsHead, a layer with no
children, as a capture's replay rebuilds), which holds the temperature; the model returns it
as it is. First anomaly: head (FieldsHead) output.logits, an origin; then the model, the same
dataclass.
"""
import collections
import dataclasses

import torch
import torch.nn as nn

import common


class Output(collections.OrderedDict):
    """A dict subclass, as transformers' ModelOutput."""


Named = collections.namedtuple("Named", ["hidden", "logits"])


@dataclasses.dataclass
class Fields:
    """A dataclass that is no dict."""
    hidden: torch.Tensor
    logits: torch.Tensor


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


class FieldsHead(nn.Module):
    """A head with no child modules that returns a dataclass, its logits divided by a
    temperature buffer."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(5, 12) * 0.3)
        self.register_buffer("temperature", torch.tensor(1.0))

    def forward(self, hidden):
        return Fields(hidden=hidden, logits=hidden @ self.weight.t() / self.temperature)


class HeadNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(6, 12), nn.ReLU())
        self.head = FieldsHead()

    def forward(self, x):
        return self.head(self.encoder(x))


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
        if self.variant == "head":
            return HeadNet()
        return Net({"ordered": Output, "named": Named, "fields": Fields}.get(self.variant, dict))

    def loss(self):
        return DictLoss()

    def schedule(self, model, step):
        holder = model.head if self.variant == "head" else model
        holder.temperature.fill_(max(0.0, 1.0 - step / self.fault_step))

    def batch(self, step, micro, gen):
        x = torch.randn(6, 6, generator=gen)
        y = torch.randint(0, 5, (6,), generator=gen)
        return (x,), y


if __name__ == "__main__":
    common.main(DictOutput())
