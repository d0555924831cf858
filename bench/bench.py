#!/usr/bin/python3
"""nanwatch benchmark (`make bench`): what watching a training run costs it.

Trains reference models on the CPU (bench/bench_model.py: a 4-layer transformer with AdamW, a
small CNN with SGD) in one long-lived process per model, and measures the median step time of:

  uninstrumented   nothing attached
  hooks            forward hooks on every module testing torch.isfinite(out).all()
  detect_anomaly   torch.autograd.detect_anomaly()
  nanwatch-MODE    nanwatchd --mode MODE attached to the same process (one per daemon mode)
  nanwatch-full-nobwd  nanwatchd --mode full --backward off, and nanwatch-full-bwd with
                   --backward on (every gradient checked): against nanwatch-full (default:
                   parameter gradient norms), what the backward pass costs, next to
                   detect_anomaly's
  nanwatch-full-uretprobe  with --daemon-modes full,full-uretprobe: --return-probe
                   uretprobe (a return probe on every Python call) beside the default (a
                   uprobe session, a return armed only for module calls, Linux 6.13+);
                   nanwatch-full-session asks for the session by name
  detached         the same process after nanwatchd detached (must equal uninstrumented)

Where each step's time goes, per model and mode: probe hits and returns (with
--return-probe session only module calls' and optimizer steps' returns trap) and what the
step paid per trap beyond the programs' own run time, each BPF program's run time (--bpf-stats), the
bytes scanned and the scan rate split into the copy alone and the test alone (stats.scan), the
backward pass's node probe (gradient norms), sequence-counter reads, GPU requests and the
daemon's CPU. Then a copy-rate sweep on this host (build/scanrate: every way BPF can copy user
memory, by chunk size, on new and warm pages) and the read method nanwatchd picks here.

Each round runs every mode once per model; the order rotates between rounds (nanwatch-* and
detached stay together, in that order: "detached" means right after a detach). The table shows
the median over rounds of each window's median step time, its ratio to uninstrumented, and the
spread (min..max of the round medians). Also: probe hits, tensors and bytes scanned per step (the
daemon's final stats of each attached window over its own step count), the BPF run time per step
and hit (nanwatchd --bpf-stats), the daemon's CPU time and peak RSS (wait4 rusage), a dedicated
scan-rate measurement (a model whose forward returns one 64 MiB float32 tensor per step,
attached vs detached) against bench/memread.c's plain memory read rate measured in the same
run, and a final `targets:` block. Results go to stdout, --json and --plot (PNG).

Exit status: 0 when the benchmark ran and every target holds, 3 when it ran and a target was
missed (the last lines name each one; `make bench` fails with it), 1 when it could not (daemon
failed to attach, a trainer died), 2 for bad usage. Needs root (the daemon does).

The process harness (children, their lines, killing them) is tests/lib/nwharness.py, shared with the
integration tests; the plot is drawn with matplotlib (python3-matplotlib, Agg backend).

  /usr/bin/python3 bench/bench.py --daemon build/nanwatchd [--quick] [--rounds N] [--steps N]
"""
import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time

import matplotlib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tests", "lib"))
from nwharness import Fail, Proc, kill_children  # noqa: E402 (the tests' process harness)

matplotlib.use("Agg")  # PNG files, no display
import matplotlib.pyplot as plt  # noqa: E402 (after the backend is chosen)
MODEL_SCRIPT = os.path.join(REPO, "bench", "bench_model.py")

# steps per measurement window: about 3.5 s each for the training models (~5 min in all)
DEFAULT_STEPS = {"transformer": 12, "cnn": 80, "scan": 30}
QUICK_STEPS = {"transformer": 4, "cnn": 20, "scan": 10}
SCAN_MIB = 64
SCANRATE_MIB = SCAN_MIB  # the copy-rate sweep's buffer: as large as the scan case's tensor
SCANRATE_TRIES = 5
SWEEP_CHUNK = 65536  # the daemon's scan chunk, when build/scanrate does not say (NW_SCAN_CHUNK)
MEMREAD_SECONDS = 0.5
ATTACH_TIMEOUT = 60
DETACH_TIMEOUT = 30
READY_TIMEOUT = 300
STEP_TIMEOUT = 30  # per step, generous: detect_anomaly and a slow daemon included

# the default watch's cost on a quiet host (median ratio, as every mode's); others within 1.10x
FULL_LIMIT = {"transformer": 1.03, "cnn": 1.05}
LABELS = {"plain": "uninstrumented", "hooks": "hooks", "anomaly": "detect_anomaly"}
NOBWD = "-nobwd"  # pseudo daemon mode suffixes: the same mode with --backward off, on
BWD = "-bwd"
SESSION = "-session"  # --return-probe session (--daemon-modes full,full-session)
URETPROBE = "-uretprobe"  # --return-probe uretprobe (--daemon-modes full,full-uretprobe)


class BenchError(Fail):
    pass


def log(msg):
    sys.stderr.write("bench: %s\n" % msg)
    sys.stderr.flush()


# --------------------------------------------------------------------------- child processes


class Trainer(Proc):
    """bench/bench_model.py: one JSON answer line per command line."""

    def __init__(self, python, model, threads, warmup):
        super().__init__([python, MODEL_SCRIPT, "--model", model, "--threads", str(threads),
                          "--warmup", str(warmup), "--scan-mib", str(SCAN_MIB)], stdin=True)
        self.model = model
        self.info = self._answer(READY_TIMEOUT)
        if not self.info.get("ready"):
            raise BenchError("trainer %s did not start: %s" % (model, self.info))

    def _answer(self, timeout):
        line = self.line(timeout)
        if line is None:
            raise BenchError("trainer %s exited: %s" % (self.model, self.stderr_tail()))
        try:
            return json.loads(line)
        except ValueError:
            raise BenchError("trainer %s: bad line %r" % (self.model, line)) from None

    def run(self, mode, steps):
        self.send(b"run %s %d\n" % (mode.encode(), steps), close=False)
        ans = self._answer(60 + STEP_TIMEOUT * steps)
        if "error" in ans:
            raise BenchError("trainer %s: %s" % (self.model, ans["error"]))
        return ans

    def quit(self):
        try:
            self.send(b"quit\n", close=False)
            self.p.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.kill()


