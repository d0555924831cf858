"""What the integration tests check in a daemon's stream, used by more than one area: the
envelope (schema, seq, time, attach ... stats ... detach), anomaly fields against the oracle's,
the diagnosis, the stats tally, refusals; watch() runs a trainer under the daemon and checks
its stream. Also how a test names the environments it runs in (conftest.py has the fixtures),
and service mode's: a config written, the daemon started and READY=1 awaited on NOTIFY_SOCKET,
its event file read and waited on, SIGTERM.
"""
import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.request

import pytest

from nwharness import (ATTACH_TIMEOUT, DETACH_TIMEOUT, ERROR_TIMEOUT, REPO, TRAINER_TIMEOUT,
                       Fail, Proc, finish_trainer, is_event, read_comm, start_daemon,
                       start_waiting_trainer, tail, trainer_argv, wait_attach, wait_daemon_exit)

ENVIRONMENTS = ("host", "trixie", "forky", "container")
EVERYWHERE = ENVIRONMENTS
HOST_AND_ROOTS = ("host", "trixie", "forky")  # the container runs in the forky root
HOST_ONLY = ("host",)  # the output tests: they test the daemon's side, any trainer will do


def environments(*names):
    """Run the test once in each named environment (the env fixture's parameter, conftest.py);
    the environment ends the test's id: test_healthy[trixie]."""
    return pytest.mark.parametrize("env", names, indirect=True)


def case_test(case, *args, envs):
    """A test of case(ctx, *args) in each of envs, for cases that several tests share (one
    per trainer); the module names it after the case: test_trainer_nan_input = ..."""
    @environments(*envs)
    def test(ctx):
        case(ctx, *args)
    test.__doc__ = case.__doc__
    return test


SCHEMA = "nanwatch/1"
NOBODY = 65534
COMMON_FIELDS = ("schema", "event", "time", "seq", "host", "pid", "comm")
ANOMALY_FIELDS = ("tid", "step", "step_source", "iteration", "iteration_source", "phase", "layer",
                  "module", "tensor", "dtype", "shape", "numel", "nan", "posinf", "neginf",
                  "finite_min", "finite_max", "inputs_finite", "params_finite", "params_late",
                  "origin", "first")
EXACT_FIELDS = ("step", "iteration", "layer", "module", "tensor", "dtype", "shape", "numel",
                "nan", "posinf", "neginf", "inputs_finite", "params_finite", "origin")
TIME_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)$")
CAPTURE_DIRS = []  # capture directories made inside an environment's root, removed at the end


def read_table(path):
    """key -> value text of a layout table (comments dropped)."""
    keys = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            key, _, value = line.partition(":")
            keys[key.strip()] = value.strip()
    return keys


def parse_stream(daemon, pid, comm):
    """Every stdout line: UTF-8 JSON object, schema, consecutive seq, common fields."""
    events = []
    for n, raw in enumerate(daemon.out, 1):
        try:
            ev = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            raise Fail("stdout line %d is not JSON (%s): %r" % (n, e, raw[:200]))
        if not isinstance(ev, dict):
            raise Fail("stdout line %d is not a JSON object" % n)
        missing = [f for f in COMMON_FIELDS if f not in ev]
        if missing:
            raise Fail("line %d (%s) lacks %s" % (n, ev.get("event"), ", ".join(missing)))
        if ev["schema"] != SCHEMA:
            raise Fail("line %d: schema %r, want %r" % (n, ev["schema"], SCHEMA))
        prev = events[-1]["seq"] if events else None
        if type(ev["seq"]) is not int or (events and ev["seq"] != prev + 1):
            raise Fail("line %d: seq %r after %r" % (n, ev["seq"], prev))
        if not isinstance(ev["time"], str) or not TIME_RE.match(ev["time"]):
            raise Fail("line %d: time %r is not RFC 3339" % (n, ev["time"]))
        if ev["pid"] != pid or ev["comm"] != comm:
            raise Fail("line %d: pid/comm %r/%r, want %d/%r" % (n, ev["pid"], ev["comm"],
                                                               pid, comm))
        if not isinstance(ev["host"], str) or not ev["host"]:
            raise Fail("line %d: host %r" % (n, ev["host"]))
        events.append(ev)
    if not events:
        raise Fail("daemon printed nothing")
    return events


