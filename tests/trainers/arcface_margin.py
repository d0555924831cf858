#!/usr/bin/python3
"""An additive angular margin head (ArcFace), written as papers write it: the angle between an
embedding and each class centre is acos of their cosine, a dot product over the two norms, and
the target class's logit is cos(angle + margin). At step 4 an embedding lies on its class
centre's direction (a collapsed sample): the cosine rounds just past 1, and acos of it is NaN.
The embedding and the weights are finite, and nothing is negative that should not be.

Expected first anomaly: head (ArcHead) at step 4, one NaN, inputs finite: the origin; an op
outside its domain (acos of a cosine past 1), fixed by clamping into [-1, 1].
"""
import torch
import torch.nn as nn

import common

DIM, CLASSES, BATCH = 16, 5, 6


class ArcHead(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(CLASSES, DIM))
        self.margin, self.scale = 0.3, 8.0

    def cosine(self, x):
        return (x @ self.weight.t()) / (x.norm(dim=-1, keepdim=True) *
                                        self.weight.norm(dim=-1)[None])

    def forward(self, x, y):
        cos = self.cosine(x)
        theta = torch.acos(cos)
        target = nn.functional.one_hot(y, CLASSES).bool()
        return self.scale * torch.where(target, torch.cos(theta + self.margin), cos)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.drop = nn.Dropout(0.0)
        self.head = ArcHead()

    def forward(self, x, y):
        return self.head(self.drop(x), y)


class ArcfaceMargin(common.Trainer):
    """Trainer whose batch at step 4 holds an embedding on its class centre's direction."""

    expected_cause = "invalid_domain"
    lr = 0.01

    def model(self):
        return Net()

    def loss(self):
        return nn.CrossEntropyLoss()

    def schedule(self, model, step):
        self.collapsed = None
        if step != self.fault_step:
            return
        # a multiple of class 0's centre whose cosine with it rounds past 1 here (this torch,
        # this CPU): the same search in the oracle's run and the daemon's
        with torch.no_grad():
            w = model.head.weight[0].clone()
            for k in range(2, 400):
                x = w * (k / 7.0)
                if float(model.head.cosine(x[None])[0, 0]) > 1:
                    self.collapsed = x
                    return
        raise SystemExit("no multiple of the centre has a cosine past 1: no fault to make")

    def batch(self, step, micro, gen):
        x = torch.randn(BATCH, DIM, generator=gen)
        y = torch.randint(0, CLASSES, (BATCH,), generator=gen)
        if self.collapsed is not None:
            x[1], y[1] = self.collapsed, 0
        return (x, y), y


if __name__ == "__main__":
    common.main(ArcfaceMargin())
