"""The GPU path end to end without a GPU: the real libnanwatch_cupti.so against the real daemon,
only the driver emulated.

tests/trainers/gpu_emu.py trains inflight's model on the CPU and launches a kernel from a hook
on every module through an emulated libcuda (build/tests/libnwemu_cuda.so, whose device memory
is the process's own and whose scan kernel is cupti/classify.h run on the host) with the mock
libcupti delivering the launch callbacks. The daemon runs with its test-only switch
NANWATCH_TEST_GPU_DEVICE=cpu: BPF takes CPU tensors for GPU tensors and writes requests with
their data pointers instead of reading them, so every check goes BPF -> request ring ->
library (scan on the emulated device, results in "pinned" memory) -> socket -> daemon.

launch_*: the library loaded at CUDA's initialisation (CUDA_INJECTION64_PATH), callback and
interpose modes; attach_inject: the trainer started without it, loaded by nanwatchd --inject
(CUPTI starts late); inject_loaded: --inject into a process that loaded it from elsewhere. Either way the first anomaly equals the forward-hook oracle's (layer,
counts, finite range, origin), no tensor was read by BPF itself, and the library scanned.
idle: the library loaded and no daemon: the losses and final parameters are bit for bit those
of a run without it.
"""
import json
import os
import re
import shutil
import tempfile

import pytest

from nwharness import (Fail, Proc, TRAINER_TIMEOUT, is_event, oracle_of, read_comm, tail,
                       trainer_argv, wait_attach, wait_daemon_exit)
from nwchecks import (HOST_ONLY, check_envelope, check_first_in_flight, environments, last_stats,
                      parse_stream, step_now, wait_steps)

TRAINER = "gpu_emu"
EMU_RE = re.compile(rb"^EMU launches (\d+) scans (\d+) modules (\d+) injected (\d+)$")
READY_RE = re.compile(r"GPU library of pid (\d+) ready: mode (\d+), state 0x([0-9a-f]+)")
ST_LATE = 16  # bpf/nwgpu.h NW_GPU_ST_LATE
MODES = {"callback": 1, "interpose": 2}


def built(ctx):
    """The library, the emulated driver and the mock CUPTI beside the daemon."""
    build = os.path.dirname(ctx.daemon)
    paths = {"lib": os.path.join(build, "libnanwatch_cupti.so"),
             "cuda": os.path.join(build, "tests", "libnwemu_cuda.so"),
             "cupti": os.path.join(build, "tests", "libnwmock_cupti.so")}
    if not os.path.exists(paths["lib"]):
        pytest.skip("libnanwatch_cupti.so not built (no CUDA toolkit)")
    missing = [p for p in paths.values() if not os.path.exists(p)]
    if missing:
        raise Fail("not built: %s (make gpu builds them)" % ", ".join(missing))
    return paths


def emu_env(paths, tmp, mode=None, lib=None):
    """The trainer's environment; lib: the library CUDA_INJECTION64_PATH names, None: none."""
    env = ["NANWATCH_CUPTI_DIR=" + tmp, "NANWATCH_CUDA_LIB=" + paths["cuda"],
           "NANWATCH_CUPTI_LIB=" + paths["cupti"]]
    if mode:
        env.append("NANWATCH_CUPTI_LAUNCH=" + mode)
    if lib:
        env.append("CUDA_INJECTION64_PATH=" + lib)
    return env


def emu_line(proc):
    """The emulated driver's counts the trainer printed at exit: launches, scans, modules,
    injected."""
    for line in proc.stderr_lines():
        m = EMU_RE.match(line.encode() if isinstance(line, str) else line)
        if m:
            return [int(x) for x in m.groups()]
    raise Fail("the trainer printed no EMU line:\n%s" % tail(proc.stderr_lines()))


def lib_mapped(pid):
    with open("/proc/%d/maps" % pid) as f:
        return "/libnanwatch_cupti.so" in f.read()


FIELDS = ("step", "layer", "module", "tensor", "nan", "posinf", "neginf", "origin", "inputs_finite",
          "params_finite")


def check_iterations(events, first, oracle):
    """Every anomaly of the first bad iteration in the oracle's order with its step (Adam's
    own count), counts and verdicts (the gated input and parameter scans), then the one of
    each later iteration."""
    offset = oracle["iteration"] - first["iteration"]
    forward = [ev for ev in events if ev["event"] == "anomaly" and ev["phase"] == "forward"]
    got = [[ev[f] for f in FIELDS] for ev in forward if ev["iteration"] == first["iteration"]]
    want = [[a[f] for f in FIELDS] for a in oracle["first_iteration"]]
    if got != want:
        raise Fail("anomalies of the first bad iteration differ:\n    daemon: %s\n    oracle: %s"
                   % (got, want))
    # the loss backward() starts from: requested when backward() begins, NaN in that pass
    loss = [ev for ev in events if ev["event"] == "anomaly" and ev["phase"] == "loss" and
            ev["iteration"] == first["iteration"]]
    if len(loss) != 1 or [loss[0][f] for f in ("tensor", "nan", "numel", "step")] != \
            ["loss", 1, 1, first["step"]]:
        raise Fail("loss anomalies of the first bad iteration: %s" % loss)
    later = {ev["iteration"] + offset: [ev[f] for f in FIELDS] for ev in forward
             if ev["iteration"] != first["iteration"]}
    want = {a["iteration"]: [a[f] for f in FIELDS] for a in oracle.get("later", [])}
    if later != want:
        raise Fail("later iterations differ:\n    daemon: %s\n    oracle: %s" % (later, want))


