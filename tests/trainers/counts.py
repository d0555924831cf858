#!/usr/bin/python3
"""Counts known by construction, for the cost guard (tests/integration/test_costs.py): a model
of KIDS children, each returning a fresh float32 tensor of ELEMS elements (1 MiB and 4 bytes:
128 whole 8 KiB chunks and a partial one), called PASSES times under torch.no_grad(), with no
optimizer, loss or backward, so that every module call, every byte the daemon should scan and
every Python frame entered is this file's.

  (no flag)  run, then print {"trace": ..., "facts": ...}
  --wait     print "READY <pid>", block on one line of stdin (the test attaches the daemon),
             then the same
  --grad     the input requires grad (still no backward): outputs carry a grad_fn, so the
             root's return, its last kid's output as it is, is known and not scanned again

facts: forward passes, module calls, module outputs (each kid's, and the root's: the last kid's output returned
as it is), the bytes of one output.
"""
import json
import os
import sys

import torch
import torch.nn as nn

KIDS = 4
PASSES = 40
ELEMS = (1 << 18) + 1


class Scale(nn.Module):
    def forward(self, x):
        return x * 1.0001


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.kids = nn.ModuleList(Scale() for _ in range(KIDS))

    def forward(self, x):
        for kid in self.kids:
            x = kid(x)
        return x


def main():
    torch.manual_seed(1234)
    torch.set_num_threads(1)
    net = Net()
    x = torch.rand(ELEMS, requires_grad="--grad" in sys.argv[1:])
    if "--wait" in sys.argv[1:]:
        print("READY %d" % os.getpid(), flush=True)
        sys.stdin.readline()
    total = 0.0
    with torch.set_grad_enabled("--grad" in sys.argv[1:]):
        for _ in range(PASSES):
            total += float(net(x)[0])
    print(json.dumps({"trace": {"sum": float.hex(total)},
                      "facts": {"passes": PASSES, "module_calls": PASSES * (KIDS + 1),
                                "outputs": PASSES * (KIDS + 1), "output_bytes": ELEMS * 4}}),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
