"""The process harness of the integration tests (tests/integration/) and the benchmark
(bench/bench.py): children in their own sessions whose stdout and stderr lines threads collect,
trainers (tests/trainers/) and their oracle runs in an environment (the host, a chroot, a
mount-namespace container), the daemon started and waited for, every child killed at the end.

Standard library only; imported from tools/ by both (no installation).
"""
import json
import os
import signal
import subprocess
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAINERS = os.path.join(REPO, "tests", "trainers")
ATTACH_TIMEOUT = 60
DETACH_TIMEOUT = 30
ERROR_TIMEOUT = 30
TRAINER_TIMEOUT = 180
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
CHILDREN = []  # every Proc started, killed by kill_children()
MNT_DIRS = []  # every container mount point made, removed (rmdir) once its process is gone


class Fail(Exception):
    """A check or a step of the harness failed; the message says what and why."""


class Proc:
    """A child in its own session; threads read its stdout and stderr into lists of lines."""

    def __init__(self, argv, stdin=False, stdout=None, term_timeout=None):
        """stdout: a file descriptor for the child's stdout instead of a pipe read here.
        term_timeout: kill_children() sends SIGTERM first and waits this long (a daemon that
        should detach cleanly) before the SIGKILL."""
        self.argv = argv
        self.term_timeout = term_timeout
        self.taken = 0  # stdout lines handed out by line()
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

    def line(self, timeout):
        """The next stdout line not handed out yet (text), or None at EOF; Fail after timeout
        seconds without one."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while self.taken >= len(self.out):
                left = deadline - time.monotonic()
                if self.open == 0 and self.taken >= len(self.out):
                    return None
                if left <= 0:
                    raise Fail("%s: no answer in %d s" % (os.path.basename(self.argv[0]),
                                                          timeout))
                self.cond.wait(min(left, 0.2))
            self.taken += 1
            return self.out[self.taken - 1].decode("utf-8", "replace")

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
        self.drain(5)
        return rc

    def drain(self, timeout):
        """Wait up to timeout seconds for the reading threads to reach EOF (the child gone)."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while self.open and time.monotonic() < deadline:
                self.cond.wait(0.2)

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
        self.drain(2)

    def stdout_text(self):
        return b"".join(self.out).decode("utf-8", "replace")

    def stderr_lines(self):
        return b"".join(self.err).decode("utf-8", "replace").splitlines()

    def stderr_tail(self, n=5):
        return "\n".join(self.stderr_lines()[-n:]).strip()


def kill_children():
    """End every child started: SIGTERM first where asked for (term_timeout), then SIGKILL to
    its session; the list is emptied."""
    for proc in CHILDREN:
        if proc.term_timeout is not None and proc.running():
            try:
                os.kill(proc.pid, signal.SIGTERM)
                proc.p.wait(proc.term_timeout)
            except (OSError, subprocess.TimeoutExpired):
                pass
        proc.kill()
    del CHILDREN[:]


def remove_mnt_dirs():
    """rmdir every container mount point (call after kill_children); the ones left, with why."""
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

    def __init__(self, name, python, trainers, root=None, torch_table=None, container=False):
        self.name = name  # host, trixie, container: the test ids name it
        self.root = root  # None: the host
        self.python = python  # as seen inside the root
        self.trainers = trainers  # as seen inside the root
        self.torch_table = torch_table  # the layout table of its torch; None: any torch-*
        self.container = container
        self.run_as = None  # a uid: trainers run as that user, without privileges (setpriv)

    def interpreter_path(self):
        """The file python names (a link: python3 -> python3.14), as the trainers see it."""
        link = os.readlink(os.path.join(self.root or "/", self.python.lstrip("/")))
        return os.path.join(os.path.dirname(self.python), os.path.basename(link))

    def argv(self, *args):
        """A command that runs python with args in this environment."""
        if self.container:
            mnt = tempfile.mkdtemp(prefix="nanwatch-container-")
            MNT_DIRS.append(mnt)
            return ["unshare", "--mount", "sh", "-c", CONTAINER_SCRIPT, "sh", self.root, mnt,
                    self.python, *args]
        prefix = ["chroot", self.root] if self.root is not None else []
        if self.run_as is not None and self.root is not None:
            # chroot first (it needs root), then the user alone, no other group
            prefix = ["chroot", "--userspec=%d:%d" % (self.run_as, self.run_as),
                      "--groups=%d" % self.run_as, self.root]
        elif self.run_as is not None:
            prefix = ["setpriv", "--reuid=%d" % self.run_as, "--regid=%d" % self.run_as,
                      "--clear-groups"]
        return prefix + [self.python, *args]


class Context:
    """What the cases share: the daemon and layout tables under test, a scratch directory, the
    trainer runs done so far (oracles and traces, per environment) and the environment of the
    case running now."""

    def __init__(self, daemon, layouts, python="/usr/bin/python3"):
        self.daemon = os.path.abspath(daemon)
        self.python = python
        self.layouts = os.path.abspath(layouts)
        self.tmp = tempfile.mkdtemp(prefix="nanwatch-it-")
        self.traces = {}
        self.streams = {}  # (env, trainer, mode) -> events of a watch() that passed its checks
        self.current_daemon = None  # for the stderr tail on failure
        self.host = Env("host", python, TRAINERS)
        self.env = self.host  # the environment of the case running now

    def log(self, msg):
        """What the case saw: shown with a failing case's output (pytest -s: always)."""
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


def start_waiting_trainer_as(ctx, uid, name, *extra):
    """start_waiting_trainer with the trainer run as uid, without privileges."""
    ctx.env.run_as = uid
    try:
        return start_waiting_trainer(ctx, name, *extra)
    finally:
        ctx.env.run_as = None


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
