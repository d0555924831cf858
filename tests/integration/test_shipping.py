"""Events off the node through a standard log shipper: Debian's rsyslog, end to end.

shipping_rsyslog: nanwatchd watches nan_input with a file output (-o FILE). rsyslog instance A
follows FILE with imfile and forwards each line over TCP on loopback (omfwd, RFC 5424 with
octet-counted framing, so a line is one frame whatever it holds) to instance B (imtcp on a port
the kernel picks, read back from listenPortFileName), which writes only each message's text,
one line each (template "%msg%\\n"). Every line of FILE must arrive: the same bytes, in the
same order, each a JSON object with consecutive seq, attach first and detach last. Both
rsyslogd run in the foreground (-n) with their own configuration, work directory and pid file
in a private directory; the system's rsyslog service is never used or started. Afterwards both
are stopped (SIGTERM, then the harness's SIGKILL) and the directory removed.
"""
import json
import os
import shutil
import signal
import tempfile
import time

from nwharness import (Fail, Proc, finish_trainer, oracle_of, read_comm, start_daemon,
                       start_waiting_trainer, tail, wait_daemon_exit)
from nwchecks import HOST_ONLY, check_anomalies, check_envelope, environments, parse_stream

RSYSLOGD = "/usr/sbin/rsyslogd"
START_TIMEOUT = 30  # rsyslogd up and listening: well under a second here
ARRIVE_TIMEOUT = 60  # the last line through both instances: about a second here
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


def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.2)
    raise Fail("%s: not within %ds" % (what, timeout))


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


def check_stopped(ctx, procs):
    for p in procs:
        if p.running():
            raise Fail("rsyslogd %d still running" % p.pid)
        if p.p.returncode != 0:
            raise Fail("rsyslogd %d exited %d:\n%s" % (p.pid, p.p.returncode,
                                                      tail(p.stderr_lines())))


@environments(*HOST_ONLY)
def test_shipping_rsyslog(ctx):
    if not os.access(RSYSLOGD, os.X_OK):
        raise Fail("%s missing: install Debian's rsyslog (tools/install-deps)" % RSYSLOGD)
    oracle, trace = oracle_of(ctx, "nan_input")
    base = tempfile.mkdtemp(prefix="shipping-", dir=ctx.tmp)
    events = os.path.join(base, "events.ndjson")
    received = os.path.join(base, "received.ndjson")
    portfile = os.path.join(base, "port")
    procs = []
    try:
        procs.append(start_rsyslogd(ctx, base, "receiver", RECEIVER, portfile=portfile,
                                    out=received))
        port = wait_for(lambda: read_bytes(portfile).strip(), START_TIMEOUT,
                        "receiver's listening port in %s" % portfile).decode()
        ctx.log("receiver listens on 127.0.0.1:%s" % port)
        procs.append(start_rsyslogd(ctx, base, "sender", SENDER, events=events, port=port))
        trainer = start_waiting_trainer(ctx, "nan_input")
        comm = read_comm(trainer.pid)
        daemon = start_daemon(ctx, trainer.pid, extra=["-o", events])
        wait_for(lambda: b'"event":"attach"' in read_bytes(events).replace(b" ", b""),
                 START_TIMEOUT * 2, "attach in %s" % events)
        trainer.send(b"go\n")
        finish_trainer(ctx, trainer, "nan_input", trace)
        wait_daemon_exit(daemon)
        sent = read_bytes(events).splitlines()
        wait_for(lambda: len(read_bytes(received).splitlines()) >= len(sent), ARRIVE_TIMEOUT,
                 "%d lines through rsyslog (%d arrived)" %
                 (len(sent), len(read_bytes(received).splitlines())))
        stop(procs)
        check_stopped(ctx, procs)
        got = read_bytes(received).splitlines()
        for n, (a, b) in enumerate(zip(sent, got), 1):
            if a != b:
                raise Fail("line %d changed on the way (%d bytes sent, %d received):\n"
                           " sent     %r\n received %r" % (n, len(a), len(b), a[:300], b[:300]))
        if len(got) != len(sent):
            raise Fail("%d lines sent, %d received" % (len(sent), len(got)))
        daemon.out[:] = got
        stream = parse_stream(daemon, trainer.pid, comm)  # JSON objects, seq consecutive
        check_envelope(stream, "target_exit")
        check_anomalies(stream, oracle, trainer.pid)
        ctx.log("%d lines (%d bytes, longest %d) arrived intact and in order, seq %d..%d" % (
            len(got), sum(len(g) + 1 for g in got), max(len(g) for g in got),
            json.loads(got[0])["seq"], json.loads(got[-1])["seq"]))
    finally:
        stop(procs)
        shutil.rmtree(base, ignore_errors=True)
