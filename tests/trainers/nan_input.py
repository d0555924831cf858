#!/usr/bin/python3
"""NaN in the input data: one value of the batch at step 4 is NaN (a corrupt sample).

Expected first anomaly: encoder.layers.0.0 (Linear), inputs not finite, so not the origin.
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


class NanInput(common.Trainer):
    """Trainer whose input batch holds a NaN at step 4."""

    expected_cause = "bad_input_data"  # what the daemon's diagnosis must say

    def model(self):
        return Net()

    def batch(self, step, micro, gen):
        x = torch.randn(4, 8, generator=gen)
        y = x[:, :3].sum(dim=1, keepdim=True).sin()
        if step == 4:
            x[2, 5] = float("nan")  # a corrupt sample; the target was computed before
        return (x,), y


if __name__ == "__main__":
    common.main(NanInput())
