"""The GPU link against other local users (bpf/nwgpu.h, daemon/attach/gpulink.c): the daemon
(root) talks only to the target itself, and what that peer sends can make findings of its own
target alone.

The attacker is uid 65534 (tests/security/gpu_attacker.py): a keeper process holds listening
sockets that short-lived planters bound at the name the library used to listen at,
/tmp/.nanwatch-cupti-<pid>.sock, each for its own pid, and then exited. The harness (root)
hands that pid number to the victim next (tests/security/withpid, clone3 set_tid): the reuse an
attacker otherwise waits for, made deterministic. Victims run as uid 4242, never root (root
could remove a planted file from sticky /tmp).

gpu_reused_pid: the victim (tests/trainers/gpu_emu.py with the real library, the emulated
driver) gets a pid a planter had. The planted socket gets no connection and the attacker reads
nothing; the real library listens in its own 0700 directory in /tmp all the same; the daemon
connects to it, the job is checked (the library scans), and a fault's anomalies are the
forward-hook oracle's, none before the fault (the attacker's forged NaNs would be).
gpu_no_library: a victim that maps no library (gpu_meta.py with a stand-in that listens where
the library does, and would at the old name but for the planted socket, but maps no file of the
library's name) under a planted socket for its pid: no connection to either for five seconds
while nothing is mapped; once the stand-in maps the name, the daemon connects to the victim's
own socket (never the planted one).
gpu_hostile_peer (service mode, two targets): a target whose stand-in lies
(tests/trainers/hostile_cupti.py) as uid 65534, and a healthy one as uid 4242. The hostile peer
can neither map the ring writable nor update it (nor make a read-only mapping writable), nor
connect to the healthy target's library socket; its replays, results for requests not written (yet, or in this round)
and out-of-range counts are counted invalid, those for requests the ring overwrote lost,
malformed messages close the link (counted, connected again), a flood of messages holds
nobody up; the daemon stays up and exits 0; the hostile target has exactly the one anomaly its
one checked NaN result allows; the healthy target has none, no invalid or lost result, and its
stats lines keep coming through the flood.

Each fails against a daemon and library that guess the socket's path from the pid number, check
only SO_PEERCRED's pid, and hand over a writable ring (the stand-ins also listen at the old
name, so that such a daemon finds them).
"""
import calendar
import glob
import json
import os
import random
import shutil
import signal
import stat
import tempfile
import time

import pytest

from nwharness import (REPO, TRAINER_TIMEOUT, Fail, Proc, is_event, oracle_of, tail,
                       trainer_argv, wait_attach, wait_daemon_exit)
from nwchecks import HOST_ONLY, NOBODY, environments

VICTIM = 4242  # the victims' user: not root, not the attacker
FAKE_NOTICE = "fake library: meta tensors are not scanned, results follow the test's plan"
ATTACKER = os.path.join(REPO, "tests", "security", "gpu_attacker.py")
WITHPID = os.path.join(REPO, "build", "tests", "security", "withpid")
FIELDS = ("step", "layer", "module", "tensor", "nan", "posinf", "neginf", "origin", "inputs_finite",
          "params_finite")


def as_user(uid):
    return ["setpriv", "--reuid=%d" % uid, "--regid=%d" % uid, "--clear-groups"]


def built(ctx):
    """The library beside the daemon under test; the emulated driver and mock CUPTI of this
    tree (the same for any daemon); withpid."""
    here = os.path.join(REPO, "build", "tests")
    paths = {"lib": os.path.join(os.path.dirname(ctx.daemon), "libnanwatch_cupti.so"),
             "cuda": os.path.join(here, "libnwemu_cuda.so"),
             "cupti": os.path.join(here, "libnwmock_cupti.so")}
    if not os.path.exists(paths["lib"]):
        pytest.skip("libnanwatch_cupti.so not built (no CUDA toolkit)")
    missing = [p for p in list(paths.values()) + [WITHPID] if not os.path.exists(p)]
    if missing:
        raise Fail("not built: %s (make gpu and make unit build them)" % ", ".join(missing))
    return paths


def scratch():
    """A directory in /tmp every user may write in (sticky, as /tmp); removed by the test."""
    d = tempfile.mkdtemp(prefix="nanwatch-security-gpu-", dir="/tmp")
    os.chmod(d, 0o1777)
    return d


