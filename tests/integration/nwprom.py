"""Debian's Prometheus, node_exporter and Alertmanager for the metrics tests, and a webhook
that keeps what Alertmanager posts. Each program runs on a given address (loopback by
default) and, with wrap (LanNode.inside's prefix), inside a network namespace; the test's
own queries reach it at that address."""
import json
import os
import shutil
import signal
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer

from nwharness import REPO, Fail, Proc, tail
from nwchecks import free_port

PROMETHEUS = "/usr/bin/prometheus"
NODE_EXPORTER = "/usr/bin/prometheus-node-exporter"
ALERTMANAGER = "/usr/bin/prometheus-alertmanager"
RULES = os.path.join(REPO, "config", "nanwatch-alerts.yml")
READY_TIMEOUT = 120  # prometheus's start (seconds on this machine, see the log line)
QUERY_TIMEOUT = 60  # for the scraped values to reach the daemon's stream's counts
FIRST_QUERY = "bottomk by (job_id) (1, nanwatch_first_nonfinite_time_seconds)"

CONFIG = """global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: nanwatch
    static_configs:
      - targets: ["127.0.0.1:%d"]
"""
ALERTING = """rule_files: [%s]
alerting:
  alertmanagers:
    - static_configs:
        - targets: ["%s:%d"]
"""
AM_CONFIG = """route:
  receiver: hook
  group_by: [alertname, job_id]
  group_wait: 1s
  group_interval: 5m
  repeat_interval: 4h
receivers:
  - name: hook
    webhook_configs:
      - url: http://%s:%d/
        send_resolved: false
"""


def require(*progs):
    for prog in progs:
        if not os.access(prog, os.X_OK):
            raise Fail("%s missing: run scripts/install-deps --test" % prog)


def http(url, method="GET"):
    """(status, body) of one request; an HTTP error status is returned, not raised."""
    req = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def query(port, expr, addr="127.0.0.1"):
    """The instant vector of expr as [(labels, value)] from prometheus's HTTP API."""
    status, body = http("http://%s:%d/api/v1/query?%s" %
                        (addr, port, urllib.parse.urlencode({"query": expr})))
    if status != 200:
        raise Fail("prometheus query %r: HTTP %d %r" % (expr, status, body[:200]))
    doc = json.loads(body)
    if doc.get("status") != "success" or doc["data"]["resultType"] != "vector":
        raise Fail("prometheus query %r: %r" % (expr, doc))
    return [(r["metric"], float(r["value"][1])) for r in doc["data"]["result"]]


def one_value(port, expr, addr="127.0.0.1"):
    got = query(port, expr, addr)
    if len(got) != 1:
        raise Fail("%s: %d series, want 1: %r" % (expr, len(got), got))
    return got[0][1]


