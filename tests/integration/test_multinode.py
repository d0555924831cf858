"""A job across three nodes on this one machine, watched the way a cluster watches it.

multinode_job (host): a bridge and four network namespaces on it, each with its own address
(10.215.30.x, eth0) and, for every process started in it, its own host name (a UTS
namespace): three nodes (nwnode0-2) and a head. tests/trainers/ddp.py runs as a gloo
DistributedDataParallel job of six ranks, two per node, rendezvous at node 0's address,
gloo on each node's eth0; rank 3 (node 1's second) makes +Inf at step 6 and the other ranks
get NaN through the all-reduce one step later.

First the job runs unwatched with --oracle (forward hooks on every module): the oracle of
rank 3 gives the layer, module and step; every rank's losses and final parameters are kept.

Then, on each node: `nanwatchd --config` (a rule for that node's ranks alone, events to a
file, `metrics: {textfile: ...}`), Debian's node_exporter serving that textfile on the node's
address, and an rsyslog following the event file (imfile) and forwarding each line over TCP
(RFC 5424, octet-counted) to the head. On the head: a central rsyslog writing each node's lines
to a file of its own (by the sender's host name), Debian's prometheus scraping the three
node_exporters with the shipped rules (config/nanwatch-alerts.yml), and Debian's
prometheus-alertmanager (group_by alertname, job_id) posting to a webhook this test serves
on the bridge. nanwatch-collect --json --follow reads the central files as they grow.

The job runs again under all that. Checked: every rank's losses and parameters equal the
unwatched run's; the webhook got one notification for the job (not one per rank or node)
naming rank 3, host nwnode1, its pid, the oracle's layer and step and the daemon's cause; the
PromQL query that names a job's first rank gives the same rank, host and pid as
nanwatch-collect's last verdict, which also has the oracle's step and layer; on every node,
the central file holds the node's event lines byte for byte and in the same order (none lost,
none reordered). Everything is stopped and the namespaces, links and bridge are removed.
"""
import json
import os
import shutil
import tempfile
import time

from nwharness import ATTACH_TIMEOUT, DETACH_TIMEOUT, Fail, Proc, tail, \
    trainer_argv
from nwchecks import (HOST_ONLY, NetLan, collector, environments, expect_notify,
                      finish_ranks, has_event,
                      notify_socket, read_events, stop_service, wait_events,
                      write_config)
from nwprom import (ALERTMANAGER, FIRST_QUERY, NODE_EXPORTER, PROMETHEUS, Webhook, alerting,
                    check_notification, query, require, start_alertmanager,
                    start_node_exporter, start_prometheus, stop_prometheus, wait_first_series)

RSYSLOGD = "/usr/sbin/rsyslogd"
NODES, PER_NODE = 3, 2
WORLD = NODES * PER_NODE
BAD_RANK = 3  # node 1's second rank
FAULT_STEP = 6
EXPORTER_PORT = 9100
READY_TIMEOUT = 180  # six torch imports and the rendezvous on a busy two-core machine
ARRIVE_TIMEOUT = 60  # a node's last line at the head

SENDER = """global(workDirectory="{work}" maxMessageSize="256k" localHostname="{host}")
module(load="imfile" mode="inotify")
input(type="imfile" file="{events}" tag="nanwatch" ruleset="ship" freshStartTail="off")
ruleset(name="ship") {{
  action(type="omfwd" target="{head}" port="{port}" protocol="tcp"
         TCP_Framing="octet-counted" template="RSYSLOG_SyslogProtocol23Format")
}}
"""
CENTRAL = """global(workDirectory="{work}" maxMessageSize="256k")
module(load="imtcp")
template(name="message" type="string" string="%msg%\\n")
template(name="bynode" type="string" string="{out}/%hostname%.ndjson")
input(type="imtcp" address="{addr}" port="0" listenPortFileName="{portfile}" ruleset="store")
ruleset(name="store") {{
  action(type="omfile" dynaFile="bynode" template="message")
}}
"""