def check_loss_trend(events, trace):
    """The diagnosis' loss trend comes from the library's answers to the loss requests (finite
    losses included): each finite value is the one the trainer computed at that step."""
    diags = [ev for ev in events if ev["event"] == "diagnosis"]
    trend = diags[0].get("loss_trend") if diags else None
    if not trend or not [t for t in trend if t["loss"] is not None]:
        raise Fail("no finite loss in the diagnosis' loss_trend: %s" % json.dumps(diags))
    by_step = {}
    for value, step in zip(trace["losses"], trace["loss_steps"]):
        by_step.setdefault(step, []).append(float.fromhex(value))
    for t in trend:
        if t["loss"] is not None and t["loss"] not in by_step.get(t["step"], []):
            raise Fail("loss_trend at step %d: %r, the trainer computed %r" %
                       (t["step"], t["loss"], by_step.get(t["step"])))


def watch_fault(ctx, paths, tmp, mode, inject, lib):
    """gpu_emu --live (the library lib loaded at CUDA's initialisation, None: not) under the
    daemon (with --inject), then a fault; returns the events, the daemon and a stats line of
    the connection while it was up."""
    trainer = Proc(["env"] + emu_env(paths, tmp, mode, lib) +
                   trainer_argv(ctx, TRAINER, "--live", "--progress-every", "10",
                                             "--pace", "0.01"), stdin=True)
    line = trainer.wait_out(lambda l: l.startswith(b"LIVE "), 60)
    if line is None or line.split()[1:] != [str(trainer.pid).encode()]:
        raise Fail("gpu_emu --live did not announce pid %d:\n%s" %
                   (trainer.pid, tail(trainer.stderr_lines())))
    comm = read_comm(trainer.pid)
    wait_steps(trainer, 20, "before the attach")
    if lib_mapped(trainer.pid) != (lib is not None):
        raise Fail("library %s before the attach" % ("not mapped" if lib else "mapped"))
    argv = ["env", "NANWATCH_TEST_GPU_DEVICE=cpu", ctx.daemon, "--pid", str(trainer.pid),
            "--layouts", ctx.layouts, "--stats-interval", "1", "-v"]
    if inject:
        argv += ["--inject", "--inject-lib", paths["lib"]]
    daemon = Proc(argv, term_timeout=10)
    ctx.current_daemon = daemon
    ctx.log("started %s (pid %d)" % (" ".join(argv), daemon.pid))
    wait_attach(daemon)
    scanning = lambda l: is_event("stats")(l) and json.loads(l)["gpu"]["connected"] and \
        (json.loads(l)["gpu"]["library"] or {}).get("scans", 0) > 0
    line = daemon.wait_out(scanning, 60)
    if line is None:
        raise Fail("no stats line with the library connected and scanning in 60 s:\n%s" %
                   tail(daemon.stderr_lines()))
    live = json.loads(line)["gpu"]
    fault = step_now(trainer) + 30
    trainer.p.stdin.write(b"FAULT %d\n" % fault)
    trainer.p.stdin.flush()
    line = trainer.wait_out(lambda l: l.startswith(b"FAULT AT "), 60)
    if line is None or int(line.split()[2]) != fault:
        raise Fail("trainer took the fault as %r, not at step %d" % (line, fault))
    rc = trainer.wait(TRAINER_TIMEOUT)
    if rc != 0:
        raise Fail("trainer exited %r:\n%s" % (rc, tail(trainer.stderr_lines())))
    wait_daemon_exit(daemon)
    events = parse_stream(daemon, trainer.pid, comm)
    check_envelope(events, "target_exit")
    oracle, trace = oracle_of(ctx, TRAINER, "--fault-step", str(fault))
    if oracle is None or oracle["step"] != fault or oracle["layer"] != "gate":
        raise Fail("oracle of the fault at step %d found %r" % (fault, oracle))
    first = check_first_in_flight(events, oracle, trainer.pid)
    if first["step_source"] != "optimizer_state":
        raise Fail("step_source %r: Adam's state['step'] (a CPU tensor) was not read" %
                   first["step_source"])
    ctx.log("first anomaly %s %s: nan %d +inf %d -inf %d, origin %r; oracle step %d" %
            (first["layer"], first["tensor"], first["nan"], first["posinf"], first["neginf"],
             first["origin"], oracle["step"]))
    check_iterations(events, first, oracle)
    check_loss_trend(events, trace)
    stats = last_stats(events)
    if stats["tensors_scanned"] != 0:
        raise Fail("BPF read %d tensors itself: the CPU path, not the library's" %
                   stats["tensors_scanned"])
    gpu = stats["gpu"]
    if gpu["device"] != "cpu" or gpu["anomalies"] < 1 or gpu["connects"] < 1:
        raise Fail("stats.gpu at the end: %s" % json.dumps(gpu))
    if not live["ready"] or live["mode"] != (mode or "callback") or live["requests"] < 1:
        raise Fail("stats.gpu while connected: %s" % json.dumps(live))
    launches, scans, modules, injected = emu_line(trainer)
    if scans < 1 or modules != 1 or injected != (1 if lib else 0):
        raise Fail("emulated driver saw %d launches, %d scans, %d module loads, injection %d" %
                   (launches, scans, modules, injected))
    left = [n for n in os.listdir(tmp) if n.startswith(".nanwatch-cupti-")]
    if left:
        raise Fail("the library left its socket or its directory behind: %s" % left)
    return events, daemon, live


