"""The daemon's outputs attacked and stalled.

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
output_full_disk_service: the same in service mode, which outlives a broken output: the tmpfs
filled and freed twice, the file written again after SIGHUP and, without it, by the back-off
retry, each recovery followed by a lost event counting the lines dropped meanwhile.
output_sighup: the output file renamed and SIGHUP sent: a new file at the path, seq continuous
over both. output_collector_reconnect: the collector reads a few lines and goes (socket closed,
path removed) while stats lines keep coming; the watch goes on, and a new collector listening at
the path gets the lines queued meanwhile, then a lost event counting those its 4 KiB queue
dropped, then the later lines, to the detach (seq increasing, whole JSON lines).
"""
import contextlib
import errno
import json
import os
import select
import signal
import socket
import stat
import subprocess
import tempfile
import threading
import time

from nwharness import (ATTACH_TIMEOUT, DETACH_TIMEOUT, TRAINER_TIMEOUT, Fail, finish_trainer,
                       is_event, oracle_of, read_comm, run_trainer, start_daemon,
                       start_waiting_trainer, wait_attach, wait_daemon_exit)
from nwchecks import (HOST_ONLY, NOBODY, check_envelope, environments, expect_refusal, has_event,
                      last_stats, parse_stream, read_events, start_ready, start_trainer,
                      stop_service, target_untouched, wait_events, write_config)


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


@environments(*HOST_ONLY)
def test_output_symlinks(ctx):
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


@environments(*HOST_ONLY)
def test_output_special_files(ctx):
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


@environments(*HOST_ONLY)
def test_output_stalled_collector(ctx):
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


@environments(*HOST_ONLY)
def test_output_closed_pipe(ctx):
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


@contextlib.contextmanager
def small_tmpfs(ctx, size):
    """A tmpfs of size mounted for the case, unmounted (the daemon killed first) after it."""
    mnt = tempfile.mkdtemp(prefix="fulldisk-", dir=ctx.tmp)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s,mode=0755" % size, "tmpfs", mnt],
                       capture_output=True, timeout=30)
    if r.returncode != 0:
        raise Fail("cannot mount a tmpfs on %s: %s" % (mnt, r.stderr.decode()[-200:]))
    try:
        yield mnt
    finally:
        if ctx.current_daemon is not None:
            ctx.current_daemon.kill()
        if subprocess.run(["umount", mnt], capture_output=True, timeout=30).returncode:
            subprocess.run(["umount", "-l", mnt], capture_output=True, timeout=30)
        os.rmdir(mnt)


@environments(*HOST_ONLY)
def test_output_full_disk(ctx):
    """A file output on a full file system (a 64 KiB tmpfs, filled) next to stdout: one stderr
    line naming the file and the reason, stats and detach (reason error) on stdout, exit 1;
    the trainer runs on as it would alone."""
    with small_tmpfs(ctx, "64k") as mnt:
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


SIGHUP_RECOVERY = 2  # s: a reopen is tried at once
RETRY_RECOVERY = 10  # s: a failing file is tried again at least every 5 s


