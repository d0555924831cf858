#!/usr/bin/python3
"""A forward that never returns once told, calling its child module all the while, run by an
unprivileged user. From Linux 6.13 the return the daemon's uprobe session armed for the
outer call stays pending, and its child's calls keep arming new ones: the kernel lets a
pending return's lock go only 100 ms after its task armed the last one, and removing any
uprobe on the node waits for that lock.

Protocol: prints "LIVE <pid>", then trains a small Linear with SGD, "STEP n" after each step
(--pace seconds apart); the line "endless" on stdin makes the next forward loop for ever: it
prints "ENDLESS" and calls its child (a Linear, then tanh) until killed, or until the line
"again", which ends that forward: the next one loops for ever in its turn (a return armed
anew, for a test whose first one the kernel let go: its task went 100 ms without a call, as
on a loaded machine). With --fork-every N,
that loop also forks a process every N calls, which exits at once (a fork storm while the
returns are held: each fork asks the daemon to clean the new process of its breakpoint).
With --in-backward, "endless" makes the next backward pass never return instead: an autograd
function's backward differentiates a small graph over and over (torch.autograd.backward, a
pass nested in it each time): a return probe on the engine would hold a return pending for the
outer pass while the nested ones kept arming new ones; it prints "ENDLESS" as it begins.
"""
import argparse
import os
import select
import sys
import time

import torch
import torch.nn as nn


class Endless(nn.Module):
    def __init__(self):
        super().__init__()
        self.child = nn.Linear(8, 8)
        self.endless = False
        self.fork_every = 0

    def forward(self, x):
        if self.endless:
            print("ENDLESS", flush=True)
            calls = 0
            while not (select.select([sys.stdin], [], [], 0)[0] and
                       sys.stdin.readline().strip() == "again"):
                x = self.child(x).tanh()
                time.sleep(0.001)
                calls += 1
                if self.fork_every and calls % self.fork_every == 0:
                    if os.fork() == 0:
                        os._exit(0)
                    os.wait()
        return self.child(x)


class EndlessGrad(torch.autograd.Function):
    """The identity, whose backward never returns: nested backward passes for ever."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        print("ENDLESS", flush=True)
        w = torch.ones(4, requires_grad=True)
        with torch.enable_grad():  # a backward runs without it
            while True:
                torch.autograd.backward((w * 2).sum())
                time.sleep(0.001)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pace", type=float, default=0.02)
    ap.add_argument("--fork-every", type=int, default=0)
    ap.add_argument("--in-backward", action="store_true",
                    help="\"endless\" makes the next backward pass endless, not the forward")
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = Endless()
    model.fork_every = args.fork_every
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    print("LIVE %d" % os.getpid(), flush=True)
    step = 0
    endless_backward = False
    while True:
        if select.select([sys.stdin], [], [], 0)[0] and sys.stdin.readline().strip() == "endless":
            if args.in_backward:
                endless_backward = True
            else:
                model.endless = True
        out = model(torch.randn(4, 8))
        if endless_backward:
            out = EndlessGrad.apply(out)
        loss = out.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        print("STEP %d" % step, flush=True)
        time.sleep(args.pace)


if __name__ == "__main__":
    main()
