"""The systemd unit (config/nanwatchd.service) and what `make install` puts in place.

The unit is never started here: PID 1 on the test machine need not be systemd (a container's
init), and a test must not touch the host's services. What can be checked without it is checked
with the tools systemd itself uses, and the sandbox is rebuilt from the unit's own lines:

service_unit_verify: `make install DESTDIR=TMP` (the build --daemon is in, not rebuilt), then
`systemd-analyze verify` on a copy of the installed unit whose nanwatchd paths are rewritten to
TMP's: verify insists that ExecStart's binary exists, and `--root=TMP` (systemd 252) would need
a whole system inside TMP (sysinit.target, /bin/kill). It must exit 0 with nothing on stderr (a
misspelt key is only a warning there). The installed unit runs PREFIX's nanwatchd with
--config /etc/nanwatch/nanwatch.yaml; the example configuration is installed, and a second
install leaves an edited one alone. The `systemd-analyze security --offline=yes` exposure
score is printed for information, not asserted.

service_unit_sandbox: the daemon as root inside the unit's capability bounding set with
no_new_privs (`setpriv --bounding-set=-all,+CAP... --no-new-privs`, what CapabilityBoundingSet=
and NoNewPrivileges= do) watches frozen_norm run as uid 65534 with --capture-dir, finds the
oracle's first anomaly and captures it, handed to that uid (CAP_CHOWN); run so again under
`strace -f -c`, every system call it made is allowed by the unit's SystemCallFilter (expanded
with `systemd-analyze syscall-filter`), so the filter cannot break a watch. With CAP_SYS_ADMIN or CAP_SYS_PTRACE taken out of the set the daemon refuses,
naming it; without CAP_CHOWN the capture fails (EPERM: the capture part fails); without
CAP_DAC_READ_SEARCH it cannot watch a trainer whose interpreter lies in a 0700 directory of
its user's (a copy of the interpreter there), which it watches with the whole set. (The watch is the single-target `--pid` one.)

service_unit_service_calls: the daemon as the unit runs it, `--config` (service mode: the
process list's BPF iterator, worker threads, a thread per session, the metrics endpoint),
inside the bounding set with no_new_privs and under `strace -f -c`, finds a trainer that a
rule matches, attaches, writes its anomaly, links to a second trainer's GPU library (the real
library over the emulated driver: the socket taken with pidfd_getfd, its peer checked), and
stops on SIGTERM: every system call it made is allowed by the unit's SystemCallFilter.

service_unit_learn: --learn-layouts (no table in the layouts directory) inside the unit's
bounding set: learning fails in one line (its run cannot be set up: chroot fails with EPERM,
CAP_SYS_CHROOT is not in the set)
and the daemon exits 1; inside the set with the learning drop-in's capabilities added
(config/nanwatchd-learn.conf), under `strace -f -c`, the tables are learned for a trainer of uid
65534 and the daemon attaches (also as `make install` puts it, with the drop-in beside it in
share/nanwatch), and every system call of the daemon and of the learning run
(nanwatch-layout, its Python and torch: the unit's filter applies to them too) is allowed by the
unit's SystemCallFilter with the drop-in's. RestrictNamespaces= and MemoryDenyWriteExecute= are
not reproduced here.
"""
import os
import shutil
import signal
import subprocess
import tempfile
import time

from nwharness import (ERROR_TIMEOUT, TRAINERS, Fail, Proc, finish_trainer, is_event, oracle_of,
                       read_comm, start_waiting_trainer, start_waiting_trainer_as, tail,
                       trainer_argv, wait_attach, wait_daemon_exit)
from nwchecks import (HOST_ONLY, NOBODY, check_anomalies, check_envelope, environments,
                      expect_refusal, free_port, parse_stream)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
UNIT = os.path.join(REPO, "config", "nanwatchd.service")
LEARN_DROPIN = os.path.join(REPO, "config", "nanwatchd-learn.conf")
PREFIX = "/usr/local"  # make install's default, which the unit in the tree names
CONFIG = "/etc/nanwatch/nanwatch.yaml"
CAPTURED = "frozen_norm"  # a first anomaly that is an origin: captured (test_capture.py)