def remove(tmp, pid=None):
    """The test's directory, and what a victim killed before its exit left in /tmp."""
    shutil.rmtree(tmp, ignore_errors=True)
    for d in private_dirs(pid) if pid else ():
        shutil.rmtree(d, ignore_errors=True)


def free_pid():
    """A pid number free now that the allocator will not hand out for a long while: one it
    passed a moment ago."""
    with open("/proc/sys/kernel/ns_last_pid") as f:
        last = int(f.read())
    low = max(301, last - 3000)
    candidates = list(range(low, max(low + 1, last - 20)))
    random.shuffle(candidates)
    for pid in candidates:
        if not os.path.exists("/proc/%d" % pid):
            return pid
    raise Fail("no free pid below %d" % last)


class Attacker:
    """The keeper (uid 65534) and its planters."""

    def __init__(self, ctx, tmp):
        self.log = os.path.join(tmp, "attacker.jsonl")
        open(self.log, "w").close()
        os.chown(self.log, NOBODY, NOBODY)
        self.name = "nanwatch-test-keeper-%d-%d" % (os.getpid(), random.randrange(1 << 30))
        self.keeper = Proc(as_user(NOBODY) + ["/usr/bin/python3", ATTACKER, "keep", self.log,
                                              self.name])
        if self.keeper.wait_out(lambda l: l.startswith(b"KEEPING "), 30) is None:
            raise Fail("the attacker's keeper did not start:\n%s" %
                       tail(self.keeper.stderr_lines()))
        self.planted = []
        ctx.log("attacker's keeper: pid %d, uid %d" % (self.keeper.pid, NOBODY))

    def plant(self, ctx):
        """A planter under a free pid: its socket, that pid (free again)."""
        for _ in range(20):
            pid = free_pid()
            p = Proc([WITHPID, str(pid)] + as_user(NOBODY) +
                     ["/usr/bin/python3", ATTACKER, "plant", self.name])
            rc = p.wait(30)
            if rc == 3:
                continue  # the number was taken meanwhile
            line = p.wait_out(lambda l: l.startswith(b"PLANTED "), 1)
            if rc != 0 or line is None:
                raise Fail("planter exited %r:\n%s" % (rc, tail(p.stderr_lines())))
            path = line.split()[1].decode()
            if path != "/tmp/.nanwatch-cupti-%d.sock" % pid:
                raise Fail("planted %s under pid %d" % (path, pid))
            self.planted.append(path)
            deadline = time.monotonic() + 10
            while not any(r.get("planted") == path for r in self.records()):
                if time.monotonic() > deadline:
                    raise Fail("the keeper did not take %s" % path)
                time.sleep(0.05)
            st = os.lstat(path)
            ctx.log("planted %s (a socket of uid %d) under pid %d, which is free again" %
                    (path, st.st_uid, pid))
            return path, pid
        raise Fail("no free pid to plant under")

    def records(self):
        with open(self.log) as f:
            return [json.loads(line) for line in f if line.strip()]

    def connections(self):
        return [r for r in self.records() if "accepted" in r or "stolen" in r]

    def close(self):
        self.keeper.kill()
        for path in self.planted:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass


def victim(ctx, pid, env, argv):
    """argv as uid VICTIM under pid number pid (withpid); once it printed LIVE pid."""
    proc = Proc([WITHPID, str(pid)] + as_user(VICTIM) + ["env"] + env + argv, stdin=True)
    line = proc.wait_out(lambda l: l.startswith(b"LIVE "), 60)
    if line is None or line.split()[1:] != [str(pid).encode()]:
        raise Fail("the victim did not start as pid %d (%r):\n%s" %
                   (pid, line, tail(proc.stderr_lines())))
    ctx.log("victim: pid %d (the planter's), uid %d" % (pid, VICTIM))
    return proc


def private_dirs(pid, base="/tmp"):
    """The library directories of pid in base (the planted socket's name is no directory)."""
    return [d for d in glob.glob(os.path.join(base, ".nanwatch-cupti-%d.*" % pid))
            if os.path.isdir(d) and not os.path.islink(d)]


def stats_line(daemon, pred, timeout, what, meanwhile=lambda: None):
    """The first stats line pred holds for; meanwhile() is called every second (a check)."""
    deadline = time.monotonic() + timeout
    while True:
        meanwhile()
        line = daemon.wait_out(lambda l: is_event("stats")(l) and pred(json.loads(l)), 1)
        if line is not None:
            return json.loads(line)
        if time.monotonic() > deadline or not daemon.running():
            raise Fail("no stats line with %s in %d s:\n%s" % (what, timeout,
                                                              tail(daemon.stderr_lines())))


