"""Attaching to a run in flight, detaching: SIGTERM, mid-run steps, live attaches, deep
nesting, a replaced root module, an exec of the target."""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

from nwharness import (Fail, TRAINER_TIMEOUT, announced_trainer, finish_trainer, is_event,
                       last_json, oracle_of, read_comm, run_trainer, start_daemon,
                       start_waiting_trainer, tail, wait_attach, wait_daemon_exit)
from nwchecks import (EVERYWHERE, HOST_AND_ROOTS, HOST_ONLY, NOBODY, case_test, check_anomalies, check_anomaly_fields,
                      check_envelope, check_first_in_flight, check_interpreter, describe,
                      environments, last_stats, parse_stream, step_now, target_untouched,
                      wait_steps, watch)


@environments(*EVERYWHERE)
def test_sigterm_while_attached(ctx):
    """SIGTERM mid-training: clean detach, and the trainer finishes exactly as it would alone."""
    steps = ("--steps", "100")
    trace = run_trainer(ctx, "healthy", *steps)["trace"]
    trainer = start_waiting_trainer(ctx, "healthy", *steps, "--progress", "--pace", "0.1")
    comm = read_comm(trainer.pid)
    daemon = start_daemon(ctx, trainer.pid)
    wait_attach(daemon)
    trainer.send(b"go\n")
    if trainer.wait_out(lambda l: l == b"STEP 5\n", 60) is None:
        raise Fail("trainer did not reach step 5 under the daemon")
    daemon.p.send_signal(signal.SIGTERM)
    wait_daemon_exit(daemon)
    if not trainer.running():
        raise Fail("trainer finished before the daemon detached (test too short)")
    finish_trainer(ctx, trainer, "healthy", trace)
    events = parse_stream(daemon, trainer.pid, comm)
    check_envelope(events, "signal")
    check_interpreter(ctx, events)
    if any(ev["event"] == "anomaly" for ev in events):
        raise Fail("anomaly events on a healthy run")


def start_paced_live_trainer(ctx, name, *extra):
    """A trainer that never waits (--live): nanwatchd is attached to it in flight, after its
    fifth step."""
    trainer = start_live_trainer(ctx, name, "--pace", "0.01", *extra)
    if trainer.wait_out(lambda l: l == b"STEP 5\n", 60) is None:
        raise Fail("%s --live did not reach step 5:\n%s" % (name, tail(trainer.stderr_lines())))
    return trainer


def stats_line(pred):
    def match(line):
        if not is_event("stats")(line):
            return False
        return pred(json.loads(line.decode("utf-8")))
    return match


def watch_live(ctx, name, source, *extra, before_fault=None, daemon_extra=()):
    """Attach to the trainer in flight; once a stats line shows steps counted with the given
    step_source (and before_fault(trainer, daemon) returned), ask for the fault. Returns
    (events, the first anomaly, the fault's step, the trace)."""
    trainer = start_paced_live_trainer(ctx, name, *extra)
    comm = read_comm(trainer.pid)
    daemon = start_daemon(ctx, trainer.pid, extra=("--stats-interval", "1") + daemon_extra)
    wait_attach(daemon)
    counted = stats_line(lambda ev: ev.get("steps", 0) > 0 and ev.get("step_source") == source)
    if daemon.wait_out(counted, 60) is None:
        raise Fail("no stats line with steps counted and step_source %r in 60 s" % source)
    if before_fault is not None:
        before_fault(trainer, daemon)
    trainer.send(b"fault\n")
    line = trainer.wait_out(lambda l: l.startswith(b"FAULT AT "), 60)
    if line is None:
        raise Fail("%s printed no FAULT AT line" % name)
    fault = int(line.split()[2])
    rc = trainer.wait(TRAINER_TIMEOUT)
    if rc != 0:
        raise Fail("%s exited %r under the daemon:\n%s" % (name, rc, tail(trainer.stderr_lines())))
    trace = last_json(trainer.stdout_text(), "trace")
    if trace is None:
        raise Fail("%s printed no trace" % name)
    wait_daemon_exit(daemon)
    events = parse_stream(daemon, trainer.pid, comm)
    check_envelope(events, "target_exit")
    check_interpreter(ctx, events)
    first = [ev for ev in events if ev["event"] == "anomaly"][:1]
    if not first:
        raise Fail("no anomaly event; the trainer's fault was at step %d" % fault)
    check_anomaly_fields(first[0], trainer.pid)
    ctx.log("fault at step %d; first anomaly: step %d (%s), iteration %d, layer %r; detach: "
            "step %d (%s), steps %d" % (fault, first[0]["step"], first[0]["step_source"],
                            first[0]["iteration"], first[0]["layer"], events[-1]["step"],
                            events[-1]["step_source"], events[-1]["steps"]))
    return events, first[0], fault, trace["trace"]