class Daemon(Proc):
    """nanwatchd attached to one trainer, from the `attach` event to its exit."""

    def __init__(self, path, pid, mode, bpf_stats=True):
        t0 = time.monotonic()
        extra = []
        for suffix, flag, how in ((NOBWD, "--backward", "off"), (BWD, "--backward", "on"),
                                  (SESSION, "--return-probe", "session"),
                                  (URETPROBE, "--return-probe", "uretprobe")):
            if mode.endswith(suffix):
                mode, extra = mode[:-len(suffix)], [flag, how]
        super().__init__([path, "--pid", str(pid), "--mode", mode] + extra
                         + (["--bpf-stats"] if bpf_stats else []), term_timeout=DETACH_TIMEOUT)
        self.events = []
        self.attach_s = None
        while True:
            ev = self._event(ATTACH_TIMEOUT)
            if ev is None:
                self.reap()
                raise BenchError("nanwatchd failed to attach to pid %d (exit %s): %s"
                                 % (pid, self.rc, self.stderr_tail()))
            if ev.get("event") == "attach":
                self.attach_s = time.monotonic() - t0
                break

    def _event(self, timeout):
        line = self.line(timeout)
        if line is None:
            return None
        try:
            ev = json.loads(line)
        except ValueError:
            ev = {"event": "unparseable", "line": line}
        self.events.append(ev)
        return ev

    def reap(self, timeout=DETACH_TIMEOUT):
        """wait4 the daemon: exit code and rusage (CPU time, peak RSS); SIGKILL at timeout."""
        deadline = time.monotonic() + timeout
        while True:
            pid, status, ru = os.wait4(self.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                os.kill(self.pid, signal.SIGKILL)
                pid, status, ru = os.wait4(self.pid, 0)
                self.err.append(b"bench: killed after %d s without exiting\n" % timeout)
                break
            time.sleep(0.005)
        self.rc = os.waitstatus_to_exitcode(status)
        self.p.returncode = self.rc  # reaped here; Popen must not wait for it again
        self.rusage = {"utime_s": ru.ru_utime, "stime_s": ru.ru_stime,
                       "maxrss_kib": ru.ru_maxrss}
        self.drain(5)

    def detach(self):
        t0 = time.monotonic()
        os.kill(self.pid, signal.SIGTERM)
        self.reap()
        detach_s = time.monotonic() - t0
        while self.taken < len(self.out):  # the lines after the attach not read yet
            line = self.line(0)
            try:
                self.events.append(json.loads(line))
            except ValueError:
                self.events.append({"event": "unparseable", "line": line})
        stats = [e for e in self.events if e.get("event") == "stats"]
        det = [e for e in self.events if e.get("event") == "detach"]
        if self.rc != 0 or not stats or not det:
            raise BenchError("nanwatchd did not detach cleanly (exit %s, %d stats, %d detach "
                             "events): %s" % (self.rc, len(stats), len(det),
                                              self.stderr_tail()))
        return {"attach_s": self.attach_s, "detach_s": detach_s, "rc": self.rc,
                "rusage": self.rusage, "stats": stats[-1], "detach": det[-1],
                "other_events": sorted({e.get("event") for e in self.events}
                                       - {"attach", "stats", "detach"})}


def daemon_modes(path):
    """The daemon's --mode values, from its --help ('name': lines under --mode)."""
    try:
        text = subprocess.run([path, "--help"], capture_output=True, text=True,
                              timeout=10).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ["full"]
    modes, inside = [], False
    for line in text.splitlines():
        s = line.strip()
        if "--mode" in s:
            inside = True
            s = s.split("MODE", 1)[-1].strip()
        elif s.startswith("-"):
            inside = False
        if inside and s.startswith("'") and "':" in s:
            modes.append(s[1:s.index("':")])
    modes = modes or ["full"]
    if "--backward" in text and "full" in modes:
        modes[modes.index("full") + 1:modes.index("full") + 1] = ["full" + NOBWD, "full" + BWD]
    return modes


# --------------------------------------------------------------------------- measurement


def median(xs):
    return statistics.median(xs) if xs else float("nan")


def window(trainer, mode, steps, label, daemon=None):
    ans = trainer.run(mode, steps)
    w = {"mode": label, "steps": steps, "times": ans["times"],
         "median_ms": 1e3 * median(ans["times"]), "nonfinite": ans.get("nonfinite", 0)}
    if daemon is not None:
        w["daemon"] = daemon.detach()
    log("  %-12s %-15s %3d steps  median %8.2f ms"
        % (trainer.model, label, steps, w["median_ms"]))
    return w


def attached_window(args, trainer, dmode, steps, bpf_stats=True):
    d = Daemon(args.daemon, trainer.pid, dmode, bpf_stats)
    try:
        return window(trainer, "plain", steps, "nanwatch-" + dmode, d)
    finally:
        if d.p.returncode is None:
            os.kill(d.pid, signal.SIGTERM)
            d.reap()


def round_units(dmodes, r):
    """This round's order: 4 units rotated by r; nanwatch-* then detached stay one unit."""
    units = [["plain"], ["hooks"], ["anomaly"], ["nw-" + m for m in dmodes] + ["detached"]]
    k = r % len(units)
    return [m for u in units[k:] + units[:k] for m in u]


def model_round(args, trainer, dmodes, steps, r, rounds):
    """One window per mode, recorded as each completes (an error keeps what was measured)."""
    rec = {"order": [], "windows": {}}
    rounds.append(rec)
    for m in round_units(dmodes, r):
        if m.startswith("nw-"):
            w = attached_window(args, trainer, m[3:], steps, not args.no_bpf_stats)
        elif m == "detached":
            w = window(trainer, "plain", steps, "detached")
        else:
            w = window(trainer, m, steps, LABELS[m])
        rec["order"].append(w["mode"])
        rec["windows"][w["mode"]] = w


def scan_round(args, trainer, steps, r, rounds):
    """The scan model detached and attached, order alternating between rounds."""
    rec = {"order": [], "windows": {}}
    for m in (["detached", "attached"] if r % 2 == 0 else ["attached", "detached"]):
        if m == "attached":
            w = attached_window(args, trainer, "full", steps)
        else:
            w = window(trainer, "plain", steps, "detached")
        w["mode"] = m
        rec["order"].append(m)
        rec["windows"][m] = w
    rounds.append(rec)  # only complete pairs: the summary compares within a round


def memread(path):
    r = subprocess.run([path, str(SCAN_MIB), str(MEMREAD_SECONDS)], capture_output=True,
                       text=True, timeout=60)
    if r.returncode:
        raise BenchError("%s failed: %s" % (path, r.stderr.strip()))
    return json.loads(r.stdout)


def scanrate(path):
    """bench/scanrate.c: BPF's copy rate by method, chunk size and new or warm pages, one JSON
    line each, then the daemon's choice on this host."""
    r = subprocess.run([path, str(SCANRATE_MIB), str(SCANRATE_TRIES)], capture_output=True,
                       text=True, timeout=300)
    if r.returncode:
        raise BenchError("%s failed: %s" % (path, r.stderr.strip()))
    rows = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    return {"sweep": [x for x in rows if "method" in x],
            "choice": next((x for x in rows if "choice" in x), None)}


def cpu_times():
    """(busy, steal, total) jiffies from /proc/stat: a VM's stolen time shows as noise."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
    except OSError:
        return None
    return (sum(v) - v[3] - v[4], v[7] if len(v) > 7 else 0, sum(v))


# --------------------------------------------------------------------------- summaries


def per_step(stats, key, steps):
    return stats.get(key, 0) / steps if steps else float("nan")


def daemon_summary(windows):
    """Per-step numbers from the final stats of each attached window; medians over windows.
    A step is one the trainer ran while the daemon was attached (it attaches before the
    window's first step and detaches after its last): the daemon's own step count is only
    compared with it, since a model that takes no optimizer step (the scan model) counts none."""
    rows = []
    for w in windows:
        st, d = w["daemon"]["stats"], w["daemon"]
        steps = w["steps"]
        bpf = st.get("bpf") or {}
        skipped = st.get("skipped") or {}
        sc = st.get("scan") or {}
        rows.append({
            "daemon_steps": st.get("steps") or 0, "window_steps": steps,
            "probe_hits": per_step(st, "probe_hits", steps),
            "return_hits": per_step(st, "return_hits", steps),
            "module_calls": per_step(st, "module_calls", steps),
            "tensors": per_step(st, "tensors_scanned", steps),
            "bytes": per_step(st, "bytes_scanned", steps),
            # output bytes not scanned, and why (usage.md, How it works)
            "rescan_bytes": per_step(st.get("rescans_avoided") or {}, "bytes", steps),
            "kept_bytes": per_step(st.get("kept_finite") or {}, "bytes", steps),
            "norm_bytes": per_step(st.get("norm_checked") or {}, "bytes", steps),
            "entry_ns": per_step(bpf, "entry_ns", steps),
            "return_ns": per_step(bpf, "return_ns", steps),
            "loss_ns": per_step(bpf, "loss_ns", steps),
            "node_ns": per_step(bpf, "node_ns", steps),
            "step_ns": per_step(bpf, "step_ns", steps),
            "scaler_ns": per_step(bpf, "scaler_ns", steps),
            # every byte scanned (outputs and gradients) against the copies alone
            "all_scan_rate": sc["gbps"] * 1e9 if sc.get("gbps") else None,
            "copy_rate": sc["copy_gbps"] * 1e9 if sc.get("copy_gbps") else None,
            "task_copies": per_step(sc, "task_copies", steps),
            "copies": per_step(st, "scan_copies", steps),
            "seq_reads": per_step(st.get("backward") or {}, "seq_reads", steps),
            "gpu_requests": per_step(st.get("gpu") or {}, "requests", steps),
            "bpf_runs": bpf.get("return_runs", 0),
            "rate": st.get("bytes_scanned", 0) / bpf["return_ns"] * 1e9
            if bpf.get("return_ns") else None,
            # the scan loop alone: BPF times each tensor's scan (stats.scan_ns)
            "scan_rate": st.get("bytes_scanned", 0) / st["scan_ns"] * 1e9
            if st.get("scan_ns") else None,
            "skipped": {k: per_step(skipped, k, steps) for k in skipped if skipped[k]},
            "bwd_nodes": per_step(st.get("backward") or {}, "nodes", steps),
            "bwd_bytes": per_step(st.get("backward") or {}, "bytes_scanned", steps),
            "param_grads": per_step(st.get("backward") or {}, "param_grads", steps),
            "anomalies": st.get("anomalies", 0), "lost": st.get("lost", 0),
            "suppressed": st.get("suppressed", 0),
            "cpu_s": d["rusage"]["utime_s"] + d["rusage"]["stime_s"],
            "user_s": d["rusage"]["utime_s"], "sys_s": d["rusage"]["stime_s"],
            "maxrss_kib": d["rusage"]["maxrss_kib"], "attach_s": d["attach_s"],
            "detach_s": d["detach_s"], "window_s": sum(w["times"]),
        })
    if not rows:
        return None
    keys = [k for k in rows[0] if isinstance(rows[0][k], (int, float))]
    s = {k: median([r[k] for r in rows if r[k] is not None]) for k in keys}
    s["maxrss_kib"] = max(r["maxrss_kib"] for r in rows)
    s["anomalies"] = sum(r["anomalies"] for r in rows)
    s["lost"] = sum(r["lost"] for r in rows)
    s["suppressed"] = sum(r["suppressed"] for r in rows)
    s["steps_mismatch"] = sum(r["daemon_steps"] != r["window_steps"] for r in rows)
    s["skipped"] = {}
    for r in rows:
        for k, v in r["skipped"].items():
            s["skipped"][k] = max(s["skipped"].get(k, 0), v)
    s["read_method"] = (windows[0]["daemon"]["stats"].get("scan") or {}).get("read_method")
    s["windows"] = rows
    return s


def model_summary(res, modes_order):
    summ = {}
    for label in modes_order:
        rm = [r["windows"][label]["median_ms"] for r in res["rounds"] if label in r["windows"]]
        if not rm:
            continue
        summ[label] = {"median_ms": median(rm), "min_ms": min(rm), "max_ms": max(rm),
                       "round_medians_ms": rm}
    base = summ.get("uninstrumented", {}).get("median_ms")
    for label, s in summ.items():
        s["ratio"] = s["median_ms"] / base if base else None
        # the same ratio taken within each round, then the median: robust to slow drift
        paired = [r["windows"][label]["median_ms"] / r["windows"]["uninstrumented"]["median_ms"]
                  for r in res["rounds"]
                  if label in r["windows"] and "uninstrumented" in r["windows"]]
        s["paired_ratio"] = median(paired) if paired else None
        if label.startswith("nanwatch-"):
            ws = [r["windows"][label] for r in res["rounds"] if label in r["windows"]]
            s["daemon"] = daemon_summary(ws)
            if s["daemon"] and base and s["daemon"]["probe_hits"]:
                extra_ms = s["median_ms"] - base
                s["extra_ms_per_step"] = extra_ms
                s["extra_us_per_hit"] = 1e3 * extra_ms / s["daemon"]["probe_hits"]
                runs = s["daemon"]["probe_hits"]
                d = s["daemon"]
                bpf_ns = sum(d[k] for k in ("entry_ns", "return_ns", "loss_ns", "node_ns",
                                            "step_ns", "scaler_ns"))
                s["bpf_us_per_hit"] = (d["entry_ns"] + d["return_ns"]) / runs / 1e3
                # what the step paid beyond the programs' own run time: the traps into the
                # kernel and back (each probe hit's, each return's), the daemon's share of
                # the CPUs
                traps = runs + d["return_hits"]
                s["trap_us_per_hit"] = (1e6 * extra_ms - bpf_ns) / traps / 1e3
    return summ


def scan_chunk(sweep):
    """The daemon's scan chunk in bytes, as build/scanrate reports it."""
    return ((sweep or {}).get("choice") or {}).get("scan_chunk", SWEEP_CHUNK)


def best_copy(sweep, memory, chunk):
    """The fastest copy-only rate of the sweep at chunk bytes a copy (bytes/s), and its
    method."""
    rows = [x for x in (sweep or {}).get("sweep", []) if x.get("offered") and
            x["memory"] == memory and x["chunk"] == chunk]
    best = max(rows, key=lambda x: x["gbps"], default=None)
    return (best["gbps"] * 1e9, best["method"]) if best else (None, None)


def scan_summary(res, mem, sweep=None):
    att = [r["windows"]["attached"] for r in res["rounds"]]
    det = [r["windows"]["detached"] for r in res["rounds"]]
    d = daemon_summary(att)
    diffs = [a["median_ms"] - b["median_ms"] for a, b in zip(att, det)]
    extra = median(diffs)
    total_bytes = sum(w["daemon"]["stats"]["bytes_scanned"] for w in att)
    total_ns = sum((w["daemon"]["stats"].get("bpf") or {}).get("return_ns", 0) for w in att)
    scan_ns = sum(w["daemon"]["stats"].get("scan_ns", 0) for w in att)
    s = {"attached_ms": median([w["median_ms"] for w in att]),
         "detached_ms": median([w["median_ms"] for w in det]),
         "extra_ms": extra, "extra_ms_rounds": diffs, "daemon": d,
         "bytes_per_step": d["bytes"] if d else 0,
         "bpf_rate": total_bytes / total_ns * 1e9 if total_ns else None,
         "wall_rate": d["bytes"] / (extra / 1e3) if d and extra > 0 else None,
         "scan_rate": total_bytes / scan_ns * 1e9 if scan_ns else None,
         "memread_rate": mem}
    s["bpf_rate_ratio"] = s["bpf_rate"] / mem if s["bpf_rate"] and mem else None
    s["scan_rate_ratio"] = s["scan_rate"] / mem if s["scan_rate"] and mem else None
    # the target: the scan (copy and test) against its copies alone, the same bytes timed
    # in the same scans (the daemon times every copy with --bpf-stats)
    cb = sum((w["daemon"]["stats"].get("scan") or {}).get("copy_bytes", 0) for w in att)
    cn = sum((w["daemon"]["stats"].get("scan") or {}).get("copy_ns", 0) for w in att)
    s["copy_rate"] = cb / cn * 1e9 if cn else None
    s["test_rate"] = test_rate(s["scan_rate"], s["copy_rate"])
    s["copy_ratio"] = s["scan_rate"] / s["copy_rate"] if s["scan_rate"] and s["copy_rate"] \
        else None
    # and beside it: the sweep's best copy alone of new pages (the scan case's kind: a new
    # tensor each step) at the daemon's chunk, a copy that no test interrupts
    s["chunk"] = scan_chunk(sweep)
    s["copy_only_rate"], s["copy_only_method"] = best_copy(sweep, "new", s["chunk"])
    s["sweep_ratio"] = s["scan_rate"] / s["copy_only_rate"] \
        if s["scan_rate"] and s["copy_only_rate"] else None
    return s


def report_sweep(sw):
    """The copy-rate sweep: a row per method and state of the pages, a column per chunk."""
    if not sw:
        return []
    chunks = sorted({x["chunk"] for x in sw["sweep"] if x.get("offered")})
    lines = ["copy-rate sweep (build/scanrate, %d MiB, median of %d): GB/s by method, pages "
             "and chunk size" % (SCANRATE_MIB, SCANRATE_TRIES),
             "  %-9s %-5s " % ("method", "pages") + " ".join("%7s" % ("%dK" % (c // 1024))
                                                          for c in chunks)]
    for m in ("probe", "user", "task"):
        for mem in ("new", "warm"):
            row = {x["chunk"]: x["gbps"] for x in sw["sweep"]
                   if x["method"] == m and x.get("offered") and x["memory"] == mem}
            if row:
                lines.append("  %-9s %-5s " % (m, mem) + " ".join("%7.2f" % row.get(c, 0)
                                                                  for c in chunks))
    off = [x["method"] for x in sw["sweep"] if not x.get("offered")]
    if off:
        lines.append("  not offered by this kernel: %s" % ", ".join(off))
    if sw.get("choice"):
        lines.append("  nanwatchd's choice here: %s (%s)" % (sw["choice"]["choice"],
                                                            sw["choice"]["why"]))
    return lines


# --------------------------------------------------------------------------- report


def fmt_bytes(n):
    if n is None or n != n:
        return "n/a"
    for unit, div in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= div:
            return "%.2f %s" % (n / div, unit)
    return "%.0f B" % n


def fmt_rate(r):
    return "n/a" if not r or r != r else "%.2f GB/s" % (r / 1e9)


def report_model(name, res, summ):
    info = res["info"]
    lines = ["%s: %.2fM params, %d steps x %d rounds per mode, torch %s, %s thread(s)"
             % (name, info["params"] / 1e6, res["steps"], len(res["rounds"]), info["torch"],
                info["threads"]),
             "  %-16s %10s %7s %7s  %s" % ("mode", "median_ms", "ratio", "paired",
                                          "spread_ms (min..max of round medians)")]
    for label, s in summ.items():
        lines.append("  %-16s %10.2f %6.3fx %6.3fx  %.2f..%.2f"
                     % (label, s["median_ms"], s["ratio"] or 0, s["paired_ratio"] or 0,
                        s["min_ms"], s["max_ms"]))
    for label, s in summ.items():
        d = s.get("daemon")
        if not d:
            continue
        lines.append("  %s: probe hits/step %.0f, returns/step %.0f, module calls/step %.0f, "
                     "tensors/step %.0f, bytes scanned/step %s"
                     % (label, d["probe_hits"], d["return_hits"], d["module_calls"],
                        d["tensors"], fmt_bytes(d["bytes"])))
        lines.append("  %s: not scanned/step: %s returned again as found, %s finite by "
                     "construction, %s checked by the norm they went to"
                     % (label, fmt_bytes(d.get("rescan_bytes") or 0),
                        fmt_bytes(d.get("kept_bytes") or 0), fmt_bytes(d.get("norm_bytes") or 0)))
        bpf = ""
        if d["bpf_runs"]:
            bpf = "; BPF run time %.1f us/hit (entry %.2f + return %.2f ms/step)" % (
                s.get("bpf_us_per_hit", 0), d["entry_ns"] / 1e6, d["return_ns"] / 1e6)
        lines.append("  %s: +%.2f ms/step over uninstrumented = %.1f us per probe hit%s"
                     % (label, s.get("extra_ms_per_step", 0), s.get("extra_us_per_hit", 0), bpf))
        lines.append("  %s: BPF scan rate %s (bytes scanned / time in the scan loop, "
                     "copy included)%s" % (label, fmt_rate(d.get("scan_rate")),
                                           "; whole return program >= %s" % fmt_rate(d["rate"])
                                           if d["bpf_runs"] else ""))
        lines += account_lines(label, s, d)
        lines.append("  %s: daemon CPU %.0f ms per attach (user %.0f + sys %.0f; %.2f%% of "
                     "the window), peak RSS %.1f MiB, attach %.0f ms, detach %.0f ms"
                     % (label, 1e3 * d["cpu_s"], 1e3 * d["user_s"], 1e3 * d["sys_s"],
                        100 * d["cpu_s"] / d["window_s"] if d["window_s"] else 0,
                        d["maxrss_kib"] / 1024, 1e3 * d["attach_s"], 1e3 * d["detach_s"]))
        if d.get("bwd_nodes"):
            lines.append("  %s: backward: %.0f autograd nodes/step, %s of gradients scanned/step, "
                         "%.0f parameter gradients measured/step"
                         % (label, d["bwd_nodes"], fmt_bytes(d["bwd_bytes"]), d["param_grads"]))
        odd = []
        if d["skipped"]:
            odd.append("skipped/step " + ", ".join("%s %.1f" % kv for kv in d["skipped"].items()))
        for k in ("anomalies", "lost", "suppressed"):
            if d[k]:
                odd.append("%s %d" % (k, d[k]))
        if d["steps_mismatch"]:
            odd.append("%d window(s) where the daemon's step count != steps run"
                       % d["steps_mismatch"])
        if odd:
            lines.append("  %s: note: %s" % (label, "; ".join(odd)))
    lines += backward_cost(summ)
    return lines


def test_rate(scan, copy):
    """The test's own rate, from the scan rate (copy and test) and the copy rate alone."""
    if not scan or not copy or scan >= copy:
        return None
    return 1 / (1 / scan - 1 / copy)


def account_lines(label, s, d):
    """Where a step's time goes: the cost per trap, each program's run time, the scan
    split into copy and test, and the other per-step work."""
    out = []
    if d["bpf_runs"]:
        out.append("  %s: per step: BPF entry %.2f, return %.2f, loss %.2f, backward nodes "
                   "(gradient norms) %.2f, step marker %.2f, scaler %.2f ms; trap and the rest "
                   "%.1f us per trap (probe hit or return)"
                   % (label, d["entry_ns"] / 1e6, d["return_ns"] / 1e6, d["loss_ns"] / 1e6,
                      d["node_ns"] / 1e6, d["step_ns"] / 1e6, d["scaler_ns"] / 1e6,
                      s.get("trap_us_per_hit", 0)))
    scan, copy = d.get("all_scan_rate"), d.get("copy_rate")
    out.append("  %s: scan (%s): all bytes %s, copies alone %s, test alone %s; %.0f output "
               "copies/step, %.0f copies/step by the task method (gradients too); %.0f "
               "sequence-counter reads/step, %.0f GPU requests/step"
               % (label, d.get("read_method") or "?", fmt_rate(scan), fmt_rate(copy),
                  fmt_rate(test_rate(scan, copy)), d["copies"], d["task_copies"],
                  d["seq_reads"], d["gpu_requests"]))
    return out


def backward_cost(summ):
    """What the backward pass costs (norms: the default; on: every gradient checked), next to
    what detect_anomaly costs."""
    off, base, anom = summ.get("nanwatch-full" + NOBWD), summ.get("uninstrumented"), \
        summ.get("detect_anomaly")
    if not (off and base and anom):
        return []
    out = []
    for what, label in (("gradient norms (default)", "nanwatch-full"),
                        ("backward checking (--backward on)", "nanwatch-full" + BWD)):
        on = summ.get(label)
        if on:
            out.append("  %s: +%.2f ms/step (%s %.2f vs --backward off %.2f; paired ratios "
                       "%.3fx vs %.3fx)" % (what, on["median_ms"] - off["median_ms"], label,
                                            on["median_ms"], off["median_ms"],
                                            on["paired_ratio"] or 0, off["paired_ratio"] or 0))
    out.append("  detect_anomaly: +%.2f ms/step over uninstrumented (%.3fx)"
               % (anom["median_ms"] - base["median_ms"], anom["paired_ratio"] or 0))
    return out


def report_scan(s, mem_runs):
    lines = ["scan: one module returning a fresh %d MiB float32 tensor per step, %d steps x %d "
             "rounds" % (SCAN_MIB, s["steps"], s["rounds"])]
    lines.append("  detached %.2f ms/step, attached %.2f ms/step: +%.2f ms/step for %s scanned "
                 "-> %s (step-time based)" % (s["detached_ms"], s["attached_ms"], s["extra_ms"],
                                              fmt_bytes(s["bytes_per_step"]),
                                              fmt_rate(s["wall_rate"])))
    lines.append("  BPF scan rate %s (bytes scanned / time in the scan loop: the copy out of "
                 "the target and the test)" % fmt_rate(s["scan_rate"]))
    lines.append("  whole return program >= %s (bytes scanned / its run time, a lower bound)"
                 % fmt_rate(s["bpf_rate"]))
    rates = [m["bytes_per_s"] for m in mem_runs]
    lines.append("  plain memory read (bench/memread.c, %d MiB, summing 64-bit words): %s "
                 "(median of %d runs, %s..%s)" % (SCAN_MIB, fmt_rate(median(rates)), len(rates),
                                                  fmt_rate(min(rates)), fmt_rate(max(rates))))
    if s["scan_rate_ratio"]:
        lines.append("  BPF scan rate / memory read rate = %.2f (whole program: %.2f)"
                     % (s["scan_rate_ratio"], s["bpf_rate_ratio"] or 0))
    if s.get("copy_ratio"):
        lines.append("  the scan split: copies alone %s (the same bytes, each copy timed), test "
                     "alone %s; scan / copies alone = %.2f"
                     % (fmt_rate(s["copy_rate"]), fmt_rate(s["test_rate"]), s["copy_ratio"]))
    if s.get("sweep_ratio"):
        lines.append("  scan / the sweep's fastest copy of new pages at the %d KiB chunk (%s, "
                     "%s, no test between copies) = %.2f"
                     % (s["chunk"] // 1024, s["copy_only_method"],
                        fmt_rate(s["copy_only_rate"]), s["sweep_ratio"]))
    return lines


def targets(summaries, scan, dmodes):
    """(text, holds) for each target of the issue."""
    out = []
    for name, summ in summaries.items():
        base = summ.get("uninstrumented")
        hooks = summ.get("hooks")
        if not base:
            continue
        tol = max(0.02, (base["max_ms"] - base["min_ms"]) / base["median_ms"] / 2)
        for m in dmodes:
            s = summ.get("nanwatch-" + m)
            if not s:
                out.append(("%s nanwatch-%s: not measured" % (name, m), False))
                continue
            limit = FULL_LIMIT.get(name, 1.10) if m == "full" else 1.10
            out.append(("%s nanwatch-%s within %.2fx of uninstrumented: %.3fx (%.2f vs %.2f ms)"
                        % (name, m, limit, s["ratio"], s["median_ms"], base["median_ms"]),
                        s["ratio"] <= limit))
            if hooks:
                out.append(("%s nanwatch-%s at most the forward-hook method: %.2f vs %.2f ms "
                            "(%.3fx vs %.3fx)" % (name, m, s["median_ms"], hooks["median_ms"],
                                                  s["ratio"], hooks["ratio"]),
                            s["median_ms"] <= hooks["median_ms"]))
        on, off, anom = summ.get("nanwatch-full" + BWD), summ.get("nanwatch-full" + NOBWD), \
            summ.get("detect_anomaly")
        if on and off and anom:
            out.append(("%s backward checking cheaper than detect_anomaly: +%.2f vs +%.2f ms/step"
                        % (name, on["median_ms"] - off["median_ms"],
                           anom["median_ms"] - base["median_ms"]),
                        on["median_ms"] - off["median_ms"] < anom["median_ms"] - base["median_ms"]))
        cheapest = next((m for m in ("loss", "sample") if m in dmodes), None)
        s = summ.get("nanwatch-" + cheapest) if cheapest else None
        if s:
            out.append(("%s cheapest watch mode (nanwatch-%s) within 1.02x of uninstrumented: "
                        "%.3fx (paired %.3fx)" % (name, cheapest, s["ratio"],
                                                  s["paired_ratio"] or 0), s["ratio"] <= 1.02))
        s = summ.get("detached")
        if s:
            out.append(("%s detached 1.00x: %.3fx (tolerance +-%.3f: 2%% or half the "
                        "uninstrumented spread, whichever is larger)" % (name, s["ratio"], tol),
                        abs(s["ratio"] - 1) <= tol))
    if scan:
        r = scan["copy_ratio"]
        out.append(("BPF scan rate at least 0.7 of its copies alone (the same bytes): %s vs %s "
                    "= %s (the sweep's copy alone: %s)"
                    % (fmt_rate(scan["scan_rate"]), fmt_rate(scan["copy_rate"]),
                       "%.2f" % r if r else "n/a",
                       "%.2f" % scan["sweep_ratio"] if scan.get("sweep_ratio") else "n/a"),
                    bool(r and r >= 0.7)))
    return out


# --------------------------------------------------------------------------- plot


def plot(path, summaries, title):
    """Bar chart, one panel per model: median step time per mode, whiskers min..max of the
    round medians, each round's median as a dot, the ratio to uninstrumented above."""
    fig, axes = plt.subplots(1, len(summaries), figsize=(6 * len(summaries), 4.8),
                             squeeze=False)
    for ax, (name, summ) in zip(axes[0], summaries.items()):
        labels = list(summ)
        med = [summ[m]["median_ms"] for m in labels]
        lo = [summ[m]["median_ms"] - summ[m]["min_ms"] for m in labels]
        hi = [summ[m]["max_ms"] - summ[m]["median_ms"] for m in labels]
        colors = ["#4c72b0" if not m.startswith("nanwatch") else "#dd8452" for m in labels]
        xs = range(len(labels))
        ax.bar(xs, med, yerr=[lo, hi], capsize=4, color=colors)
        for x, m in zip(xs, labels):
            ax.plot([x] * len(summ[m]["round_medians_ms"]), summ[m]["round_medians_ms"], "k.",
                    markersize=3)
            ax.annotate("%.2fx" % summ[m]["ratio"], (x, summ[m]["max_ms"]),
                        textcoords="offset points", xytext=(0, 4), ha="center", fontsize=8)
        ax.set_xticks(list(xs))
        ax.set_xticklabels(labels, rotation=25, ha="right", fontsize=8)
        ax.set_ylabel("step time, ms (median; whiskers: min..max of rounds)")
        ax.set_title(name)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


# --------------------------------------------------------------------------- main


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--daemon", required=True, help="path of nanwatchd")
    ap.add_argument("--python", default="/usr/bin/python3", help="the trainer's Python (torch)")
    ap.add_argument("--models", default="transformer,cnn,scan",
                    help="comma-separated, of transformer, cnn and scan (the scan-rate "
                    "measurement; `--models scan` runs it alone)")
    ap.add_argument("--rounds", type=int, help="rounds of every mode (default 5; quick 2)")
    ap.add_argument("--steps", type=int,
                    help="steps per measurement window for every model (default per model: %s)"
                    % ", ".join("%s %d" % kv for kv in DEFAULT_STEPS.items()))
    ap.add_argument("--threads", type=int, default=1, help="trainer compute threads")
    ap.add_argument("--daemon-modes", help="comma-separated (default: from nanwatchd --help)")
    ap.add_argument("--no-scan", action="store_true",
                    help="skip the scan-rate measurement (drops scan from --models)")
    ap.add_argument("--no-bpf-stats", action="store_true",
                    help="attach to the training models without --bpf-stats (kernel BPF "
                    "run-time accounting: two clock reads per program run); the scan "
                    "measurement keeps it")
    ap.add_argument("--memread", help="memread binary (default: next to --daemon)")
    ap.add_argument("--json", default=os.path.join("build", "bench.json"))
    ap.add_argument("--plot", default=os.path.join("build", "bench.png"))
    ap.add_argument("--quick", action="store_true", help="~1 minute smoke run")
    a = ap.parse_args()
    a.models = [m for m in a.models.split(",") if m]
    bad = [m for m in a.models if m not in ("transformer", "cnn", "scan")]
    if bad or not a.models:
        ap.error("--models: choose from transformer,cnn,scan")
    a.no_scan = a.no_scan or "scan" not in a.models
    a.models = [m for m in a.models if m != "scan"]
    if not a.models and a.no_scan:
        ap.error("--no-scan leaves no model to run")
    if a.rounds is None:
        a.rounds = 2 if a.quick else 5
    if a.rounds < 1 or (a.steps is not None and a.steps < 1):
        ap.error("--rounds and --steps must be at least 1")
    base = QUICK_STEPS if a.quick else DEFAULT_STEPS
    a.step_counts = {m: a.steps or base[m] for m in base}
    a.memread = a.memread or os.path.join(os.path.dirname(a.daemon), "memread")
    a.scanrate = os.path.join(os.path.dirname(a.daemon), "scanrate")
    for path, what in ((a.daemon, "--daemon"), (a.memread, "--memread"),
                       (a.scanrate, "scanrate")):
        if not os.access(path, os.X_OK):
            ap.error("%s %s is not an executable (run `make` first)" % (what, path))
    a.daemon = os.path.abspath(a.daemon)
    return a


def machine():
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")),
                       "?")
    except OSError:
        pass
    return {"host": platform.node(), "kernel": platform.release(), "cpu": cpu,
            "cpus": os.cpu_count()}


def run_all(a, out):
    dmodes = out["daemon_modes"]
    trainers = {}
    for m in a.models + ([] if a.no_scan else ["scan"]):
        log("starting trainer %s" % m)
        trainers[m] = Trainer(a.python, m, a.threads, 3)
        if m == "scan":
            out["scan"].update(info=trainers[m].info, steps=a.step_counts[m], rounds=[])
            continue
        for mode in ("plain", "hooks", "anomaly"):  # first-call costs, not measured
            trainers[m].run(mode, 2)
        out["models"][m] = {"info": trainers[m].info, "steps": a.step_counts[m], "rounds": []}
    for r in range(a.rounds):
        log("round %d/%d" % (r + 1, a.rounds))
        for m in a.models:
            model_round(a, trainers[m], dmodes, a.step_counts[m], r, out["models"][m]["rounds"])
        if not a.no_scan:
            scan_round(a, trainers["scan"], a.step_counts["scan"], r, out["scan"]["rounds"])
        out["memread"].append(memread(a.memread))
    for t in trainers.values():
        t.quit()
    if not a.no_scan:
        log("copy-rate sweep (%s)" % a.scanrate)
        out["scanrate"] = scanrate(a.scanrate)


def main():
    a = parse_args()
    if os.geteuid() != 0:
        sys.stderr.write("bench: nanwatchd needs root: run `make bench` as root\n")
        return 2
    t_start = time.monotonic()
    cpu0 = cpu_times()
    dmodes = a.daemon_modes.split(",") if a.daemon_modes else daemon_modes(a.daemon)
    modes_order = ["uninstrumented", "hooks", "detect_anomaly"] \
        + ["nanwatch-" + m for m in dmodes] + ["detached"]
    out = {"schema": "nanwatch-bench/1", "time": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                               time.gmtime()),
           "machine": machine(), "daemon": a.daemon, "python": a.python,
           "daemon_modes": dmodes, "rounds": a.rounds, "quick": a.quick, "threads": a.threads,
           "bpf_stats": not a.no_bpf_stats, "models": {}, "scan": {}, "memread": []}
    err = None
    for p in (a.json, a.plot):
        os.makedirs(os.path.dirname(os.path.abspath(p)), exist_ok=True)
    try:
        run_all(a, out)
    except (Fail, OSError, ValueError, KeyError) as e:
        err = str(e)
    except KeyboardInterrupt:
        err = "interrupted"
    finally:
        kill_children()
    elapsed = time.monotonic() - t_start
    cpu1 = cpu_times()
    out["elapsed_s"] = elapsed
    if cpu0 and cpu1 and cpu1[2] > cpu0[2]:
        out["steal_pct"] = 100.0 * (cpu1[1] - cpu0[1]) / (cpu1[2] - cpu0[2])
    if err:
        out["error"] = err
        sys.stderr.write("bench: %s\n" % err)

    lines = ["nanwatch bench  %s  %s, %s CPUs, kernel %s; %d rounds, modes rotate per round; "
             "daemon %s --bpf-stats" % (out["time"], out["machine"]["cpu"],
                                        out["machine"]["cpus"], out["machine"]["kernel"],
                                        a.rounds, "without" if a.no_bpf_stats else "with")]
    summaries = {}
    for name, res in out["models"].items():
        if not res["rounds"]:
            continue
        summaries[name] = model_summary(res, modes_order)
        res["summary"] = summaries[name]
        lines += report_model(name, res, summaries[name])
    scan = None
    mem = out["memread"]
    if out["scan"].get("rounds") and mem:
        scan = scan_summary(out["scan"], median([m["bytes_per_s"] for m in mem]),
                            out.get("scanrate"))
        scan.update(steps=out["scan"]["steps"], rounds=len(out["scan"]["rounds"]))
        out["scan"]["summary"] = scan
        lines += report_scan(scan, mem)
        lines += report_sweep(out.get("scanrate"))
    tg = targets(summaries, scan, dmodes)
    out["targets"] = [{"target": t, "holds": h} for t, h in tg]
    lines.append("ratio: median step time / uninstrumented median; paired: median over rounds "
                 "of the same ratio within one round")
    lines.append("targets:")
    lines += ["  %-6s %s" % ("HOLDS" if h else "MISSED", t) for t, h in tg]
    if "steal_pct" in out and out["steal_pct"] >= 1:
        lines.append("note: %.1f%% of CPU time was stolen by the hypervisor during the run"
                     % out["steal_pct"])
    if summaries:
        title = "nanwatch bench %s %s" % (out["time"], out["machine"]["host"])
        try:
            plot(a.plot, summaries, title)
            lines.append("plot: %s" % a.plot)
            out["plot"] = a.plot
        except Exception as e:  # the numbers matter more than the picture
            lines.append("plot: failed: %s" % e)
    lines.append("json: %s; took %.0f s" % (a.json, elapsed))
    if err:
        lines.append("error: %s" % err)
    missed = [t for t, h in tg if not h]
    out["targets_missed"] = len(missed)
    # last, where it cannot scroll away: what failed the run
    if missed:
        lines.append("MISSED %d of %d targets (exit status 3):" % (len(missed), len(tg)))
        lines += ["  MISSED %s" % t for t in missed]
    else:
        lines.append("all %d targets hold" % len(tg))
    with open(a.json, "w") as f:
        json.dump(out, f, indent=1)
    print("\n".join(lines))
    if err:
        return 1
    return 3 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
