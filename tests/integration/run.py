#!/usr/bin/python3
"""nanwatch integration tests: the real daemon against real PyTorch trainers.

Each faulty trainer (tests/trainers/) runs twice: once with --oracle (forward hooks on every
module say which output went non-finite first), once with --wait under `nanwatchd --pid`. The
daemon's stream must name the same first anomaly, the same anomalies in that iteration, and
detach by itself when the trainer exits, and the trainer's trace (losses, final parameters)
must be the same in both runs. noncontig is the exception: its first non-finite output is a
non-contiguous view, which the daemon must skip (and count), reporting the next contiguous one
first. nan_input and demo also run under `--mode sample` (sample_*): only outermost module calls
are checked, so the daemon must find the oracle's first bad step and iteration at the root
model's output, report no inner layer, and scan fewer tensors than in full mode. Then the
bad-input cases: each must fail with one line on stderr and leave its target alone.

With --trixie-root DIR (a root made by tools/make-trixie-root: Debian trixie, Python 3.13,
torch 2.6) every trainer case and the sigterm case run a second time with the trainer inside
that root, named with the suffix [trixie]: tests/trainers/*.py are copied to
DIR/opt/nanwatch-tests/trainers/ first, and the trainers (oracle runs included, so each
environment is compared with its own oracle) run as `chroot DIR /usr/bin/python3
/opt/nanwatch-tests/trainers/X.py`. The daemon stays the host's, attached by host pid (a plain
chroot shares the pid namespace). The error cases with a target run there too (not
error_no_such_pid): error_not_python's target is `chroot DIR /bin/sleep`, and
error_python_unsupported keeps only that root's torch table.
A DIR without its .nanwatch-ready stamp is one FAIL line, not a silent skip.

The same root also makes a third environment, suffixed [container]: a real mount-namespace
container whose files do not exist at those paths on the host. Each trainer runs as
`unshare --mount sh -c SCRIPT`, where SCRIPT bind-mounts DIR on a fresh empty directory (MNT,
made with tempfile.mkdtemp), pivot_roots into it, mounts a new /proc, lazily unmounts the old
root and execs /usr/bin/python3 (the exec chain keeps the pid: no pid namespace, so the pid in
the READY line is the host pid, which is checked). Inside it /proc/PID/maps names
/usr/bin/python3.13, which the host need not have, so the daemon must open the target's files
through /proc/PID/root. The trainer cases, healthy, sample_nan_input and
sigterm_while_attached run there, oracles included (each run in the same kind of container,
not the [trixie] chroot's), and each attach event must name /usr/bin/python3.13 as the
interpreter (the host's lack of that file is checked too, where the host lacks it). The
container's mounts vanish with its namespace when the trainer exits; every MNT is then removed
with rmdir (never recursively: it must be empty on the host) and a leftover one fails the case.

The capture cases (capture_*, host and [trixie]) run their trainer as uid 65534 under
`nanwatchd --capture-dir`, and check the capture against the oracle's first origin (the oracle
records digests of that call's inputs, parameters, buffers and output while its hooks run): the
directory name, the diagnosis's capture path, the manifest (layer, class, step, iteration,
tensor names, dtypes, shapes), modes 0700/0600 and ownership by that user, every .npy's header
and size (read here) and values (loaded with numpy, hashed, compared to the oracle's); then
tools/nanwatch-repro, run as that user with the environment's Python, must reproduce the
non-finite output with the oracle's NaN/+Inf/-Inf counts. capture_standard: a frozen
BatchNorm1d (torch.nn); capture_custom: div_zero's TempScale, whose zero temperature is a
buffer (instructions without --class-from, exit 3; reproduced with it); capture_children:
MultiheadAttention, whose out_proj child the manifest lists and the repro refuses (exit 2);
capture_none: no capture when the first anomaly is not an origin; capture_budget: a
200-byte budget leaves tensors out, no file holds more, the manifest says truncated and the
repro refuses it (exit 2).

The output cases (output_*, host only: they test the daemon's side) attack and stall the
daemon's outputs. output_symlinks and output_special_files run each attack as uid 65534, the
owner of a directory made by root and given to it: a symlinked parent of -o, a symlinked
--capture-dir with and without a trailing slash, an -o that is a symlink, a FIFO, a socket, a
hard link (both names) and /dev/null; each must be refused before attaching with one line
naming it, and nothing created where a link points; a real directory with a trailing slash is
accepted. output_stalled_collector: a unix socket server that accepts and never reads, next to
stdout, while nonfinite_params reports an anomaly every iteration: the daemon keeps writing
stdout, counts the collector's drops (stats.sinks, lost events with where sink), and SIGTERM
ends it within 5 s, exit 0 with detach. output_closed_pipe: stdout a pipe whose reader takes
the attach line and closes it; output_full_disk: a file output on a filled 64 KiB tmpfs
(mounted and unmounted by the case) next to stdout: one stderr line naming the output and the
reason, exit 1 (with stats and detach, reason error, on stdout), the trainer's trace unchanged.
output_sighup: the output file renamed and SIGHUP sent: a new file at the path, seq continuous
over both.

Standard library only: torch is imported by the trainers, never here.

  /usr/bin/python3 tests/integration/run.py --daemon build/nanwatchd [--trixie-root DIR]
                                            [-k SUBSTRING] [-v]
"""
import argparse
import errno
import json
import math
import os
import re
import shutil
import select
import signal
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAINERS = os.path.join(REPO, "tests", "trainers")
FAULTY = ["nan_input", "div_zero", "rnn_tuple", "mha_tuple", "fp16_overflow", "demo", "views",
          "loss_log_zero", "exp_overflow", "invalid_domain", "nonfinite_params", "lr_too_high",
          "inplace_parent", "many_modules", "late_branch"]

SCHEMA = "nanwatch/1"
ATTACH_TIMEOUT = 60
DETACH_TIMEOUT = 30
ERROR_TIMEOUT = 30
TRAINER_TIMEOUT = 180
NOBODY = 65534
TRIXIE_STAMP = ".nanwatch-ready"
TRIXIE_PYTHON = "/usr/bin/python3"  # inside the root
# inside the root; one directory per run, so runs from two checkouts cannot mix trainers
TRIXIE_TRAINERS = "/opt/nanwatch-tests/run-%d/trainers" % os.getpid()
TRIXIE_TORCH_TABLE = "torch-2.6.yaml"  # the layout table of the root's torch
CONTAINER_INTERPRETER = "/usr/bin/python3.13"  # what the container's maps show
# $1 the root, $2 an empty directory to mount it on, then the command. unshare execs sh, sh
# forks only for the mount commands and execs the command: one pid throughout, one session.
CONTAINER_SCRIPT = """set -e
mount --make-rprivate /
mount --bind "$1" "$2"
cd "$2"
mkdir -p .oldroot
pivot_root . .oldroot
cd / && mount -t proc proc /proc && umount -l /.oldroot
shift 2
exec "$@"
"""
SAMPLED = ["nan_input", "demo"]  # trainers also run under --mode sample

COMMON_FIELDS = ("schema", "event", "time", "seq", "host", "pid", "comm")
ANOMALY_FIELDS = ("tid", "step", "step_source", "iteration", "iteration_source", "phase", "layer", "module", "tensor", "dtype",
                  "shape", "numel", "nan", "posinf", "neginf", "finite_min", "finite_max",
                  "inputs_finite", "params_finite", "params_late", "origin", "first")
EXACT_FIELDS = ("step", "iteration", "layer", "module", "tensor", "dtype", "shape", "numel",
                "nan", "posinf", "neginf", "inputs_finite", "params_finite", "origin")
TIME_RE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)$")

CHILDREN = []  # every Proc started, killed in finally
MNT_DIRS = []  # every container mount point made, removed (rmdir) once its process is gone
CAPTURE_DIRS = []  # capture directories made inside an environment's root, removed at the end
TRIXIE_COPIES = []  # the per-run trainer directories made inside the trixie root (host paths)


class Fail(Exception):
    pass


class Proc:
    """A child in its own session; threads read its stdout and stderr into lists of lines."""

    def __init__(self, argv, stdin=False, stdout=None):
        """stdout: a file descriptor for the child's stdout instead of a pipe read here."""
        self.argv = argv
        self.p = subprocess.Popen(argv, stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
                                  stdout=subprocess.PIPE if stdout is None else stdout,
                                  stderr=subprocess.PIPE, start_new_session=True)
        CHILDREN.append(self)
        self.pid = self.p.pid
        self.out, self.err = [], []
        self.cond = threading.Condition()
        pipes = [(self.p.stderr, self.err)]
        if stdout is None:
            pipes.append((self.p.stdout, self.out))
        self.open = len(pipes)
        for pipe, lines in pipes:
            threading.Thread(target=self._read, args=(pipe, lines), daemon=True).start()

    def _read(self, pipe, lines):
        for raw in iter(pipe.readline, b""):
            with self.cond:
                lines.append(raw)
                self.cond.notify_all()
        with self.cond:
            self.open -= 1
            self.cond.notify_all()

    def wait_out(self, pred, timeout):
        """First stdout line (bytes) satisfying pred, or None at EOF or timeout."""
        deadline = time.monotonic() + timeout
        seen = 0
        with self.cond:
            while True:
                for line in self.out[seen:]:
                    if pred(line):
                        return line
                seen = len(self.out)
                left = deadline - time.monotonic()
                if self.open == 0 or left <= 0:
                    return None
                self.cond.wait(min(left, 0.2))

    def send(self, data, close=True):
        self.p.stdin.write(data)
        self.p.stdin.flush()
        if close:
            self.p.stdin.close()

    def wait(self, timeout):
        """Exit status, with both pipes drained; None on timeout."""
        try:
            rc = self.p.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        deadline = time.monotonic() + 5
        with self.cond:
            while self.open and time.monotonic() < deadline:
                self.cond.wait(0.2)
        return rc

    def running(self):
        return self.p.poll() is None

    def kill(self):
        if self.p.poll() is None:
            try:
                os.killpg(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                self.p.wait(10)
            except subprocess.TimeoutExpired:
                pass
        deadline = time.monotonic() + 2
        with self.cond:
            while self.open and time.monotonic() < deadline:
                self.cond.wait(0.2)

    def stdout_text(self):
        return b"".join(self.out).decode("utf-8", "replace")

    def stderr_lines(self):
        return b"".join(self.err).decode("utf-8", "replace").splitlines()


def kill_all():
    for proc in CHILDREN:
        proc.kill()


def remove_mnt_dirs():
    """rmdir every container mount point (call after kill_all); the ones left, with why."""
    left = []
    for path in MNT_DIRS:
        try:
            os.rmdir(path)
        except FileNotFoundError:
            pass
        except OSError as e:
            left.append("%s (%s)" % (path, e.strerror))
    del MNT_DIRS[:]
    return left


class Env:
    """Where the trainers run: the host, a root entered with chroot, or that root as the
    root of a mount-namespace container (container=True)."""

    def __init__(self, name, suffix, python, trainers, root=None, torch_table=None,
                 container=False):
        self.name = name
        self.suffix = suffix  # appended to case names
        self.root = root  # None: the host
        self.python = python  # as seen inside the root
        self.trainers = trainers  # as seen inside the root
        self.torch_table = torch_table  # the layout table of its torch; None: any torch-*
        self.container = container

    def argv(self, *args):
        """A command that runs python with args in this environment."""
        if self.container:
            mnt = tempfile.mkdtemp(prefix="nanwatch-container-")
            MNT_DIRS.append(mnt)
            return ["unshare", "--mount", "sh", "-c", CONTAINER_SCRIPT, "sh", self.root, mnt,
                    self.python, *args]
        prefix = ["chroot", self.root] if self.root is not None else []
        return prefix + [self.python, *args]


class Context:
    def __init__(self, args):
        self.args = args
        self.daemon = os.path.abspath(args.daemon)
        self.python = args.python
        self.layouts = os.path.abspath(args.layouts)
        self.tmp = tempfile.mkdtemp(prefix="nanwatch-it-")
        self.traces = {}
        self.streams = {}  # (env, trainer, mode) -> events of a watch() that passed its checks
        self.current_daemon = None  # for the stderr tail on failure
        self.host = Env("host", "", args.python, TRAINERS)
        self.env = self.host  # the environment of the case running now

    def log(self, msg):
        if self.args.verbose:
            print("    " + msg, flush=True)


def trainer_argv(ctx, name, *extra):
    return ctx.env.argv(os.path.join(ctx.env.trainers, name + ".py"), *extra)


def tail(lines, n=8):
    return "\n".join("    | " + line for line in lines[-n:])


def run_trainer(ctx, name, *extra):
    """Run a trainer to completion; return its last JSON line (the oracle or the trace)."""
    key = (ctx.env.name, name) + extra
    if key in ctx.traces:
        return ctx.traces[key]
    proc = Proc(trainer_argv(ctx, name, *extra))  # its session is killed on any failure
    rc = proc.wait(TRAINER_TIMEOUT)
    if rc is None:
        proc.kill()
        raise Fail("%s %s did not finish in %ds" % (name, " ".join(extra), TRAINER_TIMEOUT))
    if rc != 0:
        raise Fail("%s %s exited %d:\n%s" % (name, " ".join(extra), rc,
                                             tail(proc.stderr_lines())))
    result = last_json(proc.stdout_text(), "trace")
    if result is None:
        raise Fail("%s %s printed no trace line" % (name, " ".join(extra)))
    ctx.traces[key] = result
    return result


def last_json(text, key):
    for line in reversed(text.splitlines()):
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict) and key in obj:
                return obj
    return None


def oracle_of(ctx, name, *extra):
    result = run_trainer(ctx, name, "--oracle", *extra)
    if "oracle" not in result:
        raise Fail("%s --oracle printed no oracle" % name)
    return result["oracle"], result["trace"]


def announced_trainer(ctx, name, flag, word, *extra):
    """The trainer started with flag (--wait, --live), once it printed "WORD <its pid>"."""
    trainer = Proc(trainer_argv(ctx, name, flag, *extra), stdin=True)
    line = trainer.wait_out(lambda l: l.startswith(word + b" "), 60)
    if line is None:
        trainer.kill()
        raise Fail("%s %s printed no %s line:\n%s" % (name, flag, word.decode(),
                                                      tail(trainer.stderr_lines())))
    if line.split()[1:] != [str(trainer.pid).encode()]:
        raise Fail("%s %s: %s line %r does not name pid %d" % (name, flag, word.decode(), line,
                                                               trainer.pid))
    return trainer