@environments(*HOST_ONLY)
def test_output_full_disk_service(ctx):
    """Service mode, a file output on a 1 MiB tmpfs beside one on a roomy disk, a target
    writing a stats line each second. The tmpfs filled twice: each time one stderr line says
    the output failed (ENOSPC) and the roomy file's stats show it failing and dropping (4 KiB
    queue). The first time space is freed and SIGHUP sent: lines arrive again within 2 s; the
    second time space is only freed: the back-off retry writes again within 10 s, no SIGHUP.
    Each recovery is said once on stderr and followed, in the tmpfs file, by a lost event
    (where sink, the file named) counting what was dropped; that file holds whole JSON lines
    only (a line cut by the full disk is completed), seq increasing; the target's detach is
    target_exit and SIGTERM ends the daemon with exit 0."""
    with small_tmpfs(ctx, "1m") as mnt:
        tmp = tempfile.mkdtemp(dir=ctx.tmp, prefix="service-")
        token = "fulldisk-%d" % os.getpid()
        out = os.path.join(mnt, "events.ndjson")
        config, events_path = write_config(ctx, tmp, [
            "  - name: t\n    match: {env: {NW_SERVICE_TEST: '^%s$'}}\n" % token],
            extra="output_queue_kb: 4\nstats_interval: 1\n")
        with open(config) as f:
            text = f.read().replace("output:\n", "output:\n  - file: %s\n" % out)
        with open(config, "w") as f:
            f.write(text)
        daemon = start_ready(ctx, tmp, config)
        t = start_trainer(ctx, {"NW_SERVICE_TEST": token})
        wait_events(events_path, daemon, has_event("attach", t.pid), "attach of %d" % t.pid,
                    ATTACH_TIMEOUT)
        dropped, took = 0, {}
        for n, how in enumerate(("sighup", "retry"), 1):
            # a stats line with the output writing: what it dropped before this round
            events = wait_events(events_path, daemon, writing(t.pid, out),
                                 "stats: %s writing" % out, 30)
            first, dropped = len(events), writing(t.pid, out)(events)[0]
            fill(os.path.join(mnt, "filler"))
            wait_said(daemon, "failed to write to output %s: No space left on device" % out, n,
                      RETRY_RECOVERY)
            events = wait_events(events_path, daemon, failing(t.pid, out, dropped, first),
                                 "stats: %s failing and dropping" % out, 60)
            dropped = failing(t.pid, out, dropped, first)(events)
            os.unlink(os.path.join(mnt, "filler"))
            start = time.monotonic()
            if how == "sighup":
                daemon.p.send_signal(signal.SIGHUP)
            wait_said(daemon, "writing to output %s again" % out, n,
                      SIGHUP_RECOVERY if how == "sighup" else RETRY_RECOVERY)
            took[how] = time.monotonic() - start
            wait_events(out, daemon, lambda evs: len(lost_of(evs, out)) == n,
                        "lost event %d in %s" % (n, out), 30)
        t.send(b"fault\n")
        if t.wait(TRAINER_TIMEOUT) != 0:
            raise Fail("trainer %d failed under the daemon:\n%s" % (t.pid, t.stderr_tail()))
        wait_events(events_path, daemon, has_event("detach", t.pid), "detach of %d" % t.pid,
                    DETACH_TIMEOUT)
        stop_service(daemon)
        check_mended(ctx, daemon, out, events_path, t.pid, took)


def wait_said(daemon, text, n, timeout):
    """Until n stderr lines hold text; Fail after timeout seconds."""
    deadline = time.monotonic() + timeout
    while sum(text in line for line in daemon.stderr_lines()) < n:
        if time.monotonic() > deadline or not daemon.running():
            raise Fail("not %d stderr lines with %r in %d s:\n%s" % (n, text, timeout,
                                                                   daemon.stderr_tail()))
        time.sleep(0.05)


def failing(pid, name, before, first):
    """pred: a stats line of pid from the first'th event on shows output name failing, more
    than before dropped (the largest such count, 0 if none): an earlier round's lines, which
    say it failing too, are not this round's."""
    def pred(events):
        most = 0
        for e in events[first:]:
            if e["pid"] == pid and e["event"] == "stats":
                sink = {s["name"]: s for s in e["sinks"]}[name]
                if sink["error"] == "No space left on device" and sink["dropped"] > before:
                    most = max(most, sink["dropped"])
        return most
    return pred


def writing(pid, name):
    """pred: pid's last stats line shows output name writing: (its dropped count,), or None."""
    def pred(events):
        stats = [e for e in events if e["pid"] == pid and e["event"] == "stats"]
        if stats:
            sink = {s["name"]: s for s in stats[-1]["sinks"]}[name]
            if sink["error"] is None:
                return (sink["dropped"],)
        return None
    return pred


def lost_of(events, name):
    return [e for e in events if e["event"] == "lost" and e.get("sink") == name]