def unit_settings(path, section="Service"):
    """key -> every value given in [section] (repeatable keys such as SystemCallFilter=)."""
    settings, current = {}, None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith(("#", ";")):
                continue
            if line.startswith("["):
                current = line.strip("[]")
            elif current == section:
                key, _, value = line.partition("=")
                settings.setdefault(key.strip(), []).append(value.strip())
    return settings


def make_install(ctx, destdir):
    r = subprocess.run(["make", "-C", REPO, "--no-print-directory", "-o", "all", "install",
                        "DESTDIR=" + destdir, "OUTPUT=" + os.path.dirname(ctx.daemon)],
                       capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise Fail("make install DESTDIR=%s exited %d:\n%s" % (destdir, r.returncode,
                                                              tail(r.stderr.splitlines())))


@environments(*HOST_ONLY)
def test_service_unit_verify(ctx):
    root = tempfile.mkdtemp(prefix="install-", dir=ctx.tmp)
    make_install(ctx, root)
    installed = os.path.join(root, PREFIX.lstrip("/"), "lib/systemd/system/nanwatchd.service")
    with open(installed) as f:
        text = f.read()
    start = unit_settings(installed).get("ExecStart", [])
    if start != ["%s/sbin/nanwatchd --config %s" % (PREFIX, CONFIG)]:
        raise Fail("installed unit's ExecStart is %r" % start)
    config = os.path.join(root, CONFIG.lstrip("/"))
    if not os.path.isfile(config):
        raise Fail("make install did not install %s" % CONFIG)
    check = os.path.join(tempfile.mkdtemp(prefix="verify-", dir=ctx.tmp), "nanwatchd.service")
    with open(check, "w") as f:
        f.write(text.replace(PREFIX + "/sbin/", os.path.join(root, PREFIX.lstrip("/"), "sbin/")))
    r = subprocess.run(["systemd-analyze", "verify", "--man=no", check], capture_output=True,
                       text=True, timeout=60)
    ctx.log("systemd-analyze verify: exit %d" % r.returncode)
    if r.returncode != 0 or r.stderr.strip() or r.stdout.strip():
        raise Fail("systemd-analyze verify %s exited %d:\n%s%s" % (check, r.returncode, r.stdout,
                                                                   r.stderr))
    r = subprocess.run(["systemd-analyze", "security", "--offline=yes", check],
                       capture_output=True, text=True, timeout=60)
    score = [line for line in r.stdout.splitlines() if "Overall exposure level" in line]
    ctx.log("systemd-analyze security (information): %s" % (score[-1].strip() if score else
                                                            "no score (exit %d)" % r.returncode))
    with open(config, "a") as f:
        f.write("# edited by the admin\n")
    make_install(ctx, root)
    with open(config) as f:
        if not f.read().endswith("# edited by the admin\n"):
            raise Fail("a second make install overwrote an existing %s" % CONFIG)


def bounding_caps():
    """The unit's CapabilityBoundingSet= as setpriv names them (sys_admin, ...)."""
    caps = " ".join(unit_settings(UNIT).get("CapabilityBoundingSet", [])).split()
    if not caps or any(c.startswith("~") or not c.startswith("CAP_") for c in caps):
        raise Fail("the unit's CapabilityBoundingSet is not a plain list: %r" % caps)
    return [c[4:].lower() for c in caps]


def sandboxed(caps, argv):
    return ["setpriv", "--bounding-set=" + ",".join(["-all"] + ["+" + c for c in caps]),
            "--inh-caps=-all", "--no-new-privs"] + argv


def expand_filter(names, seen=None):
    """Every system call the SystemCallFilter= names allow (groups expanded)."""
    seen = set() if seen is None else seen
    calls = set()
    for name in names:
        if name in seen:
            continue
        seen.add(name)
        if not name.startswith("@"):
            calls.add(name)
            continue
        r = subprocess.run(["systemd-analyze", "syscall-filter", name], capture_output=True,
                           text=True, timeout=60)
        if r.returncode != 0:
            raise Fail("systemd-analyze syscall-filter %s exited %d" % (name, r.returncode))
        members = [w.strip() for w in r.stdout.splitlines()[1:]]
        calls |= expand_filter([w for w in members if w and not w.startswith("#")], seen)
    return calls


def strace_calls(path):
    """The system call names of a `strace -c` summary."""
    calls, rows = set(), False
    with open(path) as f:
        for line in f:
            if line.startswith("------"):
                rows = not rows
                continue
            if rows and line.split():
                calls.add(line.split()[-1])
    return calls


def sandboxed_watch(ctx, caps, name, trace, wrap=()):
    """name run as uid NOBODY (--linger 1: the capture reads the live target) under the daemon
    inside the bounding set caps with no_new_privs, capturing into a fresh directory, the
    daemon's command line after wrap; the parsed stream, the trainer's pid and the directory."""
    argv = trainer_argv(ctx, name, "--wait", "--linger", "1")
    trainer = Proc(["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY,
                    "--clear-groups"] + argv, stdin=True)
    line = trainer.wait_out(lambda l: l.startswith(b"READY "), 60)
    if line is None:
        raise Fail("%s --wait as uid %d printed no READY line:\n%s" %
                   (name, NOBODY, tail(trainer.stderr_lines())))
    pid = int(line.split()[1])
    comm = read_comm(pid)
    os.chmod(ctx.tmp, 0o711)
    captures = tempfile.mkdtemp(prefix="captures-", dir=ctx.tmp)
    daemon = Proc(sandboxed(caps, list(wrap) + [
        ctx.daemon, "--pid", str(pid), "--layouts", ctx.layouts, "--capture-dir", captures]))
    ctx.current_daemon = daemon
    wait_attach(daemon)
    trainer.send(b"go\n")
    finish_trainer(ctx, trainer, name, trace)
    wait_daemon_exit(daemon)
    events = parse_stream(daemon, pid, comm)
    check_envelope(events, "target_exit")
    return events, pid, captures


def private_interpreter(ctx, caps):
    """A trainer whose interpreter only its user may reach (a copy in a 0700 directory of uid
    NOBODY's, as a virtualenv in a private home): watched inside caps, not without
    CAP_DAC_READ_SEARCH (the daemon as root then cannot open the interpreter to probe it)."""
    if "dac_read_search" not in caps:
        raise Fail("the unit's CapabilityBoundingSet lacks CAP_DAC_READ_SEARCH")
    os.chmod(ctx.tmp, 0o711)
    home = tempfile.mkdtemp(prefix="private-", dir=ctx.tmp)
    python = os.path.join(home, "python3")
    shutil.copy(os.path.realpath(ctx.python), python)
    os.chown(python, NOBODY, NOBODY)
    os.chown(home, NOBODY, NOBODY)
    os.chmod(home, 0o700)
    trainer = Proc(["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups",
                    python, os.path.join(TRAINERS, "healthy.py"), "--wait"], stdin=True)
    if trainer.wait_out(lambda l: l.startswith(b"READY "), 60) is None:
        raise Fail("healthy.py with %s printed no READY line:\n%s" %
                   (python, tail(trainer.stderr_lines())))
    argv = [ctx.daemon, "--pid", str(trainer.pid), "--layouts", ctx.layouts]
    fewer = [c for c in caps if c != "dac_read_search"]
    ctx.log("interpreter in a 0700 directory; bounding set %s" % ",".join(fewer))
    daemon = Proc(sandboxed(fewer, argv))
    rc = daemon.wait(ERROR_TIMEOUT)
    if rc in (None, 0) or any(is_event("attach")(line) for line in daemon.out):
        daemon.kill()
        raise Fail("without CAP_DAC_READ_SEARCH the daemon attached to a process whose "
                   "interpreter it cannot read (exit %s): the test's premise is wrong" % rc)
    said = " ".join(daemon.stderr_lines())
    ctx.log("exit %d: %s" % (rc, said))
    if "permission denied" not in said or "CAP_DAC_READ_SEARCH" not in said:
        raise Fail("without CAP_DAC_READ_SEARCH the refusal does not name the cause: %r" % said)
    ctx.log("bounding set %s" % ",".join(caps))
    daemon = Proc(sandboxed(caps, argv))
    ctx.current_daemon = daemon
    wait_attach(daemon)
    daemon.p.send_signal(signal.SIGTERM)
    wait_daemon_exit(daemon)
    trainer.kill()


@environments(*HOST_ONLY)
def test_service_unit_sandbox(ctx):
    caps = bounding_caps()
    filters = " ".join(unit_settings(UNIT).get("SystemCallFilter", [])).split()
    if not filters or any(f.startswith("~") for f in filters):
        raise Fail("the unit's SystemCallFilter is not an allow list: %r" % filters)
    allowed = expand_filter(filters)
    trainer = start_waiting_trainer(ctx, "healthy")
    argv = [ctx.daemon, "--pid", str(trainer.pid), "--layouts", ctx.layouts]
    for drop in ("sys_admin", "sys_ptrace"):
        if drop not in caps:
            raise Fail("the unit's CapabilityBoundingSet lacks CAP_%s" % drop.upper())
        fewer = [c for c in caps if c != drop]
        ctx.log("bounding set %s" % ",".join(fewer))
        expect_refusal(ctx, Proc(sandboxed(fewer, argv)), ["CAP_" + drop.upper()])
    trainer.kill()
    ctx.log("bounding set %s, no_new_privs; %s as uid %d" % (",".join(caps), CAPTURED, NOBODY))
    oracle, trace = oracle_of(ctx, CAPTURED)
    events, pid, captures = sandboxed_watch(ctx, caps, CAPTURED, trace)
    check_anomalies(events, oracle, pid)
    made = [os.path.join(captures, d) for d in os.listdir(captures)]
    owners = [(os.lstat(d).st_uid, os.lstat(d).st_gid) for d in made]
    if len(made) != 1 or owners != [(NOBODY, NOBODY)]:
        raise Fail("captures %s owned by %s: want one, handed to uid %d" % (made, owners, NOBODY))
    private_interpreter(ctx, caps)
    # again under strace, which slows the daemon enough that a name read from the target
    # can come too late: here only the system calls are judged
    ctx.log("the same under strace -f -c")
    summary = os.path.join(tempfile.mkdtemp(prefix="strace-", dir=ctx.tmp), "calls")
    sandboxed_watch(ctx, caps, CAPTURED, trace, ["strace", "-f", "-c", "-o", summary])
    used = strace_calls(summary)
    for call in ("bpf", "process_vm_readv"):
        if call not in used:
            raise Fail("strace saw no %s call: not the daemon's summary? %s" % (call, sorted(used)))
    no_perf_uprobes(used)
    outside = sorted(used - allowed)
    ctx.log("%d system calls used, all in SystemCallFilter=%s" % (len(used), " ".join(filters))
            if not outside else "outside the filter: %s" % ", ".join(outside))
    if outside:
        raise Fail("the daemon calls %s, which SystemCallFilter=%s refuses (EPERM)" %
                   (", ".join(outside), " ".join(filters)))



def no_perf_uprobes(used):
    """The daemon's uprobes are uprobe_multi links on this kernel (6.6 on): no perf_event_open
    (a perf uprobe's removal would wait holding the kernel's trace event lock; the filter
    keeps the call for kernels without links)."""
    if "perf_event_open" in used:
        raise Fail("the daemon called perf_event_open: a perf uprobe where the kernel has "
                   "uprobe_multi links")


def gpu_trainer(ctx, token):
    """gpu_emu.py with the real GPU library over the emulated driver (its link is made with
    pidfd_getfd and SO_PEERPIDFD); None without a CUDA toolkit's build of the library."""
    here = os.path.join(REPO, "build", "tests")
    lib = os.path.join(os.path.dirname(ctx.daemon), "libnanwatch_cupti.so")
    if not os.path.exists(lib):
        return None
    env = ["NW_CALLS_TEST=" + token, "NANWATCH_CUDA_LIB=" + os.path.join(here, "libnwemu_cuda.so"),
           "NANWATCH_CUPTI_LIB=" + os.path.join(here, "libnwmock_cupti.so"),
           "CUDA_INJECTION64_PATH=" + lib]
    return Proc(["env"] + env + trainer_argv(ctx, "gpu_emu", "--live", "--pace", "0.05"),
                stdin=True)


def wait_text(path, text, daemon, timeout, what):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path) or text not in open(path).read():
        if time.monotonic() > deadline or not daemon.running():
            lines = open(path).read().splitlines() if os.path.exists(path) else []
            raise Fail("no %s under strace in service mode:\n%s\nevents: %s" % (
                what, daemon.stderr_tail(), sorted({line[:120] for line in lines
                                                     if '"stats"' not in line})))
        time.sleep(0.2)


