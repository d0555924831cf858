"""GPU check requests without a GPU: a real trainer on torch's meta device, the daemon with its
test-only switch NANWATCH_TEST_GPU_DEVICE=meta (BPF takes meta tensors for GPU tensors), and a
test-side stand-in for libnanwatch_cupti.so inside the trainer (tests/trainers/fake_cupti.py)
that reads the request ring as the library does and answers by a plan. Checked: the requests
against the trainer's forward hooks, the anomaly events the daemon makes of NaN results (a
module output, then a loss), and the link made again after the stand-in hangs up.
Also: what the attach line says of a process that maps libcuda without the library."""
import json
import os
import shutil
import signal
import tempfile

from nwharness import (Fail, Proc, is_event, read_comm, tail, trainer_argv, wait_attach,
                       wait_daemon_exit)
from nwchecks import HOST_AND_ROOTS, HOST_ONLY, check_anomaly_fields, environments, parse_stream

POISON = "blocks.1.lin"
STUB_LIBCUDA = "/usr/local/cuda/lib64/stubs/libcuda.so"
NOTICE = "fake library: meta tensors are not scanned, results follow the test's plan"


def live_trainer(ctx, env, *extra):
    """gpu_meta.py --live with env (NAME=VALUE strings), once it is past its fifth step."""
    trainer = Proc(["env"] + list(env) + trainer_argv(ctx, "gpu_meta", "--live", *extra),
                   stdin=True)
    line = trainer.wait_out(lambda l: l.startswith(b"LIVE "), 60)
    if line is None or line.split()[1:] != [str(trainer.pid).encode()]:
        raise Fail("gpu_meta --live did not announce pid %d:\n%s" %
                   (trainer.pid, tail(trainer.stderr_lines())))
    if trainer.wait_out(lambda l: l == b"STEP 5\n", 60) is None:
        raise Fail("gpu_meta did not reach step 5:\n%s" % tail(trainer.stderr_lines()))
    return trainer


def daemon_for(ctx, pid, env=()):
    # the requests carry BPF's step, counted since the attach: the events' must be the same
    argv = ["env"] + list(env) + [ctx.daemon, "--pid", str(pid), "--layouts", ctx.layouts,
                                  "--stats-interval", "1", "--step-counter", "off"]
    daemon = Proc(argv, term_timeout=10)
    ctx.current_daemon = daemon
    ctx.log("started %s (pid %d)" % (" ".join(argv), daemon.pid))
    return daemon


def stop(trainer, daemon):
    daemon.p.send_signal(signal.SIGTERM)
    wait_daemon_exit(daemon)
    trainer.send(b"stop\n")
    rc = trainer.wait(60)
    if rc != 0:
        raise Fail("gpu_meta exited %r under the daemon:\n%s" % (rc, tail(trainer.stderr_lines())))


def step_of(trainer):
    steps = [l for l in trainer.out if l.startswith(b"STEP ")]
    return int(steps[-1].split()[1]) if steps else 0


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def by_iteration(rows, role=None):
    """rows grouped by iteration, in order; requests of one role only."""
    groups = {}
    for r in rows:
        if role is None or r["role"] == role:
            groups.setdefault(r["iteration"], []).append(r)
    return groups


