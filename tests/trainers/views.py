#!/usr/bin/python3
"""Views and dtypes the daemon must read right, or leave alone.

Every iteration, before anything can go wrong:
  transpose (Transpose)  returns x.transpose(0, 1): a non-contiguous view, always finite
  pick (Pick)            returns x[:, ::2]: a strided, non-contiguous view, always finite
  codes (Codes)          returns (argmax int64, int32 flags that are -1 where x > 0); -1 is
                         0xffffffff, a NaN bit pattern were it read as float32: integer outputs
                         must be ignored
Both views and both integer tensors are taken from the input batch only, so they stay finite
(and the flags keep their NaN-looking bits) even after the fault has spoiled the parameters.

split (Split) computes in float64 and returns torch.chunk(z, 3, dim=0): three contiguous (2, 12)
views of one storage, at storage offsets 0, 24 and 48 elements (0, 192 and 384 bytes). At step 4
the schedule zeroes four entries of its temperature, all in rows 4-5 (the last chunk): three
with a finite numerator give ±Inf, one whose gain is zeroed too gives 0/0 = NaN.

Expected first anomaly: split (Split) output[2], float64 [2, 12], nan 1, posinf + neginf 3,
step 4, iteration 4, inputs finite: origin. output[0] and output[1] stay finite; head (Linear)
output, "" (Net) output and the MSELoss output follow in the same iteration.
"""
import torch
import torch.nn as nn

import common

BATCH, FEATURES, HIDDEN = 6, 8, 12


class Transpose(nn.Module):
    def forward(self, x):
        return x.transpose(0, 1)


class Pick(nn.Module):
    """Every other feature, as a view (strides (8, 2), not dense)."""

    def forward(self, x):
        return x[:, ::2]


class Codes(nn.Module):
    def forward(self, x):
        return x.argmax(dim=1), torch.where(x > 0, -1, 0).to(torch.int32)


class Split(nn.Module):
    """Scales in double precision and hands back three row blocks (the bug: temperature 0)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("temperature", torch.ones(BATCH, HIDDEN, dtype=torch.float64))
        self.register_buffer("gain", torch.ones(BATCH, HIDDEN, dtype=torch.float64))

    def forward(self, h):
        z = h.double() * self.gain / self.temperature
        return torch.chunk(z, 3, dim=0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.transpose = Transpose()
        self.pick = Pick()
        self.codes = Codes()
        self.embed = nn.Linear(FEATURES, HIDDEN)
        self.side = nn.Linear(FEATURES // 2, HIDDEN)
        self.table = nn.Embedding(FEATURES, HIDDEN)
        self.split = Split()
        self.head = nn.Linear(HIDDEN, 1)

    def forward(self, x):
        xt = self.transpose(x)
        xs = self.pick(x)
        idx, flags = self.codes(x)
        h = self.embed(xt.t() + 0.1 * flags.float()) + self.side(xs) + self.table(idx)
        pieces = self.split(h)
        return self.head(torch.cat(pieces, dim=0).float())


class Views(common.Trainer):
    """Trainer with view outputs (chunks, transpose, strided slice), float64 and integer outputs;
    the temperature of the chunked layer reaches zero in the last chunk at step 4."""

    expected_cause = "division_by_zero"  # what the daemon's diagnosis must say

    lr = 0.02

    def model(self):
        return Net()

    def schedule(self, model, step):
        split = model.split
        split.temperature.fill_(1.0)
        split.gain.fill_(1.0)
        if step == self.fault_step:
            split.temperature[4, 0:3] = 0.0  # finite / 0: ±Inf, three values
            split.temperature[5, 7] = 0.0
            split.gain[5, 7] = 0.0  # 0 / 0: NaN, one value

    def batch(self, step, micro, gen):
        x = torch.randn(BATCH, FEATURES, generator=gen)
        y = x.mean(dim=1, keepdim=True)
        return (x,), y


if __name__ == "__main__":
    common.main(Views())
