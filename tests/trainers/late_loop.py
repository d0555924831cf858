#!/usr/bin/python3
"""inflight.py with its whole run in frames entered after the attach, as `python -m`, runpy
and launchers' wrappers start a script: prints "READY <pid>" once torch is imported, waits
for one line on stdin (the test attaches nanwatchd meanwhile), then runs inflight.py through
runpy with the arguments given (--live: "LIVE <pid>", STEP lines, FAULT n on stdin). Every
frame of the training loop, from runpy's down, then began under the daemon's probes.
"""
import os
import runpy
import sys

import torch  # loaded before the attach, as a launcher's import would

torch.set_num_threads(1)
print("READY %d" % os.getpid(), flush=True)
if not sys.stdin.readline():
    sys.exit("late_loop: stdin closed before go")
sys.argv = [os.path.join(os.path.dirname(os.path.abspath(__file__)), "inflight.py")] + \
    sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
