"""Targets and settings the daemon must refuse.

The bad-input cases: each must fail with one line on stderr and leave its target alone.
"""
import os
import re
import shutil
import subprocess
import tempfile
import time

from nwharness import (REPO, Fail, Proc, finish_trainer, oracle_of, read_comm, start_daemon,
                       start_waiting_trainer, tail, wait_attach, wait_daemon_exit)
from nwchecks import (HOST_AND_ROOTS, HOST_ONLY, NOBODY, check_anomalies, environments,
                      expect_refusal, target_untouched, watch)


@environments(*HOST_ONLY)
def test_error_no_such_pid(ctx):
    probe = subprocess.Popen(["true"])
    probe.wait()
    pid = probe.pid
    if os.path.exists("/proc/%d" % pid):
        raise Fail("could not find a free pid")
    expect_refusal(ctx, start_daemon(ctx, pid), [str(pid), "no such"])


@environments(*HOST_AND_ROOTS)
def test_error_not_python(ctx):
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


@environments(*HOST_AND_ROOTS)
def test_error_no_torch(ctx):
    target = Proc(ctx.env.argv("-c",
                               "import time; print('READY', flush=True); time.sleep(60)"))
    if target.wait_out(lambda l: l.startswith(b"READY"), 30) is None:
        raise Fail("python -c did not start")
    expect_refusal(ctx, start_daemon(ctx, target.pid), ["torch"])
    target_untouched(target)


@environments(*HOST_AND_ROOTS)
def test_error_comm_escapes(ctx):
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


def torch_parent(pid):
    """The directory holding the torch package pid runs, as it sees it (from its maps)."""
    root = os.readlink("/proc/%d/root" % pid)
    with open("/proc/%d/maps" % pid) as f:
        for line in f:
            path = line.split(None, 5)[-1].strip()
            if "/torch/_C." in path:
                path = path[len(root):] if root != "/" and path.startswith(root + "/") else path
                return os.path.dirname(os.path.dirname(path))
    raise Fail("pid %d maps no torch/_C module" % pid)


def refuse_with_layouts(ctx, layouts, words, command=False):
    """Daemon refuses a healthy trainer; the trainer then runs as it would alone. command: the
    refusal ends with the command that makes the missing table."""
    trace = oracle_of(ctx, "healthy")[1]
    trainer = start_waiting_trainer(ctx, "healthy")
    daemon = start_daemon(ctx, trainer.pid, layouts=layouts)
    expect_refusal(ctx, daemon, words)
    if command:
        site = torch_parent(trainer.pid)
        if ctx.env.root is None:
            exe = os.path.realpath("/proc/%d/exe" % trainer.pid)
            want = "make it with: sudo -u '#0' %s %s --python --torch --import-from %s -o %s" % (
                exe, os.path.realpath(os.path.join(REPO, "tools", "nanwatch-layout")), site,
                layouts)
        else:
            want = "make it with: as uid 0 inside its root (/proc/%d/root), with %s: " \
                "nanwatch-layout --python --torch --import-from %s -o DIR, then copy DIR's " \
                "tables into %s" % (trainer.pid, ctx.env.interpreter_path(), site, layouts)
        got = daemon.stderr_lines()[0]
        if not got.endswith(want):
            raise Fail("refusal %r does not end with %r" % (got, want))
    target_untouched(trainer)
    trainer.send(b"go\n")
    finish_trainer(ctx, trainer, "healthy", trace)


@environments(*HOST_AND_ROOTS)
def test_error_torch_unsupported(ctx):
    py = "python-%s.yaml" % interpreter_version(ctx)
    layouts = layouts_dir(ctx, py, lambda n: n == py)
    refuse_with_layouts(ctx, layouts, ["torch"], command=True)