def check_interpreter(ctx, events):
    """In the container: the attach event names the container's interpreter path."""
    if not ctx.env.container:
        return
    got, want = events[0].get("interpreter"), ctx.env.interpreter
    if got != want:
        raise Fail("attach event's interpreter %r, want %r" % (got, want))
    if ctx.env.host_lacks_interpreter:
        if os.path.lexists(want):
            raise Fail("the host has %s now (it did not at the start)" % want)
        ctx.log("interpreter %s, a path the host does not have" % got)
    else:
        ctx.log("interpreter %s (the host has that path too: not checked that it lacks it)"
                % got)


def check_envelope(events, reason):
    """attach first, a stats event, detach last with the given reason."""
    names = [ev["event"] for ev in events]
    if names[0] != "attach":
        raise Fail("first event is %r, not attach" % names[0])
    if names.count("attach") != 1:
        raise Fail("%d attach events" % names.count("attach"))
    if names[-1] != "detach":
        raise Fail("last event is %r, not detach" % names[-1])
    if names.count("detach") != 1:
        raise Fail("%d detach events" % names.count("detach"))
    if events[-1].get("reason") != reason:
        raise Fail("detach reason %r, want %r" % (events[-1].get("reason"), reason))
    if "stats" not in names:
        raise Fail("no stats event before detach")
    for ev in events:
        if ev["event"] in ("error", "lost"):
            raise Fail("unexpected %s event: %s" % (ev["event"], json.dumps(ev)))
        if ev["event"] in ("anomaly", "warning", "diagnosis", "stats", "detach"):
            check_sources(ev)


def same(a, b):
    """Equal in value and JSON type (true is not 1, 4 is not 4.0)."""
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def close(a, b):
    if a is None or b is None:
        return a is None and b is None
    if not isinstance(a, (int, float)) or isinstance(a, bool):
        return False
    return abs(a - b) <= 1e-5 * max(abs(a), abs(b)) + 1e-30


STEP_SOURCES = ("attach", "optimizer_state", "backward_passes", "loop_variable")


def check_sources(ev):
    """step_source says where step comes from; iteration always counts from the attach."""
    if ev.get("step_source") not in STEP_SOURCES or ev.get("iteration_source") != "attach":
        raise Fail("%s: step_source %r, iteration_source %r; want one of %s and \"attach\"" %
                   (ev["event"], ev.get("step_source"), ev.get("iteration_source"),
                    STEP_SOURCES))


def check_anomaly_fields(ev, pid):
    missing = [f for f in ANOMALY_FIELDS if f not in ev]
    if missing:
        raise Fail("anomaly lacks %s: %s" % (", ".join(missing), json.dumps(ev)))
    check_sources(ev)
    if ev["tid"] != pid:
        raise Fail("anomaly tid %r, want the trainer's main thread %d" % (ev["tid"], pid))
    shape, numel = ev["shape"], 1
    for dim in shape:
        numel *= dim
    if ev["numel"] != numel:
        raise Fail("anomaly numel %r does not match shape %r" % (ev["numel"], shape))
    bad = ev["nan"] + ev["posinf"] + ev["neginf"]
    if not 0 < bad <= numel:
        raise Fail("anomaly counts nan/posinf/neginf %r/%r/%r for %d values" %
                   (ev["nan"], ev["posinf"], ev["neginf"], numel))
    if ev["phase"] == "loss":
        if ev["layer"] is not None or ev["module"] is not None or \
                not ev["tensor"].startswith("loss"):
            raise Fail("loss anomaly names a layer or tensor: %s" % json.dumps(ev))
    elif ev["origin"] is not (ev["inputs_finite"] is True and ev["params_finite"] is not False):
        raise Fail("origin %r with inputs_finite %r, params_finite %r" %
                   (ev["origin"], ev["inputs_finite"], ev["params_finite"]))
    if (ev["phase"] == "forward") != (type(ev["params_late"]) is bool):
        raise Fail("phase %s with params_late %r" % (ev["phase"], ev["params_late"]))


