#!/usr/bin/python3
"""A data-parallel job: one process per rank, gloo on CPU, the model wrapped in
DistributedDataParallel, started the way a job launcher starts ranks (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT and LOCAL_RANK in the environment; no torchrun, which fails on
Debian's Python 3.11).

Each rank trains on its own seeded data: counts, which a RatioFeatures module divides by the
first (a reference count); at --fault-step the batch of --bad-rank holds a sample whose
reference count is 0 (a missing value written as zero), so that rank's features layer makes
+Inf from finite inputs. The loss and the gradients on that rank are non-finite, the
all-reduce of backward() carries NaN into every rank's gradients, and the update leaves every
rank's parameters non-finite: the other ranks see non-finite values only from the next step, in
a layer whose parameters are not finite.

Expected first anomaly on the bad rank: module.features (RatioFeatures) at the fault step, an
origin (finite inputs, no parameters): division_by_zero. Every mode of common.py works per rank
(--wait: each rank prints READY after the rendezvous; --oracle: each its own oracle line).
"""
import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

import common


class RatioFeatures(nn.Module):
    """Each count relative to the first: a zero reference count gives +Inf."""

    def forward(self, x):
        return x[:, 1:] / x[:, :1]


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.features = RatioFeatures()
        self.hidden = nn.Sequential(nn.Linear(5, 16), nn.Tanh())
        self.head = nn.Linear(16, 1)

    def forward(self, x):
        return self.head(self.hidden(self.features(x)))


class Ddp(common.Trainer):
    """Trainer for one rank of a gloo DistributedDataParallel job."""

    steps = 10
    fault_step = 6
    expected_cause = "division_by_zero"  # what the daemon's diagnosis must say
    lr = 0.05
    bad_rank = 1

    def model(self):
        # every rank joins the group before building its model: the same seed on every rank,
        # and DistributedDataParallel broadcasts rank 0's parameters anyway
        dist.init_process_group("gloo", rank=self.rank, world_size=self.world_size)
        return DistributedDataParallel(Net())

    def batch(self, step, micro, gen):
        gen.manual_seed(gen.initial_seed() + 7919 * (self.rank + 1))  # each rank its own data
        x = torch.rand(8, 6, generator=gen) * 4 + 0.5  # counts-like, positive
        y = (x[:, 1:3].log().sum(dim=1, keepdim=True)).sin()
        if self.rank == self.bad_rank and step == self.fault_step:
            x[3, 0] = 0.0  # a missing reference count written as 0; the target was computed before
        return (x,), y


def main():
    trainer = Ddp()
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--bad-rank", type=int, default=Ddp.bad_rank)
    own, rest = ap.parse_known_args()
    trainer.bad_rank = own.bad_rank
    trainer.rank = int(os.environ["RANK"])
    trainer.world_size = int(os.environ["WORLD_SIZE"])
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    # torch 2.4 and later ask for a libuv TCPStore by default; Debian's torch has none
    os.environ.setdefault("USE_LIBUV", "0")
    if "MASTER_PORT" not in os.environ:
        sys.exit("ddp: MASTER_PORT is not set")
    sys.argv[1:] = rest
    try:
        common.main(trainer)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