def in_tmp(ctx, body):
    tmp = tempfile.mkdtemp(prefix="gpu-e2e-", dir=ctx.tmp)
    try:
        body(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def launch_case(ctx, mode):
    paths = built(ctx)

    def body(tmp):
        _, daemon, live = watch_fault(ctx, paths, tmp, mode, False, paths["lib"])
        lib = live["library"]
        # interpose mode takes no launch callback: its launches came through the wrapper
        if lib["launches"] < 1 or lib["scans"] < 1:
            raise Fail("library counters: %s" % json.dumps(lib))

    in_tmp(ctx, body)


@environments(*HOST_ONLY)
def test_gpu_e2e_launch_callback(ctx):
    launch_case(ctx, "callback")


@environments(*HOST_ONLY)
def test_gpu_e2e_launch_interpose(ctx):
    launch_case(ctx, "interpose")


@environments(*HOST_ONLY)
def test_gpu_e2e_attach_inject(ctx):
    """Started without the library; nanwatchd --inject loads it and CUPTI starts late."""
    paths = built(ctx)

    def body(tmp):
        _, daemon, _ = watch_fault(ctx, paths, tmp, None, True, None)
        ready = [READY_RE.search(l if isinstance(l, str) else l.decode())
                 for l in daemon.stderr_lines()]
        ready = [m for m in ready if m]
        if not ready or not int(ready[0].group(3), 16) & ST_LATE:
            raise Fail("READY without the late state:\n%s" % tail(daemon.stderr_lines()))

    in_tmp(ctx, body)


@environments(*HOST_ONLY)
def test_gpu_e2e_inject_loaded(ctx):
    """--inject into a process that loaded the library from another path: the daemon uses the
    instance there (a second one would find CUPTI taken and take over the socket)."""
    paths = built(ctx)

    def body(tmp):
        other = os.path.join(tmp, "other")
        os.mkdir(other)
        lib = shutil.copy(paths["lib"], other)
        events, daemon, _ = watch_fault(ctx, paths, tmp, None, True, lib)
        if not any("loaded already" in l for l in daemon.stderr_lines()):
            raise Fail("no word of the library loaded already:\n%s" %
                       tail(daemon.stderr_lines()))

    in_tmp(ctx, body)


def trace_of(ctx, env):
    proc = Proc(["env"] + env + trainer_argv(ctx, TRAINER, "--steps", "40"))
    rc = proc.wait(TRAINER_TIMEOUT)
    if rc != 0:
        raise Fail("gpu_emu exited %r:\n%s" % (rc, tail(proc.stderr_lines())))
    lines = [l for l in proc.out if l.startswith(b"{")]
    if not lines:
        raise Fail("gpu_emu printed no trace")
    return json.loads(lines[-1])["trace"], emu_line(proc)


@environments(*HOST_ONLY)
def test_gpu_e2e_idle(ctx):
    """The library loaded, no daemon: the run is the run without it, bit for bit."""
    paths = built(ctx)

    def body(tmp):
        plain, plain_emu = trace_of(ctx, emu_env(paths, tmp))
        idle, idle_emu = trace_of(ctx, emu_env(paths, tmp, lib=paths["lib"]))
        if idle_emu[3] != 1 or plain_emu[3] != 0:
            raise Fail("injection: %d with the library, %d without" % (idle_emu[3],
                                                                       plain_emu[3]))
        if idle_emu[1] or idle_emu[2] or idle_emu[0] != plain_emu[0] or not plain_emu[0]:
            raise Fail("idle library: %s launches/scans/module loads, without it %s" %
                       (idle_emu[:3], plain_emu[:3]))
        if idle != plain:
            diff = [i for i, (a, b) in enumerate(zip(idle["losses"], plain["losses"]))
                    if a != b]
            raise Fail("the idle library changed the run: losses differ at %s, params %s/%s" %
                       (diff[:5], idle["params_sha256"], plain["params_sha256"]))
        if os.listdir(tmp):
            raise Fail("left behind: %s" % os.listdir(tmp))

    in_tmp(ctx, body)