def launch(ctx, nodes, mode, env):
    """The job's ranks, PER_NODE on each node in order (rank = node * PER_NODE + local)."""
    port = 29500 + os.getpid() % 1000
    ranks = []
    for rank in range(WORLD):
        node = nodes[rank // PER_NODE]
        e = dict(env.get(node.hostname, {}), RANK=rank, LOCAL_RANK=rank % PER_NODE,
                 WORLD_SIZE=WORLD, MASTER_ADDR=nodes[0].ip, MASTER_PORT=port,
                 GLOO_SOCKET_IFNAME="eth0")
        argv = node.inside("env", *["%s=%s" % kv for kv in sorted(e.items())]) + trainer_argv(
            ctx, "ddp", mode, "--fault-step", str(FAULT_STEP), "--bad-rank", str(BAD_RANK))
        ranks.append(Proc(argv, stdin=True))
    return ranks


def rsyslogd(ctx, node, conf_text, workdir):
    """An rsyslogd in the foreground on node with its own configuration and work directory."""
    os.makedirs(workdir, exist_ok=True)
    conf = os.path.join(workdir, "rsyslog.conf")
    with open(conf, "w") as f:
        f.write(conf_text)
    return Proc(node.inside(RSYSLOGD, "-n", "-f", conf, "-i", os.path.join(workdir, "pid")),
                term_timeout=10)


def read_lines(path):
    try:
        with open(path, "rb") as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


@environments(*HOST_ONLY)
def test_multinode_job(ctx):
    require(PROMETHEUS, NODE_EXPORTER, ALERTMANAGER, RSYSLOGD)
    started = time.monotonic()
    tmp = tempfile.mkdtemp(dir=ctx.tmp, prefix="multinode-")
    os.chmod(ctx.tmp, 0o711)
    os.chmod(tmp, 0o711)
    lan = NetLan("nwjob", 30)
    procs, services, hook, prom, workdir = [], [], None, None, None
    try:
        head = lan.node("nwhead", 2)
        nodes = [lan.node("nwnode%d" % i, 10 + i) for i in range(NODES)]

        oracles = finish_ranks(launch(ctx, nodes, "--oracle", {}), "unwatched run")
        oracle = oracles[BAD_RANK]["oracle"]
        if oracle is None or (oracle["step"], oracle["layer"]) != (FAULT_STEP, "module.features"):
            raise Fail("rank %d's oracle %r: not where the trainer puts the fault" %
                       (BAD_RANK, oracle))
        ctx.log("unwatched run: %.1f s" % (time.monotonic() - started))

        # the head: a central rsyslog writing one file per node
        central = os.path.join(tmp, "central")
        os.makedirs(central)
        for n in nodes:
            open(os.path.join(central, n.hostname + ".ndjson"), "w").close()
        portfile = os.path.join(tmp, "central-port")
        procs.append(rsyslogd(ctx, head, CENTRAL.format(
            work=os.path.join(tmp, "central-work"), out=central, addr=head.ip,
            portfile=portfile), os.path.join(tmp, "central-work")))
        deadline = time.monotonic() + 30
        while not (os.path.exists(portfile) and open(portfile).read().strip()):
            if time.monotonic() > deadline or not procs[-1].running():
                raise Fail("central rsyslogd did not listen:\n%s" % tail(procs[-1].stderr_lines()))
            time.sleep(0.1)
        syslog_port = int(open(portfile).read())

        # each node: the service, node_exporter on its textfile, rsyslog forwarding its events
        token = "mn-%d" % os.getpid()
        job = "job-" + token
        env, events = {}, {}
        for n in nodes:
            d = os.path.join(tmp, n.hostname)
            os.makedirs(os.path.join(d, "textfile"))
            env[n.hostname] = {"NW_MN_TEST": "%s-%s" % (token, n.hostname),
                               "TORCHELASTIC_RUN_ID": job}
            config, events[n.hostname] = write_config(
                ctx, d, ["  - name: ranks\n    match: {env: {NW_MN_TEST: '^%s-%s$'}}\n" %
                         (token, n.hostname)],
                extra="metrics:\n  textfile: %s\n" % os.path.join(d, "textfile",
                                                                  "nanwatch.prom"))
            sock, path = notify_socket(d)
            try:
                daemon = Proc(n.inside("env", "NOTIFY_SOCKET=" + path, ctx.daemon, "--config",
                                       config), term_timeout=10)
                services.append(daemon)
                expect_notify(sock, "READY=1")
            finally:
                sock.close()
            procs.append(start_node_exporter(ctx, os.path.join(d, "textfile"), addr=n.ip,
                                             port=EXPORTER_PORT, wrap=n.inside())[0])
            procs.append(rsyslogd(ctx, n, SENDER.format(
                work=os.path.join(d, "rsyslog"), host=n.hostname, events=events[n.hostname],
                head=head.ip, port=syslog_port), os.path.join(d, "rsyslog")))

        hook = Webhook(lan.host_ip)
        workdir = tempfile.mkdtemp(prefix="prometheus-", dir=tmp)
        manager, manager_port = start_alertmanager(ctx, workdir, hook, addr=head.ip,
                                                   wrap=head.inside())
        procs.append(manager)
        scrape = "  - job_name: node\n    static_configs:\n      - targets: [%s]\n" % ", ".join(
            '"%s:%d"' % (n.ip, EXPORTER_PORT) for n in nodes)
        prom, prom_port = start_prometheus(ctx, workdir, 0, scrape=scrape, addr=head.ip,
                                           extra=alerting(head.ip, manager_port, workdir),
                                           wrap=head.inside())
        follow = Proc([collector(ctx), "--json", "--follow"] +
                      [os.path.join(central, n.hostname + ".ndjson") for n in nodes])
        procs.append(follow)
        ctx.log("three nodes and the head up: %.1f s" % (time.monotonic() - started))

        ranks = launch(ctx, nodes, "--wait", env)
        for rank, proc in enumerate(ranks):
            if proc.wait_out(lambda l: l.startswith(b"READY "), READY_TIMEOUT) is None:
                raise Fail("rank %d printed no READY line:\n%s" % (rank,
                                                                   tail(proc.stderr_lines())))
        for rank, proc in enumerate(ranks):
            n = nodes[rank // PER_NODE]
            wait_events(events[n.hostname], services[rank // PER_NODE],
                        has_event("attach", proc.pid), "attach of rank %d" % rank,
                        ATTACH_TIMEOUT)
        for proc in ranks:
            proc.send(b"go\n")
        traces = finish_ranks(ranks, "watched run")
        for rank, proc in enumerate(ranks):
            n = nodes[rank // PER_NODE]
            wait_events(events[n.hostname], services[rank // PER_NODE],
                        has_event("detach", proc.pid), "detach of rank %d" % rank,
                        DETACH_TIMEOUT)
        ctx.log("watched run done: %.1f s" % (time.monotonic() - started))

        for rank in range(WORLD):
            if traces[rank]["trace"] != oracles[rank]["trace"]:
                raise Fail("rank %d's losses or parameters differ from the unwatched run's"
                           % rank)

        bad = ranks[BAD_RANK]
        diag = [e for e in read_events(events["nwnode1"])
                if e["event"] == "diagnosis" and e["pid"] == bad.pid]
        if len(diag) != 1 or diag[0]["cause"] != oracle["expected_cause"]:
            raise Fail("rank %d's diagnosis %r, want cause %s" % (
                BAD_RANK, diag, oracle["expected_cause"]))
        want = dict(rank=str(BAD_RANK), host="nwnode1", pid=str(bad.pid),
                    layer=oracle["layer"], cause=diag[0]["cause"])
        check_notification(ctx, hook, job, want, oracle["step"])

        wait_first_series(ctx, prom_port, job, WORLD, addr=head.ip)
        first = query(prom_port, FIRST_QUERY, head.ip)
        if len(first) != 1:
            raise Fail("%s: %r" % (FIRST_QUERY, first))
        labels = first[0][0]

        # every node's lines at the head, the same bytes in the same order
        for n in nodes:
            local, path = read_lines(events[n.hostname]), os.path.join(central,
                                                                       n.hostname + ".ndjson")
            deadline = time.monotonic() + ARRIVE_TIMEOUT
            while len(read_lines(path)) < len(local) and time.monotonic() < deadline:
                time.sleep(0.2)
            got = read_lines(path)
            if got != local:
                lost = len(local) - len(got)
                at = next((i for i, (a, b) in enumerate(zip(got, local)) if a != b), None)
                raise Fail("%s: %d lines at the head, %d on the node (%d missing); first "
                           "difference at line %s" % (n.hostname, len(got), len(local), lost, at))
        ctx.log("every node's %s event lines arrived whole and in order" % "/".join(
            str(len(read_lines(events[n.hostname]))) for n in nodes))

        verdicts = []
        deadline = time.monotonic() + ARRIVE_TIMEOUT
        while time.monotonic() < deadline:
            verdicts = [json.loads(line) for line in follow.stdout_text().splitlines()
                        if line.startswith("{")]
            mine = [v for v in verdicts if v.get("job") == job]
            if mine and mine[-1].get("rank") == BAD_RANK and len(mine[-1]["received"]) == \
                    WORLD - 1:
                break
            time.sleep(0.5)
        mine = [v for v in verdicts if v.get("job") == job]
        if not mine:
            raise Fail("nanwatch-collect --follow gave no verdict for %s: %s" % (
                job, tail(follow.stderr_lines())))
        v = mine[-1]
        got = dict(rank=str(v["rank"]), host=v["host"], pid=str(v["pid"]))
        if got != {k: labels.get(k) for k in got} or got != {k: want[k] for k in got} or \
                (v["step"], v["layer"], v["cause"]) != (oracle["step"], oracle["layer"],
                                                        want["cause"]):
            raise Fail("nanwatch-collect %r, prometheus %r, want %r at step %d" % (
                json.dumps(v)[:600], labels, want, oracle["step"]))
        ctx.log("first rank: PromQL and nanwatch-collect agree: rank %s on %s (pid %s), step "
                "%d, %s, %s; %.1f s in all" % (got["rank"], got["host"], got["pid"], v["step"],
                                              v["layer"], v["cause"],
                                              time.monotonic() - started))
        for daemon in services:
            stop_service(daemon)
        services = []
    finally:
        for p in services + procs:
            if p.running():
                p.kill()
        if prom is not None:
            stop_prometheus(prom, workdir)
        if hook is not None:
            hook.close()
        lan.close()
        shutil.rmtree(tmp, ignore_errors=True)
