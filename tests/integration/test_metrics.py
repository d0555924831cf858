"""The Prometheus endpoint (nanwatchd --metrics), read by Debian's real prometheus.

metrics_prometheus (host, container): nan_input goes non-finite under
`nanwatchd --pid P --metrics 127.0.0.1:PORT`; a prometheus started here (its own config file,
scrape_interval 1s, storage in a temporary directory, web on another free loopback port)
scrapes the endpoint. Once the trainer has finished and lingers, prometheus's HTTP API
(/api/v1/query) must return, from its own scrapes: nanwatch_anomalies_total by cause equal to
the daemon's stream (anomaly lines before the diagnosis line under cause "none", those after
under the diagnosis's cause), nanwatch_targets 1, probe hits and scanned bytes above 0, no line
dropped on stdout, the target's steps above 0, up 1.
The endpoint itself answers 404 on another path and 405 to a POST. Prometheus, its directory
and every process are removed at the end.

metrics_textfile (host): the service (`metrics: {textfile: DIR/nanwatch.prom}`, no endpoint)
watches two ranks of one job (RANK 0 and 1, TORCHELASTIC_RUN_ID); rank 1 is made to go
non-finite, then rank 0 some seconds later. Debian's prometheus-node-exporter reads DIR with its
textfile collector only, and a prometheus scrapes it. From prometheus: one
nanwatch_first_nonfinite_step series per rank with job_id, rank, host (the node's name), pid,
layer and cause, its value the step of that rank's diagnosis event and layer and cause its
own; the one PromQL query `bottomk by (job_id) (1, nanwatch_first_nonfinite_time_seconds)`
names rank 1; node_textfile_scrape_error is 0. That prometheus evaluates the shipped rules
(config/nanwatch-alerts.yml) and sends to Debian's prometheus-alertmanager (group_by alertname,
job_id), which posts to a webhook the test serves: one notification for the job, not one per
rank, naming rank 1, its host, pid, layer, cause and step. The file is 0644 with no other file left in DIR;
once the trainers are gone their series stay.

metrics_tls (host): metrics off the node with TLS and basic auth, the node_exporter way. The
daemon's --metrics refuses a non-loopback address in one line. `nanwatchd --pid P
--metrics-textfile` writes the file; Debian's node_exporter, run inside a network namespace
with its own veth address (10.215.7.2), serves it with a web config (a certificate made here for
that address, a bcrypt password): https without a password, with a wrong one or another user
gets 401, plain http no metrics; a prometheus in this namespace scrapes it over https with the
password and holds nanwatch_first_nonfinite_step with the daemon's diagnosis (pid, layer,
cause, step), the trainer's rank and job (RANK, TORCHELASTIC_RUN_ID: --pid mode labels them
too) and instance 10.215.7.2:9100.

metrics_malformed (host): uid 65534 sends the endpoint of `nanwatchd --pid P --metrics` heads
that cannot be requests, none finished (a NUL, a control byte, a bare CR, a 5000-byte line, a
method that is not a token, HTTP/2.0, a header without a colon, a folded header): each is
answered 400 at once (measured; under 2 s each, where a server waiting for the rest would take
its 5 s deadline); then it fills every client slot with such a request and reads nothing, and
a scrape (its own, then root's) still gets 200.
"""
import base64
import datetime
import json
import os
import signal
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

from nwharness import (Fail, Proc, TRAINER_TIMEOUT, is_event, read_comm, start_daemon,
                       start_waiting_trainer, tail, wait_attach, wait_daemon_exit)
from nwchecks import (HOST_ONLY, NOBODY, NetLan, check_envelope, environments, free_port,
                      has_event,
                      parse_stream, read_events, start_ready, start_trainer, stop_service,
                      target_untouched, wait_events, write_config)
from nwprom import (ALERTMANAGER, FIRST_QUERY, NODE_EXPORTER, PROMETHEUS, QUERY_TIMEOUT, READY_TIMEOUT,
                    Webhook, alerting, check_notification, diagnosis_of, http, one_value, query,
                    require, start_alertmanager, start_node_exporter, start_prometheus,
                    stop_prometheus, wait_first_series)