@environments(*EVERYWHERE)
def test_midrun_adam(ctx):
    """Attached to an Adam run in flight: the step is the trainer's own (the optimizer's state),
    at the first anomaly and at the detach."""
    events, first, fault, trace = watch_live(ctx, "midrun", "optimizer_state")
    if (first["step"], first["step_source"]) != (fault, "optimizer_state"):
        raise Fail("first anomaly at step %r (%s); the trainer's fault: step %d, from the "
                   "optimizer_state" % (first["step"], first["step_source"], fault))
    if first["iteration"] > fault - 5:
        raise Fail("iteration %d counts more than the watch saw (attached after step 5 of %d)"
                   % (first["iteration"], fault))
    last = events[-1]
    if (last["step"], last["step_source"]) != (trace["steps"], "optimizer_state") or \
            last["steps"] >= trace["steps"] - 5:
        raise Fail("detach: step %r (%s), steps %r; the trainer took %d steps, the watch "
                   "fewer than %d" % (last["step"], last["step_source"], last["steps"],
                                      trace["steps"], trace["steps"] - 5))


@environments(*HOST_AND_ROOTS)
def test_midrun_refold(ctx):
    """A new optimizer replaces the one the step came from (a new fold): the step follows the
    new optimizer's own count, neither frozen at the old one's nor counted on from it."""
    refold = []

    def new_optimizer(trainer, daemon):
        trainer.send(b"refold\n", close=False)
        line = trainer.wait_out(lambda l: l.startswith(b"REFOLD AT "), 60)
        if line is None:
            raise Fail("midrun printed no REFOLD AT line")
        refold.append(int(line.split()[2]))
        # the new optimizer's count: below the steps seen since the attach (after step 5),
        # which the old one's count never is
        if daemon.wait_out(stats_line(lambda ev: ev["step_source"] == "optimizer_state" and
                                      ev["step"] < ev["steps"]), 60) is None:
            raise Fail("no stats line with the new optimizer's count in 60 s")

    events, first, fault, trace = watch_live(ctx, "midrun", "optimizer_state",
                                             before_fault=new_optimizer)
    want = fault - refold[0]
    if (first["step"], first["step_source"]) != (want, "optimizer_state"):
        raise Fail("first anomaly at step %r (%s); the new optimizer (from step %d) had taken "
                   "%d steps at the fault, step %d" % (first["step"], first["step_source"],
                                                       refold[0], want, fault))


def check_loop_steps(events, first, fault, what):
    """The training loop's counter (common.Harness.run's `step`) gives the step: the first
    anomaly at the trainer's own fault step, named so; once found, every later event's step
    comes from it, and none goes back."""
    if (first["step"], first["step_source"], first.get("step_variable")) != \
            (fault, "loop_variable", "step"):
        raise Fail("%s: first anomaly at step %r (%s, %r); the trainer's loop was at step %d "
                   "(step_source loop_variable, step_variable 'step')" % (
                       what, first["step"], first["step_source"], first.get("step_variable"),
                       fault))
    seen = False
    for ev in events:
        source = ev.get("step_source")
        if source == "loop_variable":
            seen = True
            if ev.get("step_variable") != "step":
                raise Fail("%s: %s with step_variable %r" % (what, ev["event"],
                                                             ev.get("step_variable")))
        elif seen and source is not None:
            raise Fail("%s: %s with step_source %r after the loop's counter was found" % (
                what, ev["event"], source))
    steps = [ev["step"] for ev in events if ev.get("step_source") == "loop_variable"]
    if steps != sorted(steps):
        raise Fail("%s: steps go back: %s" % (what, steps))
    last = events[-1]
    if last["step_source"] != "loop_variable" or not fault <= last["step"] <= fault + 4:
        raise Fail("%s: detach at step %r (%s); the trainer stopped 3 steps after step %d" % (
            what, last["step"], last["step_source"], fault))