def wait_ready(proc, url, what):
    """Until url answers 200 (bounded); proc's exit fails with its stderr."""
    deadline = time.monotonic() + READY_TIMEOUT
    while time.monotonic() < deadline:
        if not proc.running():
            raise Fail("%s exited %s:\n%s" % (what, proc.p.returncode, tail(proc.stderr_lines())))
        try:
            if http(url)[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise Fail("%s not ready in %ds:\n%s" % (what, READY_TIMEOUT, tail(proc.stderr_lines())))


def start_prometheus(ctx, workdir, target_port, job="nanwatch", extra="", scrape=None,
                     addr="127.0.0.1", wrap=()):
    """prometheus on a free port of addr scraping 127.0.0.1:target_port (scrape: its
    scrape_configs entries instead; extra: more of its configuration); its port once it is
    ready."""
    port = free_port()
    config = os.path.join(workdir, "prometheus.yml")
    text = (CONFIG % target_port).replace("job_name: nanwatch", "job_name: " + job)
    if scrape is not None:
        text = text[:text.index("scrape_configs:\n") + len("scrape_configs:\n")] + scrape
    with open(config, "w") as f:
        f.write(text)
        f.write(extra)
    start = time.monotonic()
    prom = Proc(list(wrap) + [PROMETHEUS, "--config.file=" + config,
                              "--storage.tsdb.path=" + os.path.join(workdir, "data"),
                              "--web.listen-address=%s:%d" % (addr, port)], term_timeout=10)
    wait_ready(prom, "http://%s:%d/-/ready" % (addr, port), "prometheus")
    ctx.log("prometheus ready in %.1fs" % (time.monotonic() - start))
    return prom, port


def stop_prometheus(prom, workdir):
    if prom is not None and prom.running():
        os.killpg(prom.pid, signal.SIGTERM)
        if prom.wait(30) is None:
            prom.kill()
    shutil.rmtree(workdir, ignore_errors=True)


class Webhook:
    """An HTTP server on a free port of addr keeping each POSTed JSON body."""

    def __init__(self, addr="127.0.0.1"):
        bodies = self.bodies = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                n = int(self.headers.get("Content-Length", 0))
                bodies.append(json.loads(self.rfile.read(n)))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = HTTPServer((addr, 0), Handler)
        self.addr, self.port = addr, self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def start_alertmanager(ctx, workdir, hook, addr="127.0.0.1", wrap=()):
    """Debian's Alertmanager (no cluster) on addr sending to the webhook; its port once
    ready."""
    port = free_port()
    config = os.path.join(workdir, "alertmanager.yml")
    with open(config, "w") as f:
        f.write(AM_CONFIG % (hook.addr, hook.port))
    proc = Proc(list(wrap) + [ALERTMANAGER, "--config.file=" + config,
                              "--storage.path=" + os.path.join(workdir, "am"),
                              "--web.listen-address=%s:%d" % (addr, port),
                              "--cluster.listen-address="], term_timeout=10)
    wait_ready(proc, "http://%s:%d/-/ready" % (addr, port), "alertmanager")
    return proc, port


# NanwatchJobNonFinite's for:, fitted to these tests' one-second scrapes and textfiles and a
# loaded machine's late daemon (the shipped minute fits scrapes of up to about a minute)
RULE_FOR = "10s"


def alerting(addr, port, workdir):
    """prometheus.yml's part loading the shipped rules (in workdir, the job alert's for: set
    to RULE_FOR, nothing else changed) and sending to that Alertmanager."""
    with open(RULES) as f:
        text = f.read()
    if text.count("\n        for: 1m\n") != 1:
        raise Fail("%s: want one rule held for 1m (NanwatchJobNonFinite)" % RULES)
    rules = os.path.join(workdir, "nanwatch-alerts.yml")
    with open(rules, "w") as f:
        f.write(text.replace("\n        for: 1m\n", "\n        for: %s\n" % RULE_FOR))
    return ALERTING % (rules, addr, port)


def start_node_exporter(ctx, textdir, addr="127.0.0.1", port=None, wrap=()):
    """node_exporter with its textfile collector alone on textdir; its port once it answers."""
    port = port or free_port()
    proc = Proc(list(wrap) + [NODE_EXPORTER, "--collector.disable-defaults",
                              "--collector.textfile", "--collector.textfile.directory=" + textdir,
                              "--web.listen-address=%s:%d" % (addr, port)], term_timeout=10)
    wait_ready(proc, "http://%s:%d/metrics" % (addr, port), "node_exporter")
    return proc, port


def diagnosis_of(events, pid):
    got = [e for e in events if e["event"] == "diagnosis" and e["pid"] == pid]
    if len(got) != 1:
        raise Fail("pid %d: %d diagnosis events" % (pid, len(got)))
    return got[0]


def wait_first_series(ctx, port, job, n, addr="127.0.0.1"):
    """Until prometheus holds n nanwatch_first_nonfinite_step series of job (bounded)."""
    deadline = time.monotonic() + QUERY_TIMEOUT
    while time.monotonic() < deadline:
        got = query(port, 'nanwatch_first_nonfinite_step{job_id="%s"}' % job, addr)
        if len(got) == n:
            return got
        time.sleep(0.5)
    raise Fail("prometheus has %d first-non-finite series of job %s, want %d" % (
        len(got), job, n))


def check_notification(ctx, hook, job, labels, step, settle=5):
    """Alertmanager sent one notification for the job, with these labels and step: the rank
    that went first. settle: seconds more to wait for a second one that must not come."""
    deadline = time.monotonic() + QUERY_TIMEOUT
    while not hook.bodies and time.monotonic() < deadline:
        time.sleep(0.5)
    time.sleep(settle)
    mine = [b for b in hook.bodies if b.get("groupLabels", {}).get("job_id") == job]
    if len(mine) != 1 or len(mine[0].get("alerts", [])) != 1:
        raise Fail("webhook got %d notification(s) for %s: %s" % (
            len(mine), job, json.dumps(hook.bodies)[:2000]))
    alert = mine[0]["alerts"][0]
    got, summary = alert["labels"], alert["annotations"].get("summary", "")
    want = dict(labels, alertname="NanwatchJobNonFinite", job_id=job)
    bad = ["%s %r (want %r)" % (k, got.get(k), v) for k, v in want.items() if got.get(k) != v]
    if bad or "at step %d" % step not in summary:
        raise Fail("notification %s: %s; summary %r lacks step %d" % (
            json.dumps(alert), "; ".join(bad), summary, step))
    ctx.log("one notification for %s: %s" % (job, summary))
    return alert