def stream_by_cause(daemon):
    """Anomaly lines of the stream so far by the cause metrics give them: before the
    diagnosis line "none", after it the diagnosis's cause."""
    counts, cause = {}, "none"
    for raw in list(daemon.out):
        ev = json.loads(raw)
        if ev["event"] == "diagnosis":
            cause = ev["cause"]
        elif ev["event"] == "anomaly":
            counts[cause] = counts.get(cause, 0) + 1
    return counts


def scraped_by_cause(port, daemon_port):
    got = {}
    for labels, value in query(port, "nanwatch_anomalies_total"):
        if labels.get("job") != "nanwatch" or labels.get("instance") != "127.0.0.1:%d" % \
                daemon_port:
            raise Fail("unexpected series %r" % labels)
        if value:
            got[labels["cause"]] = int(value)
    return got


def check_endpoint(daemon_port):
    base = "http://127.0.0.1:%d" % daemon_port
    status, body = http(base + "/metrics")
    if status != 200 or b"# TYPE nanwatch_anomalies_total counter\n" not in body:
        raise Fail("GET /metrics: HTTP %d %r" % (status, body[:200]))
    status, _ = http(base + "/")
    if status != 404:
        raise Fail("GET / answered %d, want 404" % status)
    status, _ = http(base + "/metrics", method="POST")
    if status != 405:
        raise Fail("POST /metrics answered %d, want 405" % status)


def wait_scraped(ctx, port, daemon, daemon_port):
    """Until prometheus's values equal the stream's counts (bounded)."""
    deadline = time.monotonic() + QUERY_TIMEOUT
    while True:
        want, got = stream_by_cause(daemon), scraped_by_cause(port, daemon_port)
        if got == want:
            ctx.log("scraped anomalies by cause %r" % got)
            return want
        if time.monotonic() > deadline:
            raise Fail("prometheus has nanwatch_anomalies_total %r, the stream %r" %
                       (got, want))
        time.sleep(0.5)


@environments("host", "container")
def test_metrics_prometheus(ctx):
    """prometheus scrapes a daemon watching a trainer that goes NaN and reads back the
    anomalies by cause, the targets, probe hits and bytes scanned; 404 and 405 elsewhere."""
    if not os.access(PROMETHEUS, os.X_OK):
        raise Fail("%s missing: run scripts/install-deps" % PROMETHEUS)
    daemon_port = free_port()
    trainer = start_waiting_trainer(ctx, "nan_input", "--fault-step", "4", "--linger", "600")
    comm = read_comm(trainer.pid)
    daemon = start_daemon(ctx, trainer.pid, extra=["--metrics", "127.0.0.1:%d" % daemon_port])
    wait_attach(daemon)
    check_endpoint(daemon_port)
    workdir = tempfile.mkdtemp(prefix="prometheus-")
    prom = None
    try:
        prom, port = start_prometheus(ctx, workdir, daemon_port)
        trainer.send(b"go\n")
        if trainer.wait_out(lambda l: l.startswith(b'{"trace"'), TRAINER_TIMEOUT) is None:
            raise Fail("nan_input did not finish under the daemon")
        if daemon.wait_out(is_event("diagnosis"), 60) is None:
            raise Fail("no diagnosis event")
        counts = wait_scraped(ctx, port, daemon, daemon_port)
        if counts.get("none", 0) < 1 or counts.get("bad_input_data", 0) < 1:
            raise Fail("anomalies by cause %r: want some before the diagnosis and some "
                       "after it (bad_input_data)" % counts)
        if one_value(port, 'up{job="nanwatch"}') != 1:
            raise Fail("prometheus says the endpoint is down")
        if one_value(port, "nanwatch_targets") != 1:
            raise Fail("nanwatch_targets is not 1")
        if one_value(port, 'nanwatch_diagnoses_total{cause="bad_input_data"}') != 1:
            raise Fail("nanwatch_diagnoses_total{cause=\"bad_input_data\"} is not 1")
        if one_value(port, 'nanwatch_events_dropped_total{sink="stdout"}') != 0:
            raise Fail("stdout dropped lines (its reader is the test)")
        for name in ("nanwatch_probe_hits_total", "nanwatch_scanned_bytes_total"):
            if not one_value(port, name) > 0:
                raise Fail("%s is 0" % name)
        steps = one_value(port, 'nanwatch_target_steps_total{pid="%d"}' % trainer.pid)
        if steps < 1:
            raise Fail("nanwatch_target_steps_total of pid %d is 0" % trainer.pid)
        first_time = one_value(port, "nanwatch_first_nonfinite_time_seconds")
        check_endpoint(daemon_port)
    finally:
        stop_prometheus(prom, workdir)
    target_untouched(trainer)
    daemon.p.send_signal(signal.SIGTERM)
    wait_daemon_exit(daemon)
    events = parse_stream(daemon, trainer.pid, comm)
    check_envelope(events, "signal")
    # the time the target met it, the first anomaly line's, to the millisecond the metric has
    line = unix_time([ev for ev in events if ev["event"] == "anomaly"][0]["time"])
    if abs(first_time - line) > 0.0005 + 1e-6:
        raise Fail("nanwatch_first_nonfinite_time_seconds %.6f, the first anomaly line's time "
                   "%.6f" % (first_time, line))