def events_of(daemon):
    return [json.loads(l) for l in daemon.out if l.startswith(b"{")]


def no_connection(attacker, planted):
    got = attacker.connections()
    if got:
        raise Fail("the daemon connected to the socket the attacker planted at %s: %s" %
                   (planted, json.dumps(got[:3])))


def check_library_dir(pid):
    """The library's socket: in a 0700 directory of the victim's own in /tmp."""
    dirs = private_dirs(pid)
    if len(dirs) != 1:
        raise Fail("library directories of pid %d in /tmp: %s" % (pid, dirs))
    st, sock = os.lstat(dirs[0]), os.lstat(os.path.join(dirs[0], "cupti.sock"))
    if not stat.S_ISDIR(st.st_mode) or stat.S_IMODE(st.st_mode) != 0o700 or \
            st.st_uid != VICTIM or not stat.S_ISSOCK(sock.st_mode) or sock.st_uid != VICTIM:
        raise Fail("%s: mode %o uid %d, socket mode %o uid %d" % (
            dirs[0], st.st_mode, st.st_uid, sock.st_mode, sock.st_uid))
    return dirs[0]


def check_fault(events, oracle, fault):
    """The fault's anomalies, the oracle's; none before it (forged ones would be)."""
    anomalies = [ev for ev in events if ev["event"] == "anomaly"]
    early = [ev for ev in anomalies if ev["step"] < fault]
    if early:
        raise Fail("%d anomalies before the fault at step %d, first: %s" %
                   (len(early), fault, json.dumps(early[0])))
    forward = [ev for ev in anomalies if ev["phase"] == "forward"]
    if not forward:
        raise Fail("no forward anomaly; the oracle has %s at step %d" % (oracle["layer"],
                                                                      fault))
    first = forward[0]
    got = [[ev[f] for f in FIELDS] for ev in forward if ev["iteration"] == first["iteration"]]
    want = [[a[f] for f in FIELDS] for a in oracle["first_iteration"]]
    if got != want or not first["first"]:
        raise Fail("anomalies of the first bad iteration differ:\n    daemon: %s\n"
                   "    oracle: %s" % (got, want))


@environments(*HOST_ONLY)
def test_security_gpu_reused_pid(ctx):
    """A trainer with the pid of an attacker's dead planter: checked, and only by its library."""
    paths = built(ctx)
    tmp = scratch()
    attacker = pid = None
    try:
        attacker = Attacker(ctx, tmp)
        planted, pid = attacker.plant(ctx)
        env = ["NANWATCH_CUDA_LIB=" + paths["cuda"], "NANWATCH_CUPTI_LIB=" + paths["cupti"],
               "CUDA_INJECTION64_PATH=" + paths["lib"]]
        trainer = victim(ctx, pid, env, trainer_argv(ctx, "gpu_emu", "--live",
                                                     "--progress-every", "10", "--pace", "0.01"))
        if trainer.wait_out(lambda l: l.startswith(b"STEP ") and int(l.split()[1]) >= 20,
                            60) is None:
            raise Fail("the victim did not train:\n%s" % tail(trainer.stderr_lines()))
        daemon = Proc(["env", "NANWATCH_TEST_GPU_DEVICE=cpu", ctx.daemon, "--pid", str(pid),
                       "--layouts", ctx.layouts, "--stats-interval", "1", "-v"], term_timeout=10)
        ctx.current_daemon = daemon
        wait_attach(daemon)
        scanning = lambda ev: ev["gpu"]["connected"] and \
            (ev["gpu"]["library"] or {}).get("scans", 0) > 0
        stats_line(daemon, scanning, 60, "the library connected and scanning",
                   lambda: no_connection(attacker, planted))
        lib_dir = check_library_dir(pid)
        ctx.log("the victim's library listens in %s; the planted socket got no connection" %
                lib_dir)
        steps = [l for l in trainer.out if l.startswith(b"STEP ")]
        fault = int(steps[-1].split()[1]) + 30
        trainer.p.stdin.write(b"FAULT %d\n" % fault)
        trainer.p.stdin.flush()
        if trainer.wait(TRAINER_TIMEOUT) != 0:
            raise Fail("the victim failed:\n%s" % tail(trainer.stderr_lines()))
        wait_daemon_exit(daemon)
        no_connection(attacker, planted)
        events = events_of(daemon)
        oracle, _ = oracle_of(ctx, "gpu_emu", "--fault-step", str(fault))
        check_fault(events, oracle, fault)
        stats = [ev for ev in events if ev["event"] == "stats"][-1]
        gpu = stats["gpu"]
        # every tensor went through the library (BPF reads none itself under the switch)
        if gpu["refused"] != 0 or gpu["connects"] < 1 or gpu["anomalies"] < 1 or \
                stats["tensors_scanned"] != 0:
            raise Fail("stats at the end: tensors_scanned %r, gpu %s" %
                       (stats["tensors_scanned"], json.dumps(gpu)))
        if private_dirs(pid) or not os.path.lexists(planted):
            raise Fail("after the victim: library directories %s; planted socket there: %s" %
                       (private_dirs(pid), os.path.lexists(planted)))
    finally:
        if attacker is not None:
            attacker.close()
        remove(tmp, pid)


