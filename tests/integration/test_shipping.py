"""Events off the node through a standard log shipper: Debian's rsyslog, end to end.

shipping_rsyslog: nanwatchd watches nan_input with a file output (-o FILE). rsyslog instance A
follows FILE with imfile and forwards each line over TCP on loopback (omfwd, RFC 5424 with
octet-counted framing, so a line is one frame whatever it holds) to instance B (imtcp on a port
the kernel picks, read back from listenPortFileName), which writes only each message's text,
one line each (template "%msg%\\n"). Every line of FILE must arrive: the same bytes, in the
same order, each a JSON object with consecutive seq, attach first and detach last; and
nanwatch-collect, run on what arrived, names the pid, step, iteration, layer and cause of the
daemon's first anomaly and its diagnosis. Both
rsyslogd run in the foreground (-n) with their own configuration, work directory and pid file
in a private directory; the system's rsyslog service is never used or started. Afterwards both
are stopped (SIGTERM, then the harness's SIGKILL) and the directory removed.

shipping_rsyslog_rotation: the same pipeline through a logrotate-style rotation: a paced
healthy trainer with a stats line every second; FILE renamed to FILE.1, one more line written
to FILE.1 (as between logrotate's rename and its postrotate), SIGHUP, a stats line in the new
FILE, SIGTERM. Every line of FILE.1 then FILE arrives intact and in order, seq consecutive.
"""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

from nwharness import (ATTACH_TIMEOUT, Fail, Proc, finish_trainer, oracle_of, read_comm,
                       run_trainer, start_daemon, start_waiting_trainer, tail, wait_daemon_exit)
from nwchecks import HOST_ONLY, check_anomalies, check_envelope, environments, parse_stream

RSYSLOGD = "/usr/sbin/rsyslogd"
START_TIMEOUT = 30  # rsyslogd up and listening: well under a second here
ARRIVE_TIMEOUT = 60  # the last line through both instances: about a second here
ROTATE_TIMEOUT = 30  # a stats line every second
MAX_MESSAGE = "256k"  # a JSON line is one syslog message: rsyslog's default 8k is too small

SENDER = """global(workDirectory="{work}" maxMessageSize="{max}")
module(load="imfile" mode="inotify")
input(type="imfile" file="{events}" tag="nanwatch" ruleset="ship" freshStartTail="off")
ruleset(name="ship") {{
  action(type="omfwd" target="127.0.0.1" port="{port}" protocol="tcp"
         TCP_Framing="octet-counted" template="RSYSLOG_SyslogProtocol23Format")
}}
"""

RECEIVER = """global(workDirectory="{work}" maxMessageSize="{max}")
module(load="imtcp")
template(name="message" type="string" string="%msg%\\n")
input(type="imtcp" address="127.0.0.1" port="0" listenPortFileName="{portfile}"
      ruleset="store")
ruleset(name="store") {{
  action(type="omfile" file="{out}" template="message")
}}
"""


