"""Service mode (nanwatchd --config FILE): discovery, many targets in one daemon, the config.

service_discovery (host, and the trainers in a mount-namespace container): a daemon started from a temporary config (events to a file) before the
processes it is to find; READY=1 arrives on a socket the test binds as NOTIFY_SOCKET once the
config is loaded and the first scan ran. Then two matching trainers (rules told apart by an
environment marker) with different RANK, LOCAL_RANK, WORLD_SIZE and job variables, a matching
launcher-like python that never imports torch, and a trainer that matches no rule: exactly the
two matching trainers are attached (by pid), their anomalies carry their own rank, world_size
and job (the launcher's TORCHELASTIC_RUN_ID for one, the rule's job key over SLURM_JOB_ID for
the other), the launcher costs no error event, and each is detached with reason target_exit
when it exits; SIGTERM then ends the daemon with exit 0 and STOPPING=1.

service_leak (host and container): 10 trainers started and stopped (two at a time) while one daemon runs: its open
descriptors, and among them its BPF programs, maps and links, are the same before and after.

service_broken_output (host and container): a unix collector that goes away ends no watch; the file output goes on,
and a new collector at the same path gets the target's lines from its attach (queued) on, with a
lost event for those its queue dropped meanwhile.

service_exec: a python that matches no rule execs, after its first seconds, a python that does:
the new program is attached.

service_sighup (host and container): the event file renamed and SIGHUP sent: a new file (0640) gets the next lines.

service_target_error: a matching target that cannot be watched (no layout table) gets one error
event with its pid and rank; the daemon goes on.

service_children: a torch process that forks a child which does not exec (as DataLoader
workers are made): under a rule without `children` only the parent is attached; under one with
`children: true` the child too.

service_metrics (host and container): metrics.listen in the config: the endpoint counts the target while it is
watched, its series carry its pid, rank and job, its anomaly count equals the anomaly events it
wrote, and once it exits nanwatch_targets is 0 and the totals keep its anomalies.

service_check_config: --check-config on a good file (exit 0, a one-line summary) and on bad
ones (exit 1, one line "FILE: line N: KEY: ..." on stderr).
"""
import json
import os
import signal
import socket
import subprocess
import tempfile
import time

from nwharness import ATTACH_TIMEOUT, DETACH_TIMEOUT, TRAINER_TIMEOUT, Fail, trainer_argv
from nwchecks import (HOST_ONLY, READY_TIMEOUT, attach_latencies, environments, expect_notify,
                      free_port, has_event, metric, notify_socket, read_events, scrape,
                      start_process, start_ready, start_service, start_trainer, stop_service,
                      usage, wait_events, wait_metric, wait_stderr, write_config)

LEAK_TRAINERS = 10



