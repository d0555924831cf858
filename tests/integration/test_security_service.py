"""The service against a hostile local user (host): what an unprivileged user's processes can
cost the root daemon, and that nothing of it reaches another user's job. See SECURITY.md.

security_flood: a service daemon (metrics on, every rule matching a marker any user can put on
a command line) is READY; then uid 65534 starts HOSTILE processes whose command lines match
and which each map a sparse 2 GiB file of theirs named libtorch_python.so (so that the daemon
tries to resolve each, and fails), while the test scrapes the metrics endpoint every 50 ms.
The flood is held FLOOD_S from the moment all of them have started (a loaded machine takes
longer than that to start 300 Pythons). Meanwhile root's trainer (another user's job) starts and must be attached as usual. Checked:
the daemon keeps running; the median scrape answers in under 50 ms and none takes 2 s; the
error events about uid 65534's processes are at most the per-user burst plus one a minute
(and the suppressed ones are counted: nanwatch_errors_suppressed_total); at most 64 of them are
followed at once (nanwatch_processes_capped_total counts the rest); the CPU the daemon spent
over the flood, and the metrics latencies, are logged. Before, every hostile process cost an
error line each 10 s, a scan took 339 ms, and scrapes waited 0.3-0.9 s.

security_stop_parallel: 32 trainers watched by one service daemon; SIGTERM: every target gets
its detach line (reason signal) and the daemon exits 0 in less than the unit's TimeoutStopSec
(systemd's SIGKILL would lose the lines); the time is logged. Before, the detaches ran one
after another (12.2 s for 8 targets on a slow host).
"""
import ctypes
import os
import re
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from nwharness import ATTACH_TIMEOUT, DETACH_TIMEOUT, Fail, Proc, trainer_argv
from nwchecks import (HOST_ONLY, NOBODY, environments, expect_notify, free_port, has_event,
                      notify_socket, read_events, scrape, start_service, start_trainer, usage,
                      wait_events, write_config)

HOSTILE = 300
FOLLOWED_MAX = 64  # budget.c's followed: processes of one uid waited for or watched at once
ERR_BURST = 5  # budget.c's err_burst
FLOOD_S = 20
STOP_TARGETS = 32
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
UNIT = os.path.join(REPO, "config", "nanwatchd.service")

FLOOD_UP_S = 180  # the most the HOSTILE processes may take to start on a loaded machine
HOSTILE_PY = ("import mmap, sys, time\n"
              "f = open(sys.argv[1], 'rb')\n"
              "m = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)\n"
              "time.sleep(600)\n")


def as_nobody(argv):
    return ["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups"] + argv


class Scraper(threading.Thread):
    """GET /metrics every 50 ms: the latencies (s) of the answers, the failures, and the most
    processes one user had followed at each."""

    def __init__(self, port):
        super().__init__(daemon=True)
        self.port, self.latencies, self.failures, self.followed_max = port, [], 0, []
        self.stop = threading.Event()

    def run(self):
        while not self.stop.is_set():
            t = time.monotonic()
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.port,
                                            timeout=10) as r:
                    text = r.read().decode()
                self.latencies.append(time.monotonic() - t)
                m = re.search(r"^nanwatch_processes_followed_user_max (\d+)$", text, re.M)
                if m:
                    self.followed_max.append(int(m.group(1)))
            except OSError:
                self.failures += 1
            self.stop.wait(0.05)


def start_flood(home, token):
    """HOSTILE processes of uid 65534 that match and map a 2 GiB libtorch_python.so of theirs
    (home: a directory of theirs)."""
    lib = os.path.join(home, "libtorch_python.so")
    script = os.path.join(home, "h.py")
    with open(script, "w") as f:
        f.write(HOSTILE_PY)
    subprocess.check_call(as_nobody(["truncate", "-s", "2G", lib]))
    loop = "i=0; while [ $i -lt %d ]; do /usr/bin/python3 -S %s %s %s & i=$((i+1)); done; wait" % (
        HOSTILE, script, lib, token)
    return Proc(as_nobody(["sh", "-c", loop]))


def hostile_pids(token):
    pids = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open("/proc/%s/cmdline" % d, "rb") as f:
                    argv = f.read().split(b"\0")
                if argv[0] == b"/usr/bin/python3" and token.encode() in argv and \
                        os.stat("/proc/" + d).st_uid == NOBODY:
                    pids.append(int(d))
            except OSError:
                pass
    return pids