def wait_for(pred, timeout):
    """pred()'s first true value, asked every 0.2 s; None when timeout passes first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.2)
    return None


def has_event(path, name):
    needle = b'"event":"' + name.encode() + b'"'
    return lambda: needle in read_bytes(path).replace(b" ", b"")


def read_bytes(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return b""


def start_rsyslogd(ctx, base, name, conf, **fields):
    """rsyslogd in the foreground with its own configuration (conf with fields filled in),
    work directory and pid file."""
    work = os.path.join(base, name)
    os.makedirs(os.path.join(work, "work"))
    path = os.path.join(work, "rsyslog.conf")
    with open(path, "w") as f:
        f.write(conf.format(work=os.path.join(work, "work"), max=MAX_MESSAGE, **fields))
    check = Proc([RSYSLOGD, "-N1", "-f", path])
    if check.wait(START_TIMEOUT) != 0:
        raise Fail("rsyslogd -N1 refuses %s:\n%s" % (path, tail(check.stderr_lines())))
    proc = Proc([RSYSLOGD, "-n", "-f", path, "-i", os.path.join(work, "rsyslogd.pid")],
                term_timeout=5)
    ctx.log("started rsyslogd %s (pid %d)" % (name, proc.pid))
    return proc


def stop(procs):
    for p in procs:
        if p.running():
            p.p.send_signal(signal.SIGTERM)
    for p in procs:
        if p.wait(10) is None:
            p.kill()


def check_stopped(procs):
    for p in procs:
        if p.running():
            raise Fail("rsyslogd %d still running" % p.pid)
        if p.p.returncode != 0:
            raise Fail("rsyslogd %d exited %d:\n%s" % (p.pid, p.p.returncode,
                                                      tail(p.stderr_lines())))


class Pipeline:
    """A receiving rsyslogd (imtcp to a file of messages) and a sending one (imfile on
    self.events, omfwd to the receiver), in a private directory under ctx.tmp."""

    def __init__(self, ctx):
        if not os.access(RSYSLOGD, os.X_OK):
            raise Fail("%s missing: install Debian's rsyslog (scripts/install-deps)" % RSYSLOGD)
        self.base = tempfile.mkdtemp(prefix="shipping-", dir=ctx.tmp)
        self.events = os.path.join(self.base, "events.ndjson")
        self.received = os.path.join(self.base, "received.ndjson")
        self.procs = []
        portfile = os.path.join(self.base, "port")
        self.procs.append(start_rsyslogd(ctx, self.base, "receiver", RECEIVER,
                                         portfile=portfile, out=self.received))
        port = wait_for(lambda: read_bytes(portfile).strip(), START_TIMEOUT)
        if port is None:
            raise Fail("the receiving rsyslogd wrote no port to %s" % portfile)
        ctx.log("receiver listens on 127.0.0.1:%s" % port.decode())
        self.procs.append(start_rsyslogd(ctx, self.base, "sender", SENDER, events=self.events,
                                         port=port.decode()))

    def wait_attach(self):
        if wait_for(has_event(self.events, "attach"), ATTACH_TIMEOUT) is None:
            raise Fail("no attach in %s" % self.events)

    def arrived(self, sent):
        """Once len(sent) lines arrived, both rsyslogd stopped (exit 0): the lines that arrived,
        which must be sent's, byte for byte and in order."""
        if wait_for(lambda: len(read_bytes(self.received).splitlines()) >= len(sent),
                    ARRIVE_TIMEOUT) is None:
            raise Fail("%d lines sent, %d arrived through rsyslog in %ds" %
                       (len(sent), len(read_bytes(self.received).splitlines()), ARRIVE_TIMEOUT))
        stop(self.procs)
        check_stopped(self.procs)
        got = read_bytes(self.received).splitlines()
        for n, (a, b) in enumerate(zip(sent, got), 1):
            if a != b:
                raise Fail("line %d changed on the way (%d bytes sent, %d received):\n"
                           " sent     %r\n received %r" % (n, len(a), len(b), a[:300], b[:300]))
        if len(got) != len(sent):
            raise Fail("%d lines sent, %d received" % (len(sent), len(got)))
        return got

    def close(self):
        stop(self.procs)
        shutil.rmtree(self.base, ignore_errors=True)


def summary(got):
    return "%d lines (%d bytes, longest %d) arrived intact and in order, seq %d..%d" % (
        len(got), sum(len(g) + 1 for g in got), max(len(g) for g in got),
        json.loads(got[0])["seq"], json.loads(got[-1])["seq"])