def stand_in_records(path):
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


@environments(*HOST_ONLY)
def test_security_gpu_no_library(ctx):
    """No connection to a target that maps no library, planted socket or its own."""
    built(ctx)
    tmp = scratch()
    attacker = pid = None
    log = os.path.join(tmp, "stand-in.jsonl")
    try:
        attacker = Attacker(ctx, tmp)
        planted, pid = attacker.plant(ctx)
        trainer = victim(ctx, pid, [], trainer_argv(ctx, "gpu_meta", "--live", "--fake-lib", log,
                                                    "--legacy-socket", "--no-map",
                                                    "--after", "1000000000"))
        daemon = Proc(["env", "NANWATCH_TEST_GPU_DEVICE=meta", ctx.daemon, "--pid", str(pid),
                       "--layouts", ctx.layouts, "--stats-interval", "1"], term_timeout=10)
        ctx.current_daemon = daemon
        wait_attach(daemon)
        # five seconds: five tries to connect
        since = len(daemon.out)
        deadline = time.monotonic() + 30
        while sum(1 for l in daemon.out[since:] if is_event("stats")(l)) < 5:
            no_connection(attacker, planted)
            if time.monotonic() > deadline or not daemon.running():
                raise Fail("no five stats lines in 30 s:\n%s" % tail(daemon.stderr_lines()))
            time.sleep(0.2)
        no_connection(attacker, planted)
        got = [r for r in stand_in_records(log) if "accepted" in r]
        if got:
            raise Fail("the daemon connected to a target that maps no library: %s" % got)
        gpu = [ev for ev in events_of(daemon) if ev["event"] == "stats"][-1]["gpu"]
        if gpu["connected"] or gpu["connects"] or gpu["refused"]:
            raise Fail("stats.gpu before the library is mapped: %s" % json.dumps(gpu))
        ctx.log("5 s without the library mapped: no connection to the planted socket or the "
                "target's own")
        trainer.send(b"map\n", close=False)
        stats_line(daemon, lambda ev: ev["gpu"]["connected"] and ev["gpu"]["ready"], 30,
                   "a connection once the library's name is mapped",
                   lambda: no_connection(attacker, planted))
        accepted = [r for r in stand_in_records(log) if "accepted" in r]
        if [r["listener"] for r in accepted] != ["private"]:
            raise Fail("the stand-in's connections once mapped: %s" % accepted)
        trainer.send(b"stop\n")
        if trainer.wait(60) != 0:
            raise Fail("the victim failed:\n%s" % tail(trainer.stderr_lines()))
        wait_daemon_exit(daemon)
        no_connection(attacker, planted)
    finally:
        if attacker is not None:
            attacker.close()
        remove(tmp, pid)


def read_events(path):
    try:
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def service(ctx, tmp, token):
    """nanwatchd --config: the two rules, events to a file, a stats line a second."""
    events = os.path.join(tmp, "events.ndjson")
    config = os.path.join(tmp, "nanwatch.yaml")
    with open(config, "w") as f:
        f.write("watch:\n")
        for name in ("hostile", "healthy"):
            f.write("  - name: %s\n    match: {env: {NW_SECURITY_TEST: '^%s-%s$'}}\n" %
                    (name, token, name))
        f.write("output:\n  - file: %s\nlayouts: %s\nscan_interval_ms: 100\n"
                "stats_interval: 1\n" % (events, ctx.layouts))
    daemon = Proc(["env", "NANWATCH_TEST_GPU_DEVICE=meta", ctx.daemon, "--config", config,
                   "--verbose"], term_timeout=10)
    ctx.current_daemon = daemon
    return daemon, events