def wait_flood(token):
    """Wait until the HOSTILE processes have all started (on a loaded machine 300 Pythons take
    more than FLOOD_S to start); the seconds it took."""
    t0 = time.monotonic()
    while True:
        n = len(hostile_pids(token))
        took = time.monotonic() - t0
        if n >= HOSTILE:
            return took
        if took > FLOOD_UP_S:
            raise Fail("only %d of %d hostile processes started in %d s: the flood did not "
                       "happen" % (n, HOSTILE, FLOOD_UP_S))
        time.sleep(0.2)


def stop_flood(flood):
    subprocess.call(["pkill", "-KILL", "-u", str(NOBODY), "-f", "h.py"])
    flood.kill()


@environments(*HOST_ONLY)
def test_security_flood(ctx):
    tmp = tempfile.mkdtemp(dir=ctx.tmp, prefix="flood-")
    token = "nwflood-%d" % os.getpid()
    port = free_port()
    config, events_path = write_config(ctx, tmp, [
        "  - name: any\n    match: {cmdline: '%s'}\n" % token,
        "  - name: job\n    match: {env: {NW_FLOOD_TEST: '^%s$'}}\n" % token],
        scan_ms=200, metrics_port=port)
    sock, path = notify_socket(tmp)
    home = tempfile.mkdtemp(prefix="nanwatch-hostile-")  # the attacker's, outside ctx.tmp (0700)
    os.chown(home, NOBODY, NOBODY)
    flood = None
    try:
        daemon = start_service(ctx, config, notify=path)
        expect_notify(sock, "READY=1")
        cpu0 = usage(daemon.pid)[0]
        scraper = Scraper(port)
        scraper.start()
        t0 = time.monotonic()
        flood = start_flood(home, token)
        up_s = wait_flood(token)
        t_up = time.monotonic()
        time.sleep(5)
        trainer = start_trainer(ctx, {"NW_FLOOD_TEST": token})
        if trainer.wait_out(lambda l: l.startswith(b"STEP "), 180) is None:
            raise Fail("root's trainer did not train:\n%s" % trainer.stderr_tail())
        wait_events(events_path, daemon, has_event("attach", trainer.pid),
                    "the attach of root's trainer during the flood", ATTACH_TIMEOUT)
        attach_s = time.monotonic() - t0
        time.sleep(max(0, FLOOD_S - (time.monotonic() - t_up)))
        n_hostile = len(hostile_pids(token))
        samples = scrape(port)
        scraper.stop.set()
        scraper.join()
        cpu = usage(daemon.pid)[0] - cpu0
        elapsed = time.monotonic() - t0
        if not daemon.running():
            raise Fail("daemon exited %r under the flood" % daemon.p.returncode)
        trainer.kill()
    finally:
        if flood is not None:
            stop_flood(flood)
        sock.close()
        shutil.rmtree(home, ignore_errors=True)
    daemon.p.send_signal(signal.SIGTERM)
    daemon.wait(DETACH_TIMEOUT)
    events = read_events(events_path)
    lat = sorted(scraper.latencies)
    if not lat:
        raise Fail("no scrape answered (%d failed)" % scraper.failures)
    med, p99, worst = statistics.median(lat), lat[int(len(lat) * 0.99) - 1], lat[-1]
    hostile_errors = [e for e in events if e["event"] == "error" and e["pid"] != daemon.pid]
    summaries = [e for e in events if e["event"] == "error" and e["pid"] == daemon.pid]
    ctx.log("flood of %d processes of uid %d (all started in %.1f s, %d alive at the end) "
            "for %.0f s: daemon CPU "
            "%.1f s (%.0f%% of a core); scrapes %d, median %.1f ms, p99 %.1f ms, max %.1f ms, "
            "%d failed; root's trainer attached %.1f s into it; %d error events about the "
            "flood, %d summaries, suppressed %d, capped %d" % (
                HOSTILE, NOBODY, up_s, n_hostile, elapsed, cpu, 100 * cpu / elapsed, len(lat),
                med * 1e3, p99 * 1e3, worst * 1e3, scraper.failures, attach_s,
                len(hostile_errors), len(summaries),
                samples.get(("nanwatch_errors_suppressed_total", frozenset()), -1),
                samples.get(("nanwatch_processes_capped_total", frozenset()), -1)))
    if n_hostile < HOSTILE * 0.9:
        raise Fail("only %d of %d hostile processes ran: the flood did not happen" % (
            n_hostile, HOSTILE))
    if scraper.failures:
        raise Fail("%d scrapes failed under the flood" % scraper.failures)
    if med > 0.05 or worst > 2.0:
        raise Fail("scrapes under the flood: median %.1f ms (want < 50), max %.1f ms "
                   "(want < 2000)" % (med * 1e3, worst * 1e3))
    allowed = ERR_BURST + int(elapsed / 60) + 1
    if len(hostile_errors) > allowed:
        raise Fail("%d error events about uid %d's processes in %.0f s, want at most %d: %s" % (
            len(hostile_errors), NOBODY, elapsed, allowed, hostile_errors[:3]))
    capped = samples.get(("nanwatch_processes_capped_total", frozenset()), 0)
    most = max(scraper.followed_max) if scraper.followed_max else -1
    if most != FOLLOWED_MAX or capped < n_hostile - 2 * FOLLOWED_MAX:
        raise Fail("one user followed at most %d processes at once (want %d, the cap), %s "
                   "capped, with %d hostile processes" % (most, FOLLOWED_MAX, capped, n_hostile))
    if any(e["event"] == "attach" and e["pid"] != trainer.pid for e in events):
        raise Fail("a hostile process was attached")


