#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""Run one trainer under nanwatchd and summarise the events as one JSON line.

usage: attach.py --python PY --daemon NANWATCHD --layouts DIR --events FILE
                 [--daemon-arg ARG]... TRAINER.py [ARGS...]

The trainer runs with --wait: it prints READY <pid> and blocks on stdin; the daemon attaches
(-v: libbpf's messages, the verifier log on a load failure, go to the daemon's stderr); once
the attach event is out (or the daemon has exited) the trainer is let go. The summary holds
the daemon's exit status and last stderr lines (all of them in EVENTS.stderr), the attach event, the first anomaly, the last
stats event and the detach event, and the trainer's last stdout line.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time

ATTACH_TIMEOUT = 60
RUN_TIMEOUT = 120


CHILDREN = []


def on_term(signum, frame):
    """Killed by a caller's timeout: the children (their own sessions) go too."""
    for p in CHILDREN:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
    os._exit(128 + signum)


class Proc:
    """A child in its own session whose stdout and stderr are read into lists of lines."""

    def __init__(self, argv, stdin=False, stdout=None):
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                  stdout=stdout or subprocess.PIPE, stderr=subprocess.PIPE,
                                  start_new_session=True)
        CHILDREN.append(self.p)
        self.out, self.err = [], []
        self.cond = threading.Condition()
        pipes = [(self.p.stderr, self.err)]
        if stdout is None:
            pipes.append((self.p.stdout, self.out))
        for pipe, lines in pipes:
            threading.Thread(target=self._read, args=(pipe, lines), daemon=True).start()

    def _read(self, pipe, lines):
        for raw in iter(pipe.readline, b""):
            with self.cond:
                lines.append(raw.decode("utf-8", "replace").rstrip("\n"))
                self.cond.notify_all()

    def wait_line(self, pred, timeout):
        deadline = time.monotonic() + timeout
        with self.cond:
            while time.monotonic() < deadline:
                for line in self.out:
                    if pred(line):
                        return line
                if self.p.poll() is not None:
                    return None
                self.cond.wait(0.2)
        return None

    def stop(self, timeout):
        try:
            return self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.p.pid, signal.SIGKILL)
            self.p.wait()
            return "killed"


def events_of(path):
    out = []
    try:
        with open(path) as f:
            for line in f:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    except OSError:
        pass
    return out


def has_event(path, name):
    return any(e.get("event") == name for e in events_of(path))


def wait_attach(daemon, events, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if has_event(events, "attach"):
            return True
        if daemon.p.poll() is not None:
            return False
        time.sleep(0.1)
    return False


def summary(args, rc_daemon, daemon, trainer, attached, attach_s):
    evs = events_of(args.events)
    pick = lambda name: [e for e in evs if e.get("event") == name]
    anomalies = pick("anomaly")
    stats = pick("stats")
    return {
        "daemon_rc": rc_daemon,
        "daemon_stderr_tail": daemon.err[-8:],
        "tensor_type": [l for l in daemon.err if "tensor type" in l][:1],
        "attached": attached,
        "attach_s": attach_s,
        "attach": (pick("attach") or [None])[0],
        "first_anomaly": anomalies[0] if anomalies else None,
        "first_gpu_anomaly": next((e for e in anomalies
                                   if str(e.get("device", "")).startswith("cuda")), None),
        "errors": [e.get("message") for e in pick("error")][:5],
        "anomalies": len(anomalies),
        "stats": stats[-1] if stats else None,
        "detach": (pick("detach") or [None])[0],
        "events": len(evs),
        "trainer_rc": trainer.p.returncode,
        "trainer_last": trainer.out[-1] if trainer.out else None,
        "trainer_stderr_tail": trainer.err[-5:],
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", required=True)
    ap.add_argument("--daemon", required=True)
    ap.add_argument("--layouts", required=True)
    ap.add_argument("--events", required=True)
    ap.add_argument("--daemon-arg", action="append", default=[])
    ap.add_argument("trainer", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, on_term)
    trainer = Proc([args.python] + args.trainer[:1] + ["--wait"] + args.trainer[1:], stdin=True)
    ready = trainer.wait_line(lambda l: l.startswith("READY "), 90)
    if ready is None:
        trainer.stop(1)
        print(json.dumps({"error": "trainer printed no READY line",
                          "trainer_stderr_tail": trainer.err[-8:]}))
        return 1
    pid = int(ready.split()[1])
    argv = [args.daemon, "--pid", str(pid), "--layouts", args.layouts, "-o", args.events, "-v"]
    argv += args.daemon_arg
    t0 = time.monotonic()
    daemon = Proc(argv)
    attached = wait_attach(daemon, args.events, ATTACH_TIMEOUT)
    attach_s = round(time.monotonic() - t0, 3)
    trainer.p.stdin.write(b"go\n")
    trainer.p.stdin.flush()
    trainer.p.stdin.close()
    trainer.stop(RUN_TIMEOUT)
    rc = daemon.stop(15 if attached else 1)
    if rc == "killed":
        rc = "killed after 15 s"
    with open(args.events + ".stderr", "w") as f:
        f.write("\n".join(daemon.err) + "\n")
    print(json.dumps(summary(args, rc, daemon, trainer, attached, attach_s), sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