def start_waiting_trainer(ctx, name, *extra):
    trainer = announced_trainer(ctx, name, "--wait", b"READY", *extra)
    if ctx.env.container:
        try:
            ns = {kind: [os.readlink("/proc/%s/ns/%s" % (who, kind))
                         for who in (trainer.pid, "self")] for kind in ("mnt", "pid")}
        except OSError as e:
            raise Fail("cannot read the namespaces of %s (pid %d): %s" % (name, trainer.pid, e))
        if ns["mnt"][0] == ns["mnt"][1]:
            raise Fail("%s runs in the runner's mount namespace, not a container" % name)
        if ns["pid"][0] != ns["pid"][1]:
            raise Fail("%s runs in another pid namespace (%s)" % (name, ns["pid"][0]))
    return trainer


def start_daemon(ctx, pid, layouts=None, user=None, mode=None, extra=(), stdout=None,
                 caps=None):
    """caps (with user): the only capabilities the daemon has, ambient, e.g. ["sys_admin"]."""
    argv = [ctx.daemon, "--pid", str(pid), "--layouts", layouts or ctx.layouts]
    if mode is not None:
        argv += ["--mode", mode]
    argv += list(extra)
    if user is not None:
        setpriv = ["setpriv", "--reuid=%d" % user, "--regid=%d" % user, "--clear-groups"]
        if caps is not None:
            want = ",".join(["-all"] + ["+" + c for c in caps])
            setpriv += ["--inh-caps=" + want, "--ambient-caps=" + want]
        argv = setpriv + argv
    daemon = Proc(argv, stdout=stdout)
    ctx.current_daemon = daemon
    ctx.log("started %s (pid %d)" % (" ".join(argv), daemon.pid))
    return daemon


def is_event(name):
    needle = b'"event":"' + name.encode() + b'"'
    return lambda line: needle in line.replace(b" ", b"")


def wait_attach(daemon):
    if daemon.wait_out(is_event("attach"), ATTACH_TIMEOUT) is None:
        if daemon.running():
            raise Fail("no attach event in %ds" % ATTACH_TIMEOUT)
        raise Fail("daemon exited %s before attaching" % daemon.p.returncode)


def finish_trainer(ctx, trainer, name, expected_trace):
    rc = trainer.wait(TRAINER_TIMEOUT)
    if rc is None:
        raise Fail("%s did not finish in %ds under the daemon" % (name, TRAINER_TIMEOUT))
    if rc != 0:
        raise Fail("%s exited %d under the daemon:\n%s" % (name, rc, tail(trainer.stderr_lines())))
    got = last_json(trainer.stdout_text(), "trace")
    if got is None:
        raise Fail("%s printed no trace under the daemon" % name)
    if got["trace"] != expected_trace:
        raise Fail("%s trained differently under the daemon than alone (losses or final "
                   "parameters differ)" % name)


def wait_daemon_exit(daemon, timeout=DETACH_TIMEOUT):
    rc = daemon.wait(timeout)
    if rc is None:
        daemon.kill()
        raise Fail("daemon did not exit within %ds (killed)" % timeout)
    if rc != 0:
        raise Fail("daemon exited %d" % rc)


def read_comm(pid):
    with open("/proc/%d/comm" % pid) as f:
        return f.read().rstrip("\n")


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
    got = events[0].get("interpreter")
    if got != CONTAINER_INTERPRETER:
        raise Fail("attach event's interpreter %r, want %r" % (got, CONTAINER_INTERPRETER))
    if ctx.env.host_lacks_interpreter:
        if os.path.lexists(CONTAINER_INTERPRETER):
            raise Fail("the host has %s now (it did not at the start)" % CONTAINER_INTERPRETER)
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


STEP_SOURCES = ("attach", "optimizer_state")


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


def check_anomalies(events, oracle, pid):
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


def check_origin_and_trend(events, oracle, trace):
    """The diagnosis' origin_step is the trainer's ground truth (where the trainer defines one),
    and its loss_trend holds exactly the losses the trainer computed, at their steps."""
    d = [ev for ev in events if ev["event"] == "diagnosis"][0]
    if oracle.get("origin_step") is not None and d.get("origin_step") != oracle["origin_step"]:
        raise Fail("diagnosis origin_step %r, the trainer's ground truth %r (%s)" %
                   (d.get("origin_step"), oracle["origin_step"], d["evidence"]))
    trend = d.get("loss_trend")
    if not isinstance(trend, list) or not trend:
        raise Fail("diagnosis has no loss_trend: %s" % json.dumps(d))
    losses = [float.fromhex(v) for v in trace["losses"]]
    if trend[-1]["iteration"] != d["iteration"] and oracle.get("phase") == "loss":
        raise Fail("loss_trend ends at iteration %d, the incident is at %d" %
                   (trend[-1]["iteration"], d["iteration"]))
    for t in trend:
        it = t["iteration"]
        if not 0 <= it < len(losses) or it > d["iteration"]:
            raise Fail("loss_trend iteration %r outside the run (%d losses, incident at %d)" %
                       (it, len(losses), d["iteration"]))
        want = losses[it] if math.isfinite(losses[it]) else None
        if t["loss"] != want or t["step"] != trace["loss_steps"][it]:
            raise Fail("loss_trend at iteration %d: loss %r step %r, the trainer's %r step %r" %
                       (it, t["loss"], t["step"], want, trace["loss_steps"][it]))


def check_warnings(events, oracle):
    """Warnings are well formed; a run-up (lr_too_high) is warned of before its first anomaly."""
    warnings = [ev for ev in events if ev["event"] == "warning"]
    for w in warnings:
        if w.get("reason") not in ("growth", "near_range") or \
                not (isinstance(w.get("max_abs"), (int, float)) and w["max_abs"] > 0) or \
                not isinstance(w.get("message"), str) or type(w.get("step")) is not int:
            raise Fail("malformed warning: %s" % json.dumps(w))
    if oracle["expected_cause"] == "lr_too_high":
        early = [w for w in warnings if w["iteration"] < oracle["iteration"]]
        if not early:
            raise Fail("no warning before the first anomaly (iteration %d) of a run-up; "
                       "warnings: %s" % (oracle["iteration"], [w["message"] for w in warnings]))


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
        if w is not None and not w["contiguous"]:
            continue  # the daemon skips that tensor: a custom case checks those
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


# ----------------------------------------------------------------------------- cases

def case_trainer(ctx, name):
    oracle, trace = oracle_of(ctx, name)
    if oracle is None:
        raise Fail("%s --oracle found no anomaly (the trainer lost its fault)" % name)
    ctx.log("oracle: %s step %d iteration %d" % (describe(oracle), oracle["step"],
                                                 oracle["iteration"]))
    noncontig = [a for a in oracle["first_iteration"] if not a["contiguous"]]
    if noncontig:
        raise Fail("oracle reports non-contiguous outputs, which the daemon skips (use a "
                   "custom case): %s" % listing([(a["layer"], a["module"], a["tensor"])
                                                 for a in noncontig]))
    events = watch(ctx, name, trace)
    check_anomalies(events, oracle, events[0]["pid"])
    check_origin_and_trend(events, oracle, trace)
    check_warnings(events, oracle)
    if name in ("many_modules", "late_branch"):
        # BPF may have had the parameters' list, or the daemon read them late: the verdict
        # above had to be the oracle's either way; say which path this run took
        first = [ev for ev in events if ev["event"] == "anomaly"][0]
        stats = [ev for ev in events if ev["event"] == "stats"][-1]
        ctx.log("first anomaly's parameters checked %s; %d late checks; %d module records "
                "sent again" % ("late by the daemon" if first["params_late"] else "in BPF",
                                stats["params_late"], stats["lost_records"]["module"]))
    if name == "inplace_parent":
        stats = [ev for ev in events if ev["event"] == "stats"][-1]
        avoided = (stats.get("rescans_avoided") or {}).get("tensors")
        if not isinstance(avoided, int) or avoided < 1:
            raise Fail("stats.rescans_avoided.tensors %r: the parent's unchanged output was "
                       "scanned again" % avoided)
    if name == "views":
        skipped = last_stats(events)["skipped"]["noncontiguous"]
        if skipped < 1:
            raise Fail("stats.skipped.noncontiguous %r: the transposed and strided views were "
                       "not counted" % skipped)


def last_stats(events):
    stats = [ev for ev in events if ev["event"] == "stats"]
    skipped = stats[-1].get("skipped") if stats else None
    if not isinstance(skipped, dict) or type(skipped.get("noncontiguous")) is not int:
        raise Fail("stats event lacks skipped.noncontiguous: %s" %
                   json.dumps(stats[-1] if stats else None))
    return stats[-1]


def case_noncontig(ctx):
    """First NaN in a non-contiguous view: skipped, and the dense module after it is first."""
    oracle, trace = oracle_of(ctx, "noncontig")
    if oracle is None:
        raise Fail("noncontig --oracle found no anomaly (the trainer lost its fault)")
    if oracle["contiguous"]:
        raise Fail("oracle's first anomaly %s is contiguous (the trainer lost its view)" %
                   describe(oracle))
    dense = [a for a in oracle["first_iteration"] if a["contiguous"]]
    if not dense:
        raise Fail("oracle has no contiguous anomaly in iteration %d" % oracle["iteration"])
    want = dense[0]
    ctx.log("oracle: %s (skipped), then %s, step %d iteration %d" %
            (describe(oracle), describe(want), want["step"], want["iteration"]))
    events = watch(ctx, "noncontig", trace)
    pid = events[0]["pid"]
    anomalies = [ev for ev in events if ev["event"] == "anomaly"]
    for ev in anomalies:
        check_anomaly_fields(ev, pid)
    named = [ev for ev in anomalies if ev["layer"] == oracle["layer"]]
    if named:
        raise Fail("%d anomaly events name the non-contiguous layer %r, first: %s" %
                   (len(named), oracle["layer"], json.dumps(named[0])))
    if not anomalies:
        raise Fail("no anomaly event; oracle's first contiguous: %s" % describe(want))
    first = anomalies[0]
    if first["first"] is not True or sum(1 for ev in anomalies if ev["first"] is True) != 1:
        raise Fail("the first anomaly event must be the only one with first: true")
    if first["phase"] != oracle.get("phase", "forward"):
        raise Fail("first anomaly phase %r, oracle %r" % (first["phase"],
                                                           oracle.get("phase", "forward")))
    # Its input is the skipped view: the daemon may not know it is non-finite (null), but it
    # must not call it finite, nor this layer the origin.
    exact = [f for f in EXACT_FIELDS if f != "inputs_finite"]
    diffs = ["%s %r, oracle %r" % (f, first[f], want[f]) for f in exact
             if not same(first[f], want[f])]
    diffs += ["%s %r, oracle %r" % (f, first[f], want[f]) for f in ("finite_min", "finite_max")
              if not close(first[f], want[f])]
    if first["inputs_finite"] is not None and not same(first["inputs_finite"],
                                                       want["inputs_finite"]):
        diffs.append("inputs_finite %r, oracle %r" % (first["inputs_finite"],
                                                      want["inputs_finite"]))
    if diffs:
        raise Fail("first anomaly differs from the oracle's first contiguous one: " +
                   "; ".join(diffs))
    got = [(ev["layer"], ev["module"], ev["tensor"]) for ev in anomalies
           if ev["phase"] == "forward" and ev["iteration"] == first["iteration"]]
    listed = [(a["layer"], a["module"], a["tensor"]) for a in dense]
    if got != listed:
        raise Fail("anomalies of iteration %d differ:\n    daemon: %s\n    oracle: %s" %
                   (first["iteration"], listing(got), listing(listed)))
    skipped = last_stats(events)["skipped"]["noncontiguous"]
    if skipped < 1:
        raise Fail("stats.skipped.noncontiguous %r, want >= 1" % skipped)
    ctx.log("skipped.noncontiguous %d" % skipped)
    # the origin was skipped and the first seen layer's input is unknown: no cause to claim
    check_diagnosis(events, first, oracle)


def case_healthy(ctx):
    oracle, trace = oracle_of(ctx, "healthy")
    if oracle is not None:
        raise Fail("healthy --oracle found an anomaly: %s" % describe(oracle))
    events = watch(ctx, "healthy", trace)
    n = sum(1 for ev in events if ev["event"] in ("anomaly", "diagnosis", "warning"))
    if n:
        raise Fail("%d anomaly, diagnosis or warning events on a healthy run" % n)


def watch(ctx, name, trace, mode=None, trainer_args=(), daemon_args=(), user=None, caps=None):
    """Trainer under the daemon from step 0 to exit, flat out; the parsed stream, whose last
    stats line must add up."""
    trainer = start_waiting_trainer(ctx, name, *trainer_args)
    comm = read_comm(trainer.pid)
    daemon = start_daemon(ctx, trainer.pid, mode=mode, extra=daemon_args, user=user, caps=caps)
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
    return events


PHASES = ("forward", "loss", "backward")
LOST_RECORDS = ("anomaly", "module", "mark", "loss", "grad", "capture")


