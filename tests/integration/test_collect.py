"""nanwatch-collect on real streams: the same seeded trainer (div_zero) runs as two ranks, each
under its own nanwatchd writing a file (-o FILE): RANK=0 without the fault (it would come at
step 100), RANK=1 with it at step 4. A third stream, RANK=2, is a copy of rank 0's clean stream
edited to look like a rank that received the NaN through the all-reduce: rank 1's own later
anomaly events (the steps after the fault, whose parameters the update made non-finite) put
into it. nanwatch-collect must name rank 1, its pid and host, at the step, iteration and layer
the oracle (forward hooks) names, with the daemon's diagnosis as the cause, rank 2 as a
receiver at the later step and rank 0 as clean; in text too, with a garbage line counted on
stderr; and with --follow, a verdict as soon as the receiver's stream arrives and a better one
once the origin's does.

The collector is the nanwatch-collect next to --daemon (build/ or build-asan/).
"""
import json
import os
import signal
import subprocess

from nwharness import Fail, Proc, oracle_of, run_trainer
from nwchecks import HOST_ONLY, collector, environments, run_collect, run_rank

TRAINER = "div_zero"
FAULT = ("--fault-step", "4")
NO_FAULT = ("--fault-step", "100", "--steps", "7")  # as many steps as the faulty run trains
FOLLOW_TIMEOUT = 30



def run_collect_rank(ctx, rank, args, trace):
    return run_rank(ctx, TRAINER, rank, 3, args, trace,
                    os.path.join(ctx.tmp, "collect-rank%d.ndjson" % rank))


def receiver_stream(ctx, clean, faulty, first):
    """Rank 0's clean stream as rank 2 (another pid), with rank 1's anomalies of the steps after
    the fault (non-finite parameters) before its stats and detach lines, seq renumbered."""
    later = [ev for ev in faulty if ev["event"] == "anomaly" and ev["step"] > first["step"]]
    if not later or later[0]["params_finite"] is not False:
        raise Fail("rank 1 has no anomaly with non-finite parameters after the fault: %s" %
                   (later[:1],))
    cut = next(i for i, ev in enumerate(clean) if ev["event"] in ("stats", "detach"))
    events = clean[:cut] + [dict(ev) for ev in later] + clean[cut:]
    pid = clean[0]["pid"] + 1000000
    for seq, ev in enumerate(events):
        ev.update(seq=seq, pid=pid, rank=type(clean[0]["rank"])(2))
        if ev["event"] == "anomaly":
            ev.update(first=ev is events[cut], tid=pid)
    path = os.path.join(ctx.tmp, "collect-rank2.ndjson")
    with open(path, "w") as f:
        f.writelines(json.dumps(ev) + "\n" for ev in events)
    return path, later[0]



def check_verdict(v, want):
    diffs = ["%s %r, want %r" % (k, v.get(k), w) for k, w in want.items() if v.get(k) != w]
    if diffs:
        raise Fail("nanwatch-collect: %s\n    %s" % ("; ".join(diffs), json.dumps(v)))


def rank_of(ref):
    return int(ref["rank"]) if ref.get("rank") is not None else None