def sigterm_wait(daemon, timeout):
    """SIGTERM; the daemon's exit status (None: still running after timeout s) and the wait."""
    t0 = time.monotonic()
    daemon.p.send_signal(signal.SIGTERM)
    rc = daemon.wait(timeout)
    return rc, time.monotonic() - t0


def unit_stop_timeout():
    with open(UNIT) as f:
        m = re.search(r"^TimeoutStopSec=(\d+)s?$", f.read(), re.M)
    return int(m.group(1))


@environments(*HOST_ONLY)
def test_security_stop_parallel(ctx):
    tmp = tempfile.mkdtemp(dir=ctx.tmp, prefix="stop-")
    token = "stop-%d" % os.getpid()
    config, events_path = write_config(ctx, tmp, [
        "  - name: t\n    match: {env: {NW_STOP_TEST: '^%s$'}}\n" % token])
    sock, path = notify_socket(tmp)
    trainers = []
    try:
        daemon = start_service(ctx, config, notify=path)
        expect_notify(sock, "READY=1")
        for i in range(STOP_TARGETS):
            trainers.append(start_process_paced(ctx, token, i))
        for t in trainers:
            wait_events(events_path, daemon, has_event("attach", t.pid), "attach of %d" % t.pid,
                        ATTACH_TIMEOUT * 3)
        rc, took = sigterm_wait(daemon, DETACH_TIMEOUT * 3)
    finally:
        sock.close()
        for t in trainers:
            t.kill()
    events = read_events(events_path)
    detached = {e["pid"] for e in events if e["event"] == "detach" and e["reason"] == "signal"}
    missing = [t.pid for t in trainers if t.pid not in detached]
    ctx.log("SIGTERM with %d targets: exit %r in %.2f s, %d detach lines" % (
        STOP_TARGETS, rc, took, len(detached)))
    if rc != 0 or missing:
        raise Fail("SIGTERM with %d targets: exit %r, no detach line for %s" % (
            STOP_TARGETS, rc, missing))
    if took >= unit_stop_timeout():
        raise Fail("the stop took %.1f s, the unit's TimeoutStopSec is %d s: systemd would "
                   "have killed the daemon" % (took, unit_stop_timeout()))


def start_process_paced(ctx, token, rank):
    """A trainer stepping twice a second, until killed."""
    env = {"NW_STOP_TEST": token, "RANK": str(rank)}
    return Proc(["env"] + ["%s=%s" % kv for kv in env.items()] +
                trainer_argv(ctx, "inflight", "--live", "--pace", "0.5", "--steps", "100000"),
                stdin=True)


