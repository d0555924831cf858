#!/usr/bin/python3
"""The first non-finite output is a view with holes or overlaps, which the daemon reads element
by element where its span holds NaN/±Inf: its counts are the view's own, each element counted
as often as the view shows it.

--variant chomp: a temporal convolutional network whose causal convolution (a Conv1d subclass)
pads both sides and returns super().forward(x)[:, :, :-pad], a view with holes; at step 4 one
sample of the batch holds a NaN: chomp's output is the first non-finite one (bad_input_data).
--variant expand: a pooling layer returns (x.mean(-1, keepdim=True) / self.temp).expand_as(x),
every mean shown 8 times (a stride of 0); at step 4 its temperature is annealed to 0: each mean
divided by 0 is ±Inf, counted 8 times (division_by_zero).
--variant unfold: a layer returns torch.log(x).unfold(1, 4, 2), overlapping windows of 4 with a
step of 2 (an element in two windows is counted twice); at step 4 one feature of the batch is 0:
its log is -Inf (loss_log_zero).
--variant halves: a layer returns the two halves of torch.cat([x, torch.log(x)], 1), views
whose spans overlap; at step 4 one feature of the batch is negative: the second half holds a
NaN (invalid_domain), and the first, finite, must not be named for the NaN between its elements.
--variant cls: a pooler returns the first token of its unit-normalised hidden states,
(h / h.norm(dim=-1, keepdim=True))[:, 0], one run of 256 values for each of 4 sequences of 64
tokens (fewer copies than its span: read run by run at once); at step 4 one sequence's first
token and another's fifth are all zeros: 0/0 is NaN in both, and only the first is the view's
(256 NaN; division_by_zero).
--variant patches: a layer cuts log1p of an image into 4x4 patches with a stride of 2 by two
unfolds (a view of 6 dims whose patches overlap; 4x4 patches with a stride of 4 would be a dense
permutation); at step 4 one pixel of the batch is -1 (data scaled into [-1, 1]): log1p(-1) is
-Inf, in 2 patches (loss_log_zero).
Expected first anomaly: conv (chomp), pool (expand), win (unfold), halves output[1] (halves),
pool (cls) or patch (patches) output, step 4, iteration 4, with the counts and finite range of
the forward hooks' scan of the view.
"""
import torch
import torch.nn as nn

import common


class CausalConv1d(nn.Conv1d):
    """A causal convolution: padded both sides, the right padding chomped off (a view)."""

    def __init__(self, c_in, c_out, k):
        super().__init__(c_in, c_out, k, padding=k - 1)
        self.chomp = k - 1

    def forward(self, x):
        return super().forward(x)[:, :, :-self.chomp]


class TCN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = CausalConv1d(3, 6, 3)
        self.act = nn.ReLU()
        self.head = nn.Linear(6 * 10, 1)

    def forward(self, x):
        return self.head(self.act(self.conv(x)).flatten(1))


class SumPool(nn.Module):
    """Each row's mean over a learned temperature, broadcast back over the row (expand)."""

    def __init__(self):
        super().__init__()
        self.temp = nn.Parameter(torch.tensor(1.0), requires_grad=False)

    def forward(self, x):
        return (x.mean(-1, keepdim=True) / self.temp).expand_as(x)


class Pooled(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(5, 8)
        self.pool = SumPool()
        self.head = nn.Linear(8, 1)

    def forward(self, x):
        return self.head(self.pool(self.proj(x)))


class LogWindows(nn.Module):
    """Overlapping windows of the log of positive features (unfold)."""

    def forward(self, x):
        return torch.log(x).unfold(1, 4, 2)


class Windowed(nn.Module):
    def __init__(self):
        super().__init__()
        self.win = LogWindows()
        self.head = nn.Linear(4 * 4, 1)

    def forward(self, x):
        return self.head(self.win(x).flatten(1))


class Halves(nn.Module):
    """Features and their logs, returned as two views of one tensor."""

    def forward(self, x):
        y = torch.cat([x, torch.log(x)], dim=1)
        return y[:, :x.shape[1]], y[:, x.shape[1]:]


class Split(nn.Module):
    def __init__(self):
        super().__init__()
        self.halves = Halves()
        self.lin = nn.Linear(5, 1)
        self.log_lin = nn.Linear(5, 1)

    def forward(self, x):
        a, b = self.halves(x)
        return self.lin(a) + self.log_lin(b)


class ClsPool(nn.Module):
    """The first token's unit-normalised hidden state (a view with holes)."""

    def forward(self, h):
        return (h / h.norm(dim=-1, keepdim=True))[:, 0]


class Cls(nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = ClsPool()
        self.head = nn.Linear(256, 1)

    def forward(self, h):
        return self.head(self.pool(h))


class LogPatches(nn.Module):
    """Overlapping 4x4 patches of log1p of an image (two unfolds)."""

    def forward(self, img):
        x = torch.log1p(img)
        return x.unfold(2, 4, 2).unfold(3, 4, 2)


class Patches(nn.Module):
    def __init__(self):
        super().__init__()
        self.patch = LogPatches()
        self.head = nn.Linear(16, 1)

    def forward(self, img):
        p = self.patch(img).reshape(img.shape[0], -1, 16)
        return self.head(p).mean(dim=1)


class Strided(common.Trainer):
    """Trainer whose first non-finite output is a view with holes or overlaps."""

    variant = "chomp"

    @property
    def expected_cause(self):
        return {"chomp": "bad_input_data", "expand": "division_by_zero",
                "halves": "invalid_domain", "cls": "division_by_zero",
                "patches": "loss_log_zero"}.get(
            self.variant, "loss_log_zero")

    def model(self):
        if self.variant == "expand":
            self.lr = 0.01  # a gentle step: the head sees each mean 8 times
        return {"chomp": TCN, "expand": Pooled, "halves": Split, "cls": Cls,
                "patches": Patches}.get(
            self.variant, Windowed)()

    def schedule(self, model, step):
        if self.variant == "expand":
            with torch.no_grad():
                model.pool.temp.fill_(0.0 if step == self.fault_step else 1.0)

    def batch(self, step, micro, gen):
        if self.variant == "chomp":
            x = torch.randn(4, 3, 10, generator=gen)
            if step == self.fault_step:
                x[2, 1, 5] = float("nan")
            return (x,), x.sum(dim=(1, 2)).unsqueeze(1)
        if self.variant == "expand":
            x = torch.randn(6, 5, generator=gen)
            return (x,), x.sum(dim=1, keepdim=True)
        if self.variant == "cls":
            h = torch.randn(4, 64, 256, generator=gen)
            if step == self.fault_step:
                h[1, 0] = 0.0  # a first token of zeros: the view's
                h[2, 4] = 0.0  # a fifth token of zeros: between the view's runs
            return (h,), h[:, 0, :1]
        if self.variant == "patches":
            img = torch.rand(3, 1, 8, 8, generator=gen)
            if step == self.fault_step:
                img[2, 0, 5, 1] = -1.0
            return (img,), img.mean(dim=(1, 2, 3)).unsqueeze(1)
        if self.variant == "halves":
            x = torch.rand(6, 5, generator=gen) + 0.5
            if step == self.fault_step:
                x[1, 2] = -1.0
            return (x,), x.sum(dim=1, keepdim=True)
        x = torch.rand(4, 10, generator=gen) + 0.5
        if step == self.fault_step:
            x[1, 6] = 0.0  # in two windows: [4, 8) and [6, 10)
        return (x,), x.mean(dim=1, keepdim=True)


if __name__ == "__main__":
    common.main(Strided())