def check_first(anomalies, oracle):
    """Exactly one event has first: true, it is the first one, in the oracle's phase."""
    firsts = [ev for ev in anomalies if ev["first"] is True]
    if len(firsts) != 1 or anomalies[0] is not firsts[0]:
        raise Fail("%d events with first: true; the first anomaly event must be the one" %
                   len(firsts))
    first = firsts[0]
    if first["phase"] != oracle.get("phase", "forward"):
        raise Fail("first anomaly phase %r, oracle %r" % (first["phase"],
                                                           oracle.get("phase", "forward")))
    return first


def check_anomalies(events, oracle, pid, verdicts=False):
    """The first anomaly and its iteration's as the oracle saw them; with verdicts, each of
    that iteration's outputs also with the oracle's inputs_finite and origin (where the daemon
    knows the inputs: null is unknown)."""
    anomalies = [ev for ev in events if ev["event"] == "anomaly"]
    if not anomalies:
        raise Fail("no anomaly event; oracle: %s at step %d" % (describe(oracle), oracle["step"]))
    for ev in anomalies:
        check_anomaly_fields(ev, pid)
    first = check_first(anomalies, oracle)
    diffs = ["%s %r, oracle %r" % (f, first[f], oracle[f]) for f in EXACT_FIELDS
             if not same(first[f], oracle[f])]
    diffs += ["%s %r, oracle %r" % (f, first[f], oracle[f]) for f in ("finite_min", "finite_max")
              if not close(first[f], oracle[f])]
    if diffs:
        raise Fail("first anomaly differs: " + "; ".join(diffs))

    forward = [ev for ev in anomalies if ev["phase"] == "forward"]
    got = [(ev["layer"], ev["module"], ev["tensor"]) for ev in forward
           if ev["iteration"] == first["iteration"]]
    want = [(a["layer"], a["module"], a["tensor"]) for a in oracle["first_iteration"]]
    if got != want:
        raise Fail("anomalies of iteration %d differ:\n    daemon: %s\n    oracle: %s" %
                   (first["iteration"], listing(got), listing(want)))
    if verdicts:
        this = [ev for ev in forward if ev["iteration"] == first["iteration"]]
        diffs = ["%s %s %r, oracle %r" % (ev["layer"], f, ev[f], a[f])
                 for ev, a in zip(this, oracle["first_iteration"])
                 for f in ("inputs_finite", "origin")
                 if ev[f] is not None and ev[f] != a[f]]
        if diffs:
            raise Fail("iteration %d: %s" % (first["iteration"], "; ".join(diffs)))
    later = {}
    last = first["iteration"]
    for ev in forward:
        if ev["iteration"] < last:
            raise Fail("anomaly iterations go backwards: %d after %d" % (ev["iteration"], last))
        last = ev["iteration"]
        if ev["iteration"] != first["iteration"]:
            later[ev["iteration"]] = later.get(ev["iteration"], 0) + 1
    over = sorted(it for it, n in later.items() if n > 1)
    if over:
        raise Fail("more than one anomaly event in iterations %s" % over)
    check_later(forward, first, oracle)
    check_diagnosis(events, first, oracle)


def check_diagnosis(events, first, oracle):
    """One diagnosis for the incident, on the first anomaly, with the cause the trainer's
    fault was built to produce."""
    diags = [ev for ev in events if ev["event"] == "diagnosis"]
    if len(diags) != 1:
        raise Fail("%d diagnosis events, want 1" % len(diags))
    d = diags[0]
    diffs = ["%s %r, first anomaly %r" % (f, d[f], first[f])
             for f in ("step", "iteration", "layer", "module") if not same(d[f], first[f])]
    if d["cause"] != oracle["expected_cause"]:
        diffs.append("cause %r, the fault is %r" % (d["cause"], oracle["expected_cause"]))
    if not d["evidence"] or not (0 < d["confidence"] <= 1) or \
            (d["cause"] != "unknown" and not d["fixes"]):
        diffs.append("evidence/fixes/confidence missing: %s" % json.dumps(d))
    if diffs:
        raise Fail("diagnosis differs: " + "; ".join(diffs))
    if events.index(d) < events.index(first):
        raise Fail("diagnosis before the first anomaly")