def check_mended(ctx, daemon, out, events_path, pid, took):
    """What test_output_full_disk_service's file and stderr hold at the end."""
    with open(out, "rb") as f:
        lines = f.read().splitlines()
    events = [json.loads(line) for line in lines]  # a cut line would not parse
    seqs = [e["seq"] for e in events if e["pid"] == pid]
    if seqs != sorted(set(seqs)) or events[-1]["event"] != "detach" or \
            events[-1]["reason"] != "target_exit":
        raise Fail("%s: seq %s..., last %s" % (out, seqs[:8], events[-1]))
    lost = lost_of(events, out)
    stats = [e for e in read_events(events_path) if e["pid"] == pid and e["event"] == "stats"]
    sink = {s["name"]: s for s in stats[-1]["sinks"]}[out]
    if len(lost) != 2 or any(e["where"] != "sink" or e["count"] <= 0 for e in lost) or \
            sum(e["count"] for e in lost) > sink["dropped"] or sink["error"] is not None:
        raise Fail("lost events %s, last stats.sinks %s" % (lost, sink))
    err = "\n".join(daemon.stderr_lines())
    for text in ("failed to write to output %s" % out, "writing to output %s again" % out):
        if err.count(text) != 2:
            raise Fail("stderr has %r %d times, want 2:\n%s" % (text, err.count(text),
                                                               daemon.stderr_tail()))
    ctx.log("%s: %d whole lines; recovered %.2f s after SIGHUP, %.2f s after space was freed "
            "(back-off); lost %s; stats.sinks %s" % (
                out, len(lines), took["sighup"], took["retry"],
                [e["count"] for e in lost], json.dumps(sink)))


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


@environments(*HOST_ONLY)
def test_output_sighup(ctx):
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


RECONNECT_TIMEOUT = 60  # the daemon's tries are at most 5 s apart


class Reader:
    """A collector that accepts one connection at path and reads it to EOF in a thread."""

    def __init__(self, path):
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(path)
        self.srv.listen(1)
        self.srv.settimeout(RECONNECT_TIMEOUT)
        self.data = b""
        self.conn = None
        self.cond = threading.Condition()
        self.done = False

    def accept(self):
        try:
            self.conn = self.srv.accept()[0]
        except socket.timeout:
            return False
        threading.Thread(target=self._read, daemon=True).start()
        return True

    def _read(self):
        while True:
            try:
                chunk = self.conn.recv(1 << 16)
            except OSError:
                chunk = b""
            with self.cond:
                self.data += chunk
                self.done = not chunk
                self.cond.notify_all()
            if not chunk:
                return

    def events(self):
        """The whole lines read so far, parsed (Fail on one that is not JSON)."""
        with self.cond:
            lines = self.data.split(b"\n")[:-1]
        try:
            return [json.loads(line) for line in lines]
        except ValueError as e:
            raise Fail("the collector read a line that is not JSON (%s): %r" % (e, lines[-3:]))

    def wait(self, pred, timeout):
        """The events read once pred(events) holds, or None at EOF or timeout."""
        deadline = time.monotonic() + timeout
        while True:
            events = self.events()
            if pred(events):
                return events
            with self.cond:
                left = deadline - time.monotonic()
                if self.done or left <= 0:
                    return None
                self.cond.wait(min(left, 0.2))

    def wait_eof(self, timeout):
        deadline = time.monotonic() + timeout
        with self.cond:
            while not self.done and time.monotonic() < deadline:
                self.cond.wait(0.2)
            return self.done

    def close(self, path):
        """The collector goes: its connection shut (which also ends the reading thread's
        recv) and closed, its socket closed, its path removed."""
        if self.conn is not None:
            try:
                self.conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.conn.close()
        self.srv.close()
        if os.path.exists(path):
            os.unlink(path)


def sink_entry(ev, name):
    """stats.sinks' entry for output name in event ev, or None when ev is not stats."""
    if ev["event"] != "stats":
        return None
    return {s["name"]: s for s in ev["sinks"]}[name]


def stdout_stats(name, want):
    """pred on a stdout line: a stats line whose entry for output name satisfies want."""
    def check(line):
        return is_event("stats")(line) and want(sink_entry(json.loads(line), name))
    return check