@environments(*EVERYWHERE)
def test_midrun_sgd(ctx):
    """Attached to a plain-SGD run in flight: the optimizer holds no step, but the training
    loop's counter does: the events carry the trainer's own step, named loop_variable."""
    events, first, fault, trace = watch_live(ctx, "midrun", "loop_variable", "--sgd")
    check_loop_steps(events, first, fault, "plain SGD")


@environments(*HOST_AND_ROOTS)
def test_midrun_sgd_accum(ctx):
    """The same with gradient accumulation (3 forward passes a step): the loop's step counter,
    not a micro-batch counter, gives the step; iterations count the forward passes."""
    events, first, fault, trace = watch_live(ctx, "midrun", "loop_variable", "--sgd",
                                             "--accum", "3")
    check_loop_steps(events, first, fault, "SGD with accumulation")
    stats = [ev for ev in events if ev["event"] == "stats"][-1]
    # a step under way at either end of the watch: up to two steps' passes apart
    if abs(stats["iterations"] - 3 * stats["steps"]) > 6:
        raise Fail("stats: %d steps, %d iterations; 3 forward passes a step" % (
            stats["steps"], stats["iterations"]))


@environments(*HOST_AND_ROOTS)
def test_midrun_sgd_scheduler(ctx):
    """Plain SGD under an LR scheduler stepped once a step: the loop's counter again."""
    events, first, fault, trace = watch_live(ctx, "midrun", "loop_variable", "--sgd",
                                             "--scheduler")
    check_loop_steps(events, first, fault, "SGD with a scheduler")


@environments(*HOST_AND_ROOTS)
def test_midrun_manual_loop(ctx):
    """Updates by hand (no torch.optim), attached in flight: a pass is a small part of each
    step, but BPF reads the loop's counter as each pass begins, next to the step it counts:
    the events carry the trainer's own step, named loop_variable."""
    events, first, fault, trace = watch_live(ctx, "midrun", "loop_variable", "--manual")
    check_loop_steps(events, first, fault, "updates by hand")


@environments(*HOST_ONLY)
def test_midrun_capture_step(ctx):
    """Plain SGD in flight, the first Linear overflowing at the fault (an origin, captured with
    --capture-dir): the capture's directory and manifest name the step the events do, the
    loop's counter, not the steps counted since the attach."""
    work = tempfile.mkdtemp(prefix="nw-cap-")
    try:
        os.chmod(work, 0o700)
        events, first, fault, trace = watch_live(ctx, "midrun", "loop_variable", "--sgd",
                                                 "--origin",
                                                 daemon_extra=("--capture-dir", work))
        made = os.listdir(work)
        if len(made) != 1:
            raise Fail("capture directory holds %s, want one capture" % made)
        with open(os.path.join(work, made[0], "manifest.json"), encoding="utf-8") as f:
            man = json.load(f)
        if (first["step"], first["step_source"], first["origin"]) != \
                (fault, "loop_variable", True):
            raise Fail("first anomaly at step %r (%s), origin %r; the trainer's fault step %d" % (
                first["step"], first["step_source"], first["origin"], fault))
        if (man["step"], man["step_source"]) != (fault, "loop_variable") or \
                not made[0].startswith("%d-step%d-" % (first["pid"], fault)):
            raise Fail("capture %s: manifest step %r (%s); the events' step %d (loop_variable)" % (
                made[0], man["step"], man["step_source"], fault))
    finally:
        shutil.rmtree(work, ignore_errors=True)


