#!/usr/bin/python3
"""Saturated sensor readings into an LSTM: at step 4 one time step of one sequence reads +Inf
on every channel; the gate pre-activations sum +Inf and -Inf terms, become NaN, and the LSTM's
tuple output (out, (h, c)) goes NaN from that time step on. The loss is a function, not a module.

(A huge but finite input does not do it: gates saturate, sigmoid and tanh are bounded, and a
single sequential dot product cannot meet +Inf and -Inf.)

Expected first anomaly: encoder.rnn (LSTM) output[0], inputs not finite; the same iteration
also reports output[1][0] and output[1][1], then the same three for encoder (Encoder).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import common


class Encoder(nn.Module):
    """Returns the LSTM's tuple unchanged, so a tuple output also crosses a module boundary."""

    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(8, 8)

    def forward(self, x):
        return self.rnn(x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = Encoder()
        self.head = nn.Sequential(nn.Linear(8, 8), nn.Tanh(), nn.Linear(8, 1))

    def forward(self, x):
        out, (h, c) = self.encoder(x)
        return self.head(out[-1])


class RnnTuple(common.Trainer):
    """Trainer whose batch at step 4 holds +Inf readings."""

    expected_cause = "bad_input_data"  # what the daemon's diagnosis must say

    def model(self):
        return Net()

    def loss(self):
        return F.mse_loss

    def batch(self, step, micro, gen):
        x = torch.randn(5, 3, 8, generator=gen)  # (seq, batch, features)
        y = x.mean(dim=(0, 2)).unsqueeze(1)
        if step == 4:
            x[2, 1, :] = float("inf")
        return (x,), y


if __name__ == "__main__":
    common.main(RnnTuple())