def check_tally(ctx, events):
    """The last stats line reconciles: per phase found = reported + suppressed + lost, reported
    is the anomaly lines of that phase, the top-level numbers are the phases' sums, and the
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
        if any(type(n.get(k)) is not int for k in ("found", "reported", "suppressed", "lost")):
            raise Fail("stats.phases.%s is %s" % (p, json.dumps(n)))
        if n["found"] != n["reported"] + n["suppressed"] + n["lost"]:
            bad.append("%s: found %d != reported %d + suppressed %d + lost %d" % (
                p, n["found"], n["reported"], n["suppressed"], n["lost"]))
        if n["reported"] != lines[p]:
            bad.append("%s: reported %d, %d anomaly lines" % (p, n["reported"], lines[p]))
    for top, key in (("anomalies", "found"), ("reported", "reported"),
                     ("suppressed", "suppressed"), ("lost", "lost")):
        if stats[top] != sum(phases[p][key] for p in PHASES):
            bad.append("%s %d is not the phases' %s summed" % (top, stats[top], key))
    if lost["anomaly"] != stats["lost"]:
        bad.append("lost_records.anomaly %d, lost %d" % (lost["anomaly"], stats["lost"]))
    if bad:
        raise Fail("stats do not add up: %s; %s" % ("; ".join(bad), json.dumps(stats)))
    ctx.log("stats add up: %s; lost records %s" % (
        ", ".join("%s %d = %d + %d + %d" % (p, phases[p]["found"], phases[p]["reported"],
                                            phases[p]["suppressed"], phases[p]["lost"])
                  for p in PHASES), json.dumps(lost)))
    return stats


def tensors_scanned(events, what):
    stats = [ev for ev in events if ev["event"] == "stats"]
    n = stats[-1].get("tensors_scanned") if stats else None
    if type(n) is not int:
        raise Fail("%s stats event has tensors_scanned %r" % (what, n))
    return n


def case_sample(ctx, name):
    """--mode sample: outermost calls only; the first bad step and iteration, at layer ""."""
    oracle, trace = oracle_of(ctx, name)
    if oracle is None:
        raise Fail("%s --oracle found no anomaly (the trainer lost its fault)" % name)
    outer = [a for a in oracle["first_iteration"] if a["layer"] == ""]
    if not outer:
        raise Fail("oracle's iteration %d has no non-finite outermost output (layer \"\"): the "
                   "fault does not reach the model's output" % oracle["iteration"])
    want = outer[0]
    ctx.log("oracle: first %s, outermost %s, step %d iteration %d" %
            (describe(oracle), describe(want), oracle["step"], oracle["iteration"]))
    events = watch(ctx, name, trace, mode="sample")
    pid = events[0]["pid"]
    if events[0].get("mode") != "sample":
        raise Fail("attach event has mode %r, want \"sample\"" % events[0].get("mode"))
    anomalies = [ev for ev in events if ev["event"] == "anomaly"]
    if not anomalies:
        raise Fail("no anomaly event; oracle's outermost: %s at step %d" %
                   (describe(want), want["step"]))
    for ev in anomalies:
        check_anomaly_fields(ev, pid)
    inner = [ev for ev in anomalies if ev["layer"] != ""]
    if inner:
        raise Fail("%d anomaly events name an inner layer, first: %s" %
                   (len(inner), json.dumps(inner[0])))
    first = check_first(anomalies, oracle)
    diffs = ["%s %r, oracle's first %r" % (f, first[f], oracle[f])
             for f in ("step", "iteration") if not same(first[f], oracle[f])]
    diffs += ["%s %r, oracle's outermost %r" % (f, first[f], want[f])
              for f in ("layer", "module", "tensor", "dtype", "shape", "nan", "posinf",
                        "neginf") if not same(first[f], want[f])]
    if diffs:
        raise Fail("first anomaly differs: " + "; ".join(diffs))
    got = [(ev["layer"], ev["module"], ev["tensor"]) for ev in anomalies
           if ev["phase"] == "forward" and ev["iteration"] == first["iteration"]]
    listed = [(a["layer"], a["module"], a["tensor"]) for a in outer]
    if got != listed:
        raise Fail("outermost anomalies of iteration %d differ:\n    daemon: %s\n    oracle: %s"
                   % (first["iteration"], listing(got), listing(listed)))
    sampled = tensors_scanned(events, "sample-mode")
    full = ctx.streams.get((ctx.env.name, name, "full"))
    if full is None:
        ctx.log("no full-mode stream of %s kept: running it" % name)
        full = watch(ctx, name, trace)
    scanned = tensors_scanned(full, "full-mode")
    ctx.log("tensors_scanned: sample %d, full %d" % (sampled, scanned))
    if not 0 < sampled < scanned:
        raise Fail("tensors_scanned %d in sample mode, %d in full mode: want fewer, and not 0" %
                   (sampled, scanned))


LOSS_MODE = ["nan_input", "loss_log_zero", "lr_too_high"]  # trainers also run under --mode loss


def case_loss_mode(ctx, name):
    """--mode loss: no module probes, only the loss; the first bad step and iteration from the
    loss alone, one probe hit per backward, and a diagnosis that claims no layer-level cause."""
    oracle, trace = oracle_of(ctx, name)
    if oracle is None:
        raise Fail("%s --oracle found no anomaly (the trainer lost its fault)" % name)
    losses = [float.fromhex(v) for v in trace["losses"]]
    bad = [i for i, v in enumerate(losses) if not math.isfinite(v)]
    if not bad or bad[0] != oracle["iteration"]:
        raise Fail("the trainer's first non-finite loss is at iteration %s, its first anomaly at "
                   "%d: not a case for mode loss" % (bad[:1], oracle["iteration"]))
    events = watch(ctx, name, trace, mode="loss")
    pid = events[0]["pid"]
    if events[0].get("mode") != "loss" or events[0].get("probes") not in (1, 2):
        raise Fail("attach event: mode %r, probes %r; want mode loss and 1 or 2 probes" %
                   (events[0].get("mode"), events[0].get("probes")))
    anomalies = [ev for ev in events if ev["event"] == "anomaly"]
    if not anomalies:
        raise Fail("no anomaly event; the loss went non-finite at iteration %d" % bad[0])
    for ev in anomalies:
        check_anomaly_fields(ev, pid)
        if ev["phase"] != "loss" or ev["layer"] is not None or ev["origin"] is not None:
            raise Fail("mode loss reported %s" % json.dumps(ev))
    first = anomalies[0]
    want = {"step": trace["loss_steps"][bad[0]], "iteration": bad[0], "first": True}
    diffs = ["%s %r, want %r" % (k, first[k], v) for k, v in want.items() if first[k] != v]
    if diffs:
        raise Fail("first anomaly differs: " + "; ".join(diffs))
    got = [ev["iteration"] for ev in anomalies]
    if got != bad[:len(got)] or len(got) != len(bad):
        raise Fail("anomalies at iterations %s, the non-finite losses at %s" % (got, bad))
    d = [ev for ev in events if ev["event"] == "diagnosis"]
    cause = "lr_too_high" if oracle["expected_cause"] == "lr_too_high" else "unknown"
    if len(d) != 1 or d[0]["cause"] != cause or d[0]["step"] != want["step"]:
        raise Fail("diagnosis %s; want one, cause %s at step %d" %
                   ([json.dumps(x) for x in d], cause, want["step"]))
    stats = [ev for ev in events if ev["event"] == "stats"][-1]
    if stats["module_calls"] != 0 or stats["probe_hits"] != len(losses):
        raise Fail("stats: module_calls %r, probe_hits %r; want 0 and one per backward (%d)" %
                   (stats["module_calls"], stats["probe_hits"], len(losses)))


def case_sigterm(ctx):
    """SIGTERM mid-training: clean detach, and the trainer finishes exactly as it would alone."""
    steps = ("--steps", "100")
    trace = run_trainer(ctx, "healthy", *steps)["trace"]
    trainer = start_waiting_trainer(ctx, "healthy", *steps, "--progress", "--pace", "0.1")
    comm = read_comm(trainer.pid)
    daemon = start_daemon(ctx, trainer.pid)
    wait_attach(daemon)
    trainer.send(b"go\n")
    if trainer.wait_out(lambda l: l == b"STEP 5\n", 60) is None:
        raise Fail("trainer did not reach step 5 under the daemon")
    daemon.p.send_signal(signal.SIGTERM)
    wait_daemon_exit(daemon)
    if not trainer.running():
        raise Fail("trainer finished before the daemon detached (test too short)")
    finish_trainer(ctx, trainer, "healthy", trace)
    events = parse_stream(daemon, trainer.pid, comm)
    check_envelope(events, "signal")
    check_interpreter(ctx, events)
    if any(ev["event"] == "anomaly" for ev in events):
        raise Fail("anomaly events on a healthy run")


def start_paced_live_trainer(ctx, name, *extra):
    """A trainer that never waits (--live): nanwatchd is attached to it in flight, after its
    fifth step."""
    trainer = start_live_trainer(ctx, name, "--pace", "0.01", *extra)
    if trainer.wait_out(lambda l: l == b"STEP 5\n", 60) is None:
        raise Fail("%s --live did not reach step 5:\n%s" % (name, tail(trainer.stderr_lines())))
    return trainer


def stats_line(pred):
    def match(line):
        if not is_event("stats")(line):
            return False
        return pred(json.loads(line.decode("utf-8")))
    return match


def watch_live(ctx, name, source, *extra, before_fault=None):
    """Attach to the trainer in flight; once a stats line shows steps counted with the given
    step_source (and before_fault(trainer, daemon) returned), ask for the fault. Returns
    (events, the first anomaly, the fault's step, the trace)."""
    trainer = start_paced_live_trainer(ctx, name, *extra)
    comm = read_comm(trainer.pid)
    daemon = start_daemon(ctx, trainer.pid, extra=("--stats-interval", "1"))
    wait_attach(daemon)
    counted = stats_line(lambda ev: ev.get("steps", 0) > 0 and ev.get("step_source") == source)
    if daemon.wait_out(counted, 60) is None:
        raise Fail("no stats line with steps counted and step_source %r in 60 s" % source)
    if before_fault is not None:
        before_fault(trainer, daemon)
    trainer.send(b"fault\n")
    line = trainer.wait_out(lambda l: l.startswith(b"FAULT AT "), 60)
    if line is None:
        raise Fail("%s printed no FAULT AT line" % name)
    fault = int(line.split()[2])
    rc = trainer.wait(TRAINER_TIMEOUT)
    if rc != 0:
        raise Fail("%s exited %r under the daemon:\n%s" % (name, rc, tail(trainer.stderr_lines())))
    trace = last_json(trainer.stdout_text(), "trace")
    if trace is None:
        raise Fail("%s printed no trace" % name)
    wait_daemon_exit(daemon)
    events = parse_stream(daemon, trainer.pid, comm)
    check_envelope(events, "target_exit")
    check_interpreter(ctx, events)
    first = [ev for ev in events if ev["event"] == "anomaly"][:1]
    if not first:
        raise Fail("no anomaly event; the trainer's fault was at step %d" % fault)
    check_anomaly_fields(first[0], trainer.pid)
    ctx.log("fault at step %d; first anomaly: step %d (%s), iteration %d, layer %r; detach: "
            "step %d (%s), steps %d" % (fault, first[0]["step"], first[0]["step_source"],
                            first[0]["iteration"], first[0]["layer"], events[-1]["step"],
                            events[-1]["step_source"], events[-1]["steps"]))
    return events, first[0], fault, trace["trace"]


def case_midrun_adam(ctx):
    """Attached to an Adam run in flight: the step is the trainer's own (the optimizer's state),
    at the first anomaly and at the detach."""
    events, first, fault, trace = watch_live(ctx, "midrun", "optimizer_state")
    if (first["step"], first["step_source"]) != (fault, "optimizer_state"):
        raise Fail("first anomaly at step %r (%s); the trainer's fault: step %d, from the "
                   "optimizer_state" % (first["step"], first["step_source"], fault))
    if first["iteration"] > fault - 5:
        raise Fail("iteration %d counts more than the watch saw (attached after step 5 of %d)"
                   % (first["iteration"], fault))
    last = events[-1]
    if (last["step"], last["step_source"]) != (trace["steps"], "optimizer_state") or \
            last["steps"] >= trace["steps"] - 5:
        raise Fail("detach: step %r (%s), steps %r; the trainer took %d steps, the watch "
                   "fewer than %d" % (last["step"], last["step_source"], last["steps"],
                                      trace["steps"], trace["steps"] - 5))


def case_midrun_refold(ctx):
    """A new optimizer replaces the one the step came from (a new fold): the step follows the
    new optimizer's own count, neither frozen at the old one's nor counted on from it."""
    refold = []

    def new_optimizer(trainer, daemon):
        trainer.send(b"refold\n", close=False)
        line = trainer.wait_out(lambda l: l.startswith(b"REFOLD AT "), 60)
        if line is None:
            raise Fail("midrun printed no REFOLD AT line")
        refold.append(int(line.split()[2]))
        # the new optimizer's count: below the steps seen since the attach (after step 5),
        # which the old one's count never is
        if daemon.wait_out(stats_line(lambda ev: ev["step_source"] == "optimizer_state" and
                                      ev["step"] < ev["steps"]), 60) is None:
            raise Fail("no stats line with the new optimizer's count in 60 s")

    events, first, fault, trace = watch_live(ctx, "midrun", "optimizer_state",
                                             before_fault=new_optimizer)
    want = fault - refold[0]
    if (first["step"], first["step_source"]) != (want, "optimizer_state"):
        raise Fail("first anomaly at step %r (%s); the new optimizer (from step %d) had taken "
                   "%d steps at the fault, step %d" % (first["step"], first["step_source"],
                                                       refold[0], want, fault))


def case_midrun_sgd(ctx):
    """Attached to a plain-SGD run in flight: nothing holds the step, so the events say their
    count runs from the attach (and it is smaller than the trainer's)."""
    events, first, fault, trace = watch_live(ctx, "midrun", "attach", "--sgd")
    if first["step_source"] != "attach" or not 0 < first["step"] <= fault - 5:
        raise Fail("first anomaly at step %r (%s); want a step since the attach (after step 5 "
                   "of %d), step_source attach" % (first["step"], first["step_source"], fault))
    for ev in events:
        if ev.get("step_source") not in (None, "attach"):
            raise Fail("%s with step_source %r on a plain-SGD run" % (ev["event"],
                                                                     ev["step_source"]))


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


def case_no_such_pid(ctx):
    probe = subprocess.Popen(["true"])
    probe.wait()
    pid = probe.pid
    if os.path.exists("/proc/%d" % pid):
        raise Fail("could not find a free pid")
    expect_refusal(ctx, start_daemon(ctx, pid), [str(pid), "no such"])


def case_not_python(ctx):
    if ctx.env.root is None:
        target = Proc(["sleep", "60"])
    else:
        target = Proc(["chroot", ctx.env.root, "/bin/sleep", "60"])
    time.sleep(0.2)
    deadline = time.monotonic() + 10  # chroot execs sleep in the same process
    while target.running() and read_comm(target.pid) != "sleep":
        if time.monotonic() > deadline:
            raise Fail("target %s is %r, not sleep, after 10s" % (" ".join(target.argv),
                                                                  read_comm(target.pid)))
        time.sleep(0.1)
    expect_refusal(ctx, start_daemon(ctx, target.pid), ["python"])
    target_untouched(target)


def case_no_torch(ctx):
    target = Proc(ctx.env.argv("-c",
                               "import time; print('READY', flush=True); time.sleep(60)"))
    if target.wait_out(lambda l: l.startswith(b"READY"), 30) is None:
        raise Fail("python -c did not start")
    expect_refusal(ctx, start_daemon(ctx, target.pid), ["torch"])
    target_untouched(target)


def case_comm_escapes(ctx):
    """A target that names itself with an escape sequence and a bidi control (its comm, 15
    bytes): the refusal that names it shows them as '?', never raw on the terminal."""
    # prctl(PR_SET_NAME): a chroot has no /proc/self/comm to write
    target = Proc(ctx.env.argv("-c", "import ctypes, time\n"
                               "ctypes.CDLL(None).prctl(15, '\\x1b[2J\\u202eevil'.encode(), 0, 0, 0)\n"
                               "print('READY', flush=True); time.sleep(60)"))
    if target.wait_out(lambda l: l.startswith(b"READY"), 30) is None:
        raise Fail("python -c did not start:\n%s" % tail(target.stderr_lines()))
    with open("/proc/%d/comm" % target.pid, "rb") as f:
        if f.read() != "\x1b[2J\u202eevil\n".encode():
            raise Fail("the target could not set its comm")
    daemon = start_daemon(ctx, target.pid)
    expect_refusal(ctx, daemon, ["torch"])
    raw = b"".join(daemon.err)
    if b"\x1b" in raw or "\u202e".encode() in raw or b"(?[2J?evil)" not in raw:
        raise Fail("the message shows the target's comm raw: %r" % raw)
    target_untouched(target)


def interpreter_version(ctx):
    r = subprocess.run(ctx.env.argv("-c", "import sys; print('%d.%d' % sys.version_info[:2])"),
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30)
    version = r.stdout.strip()
    if r.returncode != 0 or not re.match(r"^\d+\.\d+$", version):
        raise Fail("cannot tell the %s interpreter's version (exit %d): %r" %
                   (ctx.env.name, r.returncode, (r.stdout + r.stderr)[-300:]))
    return version


def layouts_dir(ctx, what, keep):
    """A temp copy of the layout tables holding only the files keep() accepts."""
    names = sorted(os.listdir(ctx.layouts)) if os.path.isdir(ctx.layouts) else []
    chosen = [n for n in names if n.endswith(".yaml") and keep(n)]
    if not chosen:
        raise Fail("%s has no %s table to keep" % (ctx.layouts, what))
    path = tempfile.mkdtemp(prefix="layouts-", dir=ctx.tmp)
    os.chmod(path, 0o755)
    for n in chosen:
        shutil.copy(os.path.join(ctx.layouts, n), path)
    return path


def refuse_with_layouts(ctx, layouts, words):
    """Daemon refuses a healthy trainer; the trainer then runs as it would alone."""
    trace = oracle_of(ctx, "healthy")[1]
    trainer = start_waiting_trainer(ctx, "healthy")
    expect_refusal(ctx, start_daemon(ctx, trainer.pid, layouts=layouts), words)
    target_untouched(trainer)
    trainer.send(b"go\n")
    finish_trainer(ctx, trainer, "healthy", trace)


def case_torch_unsupported(ctx):
    py = "python-%s.yaml" % interpreter_version(ctx)
    layouts = layouts_dir(ctx, py, lambda n: n == py)
    refuse_with_layouts(ctx, layouts, ["torch"])


def case_python_unsupported(ctx):
    table = ctx.env.torch_table
    if table is None:
        layouts = layouts_dir(ctx, "torch", lambda n: not n.startswith("python-"))
    else:
        layouts = layouts_dir(ctx, table, lambda n: n == table)
    refuse_with_layouts(ctx, layouts, ["python"])


def case_layout_implausible(ctx):
    """A torch table with an absurd but well-formed offset: refused, the file, key and
    plausible range named, the target untouched."""
    table = ctx.env.torch_table
    layouts = layouts_dir(ctx, "all", lambda n: table is None or not n.startswith("torch-")
                          or n == table)
    for name in os.listdir(layouts):
        if name.startswith("torch-"):
            path = os.path.join(layouts, name)
            with open(path) as f:
                text = f.read()
            text, n = re.subn(r"(?m)^impl_numel: \d+$", "impl_numel: 1099511627776", text)
            if n != 1:
                raise Fail("%s has no impl_numel line" % name)
            with open(path, "w") as f:
                f.write(text)
    refuse_with_layouts(ctx, layouts, ["'impl_numel' is 1099511627776, outside the plausible "
                                       "range 0..4096"])


def case_unprivileged(ctx):
    probe = subprocess.run(["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY,
                            "--clear-groups", "sh", "-c",
                            'test -x "$1" && test -r "$2" && test -x "$2"', "sh",
                            ctx.daemon, ctx.layouts], capture_output=True, timeout=30)
    if probe.returncode != 0:
        raise Fail("uid %d cannot run %s or read %s, so this case cannot reach BPF" %
                   (NOBODY, ctx.daemon, ctx.layouts))
    trace = oracle_of(ctx, "healthy")[1]
    trainer = start_waiting_trainer(ctx, "healthy")
    expect_refusal(ctx, start_daemon(ctx, trainer.pid, user=NOBODY),
                   ["permi", "root", "privilege", "CAP_"])
    target_untouched(trainer)
    trainer.send(b"go\n")
    finish_trainer(ctx, trainer, "healthy", trace)


def unprivileged_can_run(ctx):
    probe = subprocess.run(["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY,
                            "--clear-groups", "sh", "-c",
                            'test -x "$1" && test -r "$2" && test -x "$2"', "sh",
                            ctx.daemon, ctx.layouts], capture_output=True, timeout=30)
    if probe.returncode != 0:
        raise Fail("uid %d cannot run %s or read %s" % (NOBODY, ctx.daemon, ctx.layouts))


# The least the whole watch needs as another user than the target's (README, Permissions).
MINIMAL_CAPS = ["sys_admin", "sys_ptrace"]


def case_caps_minimal(ctx):
    """The daemon as uid NOBODY with exactly MINIMAL_CAPS watches a root trainer and finds
    the oracle's first anomaly."""
    unprivileged_can_run(ctx)
    oracle, trace = oracle_of(ctx, "nan_input")
    events = watch(ctx, "nan_input", trace, user=NOBODY, caps=MINIMAL_CAPS)
    check_anomalies(events, oracle, events[0]["pid"])


def case_caps_fewer(ctx):
    """One capability fewer than MINIMAL_CAPS, and the set the README used to give
    (CAP_BPF, CAP_PERFMON, CAP_SYS_PTRACE, which no longer creates uprobes): each refused in
    one line naming the missing capability; the trainer is untouched."""
    unprivileged_can_run(ctx)
    trace = oracle_of(ctx, "healthy")[1]
    trainer = start_waiting_trainer(ctx, "healthy")
    sets = [([c for c in MINIMAL_CAPS if c != drop], "CAP_" + drop.upper())
            for drop in MINIMAL_CAPS]
    sets.append((["bpf", "perfmon", "sys_ptrace"], "CAP_SYS_ADMIN"))
    for caps, missing in sets:
        daemon = start_daemon(ctx, trainer.pid, user=NOBODY, caps=caps)
        expect_refusal(ctx, daemon, [missing])
        target_untouched(trainer)
    trainer.send(b"go\n")
    finish_trainer(ctx, trainer, "healthy", trace)


# A process with torch loaded and a second thread; prints READY, its pid and the thread's id.
THREADED_TARGET = """import os, threading, time
import torch
t = threading.Thread(target=time.sleep, args=(120,), daemon=True)
t.start()
print("READY", os.getpid(), t.native_id, flush=True)
time.sleep(120)
"""


def case_thread_id(ctx):
    """--pid given a thread id (not the process's): refused in one line that names the
    process it belongs to, instead of an attach that watches nothing."""
    target = Proc(ctx.env.argv("-c", THREADED_TARGET))
    line = target.wait_out(lambda l: l.startswith(b"READY "), 60)
    if line is None:
        raise Fail("threaded target printed no READY line:\n%s" % tail(target.stderr_lines()))
    pid, tid = (int(w) for w in line.split()[1:3])
    if pid != target.pid or tid == pid or not os.path.exists("/proc/%d/task/%d" % (pid, tid)):
        raise Fail("READY line %r: no second thread of pid %d" % (line, target.pid))
    daemon = start_daemon(ctx, tid)
    expect_refusal(ctx, daemon, ["thread"])
    if "process %d" % pid not in daemon.stderr_lines()[0]:
        raise Fail("message %r does not name process %d" % (daemon.stderr_lines()[0], pid))
    target_untouched(target)


# ----------------------------------------------------------------------------- captures

CAPTURE_USER = NOBODY  # the trainers of the capture cases run as this user
REPRO = os.path.join(REPO, "tools", "nanwatch-repro")
TRIXIE_REPRO = "/opt/nanwatch-tests/nanwatch-repro"  # inside the root
NPY_DTYPES = {"float32": "<f4", "float64": "<f8", "float16": "<f2", "bfloat16": "<u2",
              "int64": "<i8", "int32": "<i4", "int16": "<i2", "int8": "|i1", "uint8": "|u1",
              "bool": "|b1"}


def as_user(ctx, argv):
    """argv run as CAPTURE_USER in the current environment (argv from Env.argv)."""
    if ctx.env.root is None:
        return ["setpriv", "--reuid=%d" % CAPTURE_USER, "--regid=%d" % CAPTURE_USER,
                "--clear-groups"] + argv
    assert argv[0] == "chroot"
    return ["chroot", "--userspec=%d:%d" % (CAPTURE_USER, CAPTURE_USER)] + argv[1:]


def capture_dir(ctx):
    """An empty directory for captures, where the environment's Python can read it."""
    base = ctx.tmp if ctx.env.root is None else os.path.join(ctx.env.root, "tmp")
    os.chmod(ctx.tmp, 0o711)  # traversable, not listable
    path = tempfile.mkdtemp(prefix="nanwatch-capture-", dir=base)
    os.chmod(path, 0o755)  # the user's repro must reach its own capture inside
    if ctx.env.root is not None:
        CAPTURE_DIRS.append(path)
    inside = path if ctx.env.root is None else "/" + os.path.relpath(path, ctx.env.root)
    return path, inside


def install_repro(ctx):
    """The repro tool as the environment's Python sees it."""
    if ctx.env.root is None:
        return REPRO
    dest = os.path.join(ctx.env.root, TRIXIE_REPRO.lstrip("/"))
    if os.path.islink(dest) or os.path.islink(os.path.dirname(dest)):
        raise Fail("%s is a symlink; refusing to copy through it" % dest)
    shutil.copy(REPRO, dest)
    os.chmod(dest, 0o755)
    return TRIXIE_REPRO


def watch_capture(ctx, name, trace, dirpath, *daemon_args):
    """The trainer, as CAPTURE_USER, under the daemon with captures into dirpath. It stays a
    second after training: the daemon reads the captured module's names and attributes from
    the live target (see README, Captures), and a run does not end milliseconds after its
    first NaN."""
    argv = as_user(ctx, trainer_argv(ctx, name, "--wait", "--linger", "1"))
    trainer = Proc(argv, stdin=True)
    line = trainer.wait_out(lambda l: l.startswith(b"READY "), 60)
    if line is None:
        raise Fail("%s --wait as uid %d printed no READY line:\n%s" %
                   (name, CAPTURE_USER, tail(trainer.stderr_lines())))
    pid = int(line.split()[1])
    with open("/proc/%d/status" % pid) as f:
        uid = [l.split()[1] for l in f if l.startswith("Uid:")][0]
    if int(uid) != CAPTURE_USER:
        raise Fail("trainer runs as uid %s, not %d" % (uid, CAPTURE_USER))
    comm = read_comm(pid)
    daemon = start_daemon(ctx, pid, extra=["--capture-dir", dirpath] + list(daemon_args))
    wait_attach(daemon)
    trainer.send(b"go\n")
    finish_trainer(ctx, trainer, name, trace)
    wait_daemon_exit(daemon)
    events = parse_stream(daemon, pid, comm)
    check_envelope(events, "target_exit")
    return events, pid


def npy_header(path):
    """(descr, shape, header length, file size) of a .npy file, read without numpy."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:8] != b"\x93NUMPY\x01\x00":
        raise Fail("%s is not a .npy 1.0 file" % path)
    hlen = 10 + data[8] + 256 * data[9]
    head = data[10:hlen].decode("latin-1")
    m = re.match(r"^\{'descr': '([^']+)', 'fortran_order': False, 'shape': \(([0-9, ]*)\), \}"
                 r" *\n$", head)
    if hlen % 64 or not m:
        raise Fail("%s: bad header %r" % (path, head))
    shape = [int(x) for x in m.group(2).replace(" ", "").split(",") if x]
    return m.group(1), shape, hlen, len(data)


def check_capture_files(ctx, path, man):
    """Modes, owner, sizes, and that every .npy is the array the manifest describes."""
    st = os.lstat(path)
    if not os.path.isdir(path) or os.path.islink(path) or st.st_mode & 0o777 != 0o700 or \
            (st.st_uid, st.st_gid) != (CAPTURE_USER, CAPTURE_USER):
        raise Fail("capture dir %s: mode %o owner %d:%d, want 700 %d:%d" % (
            path, st.st_mode & 0o777, st.st_uid, st.st_gid, CAPTURE_USER, CAPTURE_USER))
    files = sorted(os.listdir(path))
    listed = sorted([e["file"] for e in man["tensors"] if e["file"]] + ["manifest.json"])
    if files != listed:
        raise Fail("capture holds %s, the manifest lists %s" % (files, listed))
    data = 0
    for name in files:
        st = os.lstat(os.path.join(path, name))
        if st.st_mode & 0o7777 != 0o600 or (st.st_uid, st.st_gid) != (CAPTURE_USER,
                                                                         CAPTURE_USER):
            raise Fail("%s: mode %o owner %d:%d, want 600 %d:%d" % (
                name, st.st_mode & 0o7777, st.st_uid, st.st_gid, CAPTURE_USER, CAPTURE_USER))
    for e in man["tensors"]:
        if not e["file"]:
            continue
        descr, shape, hlen, size = npy_header(os.path.join(path, e["file"]))
        n = 1
        for d in e["shape"]:
            n *= d
        want = n * int(NPY_DTYPES[e["dtype"]][2:])
        if descr != NPY_DTYPES[e["dtype"]] or shape != e["shape"] or size - hlen != want or \
                e["bytes"] != want:
            raise Fail("%s: %s %s with %d data bytes; manifest %s %s %d bytes" % (
                e["file"], descr, shape, size - hlen, e["dtype"], e["shape"], e["bytes"]))
        data += want
    if data > man["max_bytes"] or man["bytes"] != data:
        raise Fail("capture data %d bytes, manifest bytes %d, budget %d" % (
            data, man["bytes"], man["max_bytes"]))
    return data


def numpy_digests(ctx, path, man):
    """sha256 of each file's values as numpy loads them (the host's numpy)."""
    script = ("import hashlib, json, sys, numpy as np\n"
              "out = {}\n"
              "for f in sys.argv[2:]:\n"
              "    a = np.load(sys.argv[1] + '/' + f, allow_pickle=False)\n"
              "    out[f] = [hashlib.sha256(np.ascontiguousarray(a).view(np.uint8)"
              ".tobytes()).hexdigest(), list(a.shape)]\n"
              "print(json.dumps(out))\n")
    files = [e["file"] for e in man["tensors"] if e["file"]]
    r = subprocess.run([ctx.python, "-c", script, path] + files, capture_output=True,
                       text=True, timeout=120)
    if r.returncode != 0:
        raise Fail("numpy cannot load the capture: %s" % r.stderr[-500:])
    return json.loads(r.stdout)


def find_capture(ctx, dirpath, events, pid, oracle):
    """The one capture directory, named after the first origin, and the diagnosis naming it."""
    made = os.listdir(dirpath)
    want = "%d-step%d-%s" % (pid, oracle["step"], oracle["layer"] or "root")
    if made != [want]:
        raise Fail("capture directory holds %s, want [%r]" % (made, want))
    diags = [ev for ev in events if ev["event"] == "diagnosis"]
    inside = os.path.join(dirpath, want)
    if len(diags) != 1 or diags[0].get("capture") != inside:
        raise Fail("diagnosis capture %r, want %r" % (
            [d.get("capture") for d in diags], inside))
    with open(os.path.join(inside, "manifest.json"), encoding="utf-8") as f:
        return inside, json.load(f)


def check_manifest(man, oracle, pid, complete=True):
    """Manifest against the oracle's first origin: layer, class, step, tensors and values."""
    diffs = ["%s %r, oracle %r" % (f, man[f], oracle[f])
             for f in ("step", "iteration", "layer", "module", "tensor") if man[f] != oracle[f]]
    if man["pid"] != pid or man["schema"] != "nanwatch-capture/1":
        diffs.append("pid/schema %r/%r" % (man["pid"], man["schema"]))
    truth = oracle["capture"]
    if man["nargs"] != truth["nargs"]:
        diffs.append("nargs %r, oracle %r" % (man["nargs"], truth["nargs"]))
    got = [(e["role"], e["name"], e["dtype"], e["shape"]) for e in man["tensors"]]
    want = [(t["role"], t["name"], t["dtype"], t["shape"]) for t in truth["tensors"]]
    if got != want:
        diffs.append("tensors %s, oracle %s" % (got, want))
    if man["truncated"] is complete:
        diffs.append("truncated %r" % man["truncated"])
    if diffs:
        raise Fail("manifest differs: " + "; ".join(diffs))


