#!/usr/bin/python3
"""NaN in the input data at step 4.

--variant a: a model of its own (Net, Encoder), one value of the batch written NaN inline (a
  corrupt sample). Expected first anomaly: encoder.layers.0.0 (Linear), inputs not finite, so
  not the origin.
--variant b: built-in modules (a Sequential starting with LayerNorm); the data pipeline's
  helper standardises each sample by its own standard deviation, and one sample is a constant
  reading (a dead sensor): 0/0, a whole row of NaN. Expected first anomaly: "0" (LayerNorm),
  inputs not finite.
--variant c: the corrupt values arrive by keyword: a FiLM layer scales the encoder's (finite)
  features by a conditioning vector passed as film(h, gamma=cond), and one sample's
  conditioning is NaN. Expected first anomaly: film (FiLM), inputs not finite (the keyword
  argument), so not the origin.
"""
import torch
import torch.nn as nn

import common


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([
            nn.Sequential(nn.Linear(8, 16), nn.Tanh()),
            nn.Sequential(nn.Linear(16, 16), nn.Tanh()),
        ])

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder()
        self.head = nn.Linear(16, 1)

    def forward(self, x):
        return self.head(self.encoder(x))


class FiLM(nn.Module):
    """Feature-wise scaling by a conditioning vector."""

    def forward(self, h, gamma=None):
        return h * gamma


class Conditioned(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder()
        self.film = FiLM()
        self.head = nn.Linear(16, 1)

    def forward(self, x, cond):
        return self.head(self.film(self.encoder(x), gamma=cond))


def standardize(x):
    """Each sample to zero mean and unit deviation, with no guard for a constant sample."""
    mean = x.mean(dim=1, keepdim=True)
    return (x - mean) / x.std(dim=1, keepdim=True)


class NanInput(common.Trainer):
    """Trainer whose input batch holds a NaN at step 4."""

    expected_cause = "bad_input_data"  # what the daemon's diagnosis must say
    variant = "a"

    def model(self):
        if self.variant == "a":
            return Net()
        if self.variant == "c":
            return Conditioned()
        return nn.Sequential(nn.LayerNorm(8), nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 1))

    def batch(self, step, micro, gen):
        x = torch.randn(4, 8, generator=gen)
        y = x[:, :3].sum(dim=1, keepdim=True).sin()
        if self.variant == "a":
            if step == 4:
                x[2, 5] = float("nan")  # a corrupt sample; the target was computed before
            return (x,), y
        if self.variant == "c":
            cond = 1 + 0.1 * torch.randn(4, 16, generator=gen)
            if step == 4:
                cond[1] = float("nan")  # a sample's conditioning is missing
            return (x, cond), y
        if step == 4:
            x[2] = 3.0  # a dead sensor: the same reading on every channel
        return (standardize(x),), y


if __name__ == "__main__":
    common.main(NanInput())