LATER_FIELDS = ("layer", "module", "tensor", "nan", "posinf", "neginf", "inputs_finite",
                "params_finite", "origin")


def check_later(forward, first, oracle):
    """After the first anomalous iteration, each iteration's one event is its first non-finite
    output: the same as the oracle's, parameters included (after a NaN step the weights are
    NaN, so the layer did not create the value: params_finite false, not an origin)."""
    want = {a["iteration"]: a for a in oracle.get("later", [])}
    got = {ev["iteration"]: ev for ev in forward if ev["iteration"] != first["iteration"]}
    for it in sorted(set(want) | set(got)):
        w, g = want.get(it), got.get(it)
        if w is None or g is None:
            raise Fail("iteration %d: daemon %s, oracle %s" % (
                it, g and describe(g), w and describe(w)))
        diffs = ["%s %r, oracle %r" % (f, g[f], w[f]) for f in LATER_FIELDS
                 if not same(g[f], w[f])]
        if diffs:
            raise Fail("iteration %d anomaly differs: %s" % (it, "; ".join(diffs)))


def describe(o):
    return "%s (%s) %s" % (o["layer"] or '""', o["module"], o["tensor"])


def listing(items):
    return ", ".join("%s/%s/%s" % (layer or '""', mod, tensor) for layer, mod, tensor in items)


def scan_chunk():
    """Bytes one copy out of the target may bring in: NW_SCAN_CHUNK in bpf/nanwatch.h, the
    source the daemon was built from, not anything the daemon says of itself."""
    with open(os.path.join(REPO, "bpf", "nanwatch.h")) as f:
        m = re.search(r"^#define NW_SCAN_CHUNK (\d+)\b", f.read(), re.M)
    if not m:
        raise Fail("bpf/nanwatch.h defines no NW_SCAN_CHUNK")
    return int(m.group(1))


def last_stats(events):
    stats = [ev for ev in events if ev["event"] == "stats"]
    skipped = stats[-1].get("skipped") if stats else None
    if not isinstance(skipped, dict) or type(skipped.get("noncontiguous")) is not int:
        raise Fail("stats event lacks skipped.noncontiguous: %s" %
                   json.dumps(stats[-1] if stats else None))
    return stats[-1]


def watch(ctx, name, trace, mode=None, trainer_args=(), daemon_args=(), user=None, caps=None,
          layouts=None, return_daemon=False):
    """Trainer under the daemon from step 0 to exit, flat out; the parsed stream, whose last
    stats line must add up. layouts: another --layouts directory; return_daemon: (stream,
    daemon), for what the daemon said on stderr."""
    trainer = start_waiting_trainer(ctx, name, *trainer_args)
    comm = read_comm(trainer.pid)
    daemon = start_daemon(ctx, trainer.pid, layouts=layouts, mode=mode, extra=daemon_args,
                          user=user, caps=caps)
    wait_attach(daemon)
    trainer.send(b"go\n")
    finish_trainer(ctx, trainer, name, trace)
    wait_daemon_exit(daemon)
    events = parse_stream(daemon, trainer.pid, comm)
    check_envelope(events, "target_exit")
    check_interpreter(ctx, events)
    check_tally(ctx, events)
    ctx.log("%d events: %s" % (len(events), ", ".join(sorted({e["event"] for e in events}))))
    ctx.streams[(ctx.env.name, name, mode or "full")] = events
    return (events, daemon) if return_daemon else events


PHASES = ("forward", "loss", "backward")
LOST_RECORDS = ("anomaly", "module", "mark", "loss", "grad", "capture", "scaler")


