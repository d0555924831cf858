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
and NoNewPrivileges= do), under `strace -f -c`, watches nan_input and finds the oracle's first
anomaly; every system call it made is allowed by the unit's SystemCallFilter (expanded with
`systemd-analyze syscall-filter`), so the filter cannot break a watch. With CAP_SYS_ADMIN or
CAP_SYS_PTRACE taken out of the set the daemon refuses, naming it: both are needed.
"""
import os
import re
import shutil
import subprocess
import tempfile

from nwharness import (Fail, Proc, finish_trainer, oracle_of, read_comm, start_waiting_trainer,
                       tail, wait_attach, wait_daemon_exit)
from nwchecks import (HOST_ONLY, check_anomalies, check_envelope, environments, expect_refusal,
                      parse_stream)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
UNIT = os.path.join(REPO, "config", "nanwatchd.service")
PREFIX = "/usr/local"  # make install's default, which the unit in the tree names
CONFIG = "/etc/nanwatch/nanwatch.yaml"


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


@environments(*HOST_ONLY)
def test_service_unit_sandbox(ctx):
    caps = bounding_caps()
    filters = " ".join(unit_settings(UNIT).get("SystemCallFilter", [])).split()
    if not filters or any(f.startswith("~") for f in filters):
        raise Fail("the unit's SystemCallFilter is not an allow list: %r" % filters)
    allowed = expand_filter(filters)
    oracle, trace = oracle_of(ctx, "nan_input")
    trainer = start_waiting_trainer(ctx, "nan_input")
    comm = read_comm(trainer.pid)
    summary = os.path.join(tempfile.mkdtemp(prefix="strace-", dir=ctx.tmp), "calls")
    daemon_argv = [ctx.daemon, "--pid", str(trainer.pid), "--layouts", ctx.layouts]
    for drop in ("sys_admin", "sys_ptrace"):
        if drop not in caps:
            raise Fail("the unit's CapabilityBoundingSet lacks CAP_%s" % drop.upper())
        fewer = [c for c in caps if c != drop]
        ctx.log("bounding set %s" % ",".join(fewer))
        expect_refusal(ctx, Proc(sandboxed(fewer, daemon_argv)), ["CAP_" + drop.upper()])
    ctx.log("bounding set %s, no_new_privs, strace -f -c" % ",".join(caps))
    daemon = Proc(sandboxed(caps, ["strace", "-f", "-c", "-o", summary] + daemon_argv))
    ctx.current_daemon = daemon
    wait_attach(daemon)
    trainer.send(b"go\n")
    finish_trainer(ctx, trainer, "nan_input", trace)
    wait_daemon_exit(daemon)
    events = parse_stream(daemon, trainer.pid, comm)
    check_envelope(events, "target_exit")
    check_anomalies(events, oracle, trainer.pid)
    used = strace_calls(summary)
    for call in ("bpf", "perf_event_open"):
        if call not in used:
            raise Fail("strace saw no %s call: not the daemon's summary? %s" % (call, sorted(used)))
    outside = sorted(used - allowed)
    ctx.log("%d system calls used, all in SystemCallFilter=%s" % (len(used), " ".join(filters))
            if not outside else "outside the filter: %s" % ", ".join(outside))
    if outside:
        raise Fail("the daemon calls %s, which SystemCallFilter=%s refuses (EPERM)" %
                   (", ".join(outside), " ".join(filters)))