@environments(*HOST_ONLY)
def test_collect_names_origin_rank(ctx):
    oracle, trace = oracle_of(ctx, TRAINER, *FAULT)
    clean_trace = run_trainer(ctx, TRAINER, *NO_FAULT)["trace"]
    path0, pid0, clean = run_collect_rank(ctx, 0, NO_FAULT, clean_trace)
    path1, pid1, faulty = run_collect_rank(ctx, 1, FAULT, trace)
    if any(ev["event"] == "anomaly" for ev in clean):
        raise Fail("rank 0 (no fault) has anomaly events")
    first = next(ev for ev in faulty if ev["event"] == "anomaly")
    diag = next(ev for ev in faulty if ev["event"] == "diagnosis")
    if (first["step"], first["iteration"], first["layer"]) != \
            (oracle["step"], oracle["iteration"], oracle["layer"]):
        raise Fail("the daemon's first anomaly %r differs from the oracle's %r" % (
            (first["step"], first["iteration"], first["layer"]),
            (oracle["step"], oracle["iteration"], oracle["layer"])))
    path2, got = receiver_stream(ctx, clean, faulty, first)

    out, _ = run_collect(ctx, "--json", path0, path2, path1)
    verdicts = [json.loads(line) for line in out.splitlines()]
    if len(verdicts) != 1:
        raise Fail("%d verdicts for one job: %s" % (len(verdicts), out))
    v = verdicts[0]
    check_verdict(v, dict(found=True, rank=1, host=first["host"], pid=pid1, step=oracle["step"],
                          iteration=oracle["iteration"], layer=oracle["layer"],
                          module=oracle["module"], cause=diag["cause"], cause_from="diagnosis",
                          ranks=3))
    if diag["cause"] != oracle["expected_cause"]:
        raise Fail("diagnosis %r, the fault is %r" % (diag["cause"], oracle["expected_cause"]))
    basis = v["origin_basis"]
    if basis.get("decided_by") != "earliest_step" or basis.get("evidence") != "created":
        raise Fail("origin_basis %s" % json.dumps(basis))
    received = [(rank_of(r), r["step"], r["evidence"]) for r in v["received"]]
    if received != [(2, got["step"], "received")] or got["step"] <= oracle["step"]:
        raise Fail("received %r, want rank 2 at step %d" % (received, got["step"]))
    if [rank_of(r) for r in v["clean"]] != [0] or v["tied"]:
        raise Fail("clean %r, tied %r" % (v["clean"], v["tied"]))
    ctx.log("rank 1 at step %d, iteration %d, layer %s (%s), cause %s; rank 2 received it at "
            "step %d" % (v["step"], v["iteration"], v["layer"], v["module"], v["cause"],
                         got["step"]))

    # text, from stdin, with a line that is not an event: counted once on stderr
    text_in = os.path.join(ctx.tmp, "collect-all.ndjson")
    lines = 0
    with open(text_in, "wb") as f:
        for p in (path2, path0, path1):
            with open(p, "rb") as src:
                data = src.read()
            f.write(data)
            lines += data.count(b"\n")
        f.write(b"this is not an event\n")
    with open(text_in, "rb") as stdin:
        r = subprocess.run([collector(ctx)], stdin=stdin, capture_output=True, timeout=60)
    text, err = r.stdout.decode(), r.stderr.decode()
    want = ("rank 1 (host %s, pid %d) first non-finite at step %d, iteration %d, layer %s (%s), "
            "cause %s; rank 2 received it at step %d; no anomaly on rank 0" % (
                first["host"], pid1, oracle["step"], oracle["iteration"], oracle["layer"],
                oracle["module"], diag["cause"], got["step"]))
    if r.returncode != 0 or want not in text:
        raise Fail("text output (exit %d) lacks %r:\n%s" % (r.returncode, want, text))
    if err.count("\n") != 1 or "1 line skipped" not in err or \
            "<stdin>:%d:" % (lines + 1) not in err:
        raise Fail("stderr %r: want one line counting the garbage line with its place" % err)

    check_follow(ctx, path0, path1, path2, pid1, oracle)


def check_follow(ctx, path0, path1, path2, pid1, oracle):
    """--follow on a file that grows: rank 0 and rank 2 first (rank 2 named, as a receiver),
    then rank 1 appended: a second verdict naming rank 1."""
    live = os.path.join(ctx.tmp, "collect-live.ndjson")
    with open(live, "wb") as f:
        for p in (path0, path2):
            with open(p, "rb") as src:
                f.write(src.read())
    proc = Proc([collector(ctx), "--follow", "--json", live], term_timeout=5)
    line = proc.line(FOLLOW_TIMEOUT)
    v = json.loads(line)
    if v["rank"] != 2 or v["origin_basis"]["evidence"] != "received":
        raise Fail("--follow's first verdict: %s" % line)
    with open(live, "ab") as f, open(path1, "rb") as src:
        f.write(src.read())
    v = json.loads(proc.line(FOLLOW_TIMEOUT))
    check_verdict(v, dict(rank=1, pid=pid1, step=oracle["step"], layer=oracle["layer"]))
    proc.p.send_signal(signal.SIGTERM)
    rc = proc.wait(10)
    if rc != 0:
        raise Fail("nanwatch-collect --follow exited %r on SIGTERM" % rc)
    ctx.log("--follow: rank 2 (a receiver) first, then rank 1 once its stream arrived")
