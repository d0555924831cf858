#!/usr/bin/python3
"""A new model every fold (k-fold, sweeps): 4 folds of 5 steps, each with a fresh model and
optimizer; the old model is freed after the new one exists (so it never takes its address).
In fold 2 at its step 3 the batch holds a NaN. Prints {"trace": {...}} with the forward passes
of the whole run and the global iteration and step of the bad batch: the daemon's iteration
must keep counting across the folds.

  --wait   print READY <pid>, wait for a line on stdin, then train (as common.py's trainers)
"""
import gc
import json
import os
import sys

import torch
import torch.nn as nn

FOLDS, STEPS, BAD = 4, 5, (2, 3)


def net():
    return nn.Sequential(nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 1))


def main():
    torch.manual_seed(7)
    torch.set_num_threads(1)
    if "--wait" in sys.argv[1:]:
        print("READY %d" % os.getpid(), flush=True)
        if not sys.stdin.readline():
            sys.exit("kfold: stdin closed before go")
    forwards = steps = 0
    bad = None
    model = None
    loss_fn = nn.MSELoss()
    for fold in range(FOLDS):
        new = net()
        model = None  # the old one is freed only now: the new one has another address
        gc.collect()
        model = new
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for step in range(STEPS):
            x = torch.randn(4, 6)
            if (fold, step) == BAD:
                x[1, 2] = float("nan")
                bad = {"iteration": forwards, "step": steps}
            opt.zero_grad()
            out = model(x)
            forwards += 1
            loss_fn(out, x[:, :1]).backward()
            opt.step()
            steps += 1
    print(json.dumps({"trace": {"forwards": forwards, "steps": steps, "bad": bad}}), flush=True)


if __name__ == "__main__":
    main()
