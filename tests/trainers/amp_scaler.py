#!/usr/bin/python3
"""Mixed precision with a GradScaler (torch 2.x: torch.amp.GradScaler on the CPU, float16
autocast). The scaler starts at a scale far too large and grows it again every few steps, so
the scaled float16 gradients overflow on purpose now and then: the scaler finds the Inf,
skips that update and backs off. Healthy training.

--variant a (healthy): nothing else is wrong. Expected: no anomaly, no diagnosis; the skipped
  steps reported as such, their number the trainer's own count (trace "skipped").
--variant b (stuck): the first layer takes sqrt(|w * x|) of sparse features, some exactly 0:
  the gradient of sqrt at 0 is +Inf, times abs's 0 there is NaN, whatever the scale, so every
  update is skipped and the scale falls without end. Expected: an incident whose cause says
  the skipping persists.
"""
import torch
import torch.nn as nn

import common


class Rooted(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(8))

    def forward(self, x):
        return torch.sqrt((self.w * x).abs())


class Net(nn.Module):
    def __init__(self, variant):
        super().__init__()
        self.feat = Rooted() if variant == "b" else nn.Identity()
        self.body = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 32), nn.Tanh())
        self.head = nn.Linear(32, 1)

    def forward(self, x):
        return self.head(self.body(self.feat(x)))


class AmpScaler(common.Trainer):
    """Float16 autocast and a GradScaler that overflows now and then on purpose."""

    steps = 40
    variant = "a"
    lr = 0.01

    def model(self):
        return Net(self.variant)

    def batch(self, step, micro, gen):
        x = torch.randn(16, 8, generator=gen)
        x[:, 0] = 0  # a feature absent from every sample
        return (x,), x[:, :2].sum(dim=1, keepdim=True).tanh()

    def grad_scaler(self):
        return torch.amp.GradScaler("cpu", init_scale=2.0 ** 30, growth_interval=4)


if __name__ == "__main__":
    common.main(AmpScaler())