@environments("host", "container")
def test_service_discovery(ctx):
    tmp = tempfile.mkdtemp(dir=ctx.tmp, prefix="service-")
    token = "svc-%d" % os.getpid()
    config, events_path = write_config(ctx, tmp, [
        "  - name: a\n    match: {env: {NW_SERVICE_TEST: '^%s-a$'}}\n" % token,
        "  - name: b\n    match: {env: {NW_SERVICE_TEST: '^%s-b$'}}\n"
        "    job: named-job\n" % token,
    ])
    sock, path = notify_socket(tmp)
    try:
        daemon = start_service(ctx, config, notify=path)
        expect_notify(sock, "READY=1")
        a = start_trainer(ctx, {"NW_SERVICE_TEST": token + "-a", "RANK": "0", "WORLD_SIZE": "2",
                                "TORCHELASTIC_RUN_ID": "elastic-7"})
        b = start_trainer(ctx, {"NW_SERVICE_TEST": token + "-b", "RANK": "1", "LOCAL_RANK": "1",
                                "WORLD_SIZE": "2", "SLURM_JOB_ID": "99"})
        launcher = start_process(ctx, {"NW_SERVICE_TEST": token + "-a"},
                                 ["/usr/bin/python3", "-c", "import time; time.sleep(600)"])
        other = start_trainer(ctx, {"RANK": "5"})
        for t in (a, b, other):
            if t.wait_out(lambda l: l.startswith(b"STEP "), 120) is None:
                raise Fail("trainer %d did not train:\n%s" % (t.pid, t.stderr_tail()))
        for t in (a, b):
            wait_events(events_path, daemon, has_event("attach", t.pid),
                        "attach of %d" % t.pid, ATTACH_TIMEOUT)
            t.send(b"fault\n")
        for t in (a, b):
            if t.wait(TRAINER_TIMEOUT) != 0:
                raise Fail("trainer %d failed under the daemon:\n%s" % (t.pid, t.stderr_tail()))
            wait_events(events_path, daemon, has_event("detach", t.pid),
                        "detach of %d" % t.pid, DETACH_TIMEOUT)
        cpu, hwm = usage(daemon.pid)
        ctx.log("daemon: %.2f s CPU, peak RSS %d KiB with 2 targets; attach latency: %s" %
                (cpu, hwm, "; ".join(attach_latencies(daemon))))
        if not launcher.running() or not other.running():
            raise Fail("the launcher or the unmatched trainer ended early (test too slow)")
        stop_service(daemon, sock)
    finally:
        sock.close()
    events = read_events(events_path)
    attached = sorted(e["pid"] for e in events if e["event"] == "attach")
    if attached != sorted([a.pid, b.pid]):
        raise Fail("attached %s, not exactly the matching trainers %s (launcher %d, other %d)" %
                   (attached, sorted([a.pid, b.pid]), launcher.pid, other.pid))
    errors = [e for e in events if e["event"] == "error"]
    if errors:
        raise Fail("error events: %s" % errors)
    want = {a.pid: {"rank": 0, "world_size": 2, "job": "elastic-7", "local_rank": None},
            b.pid: {"rank": 1, "world_size": 2, "job": "named-job", "local_rank": 1}}
    for pid, fields in want.items():
        mine = [e for e in events if e["pid"] == pid]
        anomalies = [e for e in mine if e["event"] == "anomaly"]
        if not anomalies:
            raise Fail("no anomaly from pid %d" % pid)
        for e in mine:
            got = {k: e.get(k) for k in fields}
            if got != fields:
                raise Fail("pid %d: %s event has %s, not %s" % (pid, e["event"], got, fields))
        detach = [e for e in mine if e["event"] == "detach"]
        if len(detach) != 1 or detach[0]["reason"] != "target_exit":
            raise Fail("pid %d: detach events %s, not one with reason target_exit" %
                       (pid, detach))


def bpf_fds(pid):
    """The daemon's lasting descriptors by kind (bpf-prog, bpf-map, bpf_link, perf_event,
    other): the least of 10 looks 50 ms apart, as a /proc scan holds a file open for a moment."""
    looks = []
    for _ in range(10):
        looks.append(fds_now(pid))
        time.sleep(0.05)
    least = {k: min(look.get(k, 0) for look in looks) for k in set().union(*looks)}
    return {k: n for k, n in least.items() if n}


def fds_now(pid):
    kinds = {}
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            target = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except FileNotFoundError:
            continue
        kind = target[len("anon_inode:"):].strip("[]") if target.startswith("anon_inode:") \
            else "other"
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


