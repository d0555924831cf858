#!/usr/bin/python3
"""Two kinds of memory in one forward pass, for the read-method tests
(tests/integration/test_read_method.py): a module that returns a tensor mapped from a file
(torch.from_file, shared: the file's own pages, as a memory-mapped weight or data set is) of
ELEMS float32 elements, and a head that returns a fresh one-element tensor of the allocator's
(anonymous memory), which the root returns as it is; PASSES forward passes under
torch.no_grad(), nothing else. Per pass: one scan of the file's pages, two of anonymous memory
(the head's output, then the root's), one chunk each.

  --file PATH  the file: ELEMS float32 values the test wrote (it plants a NaN at NAN_AT)
  --wait       print "READY <pid>", block on one line of stdin (the test attaches the daemon)

Prints {"trace": ..., "facts": ...}: passes, the bytes of the mapped output, where its NaN is.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn as nn

PASSES = 20
ELEMS = (1 << 18) + 1  # 1 MiB and 4 bytes: 128 whole 8 KiB chunks and a partial one
NAN_AT = 12345


class Mapped(nn.Module):
    """The file's pages, mapped shared, as the tensor's storage."""

    def __init__(self, path):
        super().__init__()
        self.path = path

    def forward(self):
        t = torch.from_file(self.path, shared=True, size=ELEMS, dtype=torch.float32)
        t.sum()  # read once, as a weight is used: its pages are in the process's page tables
        return t


class Head(nn.Module):
    def forward(self, m):
        return m[:1].nan_to_num() * 0 + 1


class Net(nn.Module):
    def __init__(self, path):
        super().__init__()
        self.mapped = Mapped(path)
        self.head = Head()

    def forward(self):
        return self.head(self.mapped())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--file", required=True)
    ap.add_argument("--wait", action="store_true")
    a = ap.parse_args()
    torch.manual_seed(1234)
    torch.set_num_threads(1)
    net = Net(a.file)
    if a.wait:
        print("READY %d" % os.getpid(), flush=True)
        sys.stdin.readline()
    total = 0.0
    with torch.no_grad():
        for _ in range(PASSES):
            total += float(net()[0])
    print(json.dumps({"trace": {"sum": float.hex(total)},
                      "facts": {"passes": PASSES, "output_bytes": ELEMS * 4,
                                "nan_at": NAN_AT}}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
