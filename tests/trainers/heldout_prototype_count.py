#!/usr/bin/python3
"""Held-out: class prototypes averaged over a batch, divided by a per-class count that is 0
for a class the batch does not hold.

A prototypical classifier embeds the batch, computes each class's prototype as the mean of its
embeddings (Prototypes: one_hot(labels).T @ emb / counts, counts = one_hot(labels).sum(0)),
and classifies by distance to the prototypes. A balanced sampler puts every class in every
batch. From the fault step on, the sampler's last class runs out of samples and the batches
hold none of it: its count is 0 and its prototype 0 / 0 = NaN. The zero is a column sum of a
one-hot matrix made inside the module; no input row is zero or constant.

True cause, from the code: division_by_zero (a mean over an empty set: a division by a count
of 0).
Expected first anomaly: protos (Prototypes) at the fault step, NaN, inputs finite: origin.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import common

CLASSES = 4


class Prototypes(nn.Module):
    def forward(self, emb, labels):
        onehot = F.one_hot(labels, CLASSES).to(emb.dtype)
        counts = onehot.sum(dim=0).unsqueeze(1)
        return onehot.t() @ emb / counts


class ProtoNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 8))
        self.protos = Prototypes()

    def forward(self, x, labels):
        emb = self.embed(x)
        centres = self.protos(emb, labels)
        return -torch.cdist(emb, centres)


class PrototypeCount(common.Trainer):
    """Trainer whose batches lack the last class from the fault step."""

    steps = 3000  # an upper bound: --live stops --after-fault steps after the fault
    fault_step = None  # until asked for

    def model(self):
        return ProtoNet()

    def loss(self):
        return nn.CrossEntropyLoss()

    def optimizer(self, params):
        return torch.optim.Adam(params, lr=1e-3)

    def batch(self, step, micro, gen):
        labels = torch.arange(12) % CLASSES  # balanced: each class three times
        if self.fault_step is not None and step >= self.fault_step:
            labels = torch.arange(12) % (CLASSES - 1)  # the last class ran out
        labels = labels[torch.randperm(12, generator=gen)]
        x = torch.randn(12, 6, generator=gen) + F.one_hot(labels, 6).float() * 2
        return (x, labels), labels


if __name__ == "__main__":
    common.main(PrototypeCount())
