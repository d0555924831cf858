#!/usr/bin/python3
"""A training loop whose frame holds locals named like step counters that are not one, each
built to mislead the daemon's search for the loop's counter (daemon/session/loopstep.c), run
by an unprivileged user; the real counter is `n_iter`.

  global_step  a bignum (2**100 + the step): more digits than the reader takes
  iter_num     an int subclass: not the int type
  step         negative, counting down
  iteration    a str
  batch_idx    moves 2 a step: not in lockstep with the steps
  it           rebound to a float, a bool, None and an int (7 times the step) in turn
  n_iter       the real counter, from 1000

Its first layer misleads the reading of a layer's code (the names its forward uses,
daemon/resolve/pyobject.c): Misleading.forward's code names a global of 1 MiB, then exp and
sqrt, then 20,000 more, in a branch never taken; what it runs is a Linear whose rows are
multiplied and divided by their largest |input| (the same values, 0/0 for an all-zero row).

No torch.optim (updates by hand): each backward pass is a step to the daemon, and only the
loop's counter gives the trainer's own number. Protocol as common.py's --live: "LIVE <pid>",
"STEP n" after each step, "fault" on stdin puts an all-zero sample in the batch 3 steps ahead
("FAULT AT <n_iter> (now <n_iter>)"), training ends --after-fault steps after it, then one
{"trace": ...} line; --fault-at N sets the fault from the start (the same run alone).
Expected first anomaly: layer 0 (Misleading), NaN from finite inputs, at step n_iter of the fault,
step_source loop_variable, step_variable n_iter.
"""
import argparse
import hashlib
import json
import os
import select
import sys
import time

import torch
import torch.nn as nn


class Evil(int):
    """An int subclass: the same value, another type."""


def misleading_forward():
    """A Linear's forward whose code names more globals than a reader takes, and a long one."""
    names = ["n" * (1 << 20), "exp", "sqrt"] + ["g%d" % i for i in range(20000)]
    src = ("def forward(self, x):\n"
           "    if x is None:\n"
           "        return [%s]\n"
           "    r = x.abs().amax(dim=1, keepdim=True)\n"
           "    return nn.functional.linear(x, self.weight, self.bias) * r / r\n"
           % ", ".join(names))
    ns = {"nn": nn}
    exec(compile(src, "<misleading>", "exec"), ns)
    return ns["forward"]


class Misleading(nn.Linear):
    """nn.Linear, with a forward whose code names what it never runs."""
    forward = misleading_forward()


def params_digest(model):
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().numpy().tobytes())
    return h.hexdigest()


def request(fault, n_iter):
    """A "fault" line on stdin, if one is there (never blocks): the fault's n_iter."""
    if sys.stdin.closed or not select.select([sys.stdin], [], [], 0)[0]:
        return fault
    line = sys.stdin.readline()
    if not line:
        sys.stdin.close()
        return fault
    if line.strip() == "fault" and fault is None:
        fault = n_iter + 3
        print("FAULT AT %d (now %d)" % (fault, n_iter), flush=True)
    return fault


def train(args):
    torch.manual_seed(0)
    model = nn.Sequential(Misleading(6, 12), nn.Tanh(), nn.Linear(12, 1))
    params = list(model.parameters())
    losses = []
    fault = args.fault_at
    n_iter = 1000
    global_step = 2 ** 100
    iter_num = Evil(0)
    step = -1
    iteration = "0"
    batch_idx = 0
    it = 0
    done = 0
    while done < args.steps and (fault is None or n_iter <= fault + args.after_fault):
        fault = request(fault, n_iter)
        gen = torch.Generator().manual_seed(n_iter)
        x = torch.randn(4, 6, generator=gen)
        y = x[:, :2].sum(dim=1, keepdim=True).sin()
        if n_iter == fault:
            x[1] = 0
        for p in params:
            p.grad = None
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 0.25)
        with torch.no_grad():
            for p in params:
                p.add_(p.grad, alpha=-0.05)
        losses.append(float(loss).hex())
        global_step += 1
        iter_num = Evil(iter_num + 1)
        step -= 1
        iteration = str(done)
        batch_idx += 2
        it = (1.5, True, None, 7 * done)[done % 4]
        n_iter += 1
        done += 1
        print("STEP %d" % done, flush=True)
        time.sleep(args.pace)
    del global_step, iter_num, step, iteration, batch_idx, it
    print(json.dumps({"trace": {"steps": done, "losses": losses,
                                "params_sha256": params_digest(model)}}), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--live", action="store_true", help="print LIVE <pid> and train at once")
    ap.add_argument("--pace", type=float, default=0.01, help="seconds to sleep after a step")
    ap.add_argument("--after-fault", type=int, default=3, help="steps trained after the fault")
    ap.add_argument("--steps", type=int, default=3000, help="an upper bound on the steps")
    ap.add_argument("--fault-at", type=int, help="the fault's n_iter from the start (a run alone "
                    "of the same fault)")
    args = ap.parse_args()
    if args.live:
        print("LIVE %d" % os.getpid(), flush=True)
    train(args)


if __name__ == "__main__":
    main()