@environments(*HOST_ONLY)
def test_service_unit_service_calls(ctx):
    caps = bounding_caps()
    filters = " ".join(unit_settings(UNIT).get("SystemCallFilter", [])).split()
    allowed = expand_filter(filters)
    tmp = tempfile.mkdtemp(prefix="service-calls-", dir=ctx.tmp)
    token = "calls-%d" % os.getpid()
    events = os.path.join(tmp, "events.ndjson")
    config = os.path.join(tmp, "nanwatch.yaml")
    with open(config, "w") as f:
        f.write("watch:\n  - name: t\n    match: {env: {NW_CALLS_TEST: '^%s$'}}\n" % token)
        f.write("output:\n  - file: %s\nlayouts: %s\nmetrics:\n  listen: 127.0.0.1:%d\n"
                "stats_interval: 1\n" % (events, ctx.layouts, free_port()))
    summary = os.path.join(tmp, "calls")
    trainer = gpu_trainer(ctx, token)
    gpu = trainer is not None
    # the test switch makes every session take CPU tensors for GPU ones: the GPU trainer alone
    switch = ["env", "NANWATCH_TEST_GPU_DEVICE=cpu"] if gpu else []
    daemon = Proc(sandboxed(caps, ["strace", "-f", "-c", "-o", summary] + switch +
                            [ctx.daemon, "--config", config]), term_timeout=30)
    if not gpu:
        trainer = Proc(["env", "NW_CALLS_TEST=" + token] + trainer_argv(
            ctx, "inflight", "--live", "--pace", "0.05"), stdin=True)
    wait_text(events, '"event":"attach"', daemon, 120, "attach")
    if gpu:
        wait_text(events, '"connected":true', daemon, 120, "GPU link")
    trainer.send(b"fault\n", close=False)
    wait_text(events, '"event":"anomaly"', daemon, 120, "anomaly")
    # the daemon is strace's child (setpriv execs strace): the signal goes to it, as systemd's
    with open("/proc/%d/task/%d/children" % (daemon.pid, daemon.pid)) as f:
        traced = [int(x) for x in f.read().split()]
    if len(traced) != 1 or read_comm(traced[0]) != "nanwatchd":  # env, if any, execs it
        raise Fail("strace's children %s: not the daemon alone" % traced)
    os.kill(traced[0], signal.SIGTERM)
    if daemon.wait(60) != 0:
        raise Fail("the service under strace did not exit 0 on SIGTERM:\n%s" %
                   daemon.stderr_tail())
    trainer.kill()
    used = strace_calls(summary)
    for call in ("bpf", "process_vm_readv", "eventfd2") + (("pidfd_getfd",) if gpu else ()):
        if call not in used:
            raise Fail("strace saw no %s call: not the daemon's summary? %s" % (call, sorted(used)))
    no_perf_uprobes(used)
    outside = sorted(used - allowed)
    ctx.log("service mode: %d system calls used, %s" % (
        len(used), "all in the filter" if not outside else "outside: " + ", ".join(outside)))
    if outside:
        raise Fail("in service mode the daemon calls %s, which SystemCallFilter=%s refuses" %
                   (", ".join(outside), " ".join(filters)))