@environments(*HOST_ONLY)
def test_hostile_loop_counters(ctx):
    """A target run by uid 65534 whose loop frame holds locals named like step counters built
    to mislead the search for the loop's counter (a bignum, an int subclass, a negative count,
    a str, one not in lockstep, one rebound to other types): none is taken, the real counter
    (n_iter) is, the watch goes on to the target's exit, and the run trains as it does alone.
    Its first layer's forward names a global of 1 MiB and 20,000 more: the diagnosis reads
    the code's first names only (exp, sqrt: they mislead that target's own evidence alone)."""
    ctx.env.run_as = NOBODY
    try:
        events, first, fault, trace = watch_live(ctx, "hostile_loop", "loop_variable")
        alone = run_trainer(ctx, "hostile_loop", "--pace", "0", "--fault-at", str(fault))
    finally:
        ctx.env.run_as = None
    if (first["step"], first["step_source"], first.get("step_variable")) != \
            (fault, "loop_variable", "n_iter"):
        raise Fail("first anomaly at step %r (%s, %r); the loop's n_iter was %d" % (
            first["step"], first["step_source"], first.get("step_variable"), fault))
    named = {ev.get("step_variable") for ev in events if ev.get("step_source") == "loop_variable"}
    if named != {"n_iter"}:
        raise Fail("loop counters taken: %s; only n_iter counts the steps" % sorted(named))
    if trace != alone["trace"]:
        raise Fail("hostile_loop trained differently under the daemon than alone")
    if (first["layer"], first["module"], first["origin"]) != ("0", "Misleading", True):
        raise Fail("first anomaly %r (%r), origin %r; want layer 0 (Misleading), origin" % (
            first["layer"], first["module"], first["origin"]))
    diag = [ev for ev in events if ev["event"] == "diagnosis"]
    named = "operations the code of 0 (Misleading.forward) names, where autograd did not " \
        "record them all: exp, sqrt"
    if len(diag) != 1 or named not in diag[0]["evidence"]:
        raise Fail("diagnosis %s; want one whose evidence says %r" % (diag, named))


@environments(*HOST_AND_ROOTS)
def test_midrun_manual(ctx):
    """Attached in flight to a run with no torch.optim (updates by hand), --step-counter off:
    each backward pass is a step, counted from the attach and named so; a forward pass and the
    backward pass after it share one, so the first anomaly's step is its iteration (one
    backward each)."""
    events, first, fault, trace = watch_live(ctx, "midrun", "backward_passes", "--manual",
                                             daemon_extra=("--step-counter", "off"))
    if first["step_source"] != "backward_passes" or not 0 < first["step"] <= fault - 5 or \
            first["step"] != first["iteration"]:
        raise Fail("first anomaly at step %r (%s), iteration %r; want the backward passes since "
                   "the attach (after step 5 of %d), one per iteration" % (
                       first["step"], first["step_source"], first["iteration"], fault))
    steps = [ev["step"] for ev in events if "step" in ev]
    if steps != sorted(steps):
        raise Fail("steps go back: %s" % steps)
    for ev in events:
        if ev.get("step_source") not in (None, "backward_passes"):
            raise Fail("%s with step_source %r on a run without an optimizer" % (
                ev["event"], ev["step_source"]))
    last = events[-1]
    if last["step"] != last["steps"] or last["steps"] >= trace["steps"] - 5:
        raise Fail("detach: step %r, steps %r; the trainer took %d steps, the watch fewer than "
                   "%d" % (last["step"], last["steps"], trace["steps"], trace["steps"] - 5))
    diags = [ev for ev in events if ev["event"] == "diagnosis"]
    trend = [t["step"] for d in diags for t in d.get("loss_trend") or ()]
    if len(trend) != len(set(trend)):
        raise Fail("diagnosis loss_trend repeats steps: %s" % trend)


def start_live_trainer(ctx, name, *extra):
    """A trainer that trains at once (--live): the daemon attaches to a run in flight."""
    return announced_trainer(ctx, name, "--live", b"LIVE", *extra)


def check_counts_in_flight(events, what):
    """A watch of a run in flight: steps and iterations counted together, no anomaly."""
    stats = last_stats(events)
    steps, iterations = stats["steps"], stats["iterations"]
    if steps < 5:
        raise Fail("%s: stats.steps %d after the trainer ran 20+ steps under the daemon" %
                   (what, steps))
    # one forward pass per step: they differ by the step or pass running at either end
    if abs(iterations - steps) > 1:
        raise Fail("%s: stats.iterations %d against steps %d: the per-thread module stack "
                   "or the root model went wrong at attach (stack_healed %s, unanchored %s)" %
                   (what, iterations, steps, stats.get("stack_healed"), stats.get("unanchored")))
    bad = [ev for ev in events if ev["event"] == "anomaly"]
    if bad:
        raise Fail("%s: anomaly on a healthy stretch: %s" % (what, json.dumps(bad[0])))


