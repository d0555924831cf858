#!/usr/bin/python3
"""One non-finite value at the edges of the daemon's scan: chunks, blocks, the words of a loop
iteration, the last word's tail, for every dtype it scans.

A model of independent Plant modules, each returning a fresh tensor of its own dtype and size,
finite except, from step 4, one value at its own position: the last element of a tensor with a
partial last word, the first and last elements of a 64 KiB chunk and of an 8 KiB block, the
last element before a 128-byte loop group ends, a one-element tensor. The sizes are counted in
bytes so that they fall on those edges for every chunk size up to 64 KiB. After some bad
plants comes a finite one whose data ends just before where the bad one's value lay in the
scanner's buffer (past the first 256 bytes, which the check of the bad plant's input rewrites):
a scan that tested what the previous tensor left there past the data would name it.

Expected: the forward hooks' anomalies of step 4, each plant with its counts and finite range,
the finite plants never named. The first is plants.0 (Plant), origin: it makes the value from
finite inputs.
"""
import torch
import torch.nn as nn

import common

CHUNK = 64 * 1024  # bytes: the scan's chunk (bpf/nanwatch.h NW_SCAN_CHUNK) and its multiples
BLOCK = 8 * 1024  # bytes of a fast_block() call
GROUP = 128  # bytes of an iteration of its loop

# (dtype, bytes of the tensor, byte offset of the bad value or None, the bad value)
NAN, INF = float("nan"), float("inf")
KIB = 1024
CASES = [
    (torch.float32, 2 * CHUNK + 12, 2 * CHUNK + 8, NAN),  # last, in a partial word
    (torch.float32, 3 * CHUNK, 2 * CHUNK, INF),  # first of the last chunk
    (torch.float32, 2 * CHUNK + KIB + 12, 2 * CHUNK + KIB + 8, NAN),  # as the first, further
    (torch.float32, 2 * CHUNK + KIB + 8, None, 0.0),  # ends a word before the value above
    (torch.float32, 2 * CHUNK, 2 * CHUNK - 4, -INF),  # last of a full last chunk
    (torch.float32, CHUNK - 4, None, 0.0),  # its last word's other half: the value above
    (torch.float32, 2 * CHUNK + 4, CHUNK - 4, NAN),  # last of the first chunk
    (torch.float32, 2 * BLOCK, BLOCK - 4, -INF),  # last of the first block
    (torch.float16, CHUNK + 2 * KIB + 2, CHUNK + 2 * KIB, -INF),  # last, alone in its word
    (torch.float16, CHUNK + 2 * KIB, None, 0.0),  # ends a loop group before it
    (torch.bfloat16, 2 * BLOCK + 6, BLOCK, INF),  # first of the second block
    (torch.bfloat16, 3 * BLOCK - 2, 3 * BLOCK - 4, NAN),  # before the last, in a partial word
    (torch.bfloat16, 3 * BLOCK - 6, None, 0.0),  # its last word's tail: the value above
    (torch.float64, CHUNK + 8, CHUNK, NAN),  # the one word past a chunk
    (torch.float32, 4 * KIB + GROUP - 4, 4 * KIB + GROUP - 8, INF),  # a loop group, not full
    (torch.float32, 4 * KIB + GROUP - 8, None, 0.0),  # ends a word before it
    (torch.float32, 4, 0, NAN),  # one element
]


class Plant(nn.Module):
    """A fresh tensor of finite values made from the input, one of them bad from the fault."""

    def __init__(self, dtype, nbytes, at, value):
        super().__init__()
        self.dtype, self.at, self.value = dtype, at, value
        self.numel = nbytes * 8 // torch.finfo(dtype).bits
        self.bad = False

    def forward(self, x):
        ramp = torch.linspace(-3.0, 3.0, self.numel, dtype=torch.float64)
        out = (ramp * x.mean().double()).to(self.dtype)
        if self.bad and self.at is not None:
            out[self.at * 8 // torch.finfo(self.dtype).bits] = self.value
        return out


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.plants = nn.ModuleList(Plant(*case) for case in CASES)
        self.head = nn.Linear(4, 1)

    def forward(self, x):
        h = self.head(x)
        # every plant's output reaches the loss: a float32 mean each
        return h + sum(p(x).float().mean() for p in self.plants)


class ScanPositions(common.Trainer):
    """Trainer whose plants each turn one value non-finite at step 4."""

    expected_cause = None
    steps = 5  # the fault's step is the last

    def model(self):
        return Net()

    def schedule(self, model, step):
        for p in model.plants:
            p.bad = step >= self.fault_step

    def batch(self, step, micro, gen):
        x = torch.rand(8, 4, generator=gen) + 0.5
        return (x,), torch.zeros(8, 1)


if __name__ == "__main__":
    common.main(ScanPositions())