@environments(*HOST_ONLY)
def test_service_unit_learn(ctx):
    caps = bounding_caps()
    learn = unit_settings(LEARN_DROPIN)
    more = [c[4:].lower() for c in " ".join(learn.get("CapabilityBoundingSet", [])).split()]
    filters = " ".join(unit_settings(UNIT).get("SystemCallFilter", []) +
                       learn.get("SystemCallFilter", [])).split()
    allowed = expand_filter(filters)
    empty = tempfile.mkdtemp(prefix="no-layouts-", dir=ctx.tmp)
    cache = os.path.join(tempfile.mkdtemp(prefix="learn-", dir=ctx.tmp), "cache")
    trainer = start_waiting_trainer_as(ctx, NOBODY, "healthy")
    try:
        argv = [ctx.daemon, "--pid", str(trainer.pid), "--layouts", empty, "--learn-layouts",
                "--layout-cache", cache]
        daemon = Proc(sandboxed(caps, argv))
        ctx.current_daemon = daemon
        rc = daemon.wait(ERROR_TIMEOUT)
        err = [line for line in daemon.stderr_lines() if "cannot learn" in line]
        want = "could not be set up: chroot into the target's root failed (EPERM)"
        if rc != 1 or len(err) != 1 or want not in err[0]:
            raise Fail("in the unit's bounding set alone: exit %s, saying:\n%s" % (
                rc, tail(daemon.stderr_lines())))
        ctx.log("bounding set %s: %s" % (",".join(caps), err[0]))
        # as make install puts it: nanwatch-layout found in ../bin, its schema in ../share
        root = tempfile.mkdtemp(prefix="install-", dir=ctx.tmp)
        make_install(ctx, root)
        dropin = os.path.join(root, PREFIX.lstrip("/"), "share", "nanwatch",
                              "nanwatchd-learn.conf")
        with open(dropin) as f, open(LEARN_DROPIN) as g:
            if f.read() != g.read():
                raise Fail("make install put another %s" % dropin)
        installed = os.path.join(root, PREFIX.lstrip("/"), "sbin", "nanwatchd")
        daemon = Proc(sandboxed(caps + more, [installed] + argv[1:-1] + [cache + "-installed"]))
        ctx.current_daemon = daemon
        wait_attach(daemon)
        daemon.p.send_signal(signal.SIGTERM)
        wait_daemon_exit(daemon)
        daemon.drain(10)
        if len([line for line in daemon.stderr_lines() if "learned in" in line]) != 1:
            raise Fail("the installed daemon did not learn:\n%s" % tail(daemon.stderr_lines()))
        ctx.log("installed (%s): learned and attached" % installed)
        summary = os.path.join(tempfile.mkdtemp(prefix="strace-", dir=ctx.tmp), "calls")
        daemon = Proc(sandboxed(caps + more, ["strace", "-f", "-c", "-o", summary] + argv))
        ctx.current_daemon = daemon
        wait_attach(daemon)
        trainer.kill()
        wait_daemon_exit(daemon)
    finally:
        trainer.kill()
    used = strace_calls(summary)
    for call in ("bpf", "chroot", "execveat", "mount"):
        if call not in used:
            raise Fail("strace saw no %s call: not the daemon's and the learning run's? %s" % (
                call, sorted(used)))
    outside = sorted(used - allowed)
    ctx.log("bounding set %s: learned and attached; %d system calls used%s" % (
        ",".join(caps + more), len(used),
        ", all in SystemCallFilter=%s" % " ".join(filters) if not outside else ""))
    if outside:
        raise Fail("the daemon or the learning run calls %s, which SystemCallFilter=%s refuses "
                   "(EPERM)" % (", ".join(outside), " ".join(filters)))
