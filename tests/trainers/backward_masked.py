#!/usr/bin/python3
"""The classic backward-only NaN: torch.where(z > 0, op(z), 0) with op sqrt or log, made
inside a module's forward (not at its output), or between two modules.

z = proj(x) ** 2 >= 0 (no bias). At step 4 one sample of the batch is all zeros, so its z row
is exactly 0: where keeps 0 there and every module output and the loss stay finite. In
backward where sends a zero gradient to the discarded branch, and the op's derivative at 0
(1 / (2 sqrt(0)) or 1 / 0) makes it 0 * Inf = NaN. detect_anomaly names SqrtBackward0 or
LogBackward0, and its forward traceback shows the line in the forward that made it.

--variant OP-PLACE, OP sqrt or log, PLACE:
  nested   the op in MaskedGate.forward, the gate nested two deep: layer "blocks.1.gate"
  top      the op in the model's own forward: layer "" (MaskedTop)
  between  the op in the loss, after the model and before the nn.MSELoss module that takes
           its result: made outside any module call, layer null

Expected: phase "backward", step 4, node SqrtBackward0 / LogBackward0, grad[0], that layer.
"""
import torch
import torch.nn as nn

import common


class MaskedGate(nn.Module):
    """The masked op inside forward: its result is an intermediate, not the output."""

    def __init__(self, op):
        super().__init__()
        self.op = op
        self.proj = nn.Linear(6, 6, bias=False)

    def forward(self, x):
        z = self.proj(x) ** 2
        if self.op == "log":
            r = torch.where(z > 0, torch.log(z), torch.zeros_like(z))
        else:
            r = torch.where(z > 0, torch.sqrt(z), torch.zeros_like(z))
        return 0.1 * r


class Block(nn.Module):
    def __init__(self, op):
        super().__init__()
        self.lin = nn.Linear(6, 6)
        self.gate = MaskedGate(op) if op else None

    def forward(self, h, x):
        out = torch.tanh(self.lin(h))
        if self.gate is not None:
            out = out + self.gate(x)
        return out


class MaskedNested(nn.Module):
    def __init__(self, op):
        super().__init__()
        self.blocks = nn.ModuleList([Block(None), Block(op)])
        self.head = nn.Linear(6, 1)

    def forward(self, x):
        h = x
        for b in self.blocks:
            h = b(h, x)
        return self.head(h)


class MaskedTop(nn.Module):
    def __init__(self, op):
        super().__init__()
        self.op = op
        self.proj = nn.Linear(6, 6, bias=False)
        self.head = nn.Linear(6, 1)

    def forward(self, x):
        z = self.proj(x) ** 2
        if self.op == "log":
            r = torch.where(z > 0, torch.log(z), torch.zeros_like(z))
        else:
            r = torch.where(z > 0, torch.sqrt(z), torch.zeros_like(z))
        return self.head(torch.tanh(x) + 0.1 * r)


class Plain(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 6), nn.Tanh())
        self.proj = nn.Linear(6, 6, bias=False)

    def forward(self, x):
        return self.body(x), self.proj(x)


class MaskedLoss:
    """Between two modules: the model's output, the masked op, then the nn.MSELoss module."""

    def __init__(self, op):
        self.op = op
        self.mse = nn.MSELoss()
        self.top_modules = [self.mse]

    def __call__(self, out, target):
        h, p = out
        z = p ** 2
        if self.op == "log":
            r = torch.where(z > 0, torch.log(z), torch.zeros_like(z))
        else:
            r = torch.where(z > 0, torch.sqrt(z), torch.zeros_like(z))
        return self.mse(h.sum(dim=1, keepdim=True) + 0.1 * r.sum(dim=1, keepdim=True), target)


class BackwardMasked(common.Trainer):
    """Trainer whose batch has an all-zero sample at step 4."""

    expected_cause = "invalid_domain"
    watch_backward = True
    lr = 0.01
    variant = "sqrt-nested"

    def parts(self):
        op, place = self.variant.split("-")
        if op not in ("sqrt", "log") or place not in ("nested", "top", "between"):
            raise SystemExit("--variant OP-PLACE: OP sqrt or log, PLACE nested, top or between")
        return op, place

    def model(self):
        op, place = self.parts()
        if place == "nested":
            return MaskedNested(op)
        if place == "top":
            return MaskedTop(op)
        return Plain()

    def loss(self):
        op, place = self.parts()
        if place == "between":
            return MaskedLoss(op)
        return super().loss()

    def batch(self, step, micro, gen):
        x = torch.randn(8, 6, generator=gen)
        if step == self.fault_step:
            x[3] = 0.0
        return (x,), x.sum(dim=1, keepdim=True)


if __name__ == "__main__":
    common.main(BackwardMasked())