def check_reconnected_stream(events, name, start_seq):
    """The second collector's stream: seq increasing from past the first collector's, the
    lines queued while away, then a lost event for this output, then the rest to detach."""
    seqs = [ev["seq"] for ev in events]
    if seqs != sorted(set(seqs)) or seqs[0] <= start_seq:
        raise Fail("the new collector's seq run %s... after %d" % (seqs[:8], start_seq))
    lost = [i for i, ev in enumerate(events) if ev["event"] == "lost"]
    if not lost or events[lost[0]]["where"] != "sink" or events[lost[0]]["sink"] != name:
        raise Fail("no lost event for %s in the new collector's stream: %s" %
                   (name, [ev["event"] for ev in events][:20]))
    if events[lost[0]]["count"] < 1 or lost[0] == 0:
        raise Fail("lost event %s, at %d: want a count and the queued lines before it" %
                   (json.dumps(events[lost[0]]), lost[0]))
    if events[-1]["event"] != "detach" or events[-1]["reason"] != "signal":
        raise Fail("the new collector's stream ends with %s" % json.dumps(events[-1])[:200])


@environments(*HOST_ONLY)
def test_output_collector_reconnect(ctx):
    """The collector goes while the target runs: the daemon keeps watching (no exit), queues
    and drops for that output only, says so on stderr, and connects to the next collector
    at the path, which gets the queued lines, a lost event and the later lines."""
    path = os.path.join(tempfile.mkdtemp(prefix="reconnect-", dir=ctx.tmp), "collector.sock")
    name = "unix:" + path
    trainer = start_waiting_trainer(ctx, "healthy", "--steps", "1000000", "--pace", "0.05")
    comm = read_comm(trainer.pid)
    collectors = [Reader(path)]
    try:
        daemon = start_daemon(ctx, trainer.pid, extra=["-o", "-", "-o", name,
                                                       "--output-queue-kb", "4",
                                                       "--stats-interval", "1"])
        first, new = away_and_back(ctx, daemon, trainer, path, name, collectors)
        daemon.p.send_signal(signal.SIGTERM)
        wait_daemon_exit(daemon)
        if not new.wait_eof(10):
            raise Fail("the new collector's connection stays open after the daemon exited")
    finally:
        for c in collectors:
            c.close(path)
    target_untouched(trainer)
    events = parse_stream(daemon, trainer.pid, comm)
    check_envelope([ev for ev in events if ev["event"] != "lost"], "signal")
    sink = sink_entry(last_stats(events), name)
    if sink["error"] is not None or sink["reconnects"] != 1 or not sink["connected"]:
        raise Fail("stats.sinks for the collector: %s" % json.dumps(sink))
    lost = sum(ev["count"] for ev in events if ev["event"] == "lost" and ev["sink"] == name)
    if not 0 < lost <= sink["dropped"]:
        raise Fail("lost events count %d, stats.sinks dropped %d" % (lost, sink["dropped"]))
    check_reconnected_stream(new.events(), name, first["seq"])
    err = "\n".join(daemon.stderr_lines())
    if "went away" not in err or "reconnected output " + name not in err:
        raise Fail("stderr does not say the collector went and came back: %r" % err)
    ctx.log("first collector to seq %d, the new one %d lines from seq %d; stats.sinks %s" % (
        first["seq"], len(new.events()), new.events()[0]["seq"], json.dumps(sink)))


def away_and_back(ctx, daemon, trainer, path, name, collectors):
    """The first collector reads two stats lines and goes; once stdout's stats say its output
    is away and dropping, a new one listens: its last event read and the new collector."""
    old = collectors[0]
    if not old.accept():
        raise Fail("the daemon never connected to the collector")
    trainer.send(b"go\n")
    if old.wait(lambda evs: [ev["event"] for ev in evs].count("stats") >= 2, 60) is None:
        raise Fail("the collector got no two stats lines: %r" % old.data[-300:])
    old.close(path)
    away = stdout_stats(name, lambda s: not s["connected"] and s["dropped"] > 0)
    if daemon.wait_out(away, 60) is None:
        raise Fail("no stats line with the collector away and lines dropped (daemon %s):\n%s" %
                   ("running" if daemon.running() else "exited %s" % daemon.p.returncode,
                    daemon.stderr_tail()))
    new = Reader(path)
    collectors.append(new)
    if not new.accept():
        raise Fail("the daemon did not connect to the new collector in %ds:\n%s" %
                   (RECONNECT_TIMEOUT, daemon.stderr_tail()))

    def back(ev):
        return (sink_entry(ev, name) or {}).get("reconnects") == 1
    if new.wait(lambda evs: any(back(ev) for ev in evs), 60) is None:
        raise Fail("the new collector got no stats line written after the reconnect")
    return old.events()[-1], new