@environments("host", "container")
def test_service_leak(ctx):
    tmp = tempfile.mkdtemp(dir=ctx.tmp, prefix="service-")
    token = "leak-%d" % os.getpid()
    config, events_path = write_config(ctx, tmp, [
        "  - name: leak\n    match: {env: {NW_SERVICE_TEST: '^%s$'}}\n" % token])
    daemon = start_ready(ctx, tmp, config)
    idle = bpf_fds(daemon.pid)

    def cycle(n):
        """n trainers at once, each attached, told to fault, exited and detached."""
        ts = [start_trainer(ctx, {"NW_SERVICE_TEST": token}) for _ in range(n)]
        for t in ts:
            wait_events(events_path, daemon, has_event("attach", t.pid),
                        "attach of %d" % t.pid, ATTACH_TIMEOUT)
            t.send(b"fault\n")
        for t in ts:
            if t.wait(TRAINER_TIMEOUT) != 0:
                raise Fail("trainer %d failed under the daemon:\n%s" % (t.pid, t.stderr_tail()))
            wait_events(events_path, daemon, has_event("detach", t.pid),
                        "detach of %d" % t.pid, DETACH_TIMEOUT)
        return ts

    cycle(1)  # what libbpf keeps once per process (kernel BTF, feature probes) is not a leak
    before = bpf_fds(daemon.pid)
    started = time.monotonic()
    pids = []
    for _ in range(LEAK_TRAINERS // 2):
        pids += [t.pid for t in cycle(2)]
    after = bpf_fds(daemon.pid)
    cpu, hwm = usage(daemon.pid)
    ctx.log("%d trainers in %.0f s; daemon fds idle %s, after the first %s, after all %s; "
            "%.2f s CPU, peak RSS %d KiB" % (LEAK_TRAINERS, time.monotonic() - started, idle,
                                             before, after, cpu, hwm))
    stop_service(daemon)
    events = read_events(events_path)
    for pid in pids:
        detach = [e for e in events if e["pid"] == pid and e["event"] == "detach"]
        if len(detach) != 1:
            raise Fail("pid %d: %d detach events" % (pid, len(detach)))
    if after != before:
        raise Fail("the daemon's descriptors changed over %d trainers: %s before, %s after" %
                   (LEAK_TRAINERS, before, after))


def check_config(ctx, text):
    path = os.path.join(tempfile.mkdtemp(dir=ctx.tmp, prefix="config-"), "nw.yaml")
    with open(path, "w") as f:
        f.write(text)
    p = subprocess.run([ctx.daemon, "--check-config", path], capture_output=True, text=True,
                       timeout=30)
    return path, p


@environments(*HOST_ONLY)
def test_service_check_config(ctx):
    path, p = check_config(ctx, "watch:\n  - name: ddp\n    match: {cmdline: 'train\\.py'}\n"
                                "output:\n  - stdout: true\nmetrics: {listen: '127.0.0.1:9464'}\n")
    if p.returncode != 0 or p.stderr or p.stdout.count("\n") != 1 or \
            not p.stdout.startswith(path + ": 1 rule (ddp), 1 output"):
        raise Fail("good config: exit %d, stdout %r, stderr %r" % (p.returncode, p.stdout,
                                                                  p.stderr))
    shipped = os.path.join(os.path.dirname(__file__), "..", "..", "config", "nanwatch.yaml")
    p = subprocess.run([ctx.daemon, "--check-config", shipped], capture_output=True, text=True,
                       timeout=30)
    if p.returncode != 0 or p.stderr:
        raise Fail("the shipped example config/nanwatch.yaml: exit %d, stderr %r" %
                   (p.returncode, p.stderr))
    for extra in (["--pid", "1"], ["--output", "-"], ["--mode", "loss"], ["--metrics", "x"]):
        p = subprocess.run([ctx.daemon, "--config", path] + extra, capture_output=True,
                           text=True, timeout=30)
        if p.returncode != 2 or "--config takes the watch's options from FILE" not in p.stderr:
            raise Fail("--config with %s: exit %d, stderr %r" % (extra, p.returncode, p.stderr))
    bad = [
        ("watch:\n  - name: a\n    match:\n      cmdline: 'a(b'\n",
         "line 4: cmdline: invalid regular expression"),
        ("watch:\n  - name: a\n    match: {cmdline: x}\n    colour: red\n",
         "line 4: unknown key 'colour'"),
        ("watch:\n  - name: a\n    match: {cmdline: x}\nmetrics:\n  listen: 0.0.0.0:9464\n",
         "line 5: listen: '0.0.0.0:9464' is not a loopback address"),
        ("watch:\n  - name: a\n    match: {cmdline: x}\n    mode: fast\n",
         "line 4: mode: 'fast' is not full, sample or loss"),
    ]
    for text, want in bad:
        path, p = check_config(ctx, text)
        line = "nanwatchd: %s: %s" % (path, want)
        if p.returncode != 1 or p.stdout or p.stderr.count("\n") != 1 or \
                not p.stderr.startswith(line):
            raise Fail("bad config: exit %d, stdout %r, stderr %r; wanted exit 1 and %r" %
                       (p.returncode, p.stdout, p.stderr, line))


# (config key, its text in a config, command-line option, value): the options both take
SHARED_VALUES = [
    ("capture_max_mb", "watch:\n  - match: {cmdline: x}\n    capture_max_mb: %s\n",
     "--capture-max-mb", v) for v in ("0.5", ".25", "512", "0", "512.5", "1e2", "0x10")] + [
    ("mode", "watch:\n  - match: {cmdline: x}\n    mode: %s\n", "--mode", v)
    for v in ("loss", "fast")] + [
    ("backward", "watch:\n  - match: {cmdline: x}\n    backward: %s\n", "--backward", v)
    for v in ("off", "yes")] + [
    ("stats_interval", "watch: [{match: {cmdline: x}}]\nstats_interval: %s\n",
     "--stats-interval", v) for v in ("0", "86400", "86401", "1.5")] + [
    ("max_scan_mb", "watch: [{match: {cmdline: x}}]\nmax_scan_mb: %s\n", "--max-scan-mb", v)
    for v in ("1", "0", "0.5")] + [
    ("output_queue_kb", "watch: [{match: {cmdline: x}}]\noutput_queue_kb: %s\n",
     "--output-queue-kb", v) for v in ("4", "0")] + [
    ("listen", "watch: [{match: {cmdline: x}}]\nmetrics: {listen: '%s'}\n", "--metrics", v)
    for v in ("localhost:9464", "[::ffff:127.0.0.1]:9464", "0.0.0.0:9464", "127.0.0.1:0")]


@environments(*HOST_ONLY)
def test_service_check_config_same_values(ctx):
    """Each option the config and the command line share, with values good and bad: the
    config (--check-config) and the command line (--pid of no process, so that a value taken
    ends in "no such process", exit 1) both take it or both refuse it (exit 1 and 2), and a
    refusal says the same after the option's name."""
    differ = []
    for key, text, flag, value in SHARED_VALUES:
        path, cfg = check_config(ctx, text % value)
        cli = subprocess.run([ctx.daemon, "--pid", str(2 ** 22 + 1), flag, value],
                             capture_output=True, text=True, timeout=30)
        took = (cfg.returncode == 0, cli.returncode == 1 and "no such process" in cli.stderr)
        if took[0] != took[1] or (not took[0] and cli.returncode != 2):
            differ.append("%s/%s %r: config exit %d %r, command line exit %d %r" % (
                key, flag, value, cfg.returncode, cfg.stderr.strip(), cli.returncode,
                cli.stderr.strip()))
            continue
        if took[0]:
            continue
        said = cfg.stderr.split(": %s: " % key, 1)[-1].strip()
        want = cli.stderr.split(": %s: " % flag, 1)[-1].replace(" (see --help)", "").strip()
        if said != want:
            differ.append("%s %r: config says %r, command line %r" % (key, value, said, want))
    if differ:
        raise Fail("the config and the command line differ:\n  " + "\n  ".join(differ))
    ctx.log("%d values of %d options read alike" % (len(SHARED_VALUES),
                                                    len({v[0] for v in SHARED_VALUES})))


@environments("host", "container")
def test_service_broken_output(ctx):
    """A collector that goes away ends no watch: the daemon queues for it (4 KiB: the stats
    lines each second overflow it), the file output goes on, and a new collector at the path
    gets the queued attach, a lost event, the anomalies and the detach (target_exit, not
    error) of the target, seq increasing; the daemon exits 0 on SIGTERM."""
    tmp = tempfile.mkdtemp(dir=ctx.tmp, prefix="service-")
    token = "broken-%d" % os.getpid()
    config, events_path = write_config(ctx, tmp, [
        "  - name: t\n    match: {env: {NW_SERVICE_TEST: '^%s$'}}\n" % token],
        extra="output_queue_kb: 4\nstats_interval: 1\n")
    collector = os.path.join(tmp, "collector.sock")
    name = "unix:" + collector
    with open(config) as f:
        text = f.read().replace("output:\n", "output:\n  - unix: %s\n" % collector)
    with open(config, "w") as f:
        f.write(text)
    servers = [listen_unix(collector)]
    try:
        daemon = start_service(ctx, config)
        accept_collector(daemon, servers[0]).close()  # the collector goes before any line
        servers[0].close()
        os.unlink(collector)
        t = start_trainer(ctx, {"NW_SERVICE_TEST": token})
        wait_events(events_path, daemon, has_event("attach", t.pid), "attach of %d" % t.pid,
                    ATTACH_TIMEOUT)
        wait_stderr(daemon, "collector of output %s went away" % name)
        wait_events(events_path, daemon, away_dropping(t.pid, name),
                    "a stats line with the collector away and lines dropped", 60)
        servers.append(listen_unix(collector))
        conn = accept_collector(daemon, servers[1])
        t.send(b"fault\n")
        if t.wait(TRAINER_TIMEOUT) != 0:
            raise Fail("trainer %d failed under the daemon:\n%s" % (t.pid, t.stderr_tail()))
        events = wait_events(events_path, daemon, has_event("detach", t.pid),
                             "detach of %d" % t.pid, DETACH_TIMEOUT)
        stop_service(daemon)
        got = read_to_eof(conn)
    finally:
        for srv in servers:
            srv.close()
        if os.path.exists(collector):
            os.unlink(collector)
    check_reconnected(ctx, got, events, t.pid, name)
    if "reconnected output " + name not in "\n".join(daemon.stderr_lines()):
        raise Fail("stderr does not say the output reconnected:\n%s" % daemon.stderr_tail())


def away_dropping(pid, name):
    """pred: a stats line of pid says output name is away and dropped lines."""
    def pred(events):
        for e in events:
            if e["pid"] == pid and e["event"] == "stats":
                sink = {s["name"]: s for s in e["sinks"]}[name]
                if not sink["connected"] and sink["dropped"]:
                    return True
        return False
    return pred


def listen_unix(path):
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    server.settimeout(READY_TIMEOUT)
    return server


def accept_collector(daemon, server):
    try:
        return server.accept()[0]
    except socket.timeout:
        raise Fail("the daemon did not connect to the collector:\n%s" % daemon.stderr_tail())


def read_to_eof(conn):
    conn.settimeout(DETACH_TIMEOUT)
    data = b""
    while True:
        chunk = conn.recv(1 << 16)
        if not chunk:
            conn.close()
            return data
        data += chunk


def check_reconnected(ctx, got, events, pid, name):
    """What the new collector read: whole JSON lines, the target's attach (queued while the
    output was away), a lost event counting the lines dropped meanwhile, anomalies and detach
    (target_exit), seq increasing; the file ends at the same seq."""
    if not got.endswith(b"\n"):
        raise Fail("the new collector's stream ends in a cut line: %r" % got[-100:])
    mine = [e for e in (json.loads(line) for line in got.splitlines()) if e["pid"] == pid]
    names = [e["event"] for e in mine]
    seqs = [e["seq"] for e in mine]
    if not names or names[0] != "attach" or names[-1] != "detach" or "anomaly" not in names:
        raise Fail("the new collector got %s for pid %d" % (names[:12], pid))
    if seqs != sorted(set(seqs)) or mine[-1]["reason"] != "target_exit":
        raise Fail("the new collector's seq %s..., detach reason %r" % (seqs[:8],
                                                                      mine[-1]["reason"]))
    stats = [e for e in events if e["pid"] == pid and e["event"] == "stats"][-1]
    sink = {s["name"]: s for s in stats["sinks"]}[name]
    if sink["reconnects"] != 1 or sink["error"] is not None:
        raise Fail("stats.sinks for the collector: %s" % json.dumps(sink))
    lost = [e for e in mine if e["event"] == "lost" and e["sink"] == name]
    if not lost or not 0 < sum(e["count"] for e in lost) <= sink["dropped"]:
        raise Fail("lost events %s read by the new collector, %d lines dropped" % (
            json.dumps(lost)[:300], sink["dropped"]))
    if [e["seq"] for e in events if e["pid"] == pid][-1] != seqs[-1]:
        raise Fail("the file and the collector end at different seq")
    ctx.log("the new collector read %d lines of pid %d (%s), stats.sinks %s" % (
        len(mine), pid, ", ".join(sorted(set(names))), json.dumps(sink)))


@environments(*HOST_ONLY)
def test_service_exec(ctx):
    """A python that matches no rule and, past its first seconds, execs a python that does
    (same comm, so only the exec itself tells): the new program is attached."""
    tmp = tempfile.mkdtemp(dir=ctx.tmp, prefix="service-")
    token = "exec-%d" % os.getpid()
    config, events_path = write_config(ctx, tmp, [
        "  - name: t\n    match: {cmdline: 'inflight\\.py .*--variant %s'}\n" % token])
    daemon = start_ready(ctx, tmp, config)
    argv = trainer_argv(ctx, "inflight", "--live", "--pace", "0.02", "--variant", token)
    launcher = start_process(ctx, {"NW_SERVICE_ARGV": json.dumps(argv)}, [
        "/usr/bin/python3", "-c",
        "import json, os, time\n"
        "argv = json.loads(os.environ['NW_SERVICE_ARGV'])\n"
        "print('WAITING', flush=True)\n"
        "time.sleep(4)\n"
        "os.execv(argv[0], argv)\n"])
    if launcher.wait_out(lambda l: l.startswith(b"STEP "), 120) is None:
        raise Fail("the execed trainer did not train:\n%s" % launcher.stderr_tail())
    wait_events(events_path, daemon, has_event("attach", launcher.pid),
                "attach of %d after its exec" % launcher.pid, ATTACH_TIMEOUT)
    launcher.send(b"fault\n")
    if launcher.wait(TRAINER_TIMEOUT) != 0:
        raise Fail("trainer %d failed under the daemon:\n%s" % (launcher.pid,
                                                              launcher.stderr_tail()))
    wait_events(events_path, daemon, has_event("detach", launcher.pid),
                "detach of %d" % launcher.pid, DETACH_TIMEOUT)
    stop_service(daemon)


@environments("host", "container")
def test_service_sighup(ctx):
    """logrotate's way: the event file renamed, SIGHUP; the next target's lines go to a new
    file at the path, created 0640."""
    tmp = tempfile.mkdtemp(dir=ctx.tmp, prefix="service-")
    token = "hup-%d" % os.getpid()
    config, events_path = write_config(ctx, tmp, [
        "  - name: t\n    match: {env: {NW_SERVICE_TEST: '^%s$'}}\n" % token])
    daemon = start_ready(ctx, tmp, config)
    os.rename(events_path, events_path + ".1")
    daemon.p.send_signal(signal.SIGHUP)
    deadline = time.monotonic() + DETACH_TIMEOUT
    while not os.path.exists(events_path):
        if time.monotonic() > deadline or not daemon.running():
            raise Fail("no new %s after SIGHUP:\n%s" % (events_path, daemon.stderr_tail()))
        time.sleep(0.1)
    if os.stat(events_path).st_mode & 0o777 != 0o640:
        raise Fail("the new event file has mode %o, not 640" % (os.stat(events_path).st_mode &
                                                                0o777))
    t = start_trainer(ctx, {"NW_SERVICE_TEST": token})
    wait_events(events_path, daemon, has_event("attach", t.pid), "attach of %d" % t.pid,
                ATTACH_TIMEOUT)
    t.kill()
    wait_events(events_path, daemon, has_event("detach", t.pid), "detach of %d" % t.pid,
                DETACH_TIMEOUT)
    stop_service(daemon)
    if read_events(events_path + ".1"):
        raise Fail("lines in the renamed file after SIGHUP: %s" % read_events(events_path + ".1"))


@environments(*HOST_ONLY)
def test_service_target_error(ctx):
    """A target that cannot be watched (here: no layout table for its versions) costs one
    error event naming it, with its rank; the daemon goes on and stops with exit 0."""
    tmp = tempfile.mkdtemp(dir=ctx.tmp, prefix="service-")
    token = "err-%d" % os.getpid()
    config, events_path = write_config(ctx, tmp, [
        "  - name: t\n    match: {env: {NW_SERVICE_TEST: '^%s$'}}\n" % token])
    empty = os.path.join(tmp, "no-layouts")
    os.mkdir(empty)
    with open(config) as f:
        text = f.read().replace("layouts: %s\n" % ctx.layouts, "layouts: %s\n" % empty)
    with open(config, "w") as f:
        f.write(text)
    daemon = start_service(ctx, config)
    t = start_trainer(ctx, {"NW_SERVICE_TEST": token, "RANK": "3"})
    events = wait_events(events_path, daemon, has_event("error", t.pid), "error for %d" % t.pid,
                         ATTACH_TIMEOUT)
    errors = [e for e in events if e["event"] == "error"]
    if len(errors) != 1 or errors[0].get("rank") != 3 or "layout" not in errors[0]["message"]:
        raise Fail("error events %s: not one for pid %d with rank 3 naming the layout" %
                   (errors, t.pid))
    if any(e["event"] == "attach" for e in events):
        raise Fail("an attach without layout tables")
    stop_service(daemon)




@environments("host", "container")
def test_service_metrics(ctx):
    tmp = tempfile.mkdtemp(dir=ctx.tmp, prefix="service-")
    token = "metrics-%d" % os.getpid()
    port = free_port()
    config, events_path = write_config(ctx, tmp, [
        "  - name: m\n    match: {env: {NW_SERVICE_TEST: '^%s$'}}\n    job: mjob\n" % token],
        metrics_port=port)
    daemon = start_ready(ctx, tmp, config)
    if metric(scrape(port), "nanwatch_targets") != 0:
        raise Fail("nanwatch_targets is not 0 before any target")
    t = start_trainer(ctx, {"NW_SERVICE_TEST": token, "RANK": "3", "WORLD_SIZE": "4"})
    wait_events(events_path, daemon, has_event("attach", t.pid), "attach of %d" % t.pid,
                ATTACH_TIMEOUT)
    samples = wait_metric(daemon, port, lambda s: metric(s, "nanwatch_targets") == 1,
                          "nanwatch_targets 1", ATTACH_TIMEOUT)
    series = [dict(pairs) for (n, pairs) in samples if n == "nanwatch_target_steps_total"]
    want = {"pid": '"%d"' % t.pid, "rank": '"3"', "job_id": '"mjob"'}
    if series != [want]:
        raise Fail("nanwatch_target_steps_total series %s, want one labelled %s" % (series, want))
    t.send(b"fault\n")
    if t.wait(TRAINER_TIMEOUT) != 0:
        raise Fail("trainer %d failed under the daemon:\n%s" % (t.pid, t.stderr_tail()))
    wait_events(events_path, daemon, has_event("detach", t.pid), "detach of %d" % t.pid,
                DETACH_TIMEOUT)
    anomalies = [e for e in read_events(events_path)
                 if e["event"] == "anomaly" and e["pid"] == t.pid]
    if not anomalies:
        raise Fail("no anomaly from the target")
    samples = wait_metric(daemon, port, lambda s: metric(s, "nanwatch_targets") == 0,
                          "nanwatch_targets 0 after the exit", DETACH_TIMEOUT)
    total = metric(samples, "nanwatch_anomalies_total")
    stop_service(daemon)
    if total != len(anomalies):
        raise Fail("nanwatch_anomalies_total %r, the stream has %d anomaly events" %
                   (total, len(anomalies)))


FORKER = """import os, sys, time, torch
child = os.fork()
if child == 0:
    time.sleep(120)
    os._exit(0)
print("CHILD %d" % child, flush=True)
sys.stdin.read()
os.kill(child, 9)
os.waitpid(child, 0)
"""


@environments(*HOST_ONLY)
def test_service_children(ctx):
    tmp = tempfile.mkdtemp(dir=ctx.tmp, prefix="service-")
    token = "fork-%d" % os.getpid()
    config, events_path = write_config(ctx, tmp, [
        "  - name: parents\n    match: {env: {NW_SERVICE_TEST: '^%s-a$'}}\n" % token,
        "  - name: families\n    match: {env: {NW_SERVICE_TEST: '^%s-b$'}}\n"
        "    children: true\n" % token])
    daemon = start_ready(ctx, tmp, config)
    procs = {}
    for k in "ab":
        p = start_process(ctx, {"NW_SERVICE_TEST": "%s-%s" % (token, k)},
                          ["/usr/bin/python3", "-c", FORKER])
        line = p.wait_out(lambda l: l.startswith(b"CHILD "), TRAINER_TIMEOUT)
        if line is None:
            raise Fail("forking python %s did not start:\n%s" % (k, p.stderr_tail()))
        procs[k] = (p, int(line.split()[1]))
    (pa, ca), (pb, cb) = procs["a"], procs["b"]
    for pid in (pa.pid, pb.pid, cb):
        wait_events(events_path, daemon, has_event("attach", pid), "attach of %d" % pid,
                    ATTACH_TIMEOUT)
    # the forked child of rule "parents" was found in the same scans as cb: give it the
    # time cb took and two more scans, then it must still be unwatched
    time.sleep(1.0)
    for p, _ in procs.values():
        p.send(b"")
    for p, child in procs.values():
        if p.wait(TRAINER_TIMEOUT) != 0:
            raise Fail("forking python %d failed:\n%s" % (p.pid, p.stderr_tail()))
    for pid in (pa.pid, pb.pid, cb):
        wait_events(events_path, daemon, has_event("detach", pid), "detach of %d" % pid,
                    DETACH_TIMEOUT)
    stop_service(daemon)
    attached = sorted(e["pid"] for e in read_events(events_path) if e["event"] == "attach")
    if attached != sorted([pa.pid, pb.pid, cb]):
        raise Fail("attached %s, want the parents %d, %d and rule families' child %d (not %d)" %
                   (attached, pa.pid, pb.pid, cb, ca))


RANK_EXIT_RANKS = 3
RANK_EXIT_DETACH_S = 15  # from a rank's exit to its detach line: about 2.5 s when it parks


@environments(*HOST_ONLY)
def test_service_rank_exit(ctx):
    """Three ranks of one job, each training in a thread it starts once attached (inflight
    --wait --in-thread), as a loader's or launcher's thread does: a frame entered from C after
    the attach that runs as long as the training. One rank exits. Its detach line must come
    within RANK_EXIT_DETACH_S, and the other two ranks must count steps after it. Each rank's
    uprobe session armed a return for the other ranks' calls (the kernel runs no program of a
    pid-filtered session for another process's hit), so the thread's frame kept a return
    pending and renewed, and on Linux 6.13+ the exited rank's removal waited for it: no detach
    line in 30 s, and the steps of the ranks left stopped counting (the pause of returns that
    the daemon made meanwhile lasted as long). Now the daemon parks every other session while
    a removal stays slow (stats.parked)."""
    tmp = tempfile.mkdtemp(dir=ctx.tmp, prefix="rankexit-")
    token = "rankexit-%d" % os.getpid()
    config, events_path = write_config(ctx, tmp, [
        "  - name: t\n    match: {env: {NW_RANKEXIT_TEST: '^%s$'}}\n" % token],
        extra="stats_interval: 1\n")
    daemon = start_ready(ctx, tmp, config)
    ranks = []
    try:
        for rank in range(RANK_EXIT_RANKS):
            p = start_process(ctx, {"NW_RANKEXIT_TEST": token, "RANK": str(rank)},
                              trainer_argv(ctx, "inflight", "--wait", "--in-thread",
                                           "--pace", "0.05", "--steps", "100000"))
            ranks.append(p)
            wait_events(events_path, daemon, has_event("attach", p.pid),
                        "the attach of rank %d" % rank, ATTACH_TIMEOUT * 2)
        for p in ranks:
            p.send(b"go\n", close=False)
        time.sleep(1)  # each rank's thread in its training loop
        t0 = time.monotonic()
        ranks[0].kill()
        wait_events(events_path, daemon, has_event("detach", ranks[0].pid),
                    "the exited rank's detach line", RANK_EXIT_DETACH_S)
        took = time.monotonic() - t0
        left = [p.pid for p in ranks[1:]]
        exited_at = max(e["time"] for e in read_events(events_path)
                        if e["event"] == "detach" and e["pid"] == ranks[0].pid)

        def stepped_after(events):
            after = [e for e in events if e["event"] == "stats" and e["pid"] in left and
                     e["time"] > exited_at]
            return all(len({e["steps"] for e in after if e["pid"] == pid}) > 1 for pid in left)
        wait_events(events_path, daemon, stepped_after,
                    "steps counted by the ranks left after the detach", RANK_EXIT_DETACH_S)
        stop_service(daemon)
    finally:
        for p in ranks:
            p.kill()
    events = read_events(events_path)
    parked = {e["pid"]: e["parked"] for e in events
              if e["event"] == "stats" and e["pid"] in left and e.get("parked")}
    ctx.log("the exited rank's detach line %.2f s after its exit; sessions parked %s" % (
        took, parked))
