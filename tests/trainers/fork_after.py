#!/usr/bin/python3
"""A trainer that forks once watched, as a DataLoader with workers does at each epoch.

Protocol: prints "READY <pid>", waits for "go" on stdin (the test attaches nanwatchd), trains
3 paced steps of a small MLP, then forks. The child calls a Python function from C (through
map) 1,000 times, and again every 50 ms until the first byte of its own
_PyEval_EvalFrameDefault is no longer 0xcc (a uprobe's breakpoint still in its copy of the
page) or 10 s have passed; then prints "CHILD <pid> <byte> <seconds waited>" and sleeps until
killed. The parent prints "PARENT <byte>" (its own, after the child's line), then trains paced
until a line "stop" on stdin or 60 s, and exits 0.
"""
import ctypes
import os
import select
import sys
import time

import torch
import torch.nn as nn


def first_byte():
    addr = ctypes.cast(ctypes.pythonapi._PyEval_EvalFrameDefault, ctypes.c_void_p).value
    return ctypes.string_at(addr, 1)[0]


def step(model, opt):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    time.sleep(0.02)


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    print("READY %d" % os.getpid(), flush=True)
    if not sys.stdin.readline():
        sys.exit("fork_after: stdin closed before go")
    for _ in range(3):
        step(model, opt)
    child = os.fork()
    if child == 0:
        begun = time.monotonic()
        list(map(lambda x: x + 1, range(1000)))
        while first_byte() == 0xcc and time.monotonic() < begun + 10:
            time.sleep(0.05)
            list(map(lambda x: x + 1, range(1000)))
        print("CHILD %d %d %.2f" % (os.getpid(), first_byte(), time.monotonic() - begun),
              flush=True)
        while True:
            time.sleep(1)
    end = time.monotonic() + 60
    time.sleep(0.5)
    print("PARENT %d" % first_byte(), flush=True)
    while time.monotonic() < end:
        if select.select([sys.stdin], [], [], 0)[0] and sys.stdin.readline().strip() == "stop":
            break
        step(model, opt)
    os.kill(child, 9)
    os.waitpid(child, 0)


if __name__ == "__main__":
    main()
