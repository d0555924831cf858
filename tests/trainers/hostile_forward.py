#!/usr/bin/python3
"""A forward that never returns once told, calling its child module all the while, run by an
unprivileged user. From Linux 6.13 the return the daemon's uprobe session armed for the
outer call stays pending, and its child's calls keep arming new ones: the kernel lets a
pending return's lock go only 100 ms after its task armed the last one, and removing any
uprobe on the node waits for that lock.

Protocol: prints "LIVE <pid>", then trains a small Linear with SGD, "STEP n" after each step
(--pace seconds apart); the line "endless" on stdin makes the next forward loop for ever: it
prints "ENDLESS" and calls its child (a Linear, then tanh) until killed. With --fork-every N,
that loop also forks a process every N calls, which exits at once (a fork storm while the
returns are held: each fork asks the daemon to clean the new process of its breakpoint).
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
            while True:
                x = self.child(x).tanh()
                time.sleep(0.001)
                calls += 1
                if self.fork_every and calls % self.fork_every == 0:
                    if os.fork() == 0:
                        os._exit(0)
                    os.wait()
        return self.child(x)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pace", type=float, default=0.02)
    ap.add_argument("--fork-every", type=int, default=0)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = Endless()
    model.fork_every = args.fork_every
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    print("LIVE %d" % os.getpid(), flush=True)
    step = 0
    while True:
        if select.select([sys.stdin], [], [], 0)[0] and sys.stdin.readline().strip() == "endless":
            model.endless = True
        loss = model(torch.randn(4, 8)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        step += 1
        print("STEP %d" % step, flush=True)
        time.sleep(args.pace)


if __name__ == "__main__":
    main()