def check_values(ctx, path, man, oracle):
    """Every written file holds exactly the values the oracle saw at that call."""
    digests = numpy_digests(ctx, path, man)
    by_name = {(t["role"], t["name"]): t for t in oracle["capture"]["tensors"]}
    for e in man["tensors"]:
        if not e["file"]:
            continue
        t = by_name[(e["role"], e["name"])]
        if digests[e["file"]] != [t["sha256"], t["shape"]]:
            raise Fail("%s (%s) differs from the oracle's values at the call" % (
                e["file"], e["name"]))


def run_repro(ctx, inside, *args):
    argv = as_user(ctx, ctx.env.argv(install_repro(ctx), *args, inside))
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=120)
    ctx.log("repro exit %d: %s" % (r.returncode, (r.stdout + r.stderr).strip()[-300:]))
    return r


def write_npy(path, values):
    """A float32 vector as .npy 1.0, written here (no numpy in the runner)."""
    header = "{'descr': '<f4', 'fortran_order': False, 'shape': (%d,), }" % len(values)
    header += " " * (63 - (10 + len(header)) % 64) + "\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
        f.write(struct.pack("<%df" % len(values), *values))


# Names a target controls, as a capture's manifest carries them: escape sequences (clear the
# screen, set the title, colours), a C1 CSI, and bidi controls that reorder the line.
EVIL = ["a\x1b[2J", "b\x1b]0;owned\x07", "c\x9b31m", "d\u202eevil", "e\u2066f\u2069",
        "g\u200fh\u061c"]
