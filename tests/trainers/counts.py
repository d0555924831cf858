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
  --identity an nn.Identity after each kid: it returns its input, the previous sibling's
             output, as it is (known and not scanned again with --grad)
  --backward the input requires grad and each pass ends in a backward pass of its output's
             sum: the input's gradient (ELEMS elements) is the one gradient the default
             --backward norms scans, once a pass (torch's own backward frames add probe hits)
  --wide     with --backward: a second leaf of WIDE elements (12 MiB, more than the daemon's
             gradient ring takes whole) added to the loss, scaled by SCALE: its gradient goes
             the other way (counted in BPF), in the same passes as the input's

facts: forward passes, module calls, module outputs (each kid's, and the root's: the last kid's output returned
as it is), the Identity returns (--identity), the bytes of one output, the backward passes.
"""
import json
import os
import sys

import torch
import torch.nn as nn

KIDS = 4
PASSES = 40
ELEMS = (1 << 18) + 1
WIDE = 3 << 20
SCALE = 0.5


class Scale(nn.Module):
    def forward(self, x):
        return x * 1.0001


class Net(nn.Module):
    def __init__(self, identity):
        super().__init__()
        self.kids = nn.ModuleList(Scale() for _ in range(KIDS))
        self.same = nn.ModuleList(nn.Identity() for _ in range(KIDS if identity else 0))
        # the calls in order, a plain list: no Python frame to walk it (probe hits stay the
        # modules' own)
        self.order = [m for i, kid in enumerate(self.kids)
                      for m in ((kid, self.same[i]) if identity else (kid,))]

    def forward(self, x):
        for m in self.order:
            x = m(x)
        return x


def grad_norm(leaves):
    """The norm of the gradients the leaves got in the first pass (every pass gives them the
    same ones: .grad holds the first pass's after it)."""
    return sum(float((t.grad.double() ** 2).sum()) for t in leaves if t is not None) ** 0.5


def main():
    torch.manual_seed(1234)
    torch.set_num_threads(1)
    identity = "--identity" in sys.argv[1:]
    backward = "--backward" in sys.argv[1:]
    wide = torch.ones(WIDE, requires_grad=True) if "--wide" in sys.argv[1:] else None
    grad = backward or "--grad" in sys.argv[1:]
    net = Net(identity)
    x = torch.rand(ELEMS, requires_grad=grad)
    if "--wait" in sys.argv[1:]:
        print("READY %d" % os.getpid(), flush=True)
        sys.stdin.readline()
    calls = KIDS + len(net.same)
    total = 0.0
    norm = None
    with torch.set_grad_enabled(grad):
        for _ in range(PASSES):
            out = net(x)
            total += float(out[0])
            if backward:
                loss = out.sum()
                if wide is not None:
                    loss = loss + (wide * SCALE).sum()
                loss.backward()
                if norm is None:
                    norm = grad_norm((x, wide))
    print(json.dumps({"trace": {"sum": float.hex(total)},
                      "facts": {"passes": PASSES, "module_calls": PASSES * (calls + 1),
                                "outputs": PASSES * (calls + 1),
                                "identities": PASSES * len(net.same),
                                "output_bytes": ELEMS * 4,
                                "backward_passes": PASSES if backward else 0,
                                # each pass's gradient norm: torch's, of what the leaves get
                                "grad_norm": norm}}),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
