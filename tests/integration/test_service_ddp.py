"""A data-parallel job under the service: three ranks of tests/trainers/ddp.py (gloo on CPU,
DistributedDataParallel) started the way a job launcher starts them (RANK, LOCAL_RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT and TORCHELASTIC_RUN_ID in the environment, a free port),
rank 1's data making a division by zero in the features layer at step 6; the other ranks get
NaN only through the gradient all-reduce.

First the same job runs without a daemon, every rank with --oracle (forward hooks): rank 1's
oracle names the first non-finite output. Then a service daemon (--config, a rule matching the
ranks by an environment marker, events to a file) is started, READY=1 awaited, and the job
started with --wait: each rank joins the group and waits; once the service has attached every
rank by itself (one attach event per pid, with its rank, local_rank, world_size and job) the
ranks are told to go, train, and exit 0, each detached with reason target_exit, and each rank's
trace (losses, final parameters) is the oracle run's: the daemon changed nothing. SIGTERM ends
the daemon with exit 0. nanwatch-collect --json on the event file must name exactly one job,
rank 1 with its pid at the oracle's step, iteration, layer and module, as an origin (evidence
created) with the daemon's diagnosis as the cause (the fault's: division_by_zero), ranks 0 and
2 as receivers (evidence received, at the fault step or later), none clean, and world_size 3.
Then tools/nanwatch-report makes the incident page of that one event file (every rank's
events), loaded in headless chromium (--dump-dom, nwreport.py, as test_report.py does; about
4 s, so in every environment: the tool and the file are the host's): the verdict names rank 1
with the oracle's layer, class, step and iteration and the daemon's cause; the ranks table
marks rank 1's row, and only it, as the first, and lists ranks 0 and 2 as later, each at the
step nanwatch-collect gives it as a receiver (after rank 1's); the page refers to nothing
outside itself, and every plot, the per-rank one included, is a PNG (size read from the page)
larger than 200x100 px.
"""
import json
import os
import shutil
import tempfile
import time

from nwharness import ATTACH_TIMEOUT, DETACH_TIMEOUT, Fail, Proc, tail, \
    trainer_argv
from nwchecks import (attach_latencies, environments, expect_notify, finish_ranks, free_port,
                      has_event,
                      notify_socket, read_events, run_collect, start_service, stop_service,
                      wait_events, write_config)
from nwreport import check_job_page, report

WORLD = 3
BAD_RANK = 1
FAULT_STEP = 6
READY_TIMEOUT = 120  # three torch imports and the rendezvous on a busy machine