HIDDEN_CHARS = "".join(chr(c) for c in list(range(0x20)) + list(range(0x7f, 0xa0)) +
                       [0x61c, 0x200e, 0x200f] + list(range(0x202a, 0x202f)) +
                       list(range(0x2066, 0x206a))).replace("\n", "")


def repro_raw(ctx, inside, *args):
    argv = as_user(ctx, ctx.env.argv(install_repro(ctx), *args, inside))
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=120)
    out, err = r.stdout.decode("utf-8"), r.stderr.decode("utf-8")
    ctx.log("repro exit %d: %r" % (r.returncode, (out + err)[-300:]))
    bad = sorted({"U+%04X" % ord(c) for c in out + err if c in HIDDEN_CHARS})
    if bad:
        raise Fail("nanwatch-repro %s printed raw control characters %s: %r" %
                   (" ".join(args), ", ".join(bad), (out + err)[-300:]))
    return r.returncode, out, err


def case_repro_names(ctx):
    """nanwatch-repro prints the manifest's names (from the target) with terminal and bidi
    controls neutralised, in its result, its instructions and its errors; --json stays exact."""
    path, inside = capture_dir(ctx)
    cap = os.path.join(path, "cap")
    os.mkdir(cap, 0o755)
    write_npy(os.path.join(cap, "input0.npy"), [1.0, float("nan"), -2.0, 3.0])
    write_npy(os.path.join(cap, "output.npy"), [1.0, float("nan"), 0.0, 3.0])
    vec = {"dtype": "float32", "shape": [4], "strides": [1], "storage_offset": 0, "bytes": 16,
           "skipped": None}
    man = {"schema": "nanwatch-capture/1", "pid": 1, "comm": "python3", "step": 3,
           "iteration": 3, "layer": "".join(EVIL), "module": "ReLU",
           "class_module": "torch.nn.modules.activation", "tensor": "output", "nargs": 1,
           "tensors": [dict(vec, role="input", name="input0", index=[0], file="input0.npy"),
                       dict(vec, role="output", name="output", index=[], file="output.npy")],
           "params_none": [], "buffers_none": [], "children": [], "attrs": {"inplace": False},
           "truncated": False}

    def write(m):
        with open(os.path.join(cap, "manifest.json"), "w") as f:
            json.dump(m, f)
    write(man)
    rc, out, _ = repro_raw(ctx, inside + "/cap")
    if rc != 0 or "reproduced" not in out or "a?[2Jb?]0;owned?c?31md?evile?f?g?h? (ReLU)" \
            not in out:
        raise Fail("repro of a ReLU with a hostile layer name: exit %d, %r" % (rc, out))
    rc, out, _ = repro_raw(ctx, inside + "/cap", "--json")
    layer = (last_json(out, "layer") or {}).get("layer")  # torch's UCX may print a line first
    if rc != 0 or layer != man["layer"]:
        raise Fail("--json does not carry the layer name exactly: %r" % out)
    write(dict(man, module="Net" + EVIL[0] + EVIL[3], class_module="__main__",
               attrs={"k" + EVIL[1]: "v" + EVIL[4]}))
    rc, out, _ = repro_raw(ctx, inside + "/cap")
    if rc != 3 or "import Neta?[2Jd?evil" not in out or "m.kb?]0;owned? = " not in out:
        raise Fail("instructions for a hostile class name: exit %d, %r" % (rc, out))
    write(dict(man, tensors=man["tensors"] + [dict(vec, role="param", name="w" + EVIL[5],
                                                   index=[], file=None)]))
    rc, _, err = repro_raw(ctx, inside + "/cap")
    if rc != 2 or "lacks wg?h?" not in err:
        raise Fail("error naming a hostile parameter: exit %d, %r" % (rc, err))


def check_reproduced(ctx, inside, oracle, *args):
    r = run_repro(ctx, inside, "--json", *args)
    result = last_json(r.stdout, "reproduced")
    if r.returncode != 0 or result is None:
        raise Fail("nanwatch-repro exited %d: %s" % (r.returncode, (r.stdout + r.stderr)[-500:]))
    diffs = ["%s %r, oracle %r" % (f, result[f], oracle[f]) for f in ("nan", "posinf", "neginf")
             if result[f] != oracle[f]]
    if result["reproduced"] is not True or result["matches_capture"] is not True or diffs:
        raise Fail("repro result %s; %s" % (json.dumps(result), "; ".join(diffs)))


def capture_case(ctx, name):
    oracle, trace = oracle_of(ctx, name)
    if oracle is None or not oracle["origin"] or oracle["capture"] is None:
        raise Fail("%s --oracle has no origin anomaly first (the trainer lost its fault)" % name)
    dirpath, inside_dir = capture_dir(ctx)
    events, pid = watch_capture(ctx, name, trace, dirpath)
    check_anomalies(events, oracle, pid)
    path, man = find_capture(ctx, dirpath, events, pid, oracle)
    check_manifest(man, oracle, pid)
    data = check_capture_files(ctx, path, man)
    check_values(ctx, path, man, oracle)
    ctx.log("capture %s: %d files, %d data bytes" % (path, len(os.listdir(path)), data))
    return oracle, path, os.path.join(inside_dir, os.path.basename(path)), man


def case_capture_standard(ctx):
    """A standard torch.nn layer (a frozen BatchNorm1d): captured, and nanwatch-repro rebuilds
    it and reproduces its NaN output."""
    oracle, path, inside, man = capture_case(ctx, "frozen_norm")
    attrs = man["attrs"]
    if attrs.get("eps") != 1e-5 or attrs.get("training") is not False or \
            attrs.get("num_features") != 8 or man["children"] != [] or \
            attrs.get("frozen_at") != [-1, 2 ** 40] or attrs.get("note") != "frozen statistics" or \
            man["class_module"] != "torch.nn.modules.batchnorm":
        raise Fail("attrs/class_module %s %r" % (json.dumps(attrs), man["class_module"]))
    check_reproduced(ctx, inside, oracle)


def case_capture_custom(ctx):
    """A custom layer (div_zero's TempScale, whose buffer holds the zero temperature): without
    its class the repro prints how to rebuild it; with --class-from it reproduces the ±Inf."""
    oracle, path, inside, man = capture_case(ctx, "div_zero")
    r = run_repro(ctx, inside)
    if r.returncode != 3 or "--class-from" not in r.stdout or "register_buffer" not in r.stdout:
        raise Fail("repro without the class exited %d:\n%s" % (r.returncode, r.stdout[-500:]))
    check_reproduced(ctx, inside, oracle, "--class-from",
                     os.path.join(ctx.env.trainers, "div_zero.py"))


def case_capture_children(ctx):
    """MultiheadAttention (mha_tuple): a tuple output's first item, three positional inputs;
    its out_proj child is listed, and the repro refuses to rebuild it generically."""
    oracle, path, inside, man = capture_case(ctx, "mha_tuple")
    if man["children"] != ["out_proj"] or man["attrs"].get("num_heads") != 2:
        raise Fail("children %r, attrs %s" % (man["children"], json.dumps(man["attrs"])))
    r = run_repro(ctx, inside)
    if r.returncode != 2 or "out_proj" not in r.stderr:
        raise Fail("repro of a layer with children exited %d: %s" % (r.returncode, r.stderr))


def case_capture_none(ctx):
    """nonfinite_params: the first anomaly is not an origin (its weights were already bad), so
    nothing is captured, though a later output of that iteration (the root model's, whose own
    input is the finite batch) counts as one; the diagnosis says capture null."""
    oracle, trace = oracle_of(ctx, "nonfinite_params")
    later = [a for a in oracle["first_iteration"][1:] if a["origin"]]
    if oracle["origin"] or oracle["capture"] is not None or not later:
        raise Fail("oracle: first origin %r, later origins %s: the case lost its point" % (
            oracle["origin"], listing([(a["layer"], a["module"], a["tensor"]) for a in later])))
    dirpath, _ = capture_dir(ctx)
    events, pid = watch_capture(ctx, "nonfinite_params", trace, dirpath)
    check_anomalies(events, oracle, pid)
    diags = [ev for ev in events if ev["event"] == "diagnosis"]
    if os.listdir(dirpath) or [d["capture"] for d in diags] != [None]:
        raise Fail("capture made: %s, diagnosis capture %s" % (
            os.listdir(dirpath), [d.get("capture") for d in diags]))