def endless_ranks(ctx, name, extra, procs, hostile_args=()):
    """A service watching two ranks of one job (env NW_<NAME>_TEST), both attached: uid
    65534's hostile_forward.py (with hostile_args) in its endless forward, and a paced victim
    (both put in procs as they start, for the caller to kill). Returns (daemon, events path,
    hostile, victim, the ranks' env prefix)."""
    tmp = tempfile.mkdtemp(dir=ctx.tmp, prefix=name + "-")
    token = "%s-%d" % (name, os.getpid())
    var = "NW_%s_TEST" % name.upper()
    config, events_path = write_config(ctx, tmp, [
        "  - name: t\n    match: {env: {%s: '^%s$'}}\n" % (var, token)], extra=extra)
    sock, path = notify_socket(tmp)
    env = ["env", "%s=%s" % (var, token)]
    try:
        daemon = start_service(ctx, config, notify=path)
        expect_notify(sock, "READY=1")
    finally:
        sock.close()
    hostile = Proc(as_nobody(env + trainer_argv(ctx, "hostile_forward", *hostile_args)),
                   stdin=True)
    procs.append(hostile)
    victim = Proc(env + trainer_argv(ctx, "inflight", "--live", "--pace", "0.05"), stdin=True)
    procs.append(victim)
    for p in (hostile, victim):
        wait_events(events_path, daemon, has_event("attach", p.pid), "attach of %d" % p.pid,
                    ATTACH_TIMEOUT * 2)
    hostile.send(b"endless\n", close=False)
    if hostile.wait_out(lambda l: l == b"ENDLESS\n", 60) is None:
        raise Fail("hostile_forward never entered its endless forward")
    return daemon, events_path, hostile, victim, env


def require_detached(events, rc, procs, what):
    """SIGTERM's exit 0 and a detach line for each of procs."""
    detached = {e["pid"] for e in events if e["event"] == "detach"}
    missing = [p.pid for p in procs if p.pid not in detached]
    if rc != 0 or missing:
        raise Fail("SIGTERM during %s: exit %r, no detach line for %s" % (what, rc, missing))


ENDLESS_DETACH_S = 15  # from a rank's exit to its detach line: well under a second when free


def parked_stats(events, pid):
    """pid's stats lines that count its session closed and reopened (parked)."""
    return [e for e in events
            if e["event"] == "stats" and e["pid"] == pid and e.get("parked", 0) > 0]


def stepped_after_park(pid):
    """pid's stats count a step after the first of its lines that counts it parked."""
    def pred(events):
        st = parked_stats(events, pid)
        return len(st) > 1 and st[-1].get("steps", 0) > st[0].get("steps", 0)
    return pred


HOLD_TRIES = 3  # ranks made to exit until one's removal was held by the endless forward


def held_by(counter, pid):
    """A predicate on the events: pid's stats count counter (the removal was held)."""
    return lambda events: any(e["event"] == "stats" and e["pid"] == pid and e.get(counter)
                              for e in events)


def exit_held(ctx, events_path, daemon, env, procs, hostile, victim, held):
    """victim exits (its detach line within ENDLESS_DETACH_S), until held(events) says its
    removal was held (within 2 stats lines of the detach line). The kernel lets the endless
    forward's return go once its task went 100 ms without a call (a loaded machine): then the
    forward begins again ("again") and a new rank exits, HOLD_TRIES times at most. Returns the
    seconds to the held removal's detach line."""
    for attempt in range(HOLD_TRIES):
        t0 = time.monotonic()
        victim.kill()
        wait_events(events_path, daemon, has_event("detach", victim.pid),
                    "the exited rank's detach line", ENDLESS_DETACH_S)
        took = time.monotonic() - t0
        if held is None:
            return took
        try:
            wait_events(events_path, daemon, held, "stats of the removal held", 2.5)
            return took
        except Fail:
            ctx.log("the exited rank's removal (%.2f s) was not held: the kernel let the "
                    "endless forward's return go; it begins again" % took)
        hostile.send(b"again\n", close=False)
        if hostile.wait_out(lambda l: l == b"ENDLESS\n", 60) is None:
            raise Fail("hostile_forward never began its endless forward again")
        victim = Proc(env + trainer_argv(ctx, "inflight", "--live", "--pace", "0.05"),
                      stdin=True)
        procs.append(victim)
        wait_events(events_path, daemon, has_event("attach", victim.pid),
                    "the attach of the next rank to exit", ATTACH_TIMEOUT)
    raise Fail("no rank's removal was held by the endless forward in %d tries" % HOLD_TRIES)


