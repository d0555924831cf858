#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""Attach nanwatchd to a run in flight and summarise it as one JSON line.

usage: live.py --python PY --daemon NANWATCHD --layouts DIR --events FILE TRAINER.py [ARGS...]

The trainer runs with --live --progress-every 10 (tests/trainers/inflight.py: trains flat out,
prints LIVE <pid> and STEP n). Once it passed step 20 the daemon attaches; 30 more steps
later it gets SIGTERM. As test_live_attach.py's in-flight cases check: stats.steps
must be 5 or more and stats.iterations within 1 of it (one forward pass per step), with no
anomaly on this healthy stretch. The trainer is killed at the end.
"""
import argparse
import json
import os
import signal
import sys
import time

from attach import Proc, events_of, wait_attach

ATTACH_TIMEOUT = 60


def step_now(trainer):
    steps = [l for l in trainer.out if l.startswith("STEP ")]
    return int(steps[-1].split()[1]) if steps else 0


def wait_step(trainer, n, timeout=60):
    return trainer.wait_line(lambda l: l.startswith("STEP ") and int(l.split()[1]) >= n,
                             timeout) is not None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", required=True)
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--layouts", required=True)
    ap.add_argument("--events", required=True)
    ap.add_argument("trainer", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    trainer = Proc([args.python] + args.trainer[:1] + ["--live", "--progress-every", "10"]
                   + args.trainer[1:], stdin=True)
    out = {"checks": {}}
    live = trainer.wait_line(lambda l: l.startswith("LIVE "), 90)
    if live is None or not wait_step(trainer, 20):
        trainer.stop(1)
        out["error"] = "trainer printed no LIVE line or did not reach step 20"
        out["trainer_stderr_tail"] = trainer.err[-8:]
        print(json.dumps(out))
        return 1
    pid = int(live.split()[1])
    argv = [args.daemon, "--pid", str(pid), "--layouts", args.layouts, "-o", args.events, "-v"]
    t0 = time.monotonic()
    out["step_at_attach"] = step_now(trainer)
    daemon = Proc(argv)
    out["attached"] = wait_attach(daemon, args.events, ATTACH_TIMEOUT)
    out["attach_s"] = round(time.monotonic() - t0, 3)
    if out["attached"]:
        target = step_now(trainer) + 30
        out["reached_30_more"] = wait_step(trainer, target)
        out["step_at_sigterm"] = step_now(trainer)
        daemon.p.send_signal(signal.SIGTERM)
    rc = daemon.stop(15 if out["attached"] else 1)
    out["daemon_rc"] = "killed after 15 s" if rc == "killed" else rc
    out["trainer_running"] = trainer.p.poll() is None
    os.killpg(trainer.p.pid, signal.SIGKILL)
    trainer.p.wait()
    with open(args.events + ".stderr", "w") as f:
        f.write("\n".join(daemon.err) + "\n")
    evs = events_of(args.events)
    stats = [e for e in evs if e.get("event") == "stats"]
    detach = [e for e in evs if e.get("event") == "detach"]
    keep = ("steps", "iterations", "module_calls", "tensors_scanned", "skipped", "anomalies",
            "lost", "stack_healed", "stack_overflow", "unanchored", "warnings", "step",
            "step_source", "iteration_source", "phases", "params_late")
    out["stats"] = {k: stats[-1].get(k) for k in keep} if stats else None
    out["detach"] = detach[0] if detach else None
    out["anomalies"] = sum(1 for e in evs if e.get("event") == "anomaly")
    out["daemon_stderr_tail"] = daemon.err[-6:]
    out["tensor_type"] = [l for l in daemon.err if "tensor type" in l][:1]
    s = out["stats"] or {}
    steps, its = s.get("steps"), s.get("iterations")
    out["checks"] = {
        "steps_ge_5": steps is not None and steps >= 5,
        "iterations_within_1": steps is not None and its is not None and abs(its - steps) <= 1,
        # the trainer's own step (Adam's state), within the steps it took after SIGTERM
        "step_absolute": s.get("step_source") == "optimizer_state" and
        out.get("step_at_sigterm") is not None and
        0 <= (s.get("step") or 0) - out["step_at_sigterm"] <= 30,
        "no_anomaly": out["anomalies"] == 0,
        "trainer_survived": out["trainer_running"],
    }
    out["ok"] = bool(out["attached"]) and all(out["checks"].values())
    print(json.dumps(out, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