def check_tally(ctx, events):
    """The last stats line reconciles: per phase found = reported + suppressed + lost +
    in_skipped_steps (found in steps a gradient scaler skipped), reported is the anomaly lines
    of that phase, the top-level numbers are the phases' sums, and the
    anomaly records lost are the phases' lost."""
    stats = [ev for ev in events if ev["event"] == "stats"][-1]
    phases, lost = stats.get("phases"), stats.get("lost_records")
    if not isinstance(phases, dict) or sorted(phases) != sorted(PHASES) or \
            not isinstance(lost, dict) or sorted(lost) != sorted(LOST_RECORDS):
        raise Fail("stats lacks phases {%s} or lost_records {%s}: %s" % (
            ", ".join(PHASES), ", ".join(LOST_RECORDS), json.dumps(stats)))
    lines = {p: sum(1 for ev in events if ev["event"] == "anomaly" and ev["phase"] == p)
             for p in PHASES}
    bad = []
    for p in PHASES:
        n = phases[p]
        if any(type(n.get(k)) is not int
               for k in ("found", "reported", "suppressed", "lost", "in_skipped_steps")):
            raise Fail("stats.phases.%s is %s" % (p, json.dumps(n)))
        if n["found"] != n["reported"] + n["suppressed"] + n["lost"] + n["in_skipped_steps"]:
            bad.append("%s: found %d != reported %d + suppressed %d + lost %d + in skipped "
                       "steps %d" % (p, n["found"], n["reported"], n["suppressed"], n["lost"],
                                     n["in_skipped_steps"]))
        if n["reported"] != lines[p]:
            bad.append("%s: reported %d, %d anomaly lines" % (p, n["reported"], lines[p]))
    for top, key in (("anomalies", "found"), ("reported", "reported"),
                     ("suppressed", "suppressed"), ("lost", "lost"),
                     ("in_skipped_steps", "in_skipped_steps")):
        if stats[top] != sum(phases[p][key] for p in PHASES):
            bad.append("%s %d is not the phases' %s summed" % (top, stats[top], key))
    if lost["anomaly"] != stats["lost"]:
        bad.append("lost_records.anomaly %d, lost %d" % (lost["anomaly"], stats["lost"]))
    if bad:
        raise Fail("stats do not add up: %s; %s" % ("; ".join(bad), json.dumps(stats)))
    ctx.log("stats add up: %s; lost records %s" % (
        ", ".join("%s %d = %d + %d + %d%s" % (
            p, phases[p]["found"], phases[p]["reported"], phases[p]["suppressed"],
            phases[p]["lost"], " + %d in skipped steps" % phases[p]["in_skipped_steps"]
            if phases[p]["in_skipped_steps"] else "") for p in PHASES), json.dumps(lost)))
    return stats


def expect_refusal(ctx, daemon, words):
    """Non-zero exit, one non-empty stderr line naming one of words, no attach."""
    rc = daemon.wait(ERROR_TIMEOUT)
    if rc is None:
        daemon.kill()
        raise Fail("daemon still running after %ds (killed)" % ERROR_TIMEOUT)
    if rc == 0:
        raise Fail("daemon exited 0")
    if daemon.wait_out(is_event("attach"), 0) is not None:
        raise Fail("daemon printed an attach event")
    err = daemon.stderr_lines()
    if len(err) != 1 or not err[0].strip():
        raise Fail("stderr has %d lines, want one message" % len(err))
    if not any(w.lower() in err[0].lower() for w in words):
        raise Fail("message %r names none of %s" % (err[0], "/".join(words)))
    ctx.log("exit %d: %s" % (rc, err[0]))


def target_untouched(proc):
    if not proc.running():
        raise Fail("target died (status %s)" % proc.p.returncode)
    with open("/proc/%d/status" % proc.pid) as f:
        status = dict(line.split(":", 1) for line in f if ":" in line)
    state, tracer = status["State"].strip(), status["TracerPid"].strip()
    if state[0] in "tTZX" or tracer != "0":
        raise Fail("target left in state %r, tracer %s" % (state, tracer))


# ---- service mode (nanwatchd --config) ----

READY_TIMEOUT = 60


def write_config(ctx, tmp, rules, scan_ms=100, extra="", metrics_port=None):
    """A config with these rule texts (YAML list items), events to tmp/events.ndjson, the
    metrics endpoint on 127.0.0.1:metrics_port if given."""
    events = os.path.join(tmp, "events.ndjson")
    path = os.path.join(tmp, "nanwatch.yaml")
    with open(path, "w") as f:
        f.write("watch:\n%s" % "".join(rules))
        f.write("output:\n  - file: %s\n" % events)
        f.write("layouts: %s\nscan_interval_ms: %d\n" % (ctx.layouts, scan_ms))
        if metrics_port is not None:
            f.write("metrics:\n  listen: 127.0.0.1:%d\n" % metrics_port)
        f.write(extra)
    return path, events