def check_requests(reqs, hooks, pid):
    """Every complete forward pass's output requests are the hooks' outputs of one trainer
    iteration, in order (module object, numel, dtype, thread), the same offset for all; steps
    and iterations count on by one; one loss request per pass; gated requests point at the
    output of their call. Returns the offset (trainer iteration - request iteration)."""
    outs = by_iteration(reqs, "output")
    hooked = by_iteration(hooks)
    its = sorted(outs)[1:-1]  # the first and last pass may be partial
    if len(its) < 20:
        raise Fail("only %d whole forward passes of requests" % len(its))
    key = lambda r: (r["module"], r["numel"], r["dtype"], r["tid"])
    offsets = set()
    for it in its:
        got = [key(r) for r in outs[it]]
        match = [h for h in hooked if [key(x) for x in hooked[h]] == got]
        if len(match) != 1:
            raise Fail("requests of iteration %d match %d hooked iterations: %s" %
                       (it, len(match), got))
        offsets.add(match[0] - it)
        if any(r["tid"] != pid for r in outs[it]):
            raise Fail("requests of iteration %d from another thread than %d" % (it, pid))
        if len({r["step"] for r in outs[it]}) != 1:
            raise Fail("one forward pass's requests carry several steps")
    if len(offsets) != 1:
        raise Fail("request iterations map onto the trainer's with offsets %s" % offsets)
    steps = [outs[it][0]["step"] for it in its]
    if steps != list(range(steps[0], steps[0] + len(steps))):
        raise Fail("steps of consecutive passes do not count on by one: %s" % steps)
    losses = by_iteration(reqs, "loss")
    for it in its:
        if [(r["numel"], r["index0"]) for r in losses.get(it, [])] != [(1, 255)]:
            raise Fail("iteration %d: loss requests %s" % (it, losses.get(it)))
    seqs = {r["seq"]: r for r in reqs}
    for r in reqs:
        if r["role"] in ("input", "param"):
            gate = seqs.get(r["gate"])
            if gate is None or gate["role"] != "output" or gate["iteration"] != r["iteration"]:
                raise Fail("%s request %d gated on %r, not an output of its pass" %
                           (r["role"], r["seq"], r["gate"]))
    return offsets.pop()


@environments(*HOST_AND_ROOTS)
def test_gpu_requests_meta(ctx):
    """Requests for meta tensors match the forward hooks; a NaN result becomes the anomaly."""
    base = ctx.tmp if ctx.env.root is None else os.path.join(ctx.env.root, "tmp")
    tmp = tempfile.mkdtemp(prefix="gpu-", dir=base)
    inside = tmp if ctx.env.root is None else "/" + os.path.relpath(tmp, ctx.env.root)
    hooks, lib = os.path.join(tmp, "hooks.jsonl"), os.path.join(tmp, "lib.jsonl")
    try:
        trainer = live_trainer(ctx, ["NANWATCH_CUPTI_DIR=" + inside], "--log",
                               os.path.join(inside, "hooks.jsonl"), "--fake-lib",
                               os.path.join(inside, "lib.jsonl"), "--poison", POISON,
                               "--after", "30")
        comm = read_comm(trainer.pid)
        daemon = daemon_for(ctx, trainer.pid, ["NANWATCH_TEST_GPU_DEVICE=meta"])
        wait_attach(daemon)
        if daemon.wait_out(is_event("anomaly"), 60) is None:
            raise Fail("no anomaly event in 60 s:\n%s" % tail(daemon.stderr_lines()))
        again = lambda l: is_event("stats")(l) and json.loads(l)["gpu"]["connects"] == 2 and \
            json.loads(l)["gpu"]["library"]
        if daemon.wait_out(again, 30) is None:
            raise Fail("no stats line after the second connection with the library's counters")
        # passes enough to compare on the second connection
        until = step_of(trainer) + 40
        if trainer.wait_out(lambda l: l.startswith(b"STEP ") and int(l.split()[1]) >= until,
                            60) is None:
            raise Fail("the trainer stopped training")
        stop(trainer, daemon)
        left = [n for n in os.listdir(tmp) if n.startswith(".nanwatch-cupti-")]
        if left:
            raise Fail("the stand-in left its socket behind: %s" % left)
        events = parse_stream(daemon, trainer.pid, comm)
        records = read_jsonl(lib)
        check_stream(events, records, trainer.pid)
        hooked = read_jsonl(hooks)
        for conn in (1, 2):  # the stand-in hangs up once; the daemon connects again
            offset = check_requests([r["req"] for r in records if r.get("conn") == conn],
                                    hooked, trainer.pid)
            ctx.log("connection %d: requests match the hooks (trainer iteration = request "
                    "iteration + %d)" % (conn, offset))
    finally:
        shutil.rmtree(tmp)


