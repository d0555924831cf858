#!/usr/bin/python3
"""A target that points torch's run_backward method table entry inside the function it names,
run by an unprivileged user: the ml_meth word of the engine's PyMethodDef (in libtorch_python's
writable data, filled by its initializers) is what nanwatchd reads from a target whose
libtorch_python is stripped (the torch table's backward_method). It trains two steps, then
writes ml_meth + 1 there (the middle of an instruction), prints "READY <pid>" and sleeps until
killed: it never calls backward again. nanwatchd must not place its uprobe there.

  --wait      the protocol above (the only mode)
"""
import argparse
import ctypes
import os
import sys
import time

import torch
import torch.nn as nn

WORD = 8
PROT_READ, PROT_WRITE = 1, 2


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wait", action="store_true", required=True)
    ap.parse_args()
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    for _ in range(2):
        model(torch.randn(8, 4)).pow(2).mean().backward()
    fn = torch.autograd.Variable._execution_engine.run_backward
    ml = ctypes.c_void_p.from_address(id(fn) + 2 * WORD).value  # PyCFunctionObject.m_ml
    slot = ml + WORD                                             # PyMethodDef.ml_meth
    page = slot & ~(os.sysconf("SC_PAGE_SIZE") - 1)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    if libc.mprotect(page, os.sysconf("SC_PAGE_SIZE"), PROT_READ | PROT_WRITE):
        sys.exit("mprotect: %s" % os.strerror(ctypes.get_errno()))
    meth = ctypes.c_void_p.from_address(slot)
    meth.value += 1
    print("READY %d" % os.getpid(), flush=True)
    while True:
        time.sleep(1)


if __name__ == "__main__":
    main()