def case_in_flight(ctx, name, variant, attaches, pace):
    """Attach to a trainer that never waits, several times (SIGTERM between), at moments
    the test does not choose (pace 0: flat out; else a random delay), then inject the fault
    with the daemon attached and compare with the hook oracle."""
    import random
    extra = ["--progress-every", "10", "--variant", variant]
    if pace:
        extra += ["--pace", str(pace)]
    trainer = start_live_trainer(ctx, name, *extra)
    comm = read_comm(trainer.pid)
    wait_steps(trainer, 20, "before the first attach")
    for n in range(attaches):
        if pace:
            time.sleep(random.uniform(0, 0.5))
        daemon = start_daemon(ctx, trainer.pid)
        wait_attach(daemon)
        last = n == attaches - 1
        wait_steps(trainer, step_now(trainer) + 30, "under attach %d" % (n + 1))
        if last:
            fault = step_now(trainer) + 60
            trainer.p.stdin.write(b"FAULT %d\n" % fault)
            trainer.p.stdin.flush()
            line = trainer.wait_out(lambda l: l.startswith(b"FAULT AT "), 60)
            if line is None or int(line.split()[-1].rstrip(b")")) >= fault:
                raise Fail("trainer took the fault step too late: %r" % line)
            rc = trainer.wait(TRAINER_TIMEOUT)
            if rc != 0:
                raise Fail("trainer exited %r:\n%s" % (rc, tail(trainer.stderr_lines())))
            wait_daemon_exit(daemon)
            events = parse_stream(daemon, trainer.pid, comm)
            check_envelope(events, "target_exit")
            break
        daemon.p.send_signal(signal.SIGTERM)
        wait_daemon_exit(daemon)
        events = parse_stream(daemon, trainer.pid, comm)
        check_envelope(events, "signal")
        check_counts_in_flight(events, "attach %d" % (n + 1))
        if not trainer.running():
            raise Fail("trainer ended under attach %d" % (n + 1))
    oracle, _ = oracle_of(ctx, name, "--fault-step", str(fault), "--variant", variant)
    if oracle is None or oracle["step"] != fault:
        raise Fail("oracle of the fault at step %d found %r" % (fault, oracle))
    first = check_first_in_flight(events, oracle, trainer.pid)
    ctx.log("attached %d times; first anomaly %s at step %d (%s), oracle step %d" %
            (attaches, describe(oracle), first["step"], first.get("step_source"),
             oracle["step"]))


def case_deep_nest(ctx, depth):
    """Nesting deeper than 16 (the old limit) is followed exactly; deeper than the stack
    holds, the deepest checked call is not blamed: origin null, nested_unchecked true."""
    oracle, trace = oracle_of(ctx, "deep_nest", "--variant", str(depth))
    events = watch(ctx, "deep_nest", trace, trainer_args=("--variant", str(depth)))
    anomalies = [ev for ev in events if ev["event"] == "anomaly"]
    if not anomalies:
        raise Fail("no anomaly; oracle: %s" % describe(oracle))
    first = anomalies[0]
    stats = last_stats(events)
    if depth <= 30:
        check_anomalies(events, oracle, events[0]["pid"])
        if first.get("nested_unchecked") is not False:
            raise Fail("nested_unchecked %r at depth %d" % (first.get("nested_unchecked"), depth))
        return
    layer = first["layer"] or ""
    if first["origin"] is not None or first.get("nested_unchecked") is not True:
        raise Fail("deepest checked call %r: origin %r, nested_unchecked %r; want null, true" %
                   (layer, first["origin"], first.get("nested_unchecked")))
    if not oracle["layer"].startswith(layer + ".") or first["step"] != oracle["step"]:
        raise Fail("first anomaly %r step %r is not an ancestor of the oracle's %r step %r" %
                   (layer, first["step"], oracle["layer"], oracle["step"]))
    if stats["stack_overflow"] + stats["stack_healed"] < 1:
        raise Fail("stats count no call beyond the stack: %s" % json.dumps(stats))
    diag = [ev for ev in events if ev["event"] == "diagnosis"]
    if diag and diag[0]["cause"] != "unknown":
        raise Fail("diagnosis names %r for a layer that did not make the value" %
                   diag[0]["cause"])