def case_capture_budget(ctx):
    """A budget of 200 bytes: the tensors that fit are written, the rest listed as skipped,
    the manifest says truncated, no file holds more, and the repro refuses the capture."""
    oracle, trace = oracle_of(ctx, "frozen_norm")
    dirpath, inside_dir = capture_dir(ctx)
    events, pid = watch_capture(ctx, "frozen_norm", trace, dirpath, "--capture-max-mb",
                                "%.12f" % (200 / 1048576))
    path, man = find_capture(ctx, dirpath, events, pid, oracle)
    check_manifest(man, oracle, pid, complete=False)
    data = check_capture_files(ctx, path, man)
    skipped = [e["name"] for e in man["tensors"] if e["skipped"] == "budget"]
    if man["max_bytes"] not in (199, 200) or not skipped or not 0 < data <= man["max_bytes"]:
        raise Fail("budget %r, data %d, skipped %s" % (man["max_bytes"], data, skipped))
    check_values(ctx, path, man, oracle)
    r = run_repro(ctx, os.path.join(inside_dir, os.path.basename(path)))
    if r.returncode != 2 or "truncated" not in r.stderr:
        raise Fail("repro of a truncated capture exited %d: %s" % (r.returncode, r.stderr))
# --- The backward pass -------------------------------------------------------------------

BACKWARD_NAN = ["backward_sqrt_zero", "backward_where_log"]  # detect_anomaly names the node
BACKWARD_INF = ["backward_sqrt_inf"]  # Inf: detect_anomaly (NaN only) stops at a later node
BACKWARD_FIELDS = ("step", "iteration", "node", "tensor", "layer", "module", "dtype", "shape",
                   "numel", "nan", "posinf", "neginf")


def start_live_trainer(ctx, name, *extra):
    """A trainer that trains at once (--live): the daemon attaches to a run in flight."""
    return announced_trainer(ctx, name, "--live", b"LIVE", *extra)


def step_now(trainer):
    """The last STEP n the trainer printed (0 before any)."""
    steps = [l for l in trainer.out if l.startswith(b"STEP ")]
    return int(steps[-1].split()[1]) if steps else 0


def wait_steps(trainer, n, what):
    """Wait until the trainer printed STEP m for some m >= n."""
    if trainer.wait_out(lambda l: l.startswith(b"STEP ") and int(l.split()[1]) >= n, 60) is None:
        raise Fail("trainer did not reach step %d %s" % (n, what))


def check_counts_in_flight(events, what):
    """A watch of a run in flight: steps and iterations counted together, no anomaly."""
    stats = last_stats(events)
    steps, iterations = stats["steps"], stats["iterations"]
    if steps < 5:
        raise Fail("%s: stats.steps %d after the trainer ran 20+ steps under the daemon" %
                   (what, steps))
    # one forward pass per step: they differ by the step or pass running at either end
    if abs(iterations - steps) > 1:
        raise Fail("%s: stats.iterations %d against steps %d: the per-thread module stack "
                   "or the root model went wrong at attach (stack_healed %s, unanchored %s)" %
                   (what, iterations, steps, stats.get("stack_healed"), stats.get("unanchored")))
    bad = [ev for ev in events if ev["event"] == "anomaly"]
    if bad:
        raise Fail("%s: anomaly on a healthy stretch: %s" % (what, json.dumps(bad[0])))


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


def case_in_flight(ctx, name, variant, attaches, pace):
    """Attach to a trainer that never waits, several times (SIGTERM between), at moments
    the test does not choose (pace 0: flat out; else a random delay), then inject the fault
    with the daemon attached and compare with the hook oracle."""
    import random
    extra = ["--progress-every", "10", "--variant", variant]
    if pace:
        extra += ["--pace", str(pace)]
    trainer = start_live_trainer(ctx, name, *extra)
    comm = read_comm(trainer.pid)
    wait_steps(trainer, 20, "before the first attach")
    for n in range(attaches):
        if pace:
            time.sleep(random.uniform(0, 0.5))
        daemon = start_daemon(ctx, trainer.pid)
        wait_attach(daemon)
        last = n == attaches - 1
        wait_steps(trainer, step_now(trainer) + 30, "under attach %d" % (n + 1))
        if last:
            fault = step_now(trainer) + 60
            trainer.p.stdin.write(b"FAULT %d\n" % fault)
            trainer.p.stdin.flush()
            line = trainer.wait_out(lambda l: l.startswith(b"FAULT AT "), 60)
            if line is None or int(line.split()[-1].rstrip(b")")) >= fault:
                raise Fail("trainer took the fault step too late: %r" % line)
            rc = trainer.wait(TRAINER_TIMEOUT)
            if rc != 0:
                raise Fail("trainer exited %r:\n%s" % (rc, tail(trainer.stderr_lines())))
            wait_daemon_exit(daemon)
            events = parse_stream(daemon, trainer.pid, comm)
            check_envelope(events, "target_exit")
            break
        daemon.p.send_signal(signal.SIGTERM)
        wait_daemon_exit(daemon)
        events = parse_stream(daemon, trainer.pid, comm)
        check_envelope(events, "signal")
        check_counts_in_flight(events, "attach %d" % (n + 1))
        if not trainer.running():
            raise Fail("trainer ended under attach %d" % (n + 1))
    oracle, _ = oracle_of(ctx, name, "--fault-step", str(fault), "--variant", variant)
    if oracle is None or oracle["step"] != fault:
        raise Fail("oracle of the fault at step %d found %r" % (fault, oracle))
    first = check_first_in_flight(events, oracle, trainer.pid)
    ctx.log("attached %d times; first anomaly %s at step %d (%s), oracle step %d" %
            (attaches, describe(oracle), first["step"], first.get("step_source"),
             oracle["step"]))


def case_deep_nest(ctx, depth):
    """Nesting deeper than 16 (the old limit) is followed exactly; deeper than the stack
    holds, the deepest checked call is not blamed: origin null, nested_unchecked true."""
    oracle, trace = oracle_of(ctx, "deep_nest", "--variant", str(depth))
    events = watch(ctx, "deep_nest", trace, trainer_args=("--variant", str(depth)))
    anomalies = [ev for ev in events if ev["event"] == "anomaly"]
    if not anomalies:
        raise Fail("no anomaly; oracle: %s" % describe(oracle))
    first = anomalies[0]
    stats = last_stats(events)
    if depth <= 30:
        check_anomalies(events, oracle, events[0]["pid"])
        if first.get("nested_unchecked") is not False:
            raise Fail("nested_unchecked %r at depth %d" % (first.get("nested_unchecked"), depth))
        return
    layer = first["layer"] or ""
    if first["origin"] is not None or first.get("nested_unchecked") is not True:
        raise Fail("deepest checked call %r: origin %r, nested_unchecked %r; want null, true" %
                   (layer, first["origin"], first.get("nested_unchecked")))
    if not oracle["layer"].startswith(layer + ".") or first["step"] != oracle["step"]:
        raise Fail("first anomaly %r step %r is not an ancestor of the oracle's %r step %r" %
                   (layer, first["step"], oracle["layer"], oracle["step"]))
    if stats["stack_overflow"] + stats["stack_healed"] < 1:
        raise Fail("stats count no call beyond the stack: %s" % json.dumps(stats))
    diag = [ev for ev in events if ev["event"] == "diagnosis"]
    if diag and diag[0]["cause"] != "unknown":
        raise Fail("diagnosis names %r for a layer that did not make the value" %
                   diag[0]["cause"])


def case_root_replaced(ctx):
    """A new model each fold: iterations keep counting, and the bad batch's iteration is
    the run's, not the first model's."""
    trace = run_trainer(ctx, "kfold")["trace"]
    trainer = start_waiting_trainer(ctx, "kfold")
    comm = read_comm(trainer.pid)
    daemon = start_daemon(ctx, trainer.pid)
    wait_attach(daemon)
    trainer.send(b"go\n")
    rc = trainer.wait(TRAINER_TIMEOUT)
    if rc != 0:
        raise Fail("kfold exited %r" % rc)
    wait_daemon_exit(daemon)
    events = parse_stream(daemon, trainer.pid, comm)
    check_envelope(events, "target_exit")
    if events[-1]["iterations"] != trace["forwards"]:
        raise Fail("detach iterations %r, the run made %d forward passes" %
                   (events[-1]["iterations"], trace["forwards"]))
    first = [ev for ev in events if ev["event"] == "anomaly"][0]
    if (first["iteration"], first["step"]) != (trace["bad"]["iteration"], trace["bad"]["step"]):
        raise Fail("first anomaly at iteration %r step %r, the bad batch was %r" %
                   (first["iteration"], first["step"], trace["bad"]))


def case_exec(ctx):
    """The target execs another program: detach with reason target_exec, exit 0, the new
    program left running and untouched."""
    trainer = start_live_trainer(ctx, "exec_after", "--progress-every", "10")
    comm = read_comm(trainer.pid)
    wait_steps(trainer, 10, "before the attach")
    daemon = start_daemon(ctx, trainer.pid)
    wait_attach(daemon)
    trainer.p.stdin.write(b"FAULT %d\n" % (step_now(trainer) + 20))
    trainer.p.stdin.flush()
    wait_daemon_exit(daemon, 20)
    events = parse_stream(daemon, trainer.pid, comm)
    check_envelope(events, "target_exec")
    target_untouched(trainer)
    with open("/proc/%d/comm" % trainer.pid) as f:
        if f.read().strip() != "sleep":
            raise Fail("the target did not exec sleep")


def backward_oracles(ctx, name):
    """The node hooks' first non-finite node output, and detect_anomaly's node."""
    result = run_trainer(ctx, name, "--oracle")
    first = result.get("backward_first")
    if first is None:
        raise Fail("%s --oracle: the node hooks found no non-finite gradient" % name)
    fwd = result.get("oracle")
    if fwd is not None and fwd["iteration"] <= first["iteration"]:
        raise Fail("%s --oracle: a module output or the loss was non-finite (%s) by iteration "
                   "%d: the case needs a finite forward pass" % (name, describe(fwd),
                                                                 first["iteration"]))
    anomaly = run_trainer(ctx, name, "--anomaly").get("anomaly")
    return first, anomaly, result["trace"], result


def check_backward_first(events, oracle, pid):
    anomalies = [ev for ev in events if ev["event"] == "anomaly"]
    if not anomalies:
        raise Fail("no anomaly event; oracle: %s at step %d" % (oracle["node"], oracle["step"]))
    for ev in anomalies:
        check_anomaly_fields(ev, pid)
    first = check_first(anomalies, oracle)
    for f in ("node", "consumer", "producers", "input_nr"):
        if f not in first:
            raise Fail("backward anomaly lacks %s: %s" % (f, json.dumps(first)))
    diffs = ["%s %r, oracle %r" % (f, first[f], oracle[f]) for f in BACKWARD_FIELDS
             if not same(first[f], oracle[f])]
    diffs += ["%s %r, oracle %r" % (f, first[f], oracle[f]) for f in ("finite_min", "finite_max")
              if not close(first[f], oracle[f])]
    if first["producers"] != 1 or first["origin"] is not True or \
            first["inputs_finite"] is not True:
        diffs.append("producers %r origin %r inputs_finite %r, want 1, true, true" %
                     (first["producers"], first["origin"], first["inputs_finite"]))
    if diffs:
        raise Fail("first backward anomaly differs: " + "; ".join(diffs))
    per_iter = {}
    for ev in anomalies:
        if ev["phase"] == "backward":
            per_iter[ev["iteration"]] = per_iter.get(ev["iteration"], 0) + 1
    if any(n > 1 for n in per_iter.values()):
        raise Fail("more than one backward anomaly in an iteration: %s" % per_iter)
    return first


def case_backward(ctx, name):
    """Finite forward, non-finite gradient: the node, step, layer and counts of the node
    hooks, and (for NaN) the node and step torch.autograd.detect_anomaly names."""
    oracle, anomaly, trace, result = backward_oracles(ctx, name)
    ctx.log("node hooks: %s %s at step %d (layer %r); detect_anomaly: %s" % (
        oracle["node"], oracle["tensor"], oracle["step"], oracle["layer"],
        anomaly and "%s output %d at step %d" % (anomaly["node"], anomaly["output"],
                                                 anomaly["step"])))
    if name in BACKWARD_NAN:
        if anomaly is None:
            raise Fail("detect_anomaly did not raise on %s" % name)
        want = (oracle["node"], oracle["tensor"], oracle["step"], oracle["iteration"])
        got = (anomaly["node"], "grad[%d]" % anomaly["output"], anomaly["step"],
               anomaly["iteration"])
        if want != got:
            raise Fail("the oracles disagree: node hooks %s, detect_anomaly %s" % (want, got))
    events = watch(ctx, name, trace, daemon_args=("--backward", "on"))
    if events[0].get("backward") != "on":
        raise Fail("attach says backward %r with --backward on" % events[0].get("backward"))
    first = check_backward_first(events, oracle, events[0]["pid"])
    if anomaly is not None and name in BACKWARD_NAN:
        if (first["node"], first["step"], first["tensor"]) != \
                (anomaly["node"], anomaly["step"], "grad[%d]" % anomaly["output"]):
            raise Fail("daemon %s %s step %d, detect_anomaly %s output %d step %d" % (
                first["node"], first["tensor"], first["step"], anomaly["node"],
                anomaly["output"], anomaly["step"]))
    diags = [ev for ev in events if ev["event"] == "diagnosis"]
    want_cause = {"backward_sqrt_inf": "division_by_zero"}.get(name, "invalid_domain")
    if len(diags) != 1 or diags[0]["cause"] != want_cause or diags[0]["layer"] != first["layer"]:
        raise Fail("diagnosis %s, want one with cause %s on layer %r" % (
            json.dumps(diags), want_cause, first["layer"]))
    check_norms(events, result.get("grad_norms"), upto=first["step"])