@environments(*HOST_ONLY)
def test_shipping_rsyslog(ctx):
    oracle, trace = oracle_of(ctx, "nan_input")
    ship = Pipeline(ctx)
    try:
        trainer = start_waiting_trainer(ctx, "nan_input")
        comm = read_comm(trainer.pid)
        daemon = start_daemon(ctx, trainer.pid, extra=["-o", ship.events])
        ship.wait_attach()
        trainer.send(b"go\n")
        finish_trainer(ctx, trainer, "nan_input", trace)
        wait_daemon_exit(daemon)
        daemon.out[:] = ship.arrived(read_bytes(ship.events).splitlines())
        stream = parse_stream(daemon, trainer.pid, comm)  # JSON objects, seq consecutive
        check_envelope(stream, "target_exit")
        check_anomalies(stream, oracle, trainer.pid)
        check_collect(ctx, ship.received, stream, trainer.pid)
        ctx.log(summary(daemon.out))
    finally:
        ship.close()


def check_collect(ctx, received, stream, pid):
    """nanwatch-collect --json on the shipped file: one job, named at the stream's first
    anomaly (nan_input's is the first layer, fed non-finite data) and its diagnosis."""
    collect = os.path.join(os.path.dirname(ctx.daemon), "nanwatch-collect")
    r = subprocess.run([collect, "--json", received], capture_output=True, timeout=60)
    if r.returncode != 0:
        raise Fail("nanwatch-collect exited %d: %s" % (r.returncode, r.stderr.decode()[-500:]))
    verdicts = [json.loads(line) for line in r.stdout.splitlines() if line.strip()]
    first = [e for e in stream if e["event"] == "anomaly"][0]
    diag = [e for e in stream if e["event"] == "diagnosis"][0]
    want = {"pid": pid, "step": first["step"], "iteration": first["iteration"],
            "layer": first["layer"], "module": first["module"], "cause": diag["cause"]}
    got = {k: verdicts[0].get(k) for k in want} if len(verdicts) == 1 else verdicts
    if got != want:
        raise Fail("nanwatch-collect on what rsyslog delivered: %s, want %s" % (got, want))


@environments(*HOST_ONLY)
def test_shipping_rsyslog_rotation(ctx):
    steps = ("--steps", "100")
    trace = run_trainer(ctx, "healthy", *steps)["trace"]
    ship = Pipeline(ctx)
    try:
        trainer = start_waiting_trainer(ctx, "healthy", *steps, "--pace", "0.1")
        comm = read_comm(trainer.pid)
        daemon = start_daemon(ctx, trainer.pid, extra=["-o", ship.events, "--stats-interval",
                                                       "1"])
        ship.wait_attach()
        trainer.send(b"go\n")
        if wait_for(has_event(ship.events, "stats"), ROTATE_TIMEOUT) is None:
            raise Fail("no stats line in %s" % ship.events)
        os.rename(ship.events, ship.events + ".1")  # what logrotate does, then its postrotate
        # a line written to the renamed file before the SIGHUP, as between logrotate's
        # rename and its postrotate: the shipper must still read it
        before = len(read_bytes(ship.events + ".1").splitlines())
        if wait_for(lambda: len(read_bytes(ship.events + ".1").splitlines()) > before,
                    ROTATE_TIMEOUT) is None:
            raise Fail("nothing written to the renamed %s.1" % ship.events)
        daemon.p.send_signal(signal.SIGHUP)
        if wait_for(has_event(ship.events, "stats"), ROTATE_TIMEOUT) is None:
            raise Fail("no new %s after SIGHUP" % ship.events)
        daemon.p.send_signal(signal.SIGTERM)
        wait_daemon_exit(daemon)
        old = read_bytes(ship.events + ".1").splitlines()
        new = read_bytes(ship.events).splitlines()
        daemon.out[:] = ship.arrived(old + new)
        check_envelope(parse_stream(daemon, trainer.pid, comm), "signal")
        ctx.log("%d lines before the rotation, %d after; %s" % (len(old), len(new),
                                                              summary(daemon.out)))
        finish_trainer(ctx, trainer, "healthy", trace)
    finally:
        ship.close()