@environments(*HOST_AND_ROOTS)
def test_root_replaced(ctx):
    """A new model each fold: iterations keep counting, and the bad batch's iteration is
    the run's, not the first model's."""
    trace = run_trainer(ctx, "kfold")["trace"]
    trainer = start_waiting_trainer(ctx, "kfold")
    comm = read_comm(trainer.pid)
    daemon = start_daemon(ctx, trainer.pid)
    wait_attach(daemon)
    trainer.send(b"go\n")
    rc = trainer.wait(TRAINER_TIMEOUT)
    if rc != 0:
        raise Fail("kfold exited %r" % rc)
    wait_daemon_exit(daemon)
    events = parse_stream(daemon, trainer.pid, comm)
    check_envelope(events, "target_exit")
    if events[-1]["iterations"] != trace["forwards"]:
        raise Fail("detach iterations %r, the run made %d forward passes" %
                   (events[-1]["iterations"], trace["forwards"]))
    first = [ev for ev in events if ev["event"] == "anomaly"][0]
    if (first["iteration"], first["step"]) != (trace["bad"]["iteration"], trace["bad"]["step"]):
        raise Fail("first anomaly at iteration %r step %r, the bad batch was %r" %
                   (first["iteration"], first["step"], trace["bad"]))


def attach_stopped(ctx, trainer, finish):
    """The daemon attached to the waiting trainer, then stopped (SIGSTOP) from the attach until
    the trainer, told to go, is through finish(), as a daemon lagging on a loaded node would be:
    (daemon, the trainer's comm, what finish() returned)."""
    comm = read_comm(trainer.pid)
    daemon = start_daemon(ctx, trainer.pid)
    wait_attach(daemon)
    daemon.p.send_signal(signal.SIGSTOP)
    try:
        trainer.send(b"go\n")
        done = finish()
    finally:
        daemon.p.send_signal(signal.SIGCONT)
    return daemon, comm, done


@environments(*HOST_AND_ROOTS)
def test_names_after_the_target_is_gone(ctx):
    """The daemon reads its records only once the trainer is gone (stopped from the attach to
    the trainer's exit, as a daemon lagging on a loaded node would be): no model left to read,
    each layer is named from where its caller held it, as the probes read it at the layer's
    first call (blocks.0.norm: the block held in a ModuleList the model never calls)."""
    oracle, trace = oracle_of(ctx, "demo")
    trainer = start_waiting_trainer(ctx, "demo")
    daemon, comm, _ = attach_stopped(ctx, trainer,
                                     lambda: finish_trainer(ctx, trainer, "demo", trace))
    wait_daemon_exit(daemon)
    events = parse_stream(daemon, trainer.pid, comm)
    check_envelope(events, "target_exit")
    check_anomalies(events, oracle, trainer.pid)
    named = {ev["layer"] for ev in events if ev["event"] == "anomaly" and ev["phase"] == "forward"}
    if None in named or not {"blocks.0.norm", "blocks.0.attn"} <= named:
        raise Fail("layers named after the target was gone: %s" % sorted(map(str, named)))


@environments(*HOST_ONLY)
def test_hostile_module_names(ctx):
    """uid 65534's model names its modules to mislead (hostile_names.py: a key with a quote, a
    newline and a terminal escape, a ModuleDict of 300, a 40-character key, a model holding
    itself), and the daemon reads its records only once the target is gone, so every name is
    what BPF read at the first calls: the daemon exits 0, the stream is JSON, the key comes out
    as written, box.k5 is named, what lies past the bounds is null, and nanwatch-tail prints
    no control byte."""
    ctx.env.run_as = NOBODY
    try:
        trainer = start_waiting_trainer(ctx, "hostile_names")
    finally:
        ctx.env.run_as = None
    daemon, comm, rc = attach_stopped(ctx, trainer, lambda: trainer.wait(TRAINER_TIMEOUT))
    if rc != 0:
        raise Fail("hostile_names exited %r:\n%s" % (rc, tail(trainer.stderr_lines())))
    wait_daemon_exit(daemon)
    events = parse_stream(daemon, trainer.pid, comm)
    check_envelope(events, "target_exit")
    layers = {ev["layer"] for ev in events if ev["event"] == "anomaly" and ev["phase"] == "forward"}
    want = {"", 'q"uo\nte\x01\x1b[2J', "box.k5", None}  # "": the model itself
    if layers != want:
        raise Fail("layers %s; want %s" % (sorted(map(repr, layers)), sorted(map(repr, want))))
    shown = subprocess.run([os.path.join(os.path.dirname(ctx.daemon), "nanwatch-tail")],
                           input=daemon.stdout_text().encode(), capture_output=True, timeout=60)
    if shown.returncode != 0 or b"ANOMALY" not in shown.stdout:
        raise Fail("nanwatch-tail exited %d:\n%s" % (shown.returncode, shown.stdout[-2000:]))
    bad = sorted({c for c in shown.stdout if c < 0x20 and c != 0x0a})
    if bad:
        raise Fail("nanwatch-tail printed control bytes %s" % bad)


