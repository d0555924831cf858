#!/usr/bin/python3
"""A 3.13 or 3.14 process that presents itself as a free-threaded build: it sets the
free_threaded word of its own _Py_DebugOffsets (the third word of _PyRuntime, after the
"xdebugpy" cookie and the version), which is what a python3.13t/3.14t publishes and what
nanwatchd reads from the target. Debian ships no free-threaded build; the word is the build's
only sign that a reader of its memory sees. It prints "READY <pid>" and waits for a line on
stdin (or to be killed); it never loads torch: the refusal comes first.

  --wait      the protocol above (the only mode)
"""
import argparse
import ctypes
import os
import sys

WORD = 8
COOKIE = b"xdebugpy"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wait", action="store_true", required=True)
    ap.parse_args()
    runtime = ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, "_PyRuntime"))
    if ctypes.string_at(runtime, len(COOKIE)) != COOKIE:
        sys.exit("free_threaded.py: this Python (%s) publishes no _Py_DebugOffsets" %
                 sys.version.split()[0])
    flag = ctypes.c_uint64.from_address(runtime + 2 * WORD)
    if flag.value != 0:
        sys.exit("free_threaded.py: already a free-threaded build")
    flag.value = 1
    print("READY %d" % os.getpid(), flush=True)
    sys.stdin.readline()


if __name__ == "__main__":
    main()