def unix_time(rfc3339):
    """An event's "time" (2026-11-29T14:40:00.123456789Z) in Unix seconds."""
    whole, frac = rfc3339.rstrip("Z").split(".")
    t = datetime.datetime.strptime(whole, "%Y-%m-%dT%H:%M:%S").replace(
        tzinfo=datetime.timezone.utc)
    return t.timestamp() + int(frac) / 10 ** len(frac)


@environments(*HOST_ONLY)
def test_metrics_textfile(ctx):
    """Two ranks of a job under the service writing a textfile; node_exporter and prometheus
    read it: one query names the rank that went non-finite first."""
    require(PROMETHEUS, NODE_EXPORTER, ALERTMANAGER)
    tmp = tempfile.mkdtemp(dir=ctx.tmp, prefix="textfile-")
    textdir = os.path.join(tmp, "textfile")
    os.makedirs(textdir)
    os.chmod(ctx.tmp, 0o711)
    os.chmod(tmp, 0o711)
    textfile = os.path.join(textdir, "nanwatch.prom")
    token, job = "textfile-%d" % os.getpid(), "job-%d" % os.getpid()
    config, events_path = write_config(
        ctx, tmp, ["  - name: ranks\n    match: {env: {NW_TEXTFILE_TEST: '^%s$'}}\n" % token],
        extra="metrics:\n  textfile: %s\n" % textfile)
    daemon = start_ready(ctx, tmp, config)
    ranks = [start_trainer(ctx, {"NW_TEXTFILE_TEST": token, "RANK": str(r), "WORLD_SIZE": "2",
                                 "TORCHELASTIC_RUN_ID": job}) for r in (0, 1)]
    workdir = tempfile.mkdtemp(prefix="prometheus-")
    prom = exporter = manager = None
    hook = Webhook()
    try:
        for t in ranks:
            if t.wait_out(lambda l: l.startswith(b"STEP "), 120) is None:
                raise Fail("trainer %d did not train:\n%s" % (t.pid, t.stderr_tail()))
            wait_events(events_path, daemon, has_event("attach", t.pid), "attach of %d" % t.pid,
                        120)
        exporter, exporter_port = start_node_exporter(ctx, textdir)
        manager, manager_port = start_alertmanager(ctx, workdir, hook)
        prom, port = start_prometheus(ctx, workdir, exporter_port, job="node",
                                      extra=alerting("127.0.0.1", manager_port, workdir))
        for t in (ranks[1], ranks[0]):  # rank 1 first
            t.send(b"fault\n")
            wait_events(events_path, daemon, has_event("diagnosis", t.pid),
                        "diagnosis of %d" % t.pid, 120)
            time.sleep(2)
        got = wait_first_series(ctx, port, job, 2)
        events = read_events(events_path)
        host = os.uname().nodename
        for labels, value in got:
            pid = int(labels.get("pid", -1))
            rank = [r for r, t in enumerate(ranks) if t.pid == pid]
            d = diagnosis_of(events, pid)
            want = {"job_id": job, "rank": str(rank[0]) if rank else None, "host": host,
                    "layer": d.get("layer") or "", "cause": d["cause"]}
            bad = ["%s %r (want %r)" % (k, labels.get(k), v) for k, v in want.items()
                   if labels.get(k) != v]
            if bad or value != d["step"]:
                raise Fail("series %r = %r; diagnosis of pid %d: step %r; %s" % (
                    labels, value, pid, d["step"], "; ".join(bad)))
        first = query(port, FIRST_QUERY)
        if len(first) != 1 or first[0][0].get("rank") != "1" or \
                first[0][0].get("job_id") != job:
            raise Fail("%s gave %r; want rank 1 of %s" % (FIRST_QUERY, first, job))
        ctx.log("%s: %s" % (FIRST_QUERY, first[0][0]))
        if one_value(port, "node_textfile_scrape_error") != 0:
            raise Fail("node_exporter could not read the textfile")
        d = diagnosis_of(events, ranks[1].pid)
        check_notification(ctx, hook, job, dict(rank="1", host=host, pid=str(ranks[1].pid),
                                                layer=d.get("layer") or "", cause=d["cause"]),
                           d["step"])
        st = os.stat(textfile)
        if st.st_mode & 0o777 != 0o644 or sorted(os.listdir(textdir)) != ["nanwatch.prom"]:
            raise Fail("textfile mode %o, directory %s" % (st.st_mode & 0o777,
                                                          os.listdir(textdir)))
        for t in ranks:
            if t.wait(TRAINER_TIMEOUT) != 0:
                raise Fail("trainer %d failed under the daemon" % t.pid)
            wait_events(events_path, daemon, has_event("detach", t.pid), "detach of %d" % t.pid,
                        60)
        time.sleep(3)  # the file rewritten, scraped again: the series stay
        if len(query(port, 'nanwatch_first_nonfinite_step{job_id="%s"}' % job)) != 2:
            raise Fail("the first-non-finite series went with their trainers")
    finally:
        for t in ranks:
            t.kill()
        stop_prometheus(prom, workdir)
        for proc in (exporter, manager):
            if proc is not None and proc.running():
                proc.kill()
        hook.close()
        stop_service(daemon)