@environments(*HOST_AND_ROOTS)
def test_target_exec(ctx):
    """The target execs another program: detach with reason target_exec, exit 0, the new
    program left running and untouched."""
    trainer = start_live_trainer(ctx, "exec_after", "--progress-every", "10")
    comm = read_comm(trainer.pid)
    wait_steps(trainer, 10, "before the attach")
    daemon = start_daemon(ctx, trainer.pid)
    wait_attach(daemon)
    # a step the trainer counts from its own (the last STEP line read here may be behind it)
    trainer.p.stdin.write(b"fault\n")
    trainer.p.stdin.flush()
    wait_daemon_exit(daemon, 20)
    events = parse_stream(daemon, trainer.pid, comm)
    check_envelope(events, "target_exec")
    target_untouched(trainer)
    with open("/proc/%d/comm" % trainer.pid) as f:
        if f.read().strip() != "sleep":
            raise Fail("the target did not exec sleep")


test_live_attach_tight = case_test(case_in_flight, "inflight", "adam", 3, 0, envs=EVERYWHERE)
test_live_attach_sgd = case_test(case_in_flight, "inflight", "sgd", 3, 0, envs=HOST_AND_ROOTS)
test_live_attach_paced = case_test(case_in_flight, "inflight", "adam", 3, 0.005, envs=EVERYWHERE)
test_deep_nest_20 = case_test(case_deep_nest, 20, envs=HOST_AND_ROOTS)
test_deep_nest_40 = case_test(case_deep_nest, 40, envs=HOST_AND_ROOTS)


STOP_LIMIT = 15  # s from SIGTERM to the daemon's exit: a detach takes well under one


def stats_with_calls(line):
    """A stats line that counted module calls: the loop is watched."""
    return is_event("stats")(line) and \
        json.loads(line.decode("utf-8")).get("module_calls", 0) > 0


def stop_within(daemon, what):
    """SIGTERM; the seconds the daemon took to exit 0, or Fail naming where it waits."""
    t0 = time.monotonic()
    daemon.p.send_signal(signal.SIGTERM)
    rc = daemon.wait(STOP_LIMIT)
    if rc is None:
        waits = set()
        for tid in os.listdir("/proc/%d/task" % daemon.pid):
            try:
                with open("/proc/%d/task/%s/wchan" % (daemon.pid, tid)) as f:
                    waits.add(f.read())
            except OSError:
                pass
        daemon.kill()
        raise Fail("%s had not exited %d s after SIGTERM (waiting in %s): killed" % (
            what, STOP_LIMIT, ", ".join(sorted(waits))))
    if rc != 0:
        raise Fail("%s exited %d" % (what, rc))
    return time.monotonic() - t0


def end_live(trainer, name):
    """The live trainer keeps training, and ends cleanly once told a fault step."""
    wait_steps(trainer, step_now(trainer) + 3, "after the daemon left")
    trainer.send(b"FAULT %d\n" % (step_now(trainer) + 2), close=False)
    rc = trainer.wait(TRAINER_TIMEOUT)
    if rc != 0:
        raise Fail("%s exited %r after the daemon left:\n%s" % (name, rc,
                                                                 tail(trainer.stderr_lines())))