def endless_exit(ctx, name, hostile_args, what, counter, third=False, held=None):
    """endless_ranks' service with return_probe session (and, with third, one more paced rank
    watched): the victim exits, its detach line must come within ENDLESS_DETACH_S (with held,
    a predicate on the events, exit_held() until one's removal was held), a rank started
    after must be attached, and SIGTERM must end the daemon with every detach line. Returns
    (seconds to that detach line, to SIGTERM's exit, the largest of the hostile rank's stats
    counter, the events)."""
    procs = []
    try:
        # from its return until the stop, the endless call holds every uprobe removal on
        # the node that this daemon does not make: kept to a few seconds (other tests run)
        daemon, events_path, hostile, victim, env = endless_ranks(
            ctx, name, "stats_interval: 1\nreturn_probe: session\n", procs, hostile_args)
        if third:
            other = Proc(env + trainer_argv(ctx, "inflight", "--live", "--pace", "0.05"),
                         stdin=True)
            procs.append(other)
            wait_events(events_path, daemon, has_event("attach", other.pid),
                        "the third rank's attach", ATTACH_TIMEOUT)
        took = exit_held(ctx, events_path, daemon, env, procs, hostile, victim,
                         held and held(hostile, other if third else None))
        late = Proc(env + trainer_argv(ctx, "inflight", "--live", "--pace", "0.05"),
                    stdin=True)
        procs.append(late)
        wait_events(events_path, daemon, has_event("attach", late.pid),
                    "the attach of a rank started after", ATTACH_TIMEOUT)
        if third:
            try:
                wait_events(events_path, daemon, stepped_after_park(other.pid),
                            "the third rank's stats with a step after its session reopened",
                            ENDLESS_DETACH_S)
            except Fail as e:
                raise Fail("%s\nthe third rank's stats (steps, parked): %s" % (e, [
                    (s.get("steps"), s.get("parked")) for s in read_events(events_path)
                    if s["event"] == "stats" and s["pid"] == other.pid][-20:]))
        rc, stop = sigterm_wait(daemon, DETACH_TIMEOUT)
    finally:
        for p in procs:
            p.kill()
    events = read_events(events_path)
    require_detached(events, rc, (hostile, late) + ((other,) if third else ()), what)
    return took, stop, max([e.get(counter, 0) for e in events
                            if e["event"] == "stats" and e["pid"] == hostile.pid] or [0]), events


@environments(*HOST_ONLY)
def test_security_endless_forward(ctx):
    """With return_probe session: uid 65534's rank enters a forward that never returns while
    it keeps calling a child module (tests/trainers/hostile_forward.py): the return armed for
    it stays pending, and on Linux 6.13+ that holds every uprobe removal on the node. Another
    rank of the same service then exits: its detach line must come within ENDLESS_DETACH_S;
    a rank started after must be attached, and SIGTERM must end the daemon with every detach
    line. A removal that takes long makes the daemon arm no return (stats.unarmed counts the
    calls), so the kernel lets the pending one go; before, the exited rank's removal, and
    every uprobe attach after it, waited as long as the forward ran."""
    took, stop, unarmed, _ = endless_exit(ctx, "endless", (), "the endless forward", "unarmed",
                                          held=lambda h, o: held_by("unarmed", h.pid))
    if not unarmed > 0:
        raise Fail("the hostile rank's stats count no unarmed call")
    ctx.log("the exited rank's detach line %.2f s after its exit; SIGTERM to exit %.2f s; "
            "the hostile rank's unarmed calls %d" % (took, stop, unarmed))