def wait_records(path, pred, timeout, what, daemon):
    deadline = time.monotonic() + timeout
    while True:
        recs = stand_in_records(path)
        errors = [r for r in recs if "error" in r]
        if errors:
            raise Fail("the hostile stand-in failed: %s" % errors)
        if pred(recs):
            return recs
        if time.monotonic() > deadline or not daemon.running():
            raise Fail("no %s in %d s (daemon running: %s); records: %s\n%s" % (
                what, timeout, daemon.running(), recs[-5:], tail(daemon.stderr_lines())))
        time.sleep(0.2)


def check_hostile(recs, events, pid):
    """Nothing written, nothing reached; counted as it expected; one anomaly, its own. Every
    claim checked, the ones that do not hold said together."""
    wrong = []
    hellos = [r for r in recs if "hello" in r]
    for h in hellos:
        w = h["ring_writes"]
        if w["mmap_write"] != "EPERM" or w["mprotect_write"] != "EACCES" or \
                w["bpf_update"] is None:
            wrong.append("connection %d: the ring took a write: %s" % (h["hello"], w))
    others = [o for r in recs if "others" in r for o in r["others"]]
    if len(others) < 2 or any(o["error"] != "Permission denied" for o in others):
        wrong.append("the other user's sockets, tried: %s" % others)
    sent = [r for r in recs if "sent" in r]
    want = {k: sum(1 for r in sent if r["expect"] == k) for k in ("invalid", "lost")}
    forged = [r for r in sent if r["expect"] == "anomaly"][0]
    mine = [ev for ev in events if ev["pid"] == pid]
    gpu = [ev for ev in mine if ev["event"] == "stats"][-1]["gpu"]
    got = {"invalid": gpu["invalid"], "lost": gpu["results_lost"]}
    if got != want or gpu["connects"] != 4 or gpu.get("refused") != 0 or gpu["anomalies"] != 1:
        wrong.append("stats.gpu %s; it expected %s, 4 connects, 1 anomaly" %
                     (json.dumps(gpu), want))
    anomalies = [ev for ev in mine if ev["event"] == "anomaly"]
    if len(anomalies) != 1 or anomalies[0]["numel"] != forged["numel"] or \
            anomalies[0]["nan"] != forged["numel"] or \
            anomalies[0]["iteration"] != forged["iteration"]:
        wrong.append("%d anomalies (%s); its one checked NaN result: %s" %
                     (len(anomalies), json.dumps(anomalies[:2]), forged))
    errors = [ev for ev in mine if ev["event"] == "error"]
    diagnoses = sum(1 for ev in mine if ev["event"] == "diagnosis")
    if errors or diagnoses > 1:
        wrong.append("error events %s, %d diagnoses" % (errors, diagnoses))
    accepted = [r["listener"] for r in recs if "accepted" in r]
    if len(hellos) != 5 or accepted != ["private"] * 5:
        wrong.append("%d HELLOs, connections through %s" % (len(hellos), accepted))
    if wrong:
        raise Fail("hostile target:\n    " + "\n    ".join(wrong))
    return want


def stamp(ev):
    """An event's time in seconds (RFC 3339, UTC)."""
    whole, _, frac = ev["time"].rstrip("Z").partition(".")
    return calendar.timegm(time.strptime(whole, "%Y-%m-%dT%H:%M:%S")) + float("0." + (frac or "0"))


