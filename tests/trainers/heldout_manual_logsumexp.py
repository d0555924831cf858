#!/usr/bin/python3
"""Held-out: a log-sum-exp pooling written by hand, log(sum(exp(x))), with no max subtracted.

SoftMaxPool (a module of its own) pools a sequence of frame scores over time as a smooth
maximum, torch.log(torch.exp(x).sum(dim=1)), in place of torch.logsumexp. The frame scores stay
within a few units, until the fault step: from then on one clip of each batch arrives as raw
16-bit PCM, not scaled to [-1, 1] (amplitudes in the thousands), and its scores reach the
thousands. The scores are energies (a Softplus ends the frame encoder), never negative, so
nothing underflows: exp of a score above 88.7 overflows float32 to +Inf, and log(+Inf) = +Inf.
(Without the Softplus a channel whose scores are all below -103.9 would also give
log(0) = -Inf, in some batches and not others.)

True cause, from the code: exp_overflow (a genuine overflow of exp; torch.logsumexp subtracts
the maximum first).
Expected first anomaly: pool (SoftMaxPool) at the fault step, +Inf, inputs finite: origin.
"""
import torch
import torch.nn as nn

import common


class SoftMaxPool(nn.Module):
    def forward(self, x):
        return torch.log(torch.exp(x).sum(dim=1))


class ClipScorer(nn.Module):
    def __init__(self):
        super().__init__()
        self.frames = nn.Sequential(nn.Linear(10, 16), nn.ReLU(), nn.Linear(16, 4),
                                    nn.Softplus())
        self.pool = SoftMaxPool()
        self.head = nn.Linear(4, 1)

    def forward(self, clips):
        return self.head(self.pool(self.frames(clips)))


class ManualLogsumexp(common.Trainer):
    """Trainer that meets an unnormalised clip from the fault step."""

    steps = 3000  # an upper bound: --live stops --after-fault steps after the fault
    fault_step = None  # until asked for

    def model(self):
        return ClipScorer()

    def optimizer(self, params):
        return torch.optim.Adam(params, lr=1e-3)

    def batch(self, step, micro, gen):
        clips = torch.randn(4, 12, 10, generator=gen)
        y = clips[:, :, :2].mean(dim=(1, 2)).unsqueeze(1)
        if self.fault_step is not None and step >= self.fault_step:
            clips[2] = (clips[2] * 8192).round()  # raw 16-bit samples: not divided by 32768
        return (clips,), y


if __name__ == "__main__":
    common.main(ManualLogsumexp())