@environments(*HOST_ONLY)
def test_security_endless_forward_third_rank(ctx):
    """test_security_endless_forward with a third rank watched all the while. The kernel runs
    no program for another process's hit on a pid-filtered uprobe session and arms its return:
    the third rank's session armed returns for every call of the hostile rank's endless
    forward, whatever the pause said, and the exited rank's removal waited as long as the
    forward ran (no detach line in 15 s). A removal that stays slow has the daemon close
    every other watch's session and open it again once the removal is done: the exited
    rank's detach line must come within ENDLESS_DETACH_S, the third rank's stats must count
    the reopening (parked) and steps after it, and SIGTERM must end the daemon with every
    detach line."""
    took, stop, unarmed, events = endless_exit(ctx, "endthird", (), "the endless forward",
                                               "unarmed", third=True,
                                               held=lambda h, o: held_by("parked", o.pid))
    parked = sorted({e["pid"] for e in events if e["event"] == "stats" and e.get("parked")})
    ctx.log("the exited rank's detach line %.2f s after its exit; SIGTERM to exit %.2f s; "
            "ranks parked %s; the hostile rank's unarmed calls %d" % (took, stop, parked,
                                                                      unarmed))


def entry_offset(path):
    """The file offset of an ELF file's entry point (x86-64, little-endian)."""
    with open(path, "rb") as f:
        head = f.read(64)
        entry, phoff = struct.unpack_from("<QQ", head, 24)
        phentsize, phnum = struct.unpack_from("<HH", head, 54)
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    for i in range(phnum):
        kind, _, offset, vaddr, _, filesz = struct.unpack_from("<IIQQQQ", table, i * phentsize)
        if kind == 1 and vaddr <= entry < vaddr + filesz:  # PT_LOAD
            return entry - vaddr + offset
    raise Fail("%s: no PT_LOAD holds its entry point" % path)


def perf_uprobe(path, offset):
    """A perf event of the kernel's uprobe PMU at path's offset, for every process: what a
    tracing tool run as root (perf probe, bpftrace, a libbpf tool) opens. Its descriptor."""
    with open("/sys/bus/event_source/devices/uprobe/type") as f:
        pmu = int(f.read())
    name = ctypes.create_string_buffer(path.encode())
    attr = bytearray(112)  # struct perf_event_attr, PERF_ATTR_SIZE_VER5
    struct.pack_into("<II", attr, 0, pmu, len(attr))
    struct.pack_into("<QQ", attr, 56, ctypes.addressof(name), offset)  # config1, config2
    buf = (ctypes.c_char * len(attr)).from_buffer(attr)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    # perf_event_open(attr, pid -1, cpu 0, group -1, PERF_FLAG_FD_CLOEXEC)
    fd = libc.syscall(298, buf, -1, 0, -1, 8)
    if fd < 0:
        raise Fail("perf_event_open of a uprobe at %s:%#x: %s" % (
            path, offset, os.strerror(ctypes.get_errno())))
    return fd


OTHER_HELD_S = 2  # the other tool's close still waiting this long: its removal is held


@environments(*HOST_ONLY)
def test_security_endless_forward_other_tool(ctx):
    """With return_probe session and uid 65534's rank in its endless forward, another tool on
    the node (root's perf uprobe, opened here as a tracer does) closes its probe: the kernel's
    removal waits for the forward's pending returns, holding its trace event lock, for as long
    as the forward runs (checked: the close still waits after OTHER_HELD_S). A rank started
    meanwhile must be attached within ATTACH_TIMEOUT, SIGTERM must end the daemon with every
    detach line, and the other tool's close must end once the daemon is gone. The daemon's
    uprobes are uprobe_multi links, whose attach and removal take no such lock; before, the
    rank's attach took perf uprobes, each waiting for that lock: no attach line in 60 s."""
    procs = []
    closer = None
    try:
        daemon, events_path, hostile, victim, env = endless_ranks(
            ctx, "othertool", "stats_interval: 1\nreturn_probe: session\n", procs)
        fd = perf_uprobe(sys.executable, entry_offset(os.path.realpath(sys.executable)))
        closer = threading.Thread(target=os.close, args=(fd,), daemon=True)
        closer.start()
        closer.join(OTHER_HELD_S)
        if not closer.is_alive():
            raise Fail("the other tool's close did not wait: the endless forward held no "
                       "return, and this test proves nothing")
        t0 = time.monotonic()
        late = Proc(env + trainer_argv(ctx, "inflight", "--live", "--pace", "0.05"),
                    stdin=True)
        procs.append(late)
        wait_events(events_path, daemon, has_event("attach", late.pid),
                    "the attach of a rank started while another tool's removal waited",
                    ATTACH_TIMEOUT)
        took = time.monotonic() - t0
        rc, stop = sigterm_wait(daemon, DETACH_TIMEOUT)
        closer.join(ENDLESS_DETACH_S)
        if closer.is_alive():
            raise Fail("the other tool's close still waits %d s after the daemon's exit" %
                       ENDLESS_DETACH_S)
    finally:
        for p in procs:
            p.kill()
        if closer:
            closer.join(ENDLESS_DETACH_S)
    require_detached(read_events(events_path), rc, (hostile, victim, late),
                     "another tool's removal")
    ctx.log("a rank started while another tool's removal waited: attached in %.2f s; "
            "SIGTERM to exit %.2f s" % (took, stop))