WEB_CONFIG = """tls_server_config:
  cert_file: %s
  key_file: %s
basic_auth_users:
  %s: %s
"""
TLS_SCRAPE = """  - job_name: node
    scheme: https
    tls_config:
      ca_file: %s
    basic_auth:
      username: %s
      password_file: %s
    static_configs:
      - targets: ["%s:%d"]
"""


def make_cert(workdir, ip):
    """A self-signed P-256 certificate for ip (its own CA): (cert, key) paths."""
    cert, key = os.path.join(workdir, "node.crt"), os.path.join(workdir, "node.key")
    r = subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                        "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj",
                        "/CN=nanwatch-test-node", "-addext", "subjectAltName=IP:" + ip,
                        "-keyout", key, "-out", cert], capture_output=True, text=True)
    if r.returncode:
        raise Fail("openssl req: %s" % r.stderr.strip())
    return cert, key


def bcrypt_hash(password):
    """A bcrypt hash (libxcrypt's $2b$), as node_exporter's basic_auth_users wants."""
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import crypt
        h = crypt.crypt(password, crypt.mksalt(crypt.METHOD_BLOWFISH))
    if not h or not h.startswith("$2"):
        raise Fail("no bcrypt in this libcrypt: %r" % h)
    return h


def https_status(url, cafile, auth=None):
    """(status, body) of a GET over TLS checked against cafile, with basic auth (user, pw)."""
    req = urllib.request.Request(url)
    if auth:
        req.add_header("Authorization", "Basic " + base64.b64encode(
            ("%s:%s" % auth).encode()).decode())
    context = ssl.create_default_context(cafile=cafile)
    try:
        with urllib.request.urlopen(req, timeout=10, context=context) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@environments(*HOST_ONLY)
