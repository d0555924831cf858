#!/usr/bin/python3
"""Self-distillation with an EMA teacher: the teacher (a second root model) runs under no_grad
each step, and its output is sharpened by a softmax over logits divided by a temperature
buffer annealed to 0 at step 4. logits / 0 is ±Inf, and softmax over ±Inf is NaN; no autograd
node records it (no_grad), so only the code of the sharpening module names its ops (softmax:
the "/" is no name).

Expected first anomaly: "" (Sharpen) at step 4, NaN only, inputs and parameters finite: the
origin; division by zero (the temperature buffer is a single 0).
"""
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

import common


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(6, 12), nn.GELU())
        self.cls = nn.Linear(12, 4)

    def forward(self, x):
        return self.cls(self.enc(x))


class Sharpen(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("t", torch.tensor(1.0))

    def forward(self, logits):
        return F.softmax(logits / self.t, dim=-1)


class Distill:
    """Cross-entropy to the labels plus to the teacher's sharpened output."""

    def __init__(self, teacher, batches):
        self.teacher = teacher
        self.batches = batches
        self.sharpen = Sharpen()
        self.top_modules = [self.sharpen, teacher]

    def __call__(self, out, y):
        with torch.no_grad():
            target = self.sharpen(self.teacher(self.batches[-1]))
        return F.cross_entropy(out, y) + (F.log_softmax(out, -1) * -target).sum(-1).mean()


class TeacherTemp(common.Trainer):
    """Trainer whose teacher temperature reaches zero at step 4."""

    expected_cause = "division_by_zero"

    def model(self):
        m = Net()
        self.teacher = copy.deepcopy(m)
        for p in self.teacher.parameters():
            p.requires_grad_(False)
        self.batches = []
        return m

    def loss(self):
        self.distill = Distill(self.teacher, self.batches)
        return self.distill

    def schedule(self, model, step):
        self.distill.sharpen.t.fill_(max(0.0, 1.0 - step / self.fault_step))
        with torch.no_grad():
            for pt, ps in zip(self.teacher.parameters(), model.parameters()):
                pt.mul_(0.9).add_(ps, alpha=0.1)

    def batch(self, step, micro, gen):
        x = torch.randn(5, 6, generator=gen)
        self.batches[:] = [x]
        return (x,), torch.randint(0, 4, (5,), generator=gen)


if __name__ == "__main__":
    common.main(TeacherTemp())