def launch(ctx, mode, extra_env):
    """The job's WORLD ranks, started as a launcher starts them; each with stdin a pipe."""
    port = free_port()
    ranks = []
    for rank in range(WORLD):
        env = dict(extra_env, RANK=rank, LOCAL_RANK=rank, WORLD_SIZE=WORLD,
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        argv = ["env"] + ["%s=%s" % kv for kv in sorted(env.items())] + trainer_argv(
            ctx, "ddp", mode, "--fault-step", str(FAULT_STEP), "--bad-rank", str(BAD_RANK))
        ranks.append(Proc(argv, stdin=True))
    return ranks


def check_attach(events, ranks, job):
    """Exactly one attach event per rank's pid, each with that rank's fields."""
    attached = sorted(e["pid"] for e in events if e["event"] == "attach")
    pids = [p.pid for p in ranks]
    if attached != sorted(pids):
        raise Fail("attach events for pids %s, want one for each rank %s" % (attached, pids))
    for rank, pid in enumerate(pids):
        want = {"rank": rank, "local_rank": rank, "world_size": WORLD, "job": job}
        for e in events:
            if e["pid"] != pid:
                continue
            got = {k: e.get(k) for k in want}
            if got != want:
                raise Fail("pid %d: %s event has %s, not %s" % (pid, e["event"], got, want))
        detach = [e for e in events if e["pid"] == pid and e["event"] == "detach"]
        if len(detach) != 1 or detach[0].get("reason") != "target_exit":
            raise Fail("rank %d: detach events %s, not one with reason target_exit" %
                       (rank, detach))
    errors = [e for e in events if e["event"] in ("error", "lost")]
    if errors:
        raise Fail("%s events: %s" % (errors[0]["event"], errors[:3]))


def check_verdict(ctx, events_path, ranks, oracle, job):
    out, _ = run_collect(ctx, "--json", events_path)
    verdicts = [json.loads(line) for line in out.splitlines()]
    if len(verdicts) != 1:
        raise Fail("%d verdicts for one job: %s" % (len(verdicts), out))
    v = verdicts[0]
    want = dict(job=job, found=True, rank=BAD_RANK, pid=ranks[BAD_RANK].pid,
                step=oracle["step"], iteration=oracle["iteration"], layer=oracle["layer"],
                module=oracle["module"], cause=oracle["expected_cause"], cause_from="diagnosis",
                ranks=WORLD, world_size=WORLD)
    diffs = ["%s %r, want %r" % (k, v.get(k), w) for k, w in want.items() if v.get(k) != w]
    if diffs:
        raise Fail("nanwatch-collect: %s\n    %s" % ("; ".join(diffs), json.dumps(v)))
    if v["origin_basis"].get("evidence") != "created":
        raise Fail("origin evidence %r, want created: %s" % (v["origin_basis"], json.dumps(v)))
    received = sorted((int(r["rank"]), r["pid"], r["evidence"]) for r in v["received"])
    want_received = [(r, ranks[r].pid, "received") for r in range(WORLD) if r != BAD_RANK]
    if received != want_received:
        raise Fail("received %s, want %s" % (received, want_received))
    early = [r for r in v["received"] if r["step"] < oracle["step"]]
    if early or v["clean"] or v["tied"]:
        raise Fail("receivers before the fault step %s, clean %s, tied %s" %
                   (early, v["clean"], v["tied"]))
    return v


def check_page(ctx, tmp, events_path, oracle, v):
    """The incident page of the service's event file (every rank's events in one file), read
    in headless chromium: BAD_RANK first at the oracle's layer, class, step and iteration with
    the daemon's cause, the other ranks later, at the steps nanwatch-collect gives them."""
    t0 = time.monotonic()
    page_path, page = report(ctx, [events_path], "ddp.html", directory=tmp)
    later = {int(r["rank"]): r["step"] for r in v["received"]}
    rows, sizes = check_job_page(
        ctx, page_path, page, dict(rank=str(BAD_RANK), layer=oracle["layer"],
                                   module=oracle["module"], step=str(oracle["step"]),
                                   iteration=str(oracle["iteration"]),
                                   cause=oracle["expected_cause"]), later=later)
    ctx.log("incident page in %.1f s: %s; ranks plot %dx%d px" % (
        time.monotonic() - t0, "; ".join("rank %s %s%s" % (
            r["rank"], r["first non-finite"], " at " + r["where"] if r["where"] else "")
            for r in rows), *sizes["plot-ranks"]))


@environments("host", "trixie", "container")
def test_service_ddp(ctx):
    started = time.monotonic()
    tmp = tempfile.mkdtemp(dir=ctx.tmp, prefix="ddp-")
    try:
        run_job(ctx, tmp, started)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_job(ctx, tmp, started):
    oracles = finish_ranks(launch(ctx, "--oracle", {}), "oracle run")
    oracle = oracles[BAD_RANK]["oracle"]
    if oracle is None or (oracle["step"], oracle["layer"], oracle["origin"]) != \
            (FAULT_STEP, "module.features", True):
        raise Fail("rank %d's oracle %r: the fault did not start where the trainer puts it" %
                   (BAD_RANK, oracle and {k: oracle[k] for k in ("step", "layer", "origin")}))
    for rank, found in enumerate(oracles):
        if rank != BAD_RANK and (found["oracle"] is None or found["oracle"]["step"] <= FAULT_STEP):
            raise Fail("rank %d's oracle %r: not a later step" % (rank, found["oracle"]))
    times = [("oracle run", time.monotonic())]

    token = "ddp-%d-%s" % (os.getpid(), ctx.env.name)
    job = "job-" + token
    config, events_path = write_config(ctx, tmp, [
        "  - name: ddp\n    match: {env: {NW_DDP_TEST: '^%s$'}}\n" % token])
    sock, path = notify_socket(tmp)
    try:
        daemon = start_service(ctx, config, notify=path)
        expect_notify(sock, "READY=1")
        times.append(("service ready", time.monotonic()))
        ranks = launch(ctx, "--wait", {"NW_DDP_TEST": token, "TORCHELASTIC_RUN_ID": job})
        for rank, proc in enumerate(ranks):
            if proc.wait_out(lambda l: l.startswith(b"READY "), READY_TIMEOUT) is None:
                raise Fail("rank %d printed no READY line:\n%s" % (rank,
                                                                   tail(proc.stderr_lines())))
        times.append(("ranks joined", time.monotonic()))
        for proc in ranks:
            wait_events(events_path, daemon, has_event("attach", proc.pid),
                        "attach of %d" % proc.pid, ATTACH_TIMEOUT)
        times.append(("all %d attached" % WORLD, time.monotonic()))
        for proc in ranks:
            proc.send(b"go\n")
        traces = finish_ranks(ranks, "watched run")
        for proc in ranks:
            wait_events(events_path, daemon, has_event("detach", proc.pid),
                        "detach of %d" % proc.pid, DETACH_TIMEOUT)
        times.append(("trained and detached", time.monotonic()))
        latencies = attach_latencies(daemon)
        stop_service(daemon, sock)
    finally:
        sock.close()
    for rank in range(WORLD):
        if traces[rank]["trace"] != oracles[rank]["trace"]:
            raise Fail("rank %d's trace differs from the oracle run's: the daemon changed the "
                       "training" % rank)
    events = read_events(events_path)
    check_attach(events, ranks, job)
    v = check_verdict(ctx, events_path, ranks, oracle, job)
    ctx.log("%s: rank %d first non-finite at step %d, iteration %d, layer %s (%s), cause %s; "
            "received by %s" % (ctx.env.name, v["rank"], v["step"], v["iteration"], v["layer"],
                                v["module"], v["cause"],
                                ", ".join("rank %s at step %d" % (r["rank"], r["step"])
                                          for r in v["received"])))
    times.append(("stopped and checked", time.monotonic()))
    check_page(ctx, tmp, events_path, oracle, v)
    times.append(("incident page", time.monotonic()))
    phases, last = [], started
    for what, when in times:
        phases.append("%s %.1f s" % (what, when - last))
        last = when
    ctx.log("%.1f s in all: %s; attach latency: %s" % (
        time.monotonic() - started, ", ".join(phases), "; ".join(latencies)))