@environments(*HOST_ONLY)
def test_security_endless_backward(ctx):
    """With return_probe session: uid 65534's rank enters a backward pass that never returns
    while it keeps starting nested ones (hostile_forward.py --in-backward: torch.autograd.backward
    in a loop inside an autograd function's backward). Another rank of the same service then
    exits: its detach line must come within ENDLESS_DETACH_S, a rank started after must be
    attached, and SIGTERM must end the daemon with every detach line; the hostile rank's nested
    passes are counted (stats.nested_backward, from its frames). With a return probe on
    run_backward (tried: a uprobe session arming no return while a removal was slow), the outer
    pass's return stayed pending while each nested pass armed another (the exited rank's own
    session on run_backward, still registered while its other link was removed, armed them for
    the hostile's hits), and on Linux 6.13+ that held the removal for as long as the backward
    pass ran: the exited rank had no detach line in 15 s."""
    took, stop, nested, _ = endless_exit(ctx, "endbwd", ("--in-backward",),
                                         "the endless backward pass", "nested_backward")
    if not nested > 0:
        raise Fail("the hostile rank's stats count no nested backward pass: its endless "
                   "backward was not watched")
    ctx.log("the exited rank's detach line %.2f s after its exit; SIGTERM to exit %.2f s; "
            "the hostile rank's nested backward passes %d" % (took, stop, nested))


FORK_STORM_S = 4  # the fork storm watched, with the victim's stats lines (one a second)


@environments(*HOST_ONLY)
def test_security_fork_storm(ctx):
    """With the default return probe (a uprobe session on this kernel): uid 65534's rank enters
    a forward that never returns and forks a process every 20 calls from it
    (hostile_forward.py --fork-every 20). Each fork has the daemon clean the new processes of
    the frame evaluator's breakpoint, and that removal waits for the returns the forward holds
    for good: it must keep only the hostile rank's cleaner waiting. Another rank trains all the
    while: none of its stats lines may count an unarmed call (a cleaning counted as a removal
    would pause every watch's returns), its steps go on, and SIGTERM ends the daemon with both
    detach lines."""
    procs = []
    try:
        daemon, events_path, hostile, victim, _ = endless_ranks(
            ctx, "forks", "stats_interval: 1\n", procs, ("--fork-every", "20"))
        time.sleep(FORK_STORM_S)
        rc, stop = sigterm_wait(daemon, DETACH_TIMEOUT)
    finally:
        for p in procs:
            p.kill()
    events = read_events(events_path)
    attach = [e for e in events if e["event"] == "attach" and e["pid"] == victim.pid]
    if not attach or attach[0].get("return_probe") != "session":
        raise Fail("the victim's attach line %s: want return_probe session" % attach[:1])
    require_detached(events, rc, (hostile, victim), "the fork storm")
    stats = [e for e in events if e["event"] == "stats" and e["pid"] == victim.pid]
    unarmed = [e.get("unarmed", 0) for e in stats]
    steps = [e.get("steps", 0) for e in stats]
    if len(stats) < FORK_STORM_S - 1 or max(unarmed) > 0 or steps[-1] <= steps[0]:
        raise Fail("the victim's stats lines during the fork storm: unarmed %s, steps %s" % (
            unarmed, steps))
    forks = [e.get("forks", 0) for e in events if e["event"] == "stats" and
             e["pid"] == hostile.pid]
    if not forks or not max(forks) > 0:
        raise Fail("the hostile rank's stats count no fork: %s" % forks)
    ctx.log("victim: %d stats lines, steps %d..%d, unarmed 0; the hostile rank's forks %d; "
            "SIGTERM to exit %.2f s" % (len(stats), steps[0], steps[-1], max(forks), stop))