def check_healthy(events, pid, flood):
    """Nothing from the other target: no finding, nothing refused, stats on time throughout."""
    mine = [ev for ev in events if ev["pid"] == pid]
    bad = [ev for ev in mine if ev["event"] in ("anomaly", "diagnosis", "lost") or
           (ev["event"] == "error" and ev.get("message") != FAKE_NOTICE)]
    if bad:
        raise Fail("healthy target got %s" % json.dumps(bad[:3]))
    stats = [ev for ev in mine if ev["event"] == "stats"]
    gpu = stats[-1]["gpu"]
    if gpu["connects"] != 1 or gpu["requests"] < 1 or gpu["invalid"] or \
            gpu["results_lost"] or gpu["refused"] or gpu["anomalies"]:
        raise Fail("healthy target's stats.gpu: %s" % json.dumps(gpu))
    # connected from its first connection until its trainer stopped, never cut off
    up = [i for i, ev in enumerate(stats) if ev["gpu"]["connected"]]
    if len(up) < 5 or up != list(range(up[0], up[-1] + 1)):
        raise Fail("healthy target's link over its stats lines: %s" %
                   [ev["gpu"]["connected"] for ev in stats])
    times = [stamp(ev) for ev in stats]
    gaps = [b - a for a, b in zip(times, times[1:])]
    if len(stats) < 5 or max(gaps) > 5:
        raise Fail("healthy target's stats lines: %d, gaps up to %s s (the flood took %s s)" %
                   (len(stats), max(gaps) if gaps else None, flood["seconds"]))
    return len(stats), max(gaps)


@environments(*HOST_ONLY)
def test_security_gpu_hostile_peer(ctx):
    """A target's lying library reaches its own results, no further, and holds nobody up."""
    tmp = scratch()
    token = "sec-%d" % os.getpid()
    hostile_log, healthy_log = (os.path.join(tmp, n) for n in ("hostile.jsonl", "healthy.jsonl"))
    try:
        daemon, events_path = service(ctx, tmp, token)
        base = ["NANWATCH_CUPTI_DIR=" + tmp]
        healthy = Proc(as_user(VICTIM) + ["env", "NW_SECURITY_TEST=%s-healthy" % token] + base +
                       trainer_argv(ctx, "gpu_meta", "--live", "--fake-lib", healthy_log,
                                    "--legacy-socket", "--after", "1000000000"), stdin=True)
        hostile = Proc(as_user(NOBODY) + ["env", "NW_SECURITY_TEST=%s-hostile" % token] + base +
                       trainer_argv(ctx, "gpu_meta", "--live", "--hostile-lib", hostile_log,
                                    "--legacy-socket"), stdin=True)
        for t in (healthy, hostile):
            if t.wait_out(lambda l: l.startswith(b"STEP "), 60) is None:
                raise Fail("trainer did not train:\n%s" % tail(t.stderr_lines()))
        recs = wait_records(hostile_log, lambda rs: any("done" in r for r in rs), 180,
                            "end of the hostile peer's acts", daemon)
        flood = [r for r in recs if r.get("sent") == "flood"][0]
        ctx.log("hostile peer: %d acts done; %d STATS messages in %.2f s" %
                (sum(1 for r in recs if "hello" in r), flood["count"], flood["seconds"]))
        time.sleep(4)  # the healthy target's stats lines after the flood; the finding out
        for t in (healthy, hostile):
            t.send(b"stop\n")
        for t in (healthy, hostile):
            if t.wait(60) != 0:
                raise Fail("trainer %d failed:\n%s" % (t.pid, tail(t.stderr_lines())))
        deadline = time.monotonic() + 30
        while sum(1 for e in read_events(events_path) if e["event"] == "detach") < 2:
            if time.monotonic() > deadline or not daemon.running():
                raise Fail("no detach of both targets (daemon running: %s):\n%s" %
                           (daemon.running(), tail(daemon.stderr_lines())))
            time.sleep(0.2)
        daemon.p.send_signal(signal.SIGTERM)
        if daemon.wait(30) != 0:
            raise Fail("daemon exited %r:\n%s" % (daemon.p.returncode,
                                                   tail(daemon.stderr_lines())))
        events = read_events(events_path)
        # setpriv and env exec: the trainers' pids are the ones started
        attached = sorted(e["pid"] for e in events if e["event"] == "attach")
        if attached != sorted([healthy.pid, hostile.pid]):
            raise Fail("attached %s, not the two targets %s" %
                       (attached, sorted([healthy.pid, hostile.pid])))
        want = check_hostile(stand_in_records(hostile_log), events, hostile.pid)
        n, gap = check_healthy(events, healthy.pid, flood)
        ctx.log("hostile target: 1 anomaly, invalid %d, lost %d as it expected; healthy target: "
                "%d stats lines, at most %.2f s apart, nothing else" %
                (want["invalid"], want["lost"], n, gap))
    finally:
        remove(tmp)