def check_norms(events, norms, upto=None, stats=None):
    """stats.grad_norm.trend against the trainer's own norms: torch's value inside the
    daemon's [low, high] for every pass whose gradients were finite."""
    if stats is None:
        stats = [ev for ev in events if ev["event"] == "stats"][-1]
    gn = stats.get("grad_norm")
    if not isinstance(gn, dict) or not gn.get("trend"):
        raise Fail("stats has no grad_norm trend: %s" % json.dumps(stats))
    want = {i: n["norm"] for i, n in enumerate(norms or [])}
    checked = 0
    for t in gn["trend"]:
        w = want.get(t["iteration"])
        if w is None or w != w or (upto is not None and t["step"] >= upto):
            continue
        if t.get("complete") is not True:
            raise Fail("pass %d: histograms were dropped (complete %r)" % (t["iteration"],
                                                                            t.get("complete")))
        if t["nonfinite"] or t["total"] is None:
            raise Fail("pass %d: daemon counts non-finite gradients, torch's norm is %r" %
                       (t["iteration"], w))
        lo, hi = t["low"], t["high"]
        if not (lo * (1 - 1e-6) <= w <= hi * (1 + 1e-6)) or hi > lo * 1.25 * (1 + 1e-9):
            raise Fail("pass %d: torch's gradient norm %r outside the daemon's bounds [%r, %r]"
                       % (t["iteration"], w, lo, hi))
        if abs(t["total"] / w - 1) > 0.118:
            raise Fail("pass %d: norm %r, torch %r: more than 11.8%% off" %
                       (t["iteration"], t["total"], w))
        checked += 1
    if checked < 2:
        raise Fail("only %d passes of the trend could be compared: %s" % (checked, gn["trend"]))
    return checked


def case_grad_explode(ctx):
    """Exploding gradients: stats lines show the norm growing, each pass within the stated
    bounds of torch's norm, before any parameter or output is non-finite."""
    name = "grad_explode"
    result = run_trainer(ctx, name, "--oracle")
    norms, trace = result["grad_norms"], result["trace"]
    events = watch(ctx, name, trace, trainer_args=("--pace", "0.4"),
                   daemon_args=("--stats-interval", "1"))
    if events[0].get("backward") != "norms":
        raise Fail("attach says backward %r by default, want norms" % events[0].get("backward"))
    anomalies = [ev for ev in events if ev["event"] == "anomaly"]
    if not anomalies:
        raise Fail("no anomaly once the values overflowed")
    first_seq = anomalies[0]["seq"]
    before = [ev for ev in events if ev["event"] == "stats" and ev["seq"] < first_seq and
              isinstance(ev.get("grad_norm"), dict)]
    if not before:
        raise Fail("no stats line with gradient norms before the first anomaly")
    last = before[-1]
    check_norms(events, norms, stats=last)
    totals = [t["total"] for t in last["grad_norm"]["trend"] if t["total"] is not None]
    rising = all(a < b for a, b in zip(totals[-4:], totals[-3:]))
    if len(totals) < 4 or not rising or totals[-1] < 20 * min(totals):
        raise Fail("the trend before the first anomaly does not show the growth: %s" % totals)
    if anomalies[0]["step"] <= last["grad_norm"]["step"]:
        raise Fail("the first anomaly (step %d) is not after the trend's last pass (step %d)"
                   % (anomalies[0]["step"], last["grad_norm"]["step"]))
    ctx.log("trend before the first anomaly (step %d): %s" % (
        anomalies[0]["step"], ", ".join("%.3g" % t for t in totals)))


def case_backward_off(ctx):
    """--backward off: no backward probe, no backward events, no norms; the same training."""
    name = "backward_sqrt_zero"
    result = run_trainer(ctx, name, "--oracle")
    events = watch(ctx, name, result["trace"], daemon_args=("--backward", "off"))
    if events[0].get("backward") != "off":
        raise Fail("attach says backward %r with --backward off" % events[0].get("backward"))
    bad = [ev for ev in events if ev["event"] == "anomaly" and ev["phase"] == "backward"]
    stats = [ev for ev in events if ev["event"] == "stats"][-1]
    if bad or "grad_norm" in stats:
        raise Fail("backward output with --backward off")


# ----------------------------------------------------------------------------- outputs

STOP_TIMEOUT = 5  # SIGTERM with a stalled collector: the daemon needs well under a second
LOST_TIMEOUT = 120  # for a stalled collector's first dropped line


def as_nobody(*argv):
    """Run argv as uid NOBODY: the unprivileged owner of the directory under attack."""
    r = subprocess.run(["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY,
                        "--clear-groups"] + list(argv), capture_output=True, timeout=30)
    if r.returncode != 0:
        raise Fail("as uid %d, %s exited %d: %s" % (NOBODY, " ".join(argv), r.returncode,
                                                    r.stderr.decode("utf-8", "replace")[-300:]))


def user_dir(ctx):
    """A directory made by root and given to NOBODY, and beside it a directory only root
    may write: where an attack would have the daemon create its files."""
    os.chmod(ctx.tmp, 0o711)
    home = tempfile.mkdtemp(prefix="userdir-", dir=ctx.tmp)
    os.chown(home, NOBODY, NOBODY)
    os.chmod(home, 0o755)
    secret = tempfile.mkdtemp(prefix="rootonly-", dir=ctx.tmp)
    return home, secret


def read_lines(path):
    with open(path, "rb") as f:
        return f.read().splitlines()


def check_created(path, owner=0):
    """A file the daemon created: a regular file of owner, no mode bits beyond 0640."""
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != owner or st.st_mode & 0o7137:
        raise Fail("%s: mode %o uid %d, want a regular file, uid %d, at most 0640" %
                   (path, st.st_mode, st.st_uid, owner))


def case_output_symlinks(ctx):
    """Symlinks planted by the unprivileged owner of a directory on the path: a symlinked
    parent of -o, a symlinked --capture-dir named with a trailing slash (and without), an -o
    file that is a symlink. Each is refused before attaching (one line, no attach), the target
    is untouched, and nothing is created where a link points. A real directory named with a
    trailing slash is accepted, and the output file is created 0640."""
    home, secret = user_dir(ctx)
    as_nobody("ln", "-s", secret, os.path.join(home, "sub"))
    as_nobody("ln", "-s", secret, os.path.join(home, "lnk"))
    as_nobody("ln", "-s", os.path.join(secret, "planted"), os.path.join(home, "events"))
    as_nobody("mkdir", os.path.join(home, "real"))
    trainer = start_waiting_trainer(ctx, "healthy")
    attacks = (["-o", os.path.join(home, "sub", "x")],
               ["--capture-dir", os.path.join(home, "lnk") + "/"],
               ["--capture-dir", os.path.join(home, "lnk")],
               ["-o", os.path.join(home, "events")])
    for args in attacks:
        ctx.log("attack: %s" % " ".join(args))
        expect_refusal(ctx, start_daemon(ctx, trainer.pid, extra=args), ["symlink"])
        target_untouched(trainer)
        if os.listdir(secret):
            raise Fail("%s: the daemon created %s where a symlink points" %
                       (" ".join(args), ", ".join(os.listdir(secret))))
    out = os.path.join(home, "real", "events.ndjson")
    daemon = start_daemon(ctx, trainer.pid, extra=["--capture-dir", os.path.join(home, "real/"),
                                                   "-o", "-", "-o", out])
    wait_attach(daemon)
    daemon.p.send_signal(signal.SIGTERM)
    wait_daemon_exit(daemon)
    check_created(out)
    lines = read_lines(out)
    if not lines or json.loads(lines[-1]).get("event") != "detach":
        raise Fail("%s does not end with detach" % out)
    target_untouched(trainer)


def case_output_special_files(ctx):
    """An output path where the unprivileged owner of its directory put a FIFO (opening it
    would wait for a reader), a socket, a hard link to a file of theirs (either name), or a
    device: each refused at once with one line naming what it is, nothing written."""
    home, _ = user_dir(ctx)
    fifo, sock = os.path.join(home, "fifo"), os.path.join(home, "sock")
    own, alias = os.path.join(home, "own"), os.path.join(home, "alias")
    as_nobody("mkfifo", fifo)
    as_nobody(ctx.python, "-c", "import socket, sys; "
              "socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).bind(sys.argv[1])", sock)
    as_nobody("sh", "-c", 'echo mine > "$1" && ln "$1" "$2"', "sh", own, alias)
    trainer = start_waiting_trainer(ctx, "healthy")
    for path, words in ((fifo, ["FIFO"]), (sock, ["socket"]), (alias, ["hard link"]),
                        (own, ["hard link"]), ("/dev/null", ["device"])):
        ctx.log("output: %s" % path)
        expect_refusal(ctx, start_daemon(ctx, trainer.pid, extra=["-o", path]), words)
        target_untouched(trainer)
    with open(own, "rb") as f:
        if f.read() != b"mine\n":
            raise Fail("the hard-linked file was written to")


def collector(path):
    """A unix socket server that accepts one collector connection and never reads it."""
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(1)
    conns = []

    def accept():
        conns.append(srv.accept()[0])
    threading.Thread(target=accept, daemon=True).start()
    return srv, conns


def read_all(conn):
    conn.settimeout(10)
    data = b""
    while True:
        chunk = conn.recv(1 << 16)
        if not chunk:
            return data
        data += chunk


def check_stalled_stream(events, sock_name, got):
    """stdout complete; the stalled collector's drops counted and said, its lines whole."""
    names = [ev["event"] for ev in events]
    if names[0] != "attach" or names[-1] != "detach" or events[-1]["reason"] != "signal":
        raise Fail("stdout runs %s ... %s (reason %r)" % (names[0], names[-1],
                                                            events[-1].get("reason")))
    sinks = {s["name"]: s for s in last_stats(events)["sinks"]}
    if set(sinks) != {"stdout", sock_name}:
        raise Fail("stats.sinks names %s" % ", ".join(sorted(sinks)))
    if sinks["stdout"]["dropped"] or sinks["stdout"]["error"] is not None:
        raise Fail("stdout: %r" % sinks["stdout"])
    stalled = sinks[sock_name]
    if not stalled["dropped"] or stalled["error"] is not None:
        raise Fail("the stalled collector: %r, want drops and no error" % stalled)
    lost = [ev for ev in events if ev["event"] == "lost"]
    if any(ev["where"] != "sink" or ev["sink"] != sock_name for ev in lost):
        raise Fail("lost events %s" % json.dumps(lost)[:300])
    if sum(ev["count"] for ev in lost) > stalled["dropped"]:
        raise Fail("lost events count more than stats.sinks dropped (%d)" % stalled["dropped"])
    if got and not got.endswith(b"\n"):  # each line is one send the socket takes whole or not
        raise Fail("the collector's stream ends in a cut line: %r" % got[-100:])
    lines = got.split(b"\n")[:-1]
    seqs = [json.loads(line)["seq"] for line in lines]
    if seqs != sorted(set(seqs)) or len(seqs) < stalled["written"]:
        raise Fail("the collector got %d lines (seq %s...), stats says %d written" %
                   (len(seqs), seqs[:5], stalled["written"]))
    if len(seqs) >= len(events):
        raise Fail("the collector got %d lines, stdout %d: nothing was dropped" %
                   (len(seqs), len(events)))


def case_output_stalled_collector(ctx):
    """A collector that accepts and never reads, next to stdout: the daemon keeps reading the
    ring (anomalies keep reaching stdout), drops and counts the collector's lines (a lost
    event, stats.sinks), and a SIGTERM ends it in a few seconds with a detach, exit 0."""
    path = os.path.join(ctx.tmp, "collector.sock")
    srv, conns = collector(path)
    trainer = start_waiting_trainer(ctx, "nonfinite_params", "--steps", "1000000")
    comm = read_comm(trainer.pid)
    daemon = start_daemon(ctx, trainer.pid, extra=["-o", "-", "-o", "unix:" + path,
                                                   "--output-queue-kb", "256"])
    wait_attach(daemon)
    trainer.send(b"go\n")
    if daemon.wait_out(lambda l: is_event("lost")(l) and b'"sink"' in l, LOST_TIMEOUT) is None:
        raise Fail("no lost event for the stalled collector in %ds" % LOST_TIMEOUT)
    seen = len(daemon.out)
    if daemon.wait_out(lambda l: is_event("anomaly")(l) and daemon.out.index(l) >= seen,
                       60) is None:
        raise Fail("no anomaly on stdout after the collector stalled")
    start = time.monotonic()
    daemon.p.send_signal(signal.SIGTERM)
    rc = daemon.wait(STOP_TIMEOUT)
    if rc is None:
        raise Fail("daemon still running %ds after SIGTERM with a stalled collector" %
                   STOP_TIMEOUT)
    ctx.log("exit %d %.2fs after SIGTERM" % (rc, time.monotonic() - start))
    if rc != 0:
        raise Fail("daemon exited %d" % rc)
    target_untouched(trainer)
    if not conns:
        raise Fail("the daemon never connected to the collector")
    got = read_all(conns[0])
    srv.close()
    events = parse_stream(daemon, trainer.pid, comm)
    check_stalled_stream(events, "unix:" + path, got)
    ctx.log("stdout %d lines, collector %d, stats.sinks %s" % (
        len(events), got.count(b"\n"), json.dumps(last_stats(events)["sinks"])))


def expect_broken(ctx, daemon, words):
    """Exit 1, and one stderr line naming the output and the reason."""
    rc = daemon.wait(ATTACH_TIMEOUT)
    if rc is None:
        raise Fail("daemon still running after %ds with a broken output" % ATTACH_TIMEOUT)
    if rc != 1:
        raise Fail("daemon exited %d, want 1" % rc)
    err = daemon.stderr_lines()
    if len(err) != 1 or not all(w in err[0] for w in words):
        raise Fail("stderr %r: want one line naming %s" % (err, " and ".join(words)))
    ctx.log("exit 1: %s" % err[0])


def case_output_closed_pipe(ctx):
    """stdout a pipe whose reader takes one line and goes (`nanwatchd | head -1`): one stderr
    line naming stdout and the broken pipe, exit 1; the trainer runs on as it would alone."""
    steps = ("--steps", "60")
    trace = run_trainer(ctx, "healthy", *steps)["trace"]
    trainer = start_waiting_trainer(ctx, "healthy", *steps, "--pace", "0.05")
    r, w = os.pipe()
    try:
        daemon = start_daemon(ctx, trainer.pid, extra=["--stats-interval", "1"], stdout=w)
    finally:
        os.close(w)
    with os.fdopen(r, "rb") as reader:  # head -1
        if not select.select([reader], [], [], ATTACH_TIMEOUT)[0]:
            raise Fail("nothing on stdout in %ds" % ATTACH_TIMEOUT)
        first = reader.readline()
    if not is_event("attach")(first):
        raise Fail("first line is not attach: %r" % first[:200])
    trainer.send(b"go\n")
    expect_broken(ctx, daemon, ["stdout", "Broken pipe"])
    finish_trainer(ctx, trainer, "healthy", trace)