def check_stream(events, records, pid):
    errors = [r["error"] for r in records if "error" in r]
    if errors:
        raise Fail("the stand-in library failed: %s" % errors)
    hello = [r for r in records if "hello" in r]
    if not hello or hello[0]["hello"] != {"version": 1, "slots": 4096, "req_size": 256}:
        raise Fail("HELLO %s" % hello)
    poisoned = [r["poisoned"] for r in records if "poisoned" in r]
    if len(poisoned) != 1 or poisoned[0]["layer"] != POISON:
        raise Fail("the stand-in poisoned %s" % poisoned)
    p = poisoned[0]
    if p["ngated"] != 3 or p["params_known"] != 1:
        raise Fail("%s gated %d requests (want its input and 2 parameters), params_known %d" %
                   (POISON, p["ngated"], p["params_known"]))
    attach = events[0]
    if attach["event"] != "attach" or attach.get("gpu") != "connected":
        raise Fail("attach says gpu %r, want connected" % attach.get("gpu"))
    anomalies = [ev for ev in events if ev["event"] == "anomaly"]
    if len(anomalies) != 2:
        raise Fail("%d anomaly events, want the two NaN results" % len(anomalies))
    ev = anomalies[0]
    check_anomaly_fields(ev, pid)
    want = {"layer": POISON, "module": "Linear", "device": "meta", "phase": "forward",
            "tensor": "output", "step": p["step"], "iteration": p["iteration"],
            "numel": p["numel"], "shape": p["shape"], "nan": p["numel"], "posinf": 0,
            "neginf": 0, "dtype": "float32", "inputs_finite": True, "params_finite": True,
            "origin": True, "first": True, "finite_min": None, "finite_max": None}
    bad = {k: (ev.get(k), v) for k, v in want.items() if ev.get(k) != v}
    if bad:
        raise Fail("anomaly differs from the poisoned request (got, want): %s" % bad)
    loss = [r["poisoned_loss"] for r in records if "poisoned_loss" in r]
    ev = anomalies[1]
    check_anomaly_fields(ev, pid)
    want = {"phase": "loss", "tensor": "loss", "layer": None, "module": None, "device": "meta",
            "step": loss[0]["step"], "iteration": loss[0]["iteration"], "numel": 1, "shape": [],
            "nan": 1, "inputs_finite": None, "params_finite": None, "origin": True,
            "first": False}
    bad = {k: (ev.get(k), v) for k, v in want.items() if ev.get(k) != v}
    if len(loss) != 1 or bad:
        raise Fail("loss anomaly differs from the poisoned loss request (got, want): %s" % bad)
    # said on both connections, written once
    notices = [e for e in events if e["event"] == "error"]
    if [(e.get("source"), e["message"]) for e in notices] != [("gpu", NOTICE)]:
        raise Fail("the library's notice came out as %s" % notices)
    gpu = [e for e in events if e["event"] == "stats"][-1]["gpu"]
    if not gpu["connected"] or gpu["mode"] != "interpose" or gpu["requests"] <= 0 or \
            gpu["library"]["requests"] <= 0 or gpu["anomalies"] != 2 or gpu["connects"] != 2:
        raise Fail("stats.gpu %s" % gpu)
    if [r["hangup"] for r in records if "hangup" in r] != [1]:
        raise Fail("the stand-in did not hang up once")


@environments(*HOST_ONLY)
def test_gpu_not_checked(ctx):
    """A process that maps libcuda (the toolkit's driver stub, dlopened: what the attach looks
    at, not a working GPU) without the library: attach says GPU tensors are not checked and
    how to enable it, on stdout and once on stderr. The same trainer without libcuda: none."""
    if not os.path.exists(STUB_LIBCUDA):
        import pytest
        pytest.skip("no CUDA driver stub at %s" % STUB_LIBCUDA)
    for libcuda in (True, False):
        extra = ("--device", "cpu") + (("--libcuda", STUB_LIBCUDA) if libcuda else ())
        trainer = live_trainer(ctx, [], *extra)
        daemon = daemon_for(ctx, trainer.pid)
        wait_attach(daemon)
        stop(trainer, daemon)
        attach = json.loads(daemon.out[0])
        said = [l for l in daemon.stderr_lines() if "GPU tensors are not checked" in l]
        if libcuda:
            msg = attach.get("gpu_message") or ""
            if attach.get("gpu") != "not_checked" or "CUDA_INJECTION64_PATH=" not in msg or \
                    "--inject" not in msg:
                raise Fail("attach with libcuda mapped: gpu %r, gpu_message %r" %
                           (attach.get("gpu"), msg))
            if len(said) != 1 or msg not in said[0]:
                raise Fail("stderr says it %d times: %s" % (len(said), said))
        elif attach.get("gpu") != "none" or "gpu_message" in attach or said:
            raise Fail("attach without CUDA: gpu %r, stderr %s" % (attach.get("gpu"), said))