def test_metrics_tls(ctx):
    """Metrics off the node with TLS and basic auth, the node_exporter way: the daemon's own
    endpoint stays on loopback; its textfile is served by node_exporter on a node's own
    address, and prometheus on another scrapes it over https with a password."""
    require(PROMETHEUS, NODE_EXPORTER)
    tmp = tempfile.mkdtemp(dir=ctx.tmp, prefix="tls-")
    textdir = os.path.join(tmp, "textfile")
    os.makedirs(textdir)
    os.chmod(ctx.tmp, 0o711)
    os.chmod(tmp, 0o711)
    lan = NetLan("nwtls", 7)
    node = lan.node("nwtlsnode", 2)
    workdir = tempfile.mkdtemp(prefix="prometheus-")
    prom = exporter = None
    job = "tls-%d" % os.getpid()
    os.environ.update(RANK="5", TORCHELASTIC_RUN_ID=job)  # the trainer's, read by the daemon
    try:
        trainer = start_waiting_trainer(ctx, "nan_input", "--fault-step", "4", "--linger",
                                        "600")
    finally:
        del os.environ["RANK"], os.environ["TORCHELASTIC_RUN_ID"]
    try:
        # the daemon's own endpoint refuses the node's address: no TLS there, by design
        r = subprocess.run([ctx.daemon, "--pid", str(trainer.pid), "--metrics",
                            "%s:%d" % (lan.host_ip, free_port())],
                           capture_output=True, text=True, timeout=30)
        lines = r.stderr.strip().splitlines()
        if r.returncode == 0 or len(lines) != 1 or "loopback" not in lines[0]:
            raise Fail("--metrics on %s: exit %d, stderr %r: want one line about loopback"
                       % (lan.host_ip, r.returncode, r.stderr))
        comm = read_comm(trainer.pid)
        textfile = os.path.join(textdir, "nanwatch.prom")
        daemon = start_daemon(ctx, trainer.pid, extra=["--metrics-textfile", textfile])
        wait_attach(daemon)
        cert, key = make_cert(workdir, node.ip)
        password = "pw-%d" % os.getpid()
        pwfile = os.path.join(workdir, "password")
        webconf = os.path.join(workdir, "web.yml")
        with open(pwfile, "w") as f:
            f.write(password)
        with open(webconf, "w") as f:
            f.write(WEB_CONFIG % (cert, key, "nanwatch", bcrypt_hash(password)))
        port = 9100
        url = "https://%s:%d/metrics" % (node.ip, port)
        exporter = Proc(node.inside(
            NODE_EXPORTER, "--collector.disable-defaults", "--collector.textfile",
            "--collector.textfile.directory=" + textdir, "--web.config.file=" + webconf,
            "--web.listen-address=%s:%d" % (node.ip, port)), term_timeout=10)
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            try:
                if https_status(url, cert, ("nanwatch", password))[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or not exporter.running():
                raise Fail("node_exporter not ready over https:\n%s"
                           % tail(exporter.stderr_lines()))
            time.sleep(0.2)
        # without the password, with a wrong one, without TLS: nothing
        for auth in (None, ("nanwatch", "wrong"), ("other", password)):
            status, body = https_status(url, cert, auth)
            if status != 401 or b"nanwatch_" in body:
                raise Fail("https with auth %r: %d %r" % (auth, status, body[:100]))
        status, body = http("http://%s:%d/metrics" % (node.ip, port))
        if status == 200 or b"nanwatch_" in body:
            raise Fail("plain http answered %d %r" % (status, body[:100]))
        prom, prom_port = start_prometheus(
            ctx, workdir, 0, scrape=TLS_SCRAPE % (cert, "nanwatch", pwfile, node.ip, port))
        trainer.send(b"go\n")
        if daemon.wait_out(is_event("diagnosis"), 120) is None:
            raise Fail("no diagnosis event")
        got = wait_first_series(ctx, prom_port, job, 1)
        with daemon.cond:
            lines = list(daemon.out)
        d = diagnosis_of([json.loads(x) for x in lines if x.startswith(b"{")], trainer.pid)
        labels, value = got[0]
        if (labels.get("pid") != str(trainer.pid) or labels.get("cause") != d["cause"] or
                labels.get("rank") != "5" or labels.get("job_id") != job or
                labels.get("layer") != (d.get("layer") or "") or value != d["step"] or
                labels.get("instance") != "%s:%d" % (node.ip, port)):
            raise Fail("series %r = %r; diagnosis %r" % (labels, value, d))
        if one_value(prom_port, 'up{job="node"}') != 1:
            raise Fail("prometheus says the node is down")
        ctx.log("scraped over https with basic auth from %s: %r" % (node.ip, labels))
    finally:
        stop_prometheus(prom, workdir)
        if exporter is not None and exporter.running():
            exporter.kill()
        lan.close()
    target_untouched(trainer)
    daemon.p.send_signal(signal.SIGTERM)
    wait_daemon_exit(daemon)
    check_envelope(parse_stream(daemon, trainer.pid, comm), "signal")


MALFORMED_BOUND = 2  # s per answer: generous, a server that waits takes its 5 s deadline
ATTACKER = r"""
import json, socket, sys, time
port = int(sys.argv[1])
BAD = [b"GET /metrics HTTP/1.1\r\nHost: x\r\nX: a\x00b", b"GET /met\x00rics HTTP/1.1",
       b"GET /metrics HTTP/1.1\r\nX: \x01", b"GET /metrics HTTP/1.1\rHost: x",
       b"GET /" + b"a" * 5000, b"G@T /metrics HTTP/1.1\r\n", b"GET /metrics HTTP/2.0\r\n",
       b"GET /metrics HTTP/1.1\r\nHost x\r\n", b"GET /metrics HTTP/1.1\r\nA: b\r\n c\r\n"]
SCRAPE = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"

def exchange(req):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    start = time.monotonic()
    s.sendall(req)
    data = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    except OSError as e:
        data += b"<%s>" % type(e).__name__.encode()
    s.close()
    return data.split(b"\r\n")[0].decode("latin-1"), time.monotonic() - start

for req in BAD:
    status, took = exchange(req)
    print(json.dumps({"req": req[:60].decode("latin-1"), "status": status, "took": took}))
held = []
for _ in range(8):  # every client slot: METRICS_DEFAULT_CLIENTS
    c = socket.create_connection(("127.0.0.1", port), timeout=10)
    c.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\x00")
    held.append(c)
time.sleep(0.5)
status, took = exchange(SCRAPE)
print(json.dumps({"req": "scrape with the slots filled", "status": status, "took": took}))
print("HELD", flush=True)
sys.stdin.read()
"""


@environments(*HOST_ONLY)
def test_metrics_malformed(ctx):
    """uid 65534 sends malformed heads to the endpoint: each answered 400 at once; with every
    client slot taken by one, scrapes still get 200."""
    daemon_port = free_port()
    trainer = start_waiting_trainer(ctx, "healthy")
    daemon = start_daemon(ctx, trainer.pid, extra=["--metrics", "127.0.0.1:%d" % daemon_port])
    wait_attach(daemon)
    attacker = Proc(["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups",
                     "/usr/bin/python3", "-c", ATTACKER, str(daemon_port)], stdin=True)
    if attacker.wait_out(lambda l: l == b"HELD\n", 120) is None:
        raise Fail("the attacker did not finish:\n%s" % tail(attacker.stderr_lines()))
    try:
        status, body = http("http://127.0.0.1:%d/metrics" % daemon_port)
    except OSError as e:  # http.client's RemoteDisconnected among them
        status, body = repr(e), b""
    attacker.send(b"")
    got = [json.loads(l) for l in attacker.out if l.startswith(b"{")]
    scrape, bad = got[-1], got[:-1]
    wrong = [g for g in bad if not g["status"].startswith("HTTP/1.1 400 ")]
    slow = [g for g in bad if g["took"] > MALFORMED_BOUND]
    if len(bad) != 9 or wrong or slow:
        raise Fail("malformed requests: not 400 %s, over %d s %s" % (wrong, MALFORMED_BOUND,
                                                                    slow))
    if scrape["status"] != "HTTP/1.1 200 OK" or status != 200 or \
            b"nanwatch_targets 1\n" not in body:
        raise Fail("scrapes with the slots filled: nobody's %r, root's %r" % (scrape, status))
    ctx.log("as uid %d: %d malformed heads answered 400 in at most %.3f s (mean %.3f s); a "
            "scrape with every slot filled: %.3f s" % (
                NOBODY, len(bad), max(g["took"] for g in bad),
                sum(g["took"] for g in bad) / len(bad), scrape["took"]))
    target_untouched(trainer)
    trainer.kill()
    wait_daemon_exit(daemon)