@environments(*HOST_ONLY)
def test_stop_while_a_late_frame_runs(ctx):
    """With --return-probe session, SIGTERM while the target trains in frames entered after
    the attach (its script started through runpy, as `python -m` and launchers do): the
    daemon leaves at once, and so does a second daemon on the node watching another trainer;
    both trainers train on. On Linux 6.13+ a return probe on every call (the default,
    uretprobe) makes each removal wait for such a frame to return (docs/limits.md)."""
    late = announced_trainer(ctx, "late_loop", "--live", b"READY", "--pace", "0.01")
    late_comm = read_comm(late.pid)
    late_daemon = start_daemon(ctx, late.pid, extra=("--stats-interval", "1",
                                                     "--return-probe", "session"))
    wait_attach(late_daemon)
    late.send(b"go\n", close=False)
    if late_daemon.wait_out(stats_with_calls, 60) is None:
        raise Fail("no stats line with module calls in 60 s: the late loop is not watched")
    other = announced_trainer(ctx, "inflight", "--live", b"LIVE", "--pace", "0.01")
    other_comm = read_comm(other.pid)
    other_daemon = start_daemon(ctx, other.pid, extra=("--return-probe", "session"))
    wait_attach(other_daemon)
    wait_steps(other, step_now(other) + 3, "under the daemon")
    took = [stop_within(other_daemon, "the other trainer's daemon"),
            stop_within(late_daemon, "the late loop's daemon")]
    for daemon, trainer, comm in ((other_daemon, other, other_comm),
                                  (late_daemon, late, late_comm)):
        events = parse_stream(daemon, trainer.pid, comm)
        check_envelope(events, "signal")
        if events[0].get("return_probe") != "session":
            raise Fail("attach line's return_probe %r, asked for session" %
                       events[0].get("return_probe"))
        if not trainer.running():
            raise Fail("trainer %d ended with its daemon" % trainer.pid)
    end_live(other, "inflight")
    end_live(late, "late_loop")
    ctx.log("stops took %.2f s (the other daemon) and %.2f s (the late loop's)" % tuple(took))


BREAKPOINT = 0xCC  # x86-64 int3: a uprobe in a process's copy of the page


def fork_under(ctx, returns):
    """fork_after.py attached with --return-probe returns: (the child's first byte of the
    frame evaluator, the parent's, the seconds the child waited for its own to change), each
    as the process itself reads it, and the daemon's last stats line."""
    trainer = start_waiting_trainer(ctx, "fork_after")
    daemon = start_daemon(ctx, trainer.pid, extra=("--return-probe", returns))
    try:
        wait_attach(daemon)
        trainer.send(b"go\n", close=False)
        child = trainer.wait_out(lambda l: l.startswith(b"CHILD "), 60)
        parent = trainer.wait_out(lambda l: l.startswith(b"PARENT "), 60)
        if child is None or parent is None:
            raise Fail("fork_after printed %r, %r:\n%s" % (child, parent,
                                                           tail(trainer.stderr_lines())))
        trainer.send(b"stop\n", close=False)
        rc = trainer.wait(TRAINER_TIMEOUT)
        if rc != 0:
            raise Fail("fork_after exited %r under the daemon" % rc)
        wait_daemon_exit(daemon)
    finally:
        trainer.kill()
    stats = [json.loads(l) for l in daemon.stdout_text().splitlines() if '"stats"' in l]
    return (int(child.split()[2]), int(parent.split()[1]), float(child.split()[3]),
            stats[-1] if stats else {})


@environments(*HOST_ONLY)
def test_fork_after_attach(ctx):
    """A process the target forks once watched (a DataLoader worker) keeps no probe: the
    kernel leaves the breakpoint of a uprobe_multi link (a session's, and every probe's where
    the kernel has them, as here) in its copy of the page, and the daemon takes it out, with
    either return probe (the parent's stays: the check can see one). A perf uprobe's (kernels
    before 6.6) goes at the child's first hit."""
    for returns in ("uretprobe", "session"):
        child, parent, waited, st = fork_under(ctx, returns)
        ctx.log("%s: the child's breakpoint gone after %.2f s; stats forks %s, cleaned %s" % (
            returns, waited, st.get("forks"), st.get("forks_cleaned")))
        if parent != BREAKPOINT or child == BREAKPOINT:
            raise Fail("%s: the frame evaluator's first byte %#x in the target, %#x in its "
                       "child after %.1f s; want %#x and anything else" %
                       (returns, parent, child, waited, BREAKPOINT))
        want = (1, 1)
        got = (st.get("forks"), st.get("forks_cleaned"))
        if got[0] != want[0] or (got[1] or 0) < want[1]:
            raise Fail("%s: stats forks, forks_cleaned %s; want %s" % (returns, got, want))