def case_output_full_disk(ctx):
    """A file output on a full file system (a 64 KiB tmpfs, filled) next to stdout: one stderr
    line naming the file and the reason, stats and detach (reason error) on stdout, exit 1;
    the trainer runs on as it would alone."""
    mnt = tempfile.mkdtemp(prefix="fulldisk-", dir=ctx.tmp)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0755", "tmpfs", mnt],
                       capture_output=True, timeout=30)
    if r.returncode != 0:
        raise Fail("cannot mount a tmpfs on %s: %s" % (mnt, r.stderr.decode()[-200:]))
    try:
        fill(os.path.join(mnt, "filler"))
        trace = oracle_of(ctx, "healthy")[1]
        trainer = start_waiting_trainer(ctx, "healthy")
        comm = read_comm(trainer.pid)
        out = os.path.join(mnt, "events.ndjson")
        daemon = start_daemon(ctx, trainer.pid, extra=["-o", "-", "-o", out])
        expect_broken(ctx, daemon, [out, "No space left"])
        events = parse_stream(daemon, trainer.pid, comm)
        names = [ev["event"] for ev in events]
        if names[0] != "attach" or names[-1] != "detach" or events[-1]["reason"] != "error":
            raise Fail("stdout: %s, want attach ... detach (reason error)" % ", ".join(names))
        sinks = {s["name"]: s for s in last_stats(events)["sinks"]}
        if sinks.get(out, {}).get("error") != "No space left on device":
            raise Fail("stats.sinks: %s" % json.dumps(list(sinks.values())))
        target_untouched(trainer)
        trainer.send(b"go\n")
        finish_trainer(ctx, trainer, "healthy", trace)
    finally:
        if ctx.current_daemon is not None:
            ctx.current_daemon.kill()
        if subprocess.run(["umount", mnt], capture_output=True, timeout=30).returncode:
            subprocess.run(["umount", "-l", mnt], capture_output=True, timeout=30)
        os.rmdir(mnt)


def fill(path):
    """Write path until the file system is full."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        while True:
            os.write(fd, b"x" * 4096)
    except OSError as e:
        if e.errno != errno.ENOSPC:
            raise
    finally:
        os.close(fd)


def wait_file_event(path, name, timeout):
    """The first line of event name in the file at path (reread until it shows), or None."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            for line in read_lines(path):
                if is_event(name)(line):
                    return line
        except FileNotFoundError:
            pass
        time.sleep(0.2)
    return None


def case_output_sighup(ctx):
    """logrotate: the output file is renamed and the daemon sent SIGHUP; it keeps running and
    new lines go to a new file at the path (0640). The two files hold the whole stream: seq
    continues from one to the other, attach in the first, detach (signal) at the end of the
    second, nothing on stderr."""
    steps = ("--steps", "100")
    trace = run_trainer(ctx, "healthy", *steps)["trace"]
    trainer = start_waiting_trainer(ctx, "healthy", *steps, "--pace", "0.1")
    comm = read_comm(trainer.pid)
    out = os.path.join(tempfile.mkdtemp(prefix="rotate-", dir=ctx.tmp), "events.ndjson")
    daemon = start_daemon(ctx, trainer.pid, extra=["-o", out, "--stats-interval", "1"])
    if wait_file_event(out, "attach", ATTACH_TIMEOUT) is None:
        raise Fail("no attach in %s" % out)
    trainer.send(b"go\n")
    if wait_file_event(out, "stats", 30) is None:
        raise Fail("no stats line in %s" % out)
    os.rename(out, out + ".1")
    daemon.p.send_signal(signal.SIGHUP)
    if wait_file_event(out, "stats", 30) is None:
        raise Fail("no new file at %s after SIGHUP (daemon %s)" %
                   (out, "running" if daemon.running() else
                    "exited %s" % daemon.p.returncode))
    daemon.p.send_signal(signal.SIGTERM)
    wait_daemon_exit(daemon)
    check_created(out)
    old, new = read_lines(out + ".1"), read_lines(out)
    daemon.out[:] = old + new
    events = parse_stream(daemon, trainer.pid, comm)  # seq consecutive across the two files
    check_envelope(events, "signal")
    if not new or events[len(old)]["event"] != "stats":
        raise Fail("the new file starts with %r" % (new[:1],))
    if daemon.stderr_lines():
        raise Fail("stderr: %r" % daemon.stderr_lines())
    ctx.log("%d lines before the rotation, %d after" % (len(old), len(new)))
    finish_trainer(ctx, trainer, "healthy", trace)


CASES = [("trainer_" + n, (lambda n: lambda ctx: case_trainer(ctx, n))(n)) for n in FAULTY]
CASES += [(n, (lambda n: lambda ctx: case_backward(ctx, n))(n)) for n in BACKWARD_NAN + BACKWARD_INF]
CASES += [("grad_explode", case_grad_explode), ("backward_off", case_backward_off)]
CASES += [("sample_" + n, (lambda n: lambda ctx: case_sample(ctx, n))(n)) for n in SAMPLED]
CASES += [("lossmode_" + n, (lambda n: lambda ctx: case_loss_mode(ctx, n))(n)) for n in LOSS_MODE]
CASES += [
    ("noncontig", case_noncontig),
    ("healthy", case_healthy),
    ("error_no_such_pid", case_no_such_pid),
    ("error_not_python", case_not_python),
    ("error_no_torch", case_no_torch),
    ("error_torch_unsupported", case_torch_unsupported),
    ("error_python_unsupported", case_python_unsupported),
    ("error_unprivileged", case_unprivileged),
    ("error_layout_implausible", case_layout_implausible),
    ("error_thread_id", case_thread_id),
    ("error_comm_escapes", case_comm_escapes),
    ("caps_minimal", case_caps_minimal),
    ("error_caps_fewer", case_caps_fewer),
    ("sigterm_while_attached", case_sigterm),
    ("midrun_adam", case_midrun_adam),
    ("midrun_sgd", case_midrun_sgd),
    ("midrun_refold", case_midrun_refold),
    ("capture_standard", case_capture_standard),
    ("capture_custom", case_capture_custom),
    ("capture_children", case_capture_children),
    ("capture_budget", case_capture_budget),
    ("capture_none", case_capture_none),
    ("live_attach_tight", lambda ctx: case_in_flight(ctx, "inflight", "adam", 3, 0)),
    ("live_attach_sgd", lambda ctx: case_in_flight(ctx, "inflight", "sgd", 3, 0)),
    ("live_attach_paced", lambda ctx: case_in_flight(ctx, "inflight", "adam", 3, 0.005)),
    ("deep_nest_20", lambda ctx: case_deep_nest(ctx, 20)),
    ("deep_nest_40", lambda ctx: case_deep_nest(ctx, 40)),
    ("root_replaced", case_root_replaced),
    ("target_exec", case_exec),
    ("output_symlinks", case_output_symlinks),
    ("output_special_files", case_output_special_files),
    ("output_stalled_collector", case_output_stalled_collector),
    ("output_closed_pipe", case_output_closed_pipe),
    ("output_full_disk", case_output_full_disk),
    ("output_sighup", case_output_sighup),
    ("repro_names", case_repro_names),
]
# The output cases test the daemon's side only: the host's trainer is enough.
HOST_ONLY = {name for name, _ in CASES if name.startswith("output_")}
# Run again with the trainer inside the --trixie-root root: every case but error_no_such_pid,
# which has no target.
TRIXIE_CASES = [name for name, _ in CASES
                if name != "error_no_such_pid" and name not in HOST_ONLY]
# And in the container made from that root: the trainer cases, healthy, one sampled case, and
# the SIGTERM case.
CONTAINER_CASES = ["trainer_" + n for n in FAULTY] + ["sample_nan_input", "healthy",
                                                       "sigterm_while_attached",
                                                       "backward_sqrt_zero", "midrun_adam",
                                                       "midrun_sgd", "live_attach_tight",
                                                       "live_attach_paced"]


def trixie_env(ctx, root):
    """The trixie environment, with the trainers copied in; Fail when the root is not usable."""
    root = os.path.abspath(root)
    stamp = os.path.join(root, TRIXIE_STAMP)
    if not os.path.isfile(stamp):
        raise Fail("%s is not built (no %s): run tools/make-trixie-root %s (or make "
                   "trixie-root)" % (root, TRIXIE_STAMP, root))
    parent = os.path.join(root, os.path.dirname(TRIXIE_TRAINERS).lstrip("/"))
    dest = os.path.join(root, TRIXIE_TRAINERS.lstrip("/"))
    # Written as root into a tree whose contents we did not make: never through a symlink.
    sub = root
    for part in TRIXIE_TRAINERS.strip("/").split("/"):
        sub = os.path.join(sub, part)
        if os.path.islink(sub):
            raise Fail("%s is a symlink; refusing to copy the trainers through it" % sub)
    try:
        os.makedirs(parent, mode=0o755, exist_ok=True)
        os.chmod(parent, 0o755)
        TRIXIE_COPIES.append(parent)
        if os.path.isdir(dest):
            shutil.rmtree(dest)
        elif os.path.lexists(dest):
            os.unlink(dest)
        os.mkdir(dest, 0o755)
        os.chown(dest, 0, 0)
        os.chmod(dest, 0o755)
        names = sorted(n for n in os.listdir(TRAINERS) if n.endswith(".py"))
        for n in names:
            shutil.copy(os.path.join(TRAINERS, n), os.path.join(dest, n))
    except OSError as e:
        raise Fail("cannot copy the trainers into %s: %s" % (dest, e))
    if not names:
        raise Fail("no trainers in %s" % TRAINERS)
    ctx.log("copied %d trainers into %s" % (len(names), dest))
    return Env("trixie", "[trixie]", TRIXIE_PYTHON, TRIXIE_TRAINERS, root=root,
               torch_table=TRIXIE_TORCH_TABLE)


def container_env(ctx, trixie):
    """The container environment on the trixie root (its trainers already copied in)."""
    missing = [tool for tool in ("unshare", "sh") if shutil.which(tool) is None]
    if missing:
        raise Fail("no %s on PATH" % ", ".join(missing))
    env = Env("container", "[container]", trixie.python, trixie.trainers, root=trixie.root,
              torch_table=trixie.torch_table, container=True)
    env.host_lacks_interpreter = not os.path.lexists(CONTAINER_INTERPRETER)
    ctx.log("container on %s; the host %s %s" % (
        trixie.root, "lacks" if env.host_lacks_interpreter else "has", CONTAINER_INTERPRETER))
    return env


def run_case(ctx, name, fn, env=None):
    start = time.monotonic()
    ctx.current_daemon = None
    ctx.env = env or ctx.host
    name += ctx.env.suffix
    try:
        if not os.access(ctx.daemon, os.X_OK):
            raise Fail("daemon %s is not an executable file (build it first)" % ctx.daemon)
        fn(ctx)
    except Fail as e:
        print("FAIL %s: %s" % (name, e), flush=True)
        if ctx.current_daemon is not None:
            ctx.current_daemon.kill()
            err = ctx.current_daemon.stderr_lines()
            print("  daemon stderr (last %d of %d lines):" % (min(len(err), 20), len(err)))
            print(tail(err, 20) if err else "    (empty)", flush=True)
        return False
    finally:
        kill_all()
        del CHILDREN[:]
        left = remove_mnt_dirs()
        if left:  # after a FAIL line too, so a leak is never silent
            print("FAIL %s: container mount point left behind: %s" % (name, ", ".join(left)),
                  flush=True)
    if left:
        return False
    print("PASS %s (%.1fs)" % (name, time.monotonic() - start), flush=True)
    return True


def parse_args():
    ap = argparse.ArgumentParser(description="nanwatch integration tests")
    ap.add_argument("--daemon", required=True, help="path to nanwatchd")
    ap.add_argument("--python", default="/usr/bin/python3",
                    help="interpreter with torch for the trainers (default %(default)s)")
    ap.add_argument("--layouts", default=os.path.join(REPO, "config", "layouts"),
                    help="layout tables passed to the daemon (default %(default)s)")
    ap.add_argument("--trixie-root", metavar="DIR",
                    help="also run the trainer cases with the trainer inside this root "
                         "(made by tools/make-trixie-root), suffixed [trixie], and in a "
                         "mount-namespace container on it, suffixed [container]")
    ap.add_argument("-k", dest="select", default="", help="run the cases whose name has this")
    ap.add_argument("-v", dest="verbose", action="store_true", help="say what each case does")
    return ap.parse_args()


def main():
    args = parse_args()
    ctx = Context(args)
    passed = failed = 0

    def on_term(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)
    try:
        trixie = container = None
        wanted = [(name, fn) for name, fn in CASES if name in TRIXIE_CASES
                  and args.select in name + "[trixie]"]
        in_container = [(name, fn) for name, fn in CASES if name in CONTAINER_CASES
                        and args.select in name + "[container]"]
        if args.trixie_root is not None:
            try:
                trixie = trixie_env(ctx, args.trixie_root)
            except Fail as e:
                print("FAIL trixie_root: %s" % e, flush=True)
                failed += 1
        if trixie is not None and in_container:
            try:
                container = container_env(ctx, trixie)
            except Fail as e:
                print("FAIL container_env: %s" % e, flush=True)
                failed += 1
        for name, fn in CASES:
            if args.select in name:
                if run_case(ctx, name, fn):
                    passed += 1
                else:
                    failed += 1
        for name, fn in wanted if trixie is not None else []:
            if run_case(ctx, name, fn, trixie):
                passed += 1
            else:
                failed += 1
        for name, fn in in_container if container is not None else []:
            if run_case(ctx, name, fn, container):
                passed += 1
            else:
                failed += 1
    except KeyboardInterrupt:
        print("interrupted", flush=True)
        failed += 1
    finally:
        kill_all()
        left = remove_mnt_dirs()
        if left:
            print("container mount point left behind: %s" % ", ".join(left), flush=True)
        shutil.rmtree(ctx.tmp, ignore_errors=True)
        for path in CAPTURE_DIRS + TRIXIE_COPIES:
            shutil.rmtree(path, ignore_errors=True)
    if not passed + failed:
        print("no case name contains %r" % args.select)
    print("integration: %d passed, %d failed" % (passed, failed), flush=True)
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
