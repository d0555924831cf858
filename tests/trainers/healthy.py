#!/usr/bin/python3
"""A healthy run: nothing non-finite, ever. Mixes the module kinds of the faulty trainers
(ModuleDict, Sequential, an LSTM's tuple output, float16 and bfloat16 elementwise modules, a
namedtuple output with integer indices, in-place ReLU) so a false positive has somewhere to
show up.
"""
import torch
import torch.nn as nn

import common


class LowPrecision(nn.Module):
    """Round-trips through float16 and bfloat16 (values stay small)."""

    def forward(self, x):
        h = x.clamp(-4, 4).half() * 0.5
        b = h.bfloat16() + 1
        return b.float()


class TopK(nn.Module):
    def forward(self, x):
        return torch.topk(x, 2, dim=-1)  # torch.return_types.topk, indices are int64


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.parts = nn.ModuleDict({
            "rnn": nn.LSTM(4, 6),
            "mlp": nn.Sequential(nn.Linear(6, 6), nn.ReLU(inplace=True), LowPrecision()),
        })
        self.router = TopK()
        self.head = nn.Linear(6, 1)

    def forward(self, x):
        out, _ = self.parts["rnn"](x)
        h = self.parts["mlp"](out[-1])
        top = self.router(h)
        return self.head(h) + top.values.sum(dim=-1, keepdim=True) * 0.01


class Healthy(common.Trainer):
    """Trainer with no fault."""

    def model(self):
        return Net()

    def batch(self, step, micro, gen):
        x = torch.randn(5, 3, 4, generator=gen)
        y = x.mean(dim=(0, 2)).unsqueeze(1)
        return (x,), y


if __name__ == "__main__":
    common.main(Healthy())