def notify_socket(tmp):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    path = os.path.join(tmp, "notify")
    sock.bind(path)
    sock.settimeout(READY_TIMEOUT)
    return sock, path


def expect_notify(sock, want):
    try:
        got = sock.recv(256).decode()
    except socket.timeout:
        raise Fail("no %s on NOTIFY_SOCKET in %d s" % (want, READY_TIMEOUT))
    if want not in got.split("\n"):
        raise Fail("NOTIFY_SOCKET got %r, not %s" % (got, want))


def start_service(ctx, config, notify=None):
    env = ["env", "NOTIFY_SOCKET=" + notify] if notify else []
    daemon = Proc(env + [ctx.daemon, "--config", config, "--verbose"], term_timeout=10)
    ctx.current_daemon = daemon
    ctx.log("started nanwatchd --config %s (pid %d)" % (config, daemon.pid))
    return daemon


def start_ready(ctx, tmp, config):
    """start_service, returned once READY=1 has arrived."""
    sock, path = notify_socket(tmp)
    try:
        daemon = start_service(ctx, config, notify=path)
        expect_notify(sock, "READY=1")
    finally:
        sock.close()
    return daemon


def start_process(ctx, env, argv):
    """argv run with env (a dict) added to this environment, stdin a pipe."""
    return Proc(["env"] + ["%s=%s" % kv for kv in env.items()] + argv, stdin=True)


def start_trainer(ctx, env):
    """inflight --live: trains until told "fault", then three more steps, and exits."""
    return start_process(ctx, env, trainer_argv(ctx, "inflight", "--live", "--pace", "0.02"))


def read_events(path):
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def wait_file_event(path, name, timeout):
    """Whether an event name shows in the file at path within timeout seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if any(ev.get("event") == name for ev in read_events(path)):
                return True
        except ValueError:
            pass  # a line being written
        time.sleep(0.2)
    return False


def run_rank(ctx, name, rank, world_size, trainer_args, trace, out, daemon_extra=()):
    """Trainer name (--wait, then trainer_args) with RANK and WORLD_SIZE in its environment,
    under a daemon writing the file out (-o, plus daemon_extra); the file's path, the trainer's
    pid and its events, the last a detach, the first of that rank."""
    argv = ["env", "RANK=%d" % rank, "WORLD_SIZE=%d" % world_size] + trainer_argv(
        ctx, name, "--wait", *trainer_args)
    trainer = Proc(argv, stdin=True)
    if trainer.wait_out(lambda l: l.startswith(b"READY "), 60) is None:
        raise Fail("rank %d printed no READY line:\n%s" % (rank, tail(trainer.stderr_lines())))
    daemon = start_daemon(ctx, trainer.pid, extra=["-o", out] + list(daemon_extra))
    if not wait_file_event(out, "attach", ATTACH_TIMEOUT):
        raise Fail("no attach event in %s" % out)
    trainer.send(b"go\n")
    finish_trainer(ctx, trainer, name, trace)
    wait_daemon_exit(daemon)
    events = read_events(out)
    if events[-1].get("event") != "detach" or str(events[0].get("rank")) != str(rank):
        raise Fail("%s: last event %r, rank %r" % (out, events[-1].get("event"),
                                                   events[0].get("rank")))
    return out, trainer.pid, events


def last_json(proc, key):
    """proc's last stdout line that is a JSON object holding key, or None."""
    for line in reversed(proc.stdout_text().splitlines()):
        if line.startswith("{"):
            found = json.loads(line)
            if key in found:
                return found
    return None


def finish_ranks(ranks, what):
    """Each rank's last JSON line with a trace, once every rank exited 0."""
    results = []
    for rank, proc in enumerate(ranks):
        rc = proc.wait(TRAINER_TIMEOUT)
        if rc != 0:
            raise Fail("%s: rank %d exited %r:\n%s" % (what, rank, rc, tail(proc.stderr_lines())))
        found = last_json(proc, "trace")
        if found is None:
            raise Fail("%s: rank %d printed no trace" % (what, rank))
        results.append(found)
    return results