@environments(*HOST_AND_ROOTS)
def test_error_python_unsupported(ctx):
    table = ctx.env.torch_table
    if table is None:
        layouts = layouts_dir(ctx, "torch", lambda n: not n.startswith("python-"))
    else:
        layouts = layouts_dir(ctx, table, lambda n: n == table)
    refuse_with_layouts(ctx, layouts, ["python"], command=True)


@environments("trixie", "forky", "container")
def test_error_free_threaded(ctx):
    """A process whose _Py_DebugOffsets say free-threaded (3.13t, 3.14t): refused by name,
    before anything else of it is read, and left running."""
    trainer = start_waiting_trainer(ctx, "free_threaded")
    series = os.path.basename(ctx.env.interpreter_path())[len("python"):]
    daemon = start_daemon(ctx, trainer.pid)
    expect_refusal(ctx, daemon, ["free-threaded"])
    got = daemon.stderr_lines()[0]
    want = ["unsupported Python %s." % series, "in pid %d" % trainer.pid,
            "a free-threaded build (_Py_DebugOffsets.free_threaded)",
            "run it under the default python%s" % series]
    missing = [w for w in want if w not in got]
    if missing:
        raise Fail("refusal %r lacks %s" % (got, missing))
    if ctx.env.root and ctx.env.root.rstrip("/") + "/" in got:
        raise Fail("refusal %r names the interpreter by the host's path, not as the target "
                   "sees it" % got)
    target_untouched(trainer)
    trainer.kill()


@environments(*HOST_AND_ROOTS)
def test_error_layout_implausible(ctx):
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


@environments(*HOST_AND_ROOTS)
def test_error_unprivileged(ctx):
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


# The least the whole watch needs as another user than the target's (docs/service.md, Permissions).
MINIMAL_CAPS = ["sys_admin", "sys_ptrace"]


@environments(*HOST_AND_ROOTS)
def test_caps_minimal(ctx):
    """The daemon as uid NOBODY with exactly MINIMAL_CAPS watches a root trainer and finds
    the oracle's first anomaly."""
    unprivileged_can_run(ctx)
    oracle, trace = oracle_of(ctx, "nan_input")
    events = watch(ctx, "nan_input", trace, user=NOBODY, caps=MINIMAL_CAPS)
    check_anomalies(events, oracle, events[0]["pid"])


@environments(*HOST_AND_ROOTS)
def test_error_caps_fewer(ctx):
    """One capability fewer than MINIMAL_CAPS: each refused in one line naming the missing
    capability; the trainer is untouched. CAP_BPF and CAP_PERFMON in place of CAP_SYS_ADMIN
    (since Linux 6.16 they create no perf uprobe) watch: the daemon's uprobes are uprobe_multi
    links where the kernel has them, which this kernel creates for them; the trainer trains
    as it does alone, and the daemon ends with it."""
    unprivileged_can_run(ctx)
    trace = oracle_of(ctx, "healthy")[1]
    trainer = start_waiting_trainer(ctx, "healthy")
    sets = [([c for c in MINIMAL_CAPS if c != drop], "CAP_" + drop.upper())
            for drop in MINIMAL_CAPS]
    for caps, missing in sets:
        daemon = start_daemon(ctx, trainer.pid, user=NOBODY, caps=caps)
        expect_refusal(ctx, daemon, [missing])
        target_untouched(trainer)
    daemon = start_daemon(ctx, trainer.pid, user=NOBODY, caps=["bpf", "perfmon", "sys_ptrace"])
    try:
        wait_attach(daemon)
        trainer.send(b"go\n")
        finish_trainer(ctx, trainer, "healthy", trace)
        wait_daemon_exit(daemon)
    finally:
        daemon.kill()


# A process with torch loaded and a second thread; prints READY, its pid and the thread's id.
THREADED_TARGET = """import os, threading, time
import torch
t = threading.Thread(target=time.sleep, args=(120,), daemon=True)
t.start()
print("READY", os.getpid(), t.native_id, flush=True)
time.sleep(120)
"""


@environments(*HOST_AND_ROOTS)
def test_error_thread_id(ctx):
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