def wait_events(path, daemon, pred, what, timeout):
    """The events once pred(events) holds; Fail after timeout seconds or if the daemon ends."""
    deadline = time.monotonic() + timeout
    while True:
        events = read_events(path)
        if pred(events):
            return events
        if not daemon.running():
            raise Fail("daemon exited %s waiting for %s:\n%s" % (daemon.p.returncode, what,
                                                               daemon.stderr_tail(8)))
        if time.monotonic() > deadline:
            raise Fail("no %s in %d s; events: %s\n%s" % (
                what, timeout, [(e["event"], e["pid"]) for e in events][-10:],
                daemon.stderr_tail(8)))
        time.sleep(0.1)


def has_event(name, pid):
    return lambda events: any(e["event"] == name and e["pid"] == pid for e in events)


def stop_service(daemon, sock=None):
    daemon.p.send_signal(signal.SIGTERM)
    rc = daemon.wait(DETACH_TIMEOUT)
    if rc != 0:
        raise Fail("daemon exited %r on SIGTERM, not 0:\n%s" % (rc, daemon.stderr_tail(8)))
    if sock is not None:
        expect_notify(sock, "STOPPING=1")


def attach_latencies(daemon):
    return [line.split(" attached ")[1] for line in daemon.stderr_lines() if " attached " in line]


def wait_stderr(daemon, text):
    deadline = time.monotonic() + READY_TIMEOUT
    while not any(text in line for line in daemon.stderr_lines()):
        if time.monotonic() > deadline or not daemon.running():
            raise Fail("no %r on stderr:\n%s" % (text, daemon.stderr_tail()))
        time.sleep(0.1)


class NetLan:
    """A bridge in this namespace (BRIDGE_IP 10.215.S.1/24) and network namespaces on it,
    each a "node" with its own address (10.215.S.OCTET, eth0 inside) and, for what node()'s
    run() starts, its own host name (a UTS namespace per process). close() removes them."""

    def __init__(self, tag, subnet):
        self.subnet, self.tag, self.nodes = subnet, tag, []
        self.bridge = "nwbr%d-%d" % (subnet, os.getpid() % 100000)
        self.host_ip = "10.215.%d.1" % subnet
        self.sh(["ip", "link", "add", self.bridge, "type", "bridge"])
        self.sh(["ip", "addr", "add", self.host_ip + "/24", "dev", self.bridge])
        self.sh(["ip", "link", "set", self.bridge, "up"])

    def sh(self, argv):
        r = subprocess.run(argv, capture_output=True, text=True)
        if r.returncode:
            self.close()
            raise Fail("%s: %s" % (" ".join(argv), r.stderr.strip()))

    def node(self, name, octet):
        n = LanNode("%s-%s-%d" % (self.tag, name, os.getpid()), name,
                    "10.215.%d.%d" % (self.subnet, octet))
        self.nodes.append(n)
        outside = "nw%d.%d-%d" % (self.subnet, octet, os.getpid() % 10000)
        n.outside = outside
        self.sh(["ip", "netns", "add", n.ns])
        self.sh(["ip", "link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns",
                 n.ns])
        self.sh(["ip", "link", "set", outside, "master", self.bridge, "up"])
        self.sh(n.inside("ip", "addr", "add", n.ip + "/24", "dev", "eth0"))
        self.sh(n.inside("ip", "link", "set", "eth0", "up"))
        self.sh(n.inside("ip", "link", "set", "lo", "up"))
        return n

    def close(self):
        for n in self.nodes:
            subprocess.run(["ip", "link", "del", n.outside], capture_output=True)
            subprocess.run(["ip", "netns", "del", n.ns], capture_output=True)
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)


class LanNode:
    """One namespace of a NetLan: ns, hostname, ip."""

    def __init__(self, ns, hostname, ip):
        self.ns, self.hostname, self.ip = ns, hostname, ip

    def inside(self, *argv):
        """argv inside the namespace, with this node's host name."""
        return ["ip", "netns", "exec", self.ns, "unshare", "--uts", "--", "sh", "-c",
                'hostname "$0" && exec "$@"', self.hostname] + list(argv)


def free_port():
    """A TCP port on loopback that nothing listens on now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port):
    """The metrics endpoint's samples: {(name, frozenset of label pairs): value}."""
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        text = r.read().decode()
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        series, value = line.rsplit(" ", 1)
        name, _, labels = series.partition("{")
        pairs = frozenset(tuple(kv.split("=", 1)) for kv in labels.rstrip("}").split(",") if kv)
        samples[(name, pairs)] = float(value)
    return samples


def metric(samples, name, **labels):
    """The sum of name's samples whose labels include these."""
    want = {(k, '"%s"' % v) for k, v in labels.items()}
    return sum(v for (n, pairs), v in samples.items() if n == name and want <= pairs)


def wait_metric(daemon, port, pred, what, timeout):
    deadline = time.monotonic() + timeout
    while True:
        samples = scrape(port)
        if pred(samples):
            return samples
        if not daemon.running():
            raise Fail("daemon exited %s waiting for %s" % (daemon.p.returncode, what))
        if time.monotonic() > deadline:
            raise Fail("metrics never showed %s in %d s: %s" % (
                what, timeout, {k[0]: v for k, v in samples.items() if "target" in k[0]}))
        time.sleep(0.2)


def usage(pid):
    """CPU seconds used and peak RSS in KiB of process pid."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    with open("/proc/%d/status" % pid) as f:
        hwm = [line.split()[1] for line in f if line.startswith("VmHWM:")][0]
    return cpu, int(hwm)


def collector(ctx):
    """nanwatch-collect beside the daemon under test."""
    path = os.path.join(os.path.dirname(ctx.daemon), "nanwatch-collect")
    if not os.access(path, os.X_OK):
        raise Fail("%s is not an executable file (build it first)" % path)
    return path


def run_collect(ctx, *args):
    """nanwatch-collect ARGS: its stdout and stderr; Fail unless it exits 0."""
    r = subprocess.run([collector(ctx)] + list(args), capture_output=True, timeout=60)
    if r.returncode != 0:
        raise Fail("nanwatch-collect %s exited %d: %s" % (" ".join(args), r.returncode,
                                                         r.stderr.decode()[-500:]))
    return r.stdout.decode(), r.stderr.decode()


def step_now(trainer):
    """The last STEP n the trainer printed (0 before any)."""
    steps = [l for l in trainer.out if l.startswith(b"STEP ")]
    return int(steps[-1].split()[1]) if steps else 0


def wait_steps(trainer, n, what):
    """Wait until the trainer printed STEP m for some m >= n."""
    if trainer.wait_out(lambda l: l.startswith(b"STEP ") and int(l.split()[1]) >= n, 60) is None:
        raise Fail("trainer did not reach step %d %s" % (n, what))


def check_first_in_flight(events, oracle, pid):
    """The first anomaly against the oracle of the same fault: every exact field but the
    step and iteration, which count from the attach unless the event says otherwise."""
    anomalies = [ev for ev in events if ev["event"] == "anomaly"]
    if not anomalies:
        raise Fail("no anomaly; oracle: %s at step %d" % (describe(oracle), oracle["step"]))
    for ev in anomalies:
        check_anomaly_fields(ev, pid)
    first = check_first(anomalies, oracle)
    fields = [f for f in EXACT_FIELDS if f not in ("step", "iteration")]
    diffs = ["%s %r, oracle %r" % (f, first[f], oracle[f]) for f in fields
             if not same(first[f], oracle[f])]
    diffs += ["%s %r, oracle %r" % (f, first[f], oracle[f]) for f in ("finite_min", "finite_max")
              if not close(first[f], oracle[f])]
    source = first.get("step_source")
    if source not in (None, "attach") and first["step"] != oracle["step"]:
        diffs.append("step %r (from %s), oracle %r" % (first["step"], source, oracle["step"]))
    if source in (None, "attach") and not 0 <= first["step"] - first["iteration"] <= 1:
        diffs.append("step %r and iteration %r, one forward pass a step" %
                     (first["step"], first["iteration"]))
    if diffs:
        raise Fail("first anomaly differs: " + "; ".join(diffs))
    return first
