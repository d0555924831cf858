"""Mixed precision with a GradScaler (issue 27), attached in flight on torch 2.6's CPU scaler.

tests/trainers/amp_scaler.py trains under float16 autocast with a GradScaler whose scale starts
far too large and grows again every four steps: its scaled gradients overflow now and then on
purpose, and the scaler skips those updates (variant a, healthy). Variant b makes a NaN gradient
every step whatever the scale (sqrt at 0 times abs's zero derivative), so every update is
skipped and the scale falls without end.

Checked: on the healthy run, no anomaly and no diagnosis; one skipped_step line per update the
scaler skipped while attached, at the trainer's own skipped steps (counted from the attach: one
offset maps the daemon's steps onto the trainer's); stats.grad_scaler and the per-phase
in_skipped_steps account for every gradient anomaly found. On the stuck run, an incident: one
backward anomaly (the first skipped step of the run), a diagnosis with cause
scaler_skips_persist whose evidence names what makes the gradient non-finite.
"""
import json

from nwharness import (TRAINER_TIMEOUT, Fail, announced_trainer, is_event, last_json, read_comm,
                       start_daemon, tail, wait_attach, wait_daemon_exit)
from nwchecks import (check_envelope, check_tally, environments, last_stats, parse_stream,
                      step_now, wait_steps)

TORCH_2 = ("trixie", "forky")  # torch 1.13's GradScaler is CUDA only


def stats_counting(line):
    if not is_event("stats")(line):
        return False
    return json.loads(line.decode("utf-8")).get("steps", 0) > 0


def run(ctx, variant, until, more):
    """The trainer in flight (pace 10 ms a step), attached after its fifth step; once the
    daemon's output satisfies until, the trainer is asked to stop more steps later. Returns
    (events, trace, steps done before the attach, steps done once attached)."""
    trainer = announced_trainer(ctx, "amp_scaler", "--live", b"LIVE", "--pace", "0.01",
                                "--steps", "2000", "--variant", variant, "--after-fault", "0")
    comm = read_comm(trainer.pid)
    wait_steps(trainer, 5, "before the attach")
    before = step_now(trainer)
    daemon = start_daemon(ctx, trainer.pid, extra=("--stats-interval", "1"))
    wait_attach(daemon)
    attached = step_now(trainer)
    if daemon.wait_out(until, 120) is None:
        trainer.kill()
        raise Fail("the daemon's output never showed what the test waits for in 120 s")
    trainer.send(b"FAULT %d\n" % (step_now(trainer) + more), close=False)
    rc = trainer.wait(TRAINER_TIMEOUT)
    if rc != 0:
        raise Fail("amp_scaler exited %r under the daemon:\n%s" % (rc,
                                                                  tail(trainer.stderr_lines())))
    got = last_json(trainer.stdout_text(), "trace")
    if got is None:
        raise Fail("amp_scaler printed no trace under the daemon")
    wait_daemon_exit(daemon)
    events = parse_stream(daemon, trainer.pid, comm)
    check_envelope(events, "target_exit")
    check_tally(ctx, events)
    return events, got["trace"], before, attached


@environments(*TORCH_2)
def test_scaler_healthy(ctx):
    """Skipped steps of a healthy GradScaler run are reported as such, never as anomalies."""
    events, trace, before, attached = run(ctx, "a", stats_counting, 40)
    bad = [ev for ev in events if ev["event"] in ("anomaly", "diagnosis")]
    if bad:
        raise Fail("a healthy scaler run got %d anomaly/diagnosis lines, first: %s" % (
            len(bad), json.dumps(bad[0])))
    skips = [ev for ev in events if ev["event"] == "skipped_step"]
    stats = last_stats(events)
    sc = stats.get("grad_scaler")
    if not isinstance(sc, dict) or sc.get("skipped_steps") != len(skips) or not skips:
        raise Fail("stats.grad_scaler %s, %d skipped_step lines (the trainer skipped %d steps)"
                   % (json.dumps(sc), len(skips), len(trace["skipped"])))
    if sc["updates"] < stats["steps"] - 1 or sc["updates"] > stats["steps"]:
        raise Fail("stats.grad_scaler.updates %d, %d steps counted" % (sc["updates"],
                                                                       stats["steps"]))
    # the training loop's counter gives the trainer's own step once found; before, steps count
    # from the attach, and one offset (the steps done before the daemon counted) maps them
    want = set(trace["skipped"])
    counted = [ev["step"] for ev in skips if ev["step_source"] == "attach"]
    looped = [ev["step"] for ev in skips if ev["step_source"] == "loop_variable"]
    if len(counted) + len(looped) != len(skips) or not set(looped) <= want:
        raise Fail("skipped steps from the loop's counter %s are not all the trainer's %s (or "
                   "another step_source): %s" % (looped, trace["skipped"],
                                                  [ev["step_source"] for ev in skips]))
    # the scaler's skips recur in a pattern (back off, grow every four steps), so more than one
    # offset in the attach window can put the counted steps on skipped ones: the daemon is right
    # if one of them makes its steps the trainer's, each one, from the first it saw
    def mapped(o):
        steps = [s + o for s in counted] + looped
        return steps, [s for s in trace["skipped"] if s >= steps[0]]

    offsets = [o for o in range(before, attached + 2) if all(s + o in want for s in counted)]
    if not offsets:
        raise Fail("skipped steps %s (counted from the attach after %d-%d steps) are not the "
                   "trainer's %s" % (counted, before, attached, trace["skipped"]))
    if not any(steps == seen for steps, seen in map(mapped, offsets)):
        raise Fail("the daemon's skipped steps %s (counted from the attach: any offset of %s), "
                   "the trainer's: %s" % (counted + looped, offsets, trace["skipped"]))
    for ev in skips:
        if not (isinstance(ev["scale"], float) and ev["scale"] > 1) or \
                not ev["consecutive"] >= 1:
            raise Fail("skipped_step line: %s" % json.dumps(ev))
    if not any(ev["anomalies"] and ev["first_gradient"] for ev in skips):
        raise Fail("no skipped_step line carries the gradient anomaly BPF found in it: %s" %
                   json.dumps(skips[0]))
    folded = stats["phases"]["backward"]["in_skipped_steps"]
    if folded != sum(ev["anomalies"] for ev in skips) or stats["in_skipped_steps"] != folded:
        raise Fail("stats in_skipped_steps %d (backward %d), the skipped_step lines carry %d" % (
            stats["in_skipped_steps"], folded, sum(ev["anomalies"] for ev in skips)))
    ctx.log("%d skipped steps seen, %d updates, scale %s; the trainer skipped %s" % (
        len(skips), sc["updates"], sc["scale"], trace["skipped"]))


@environments(*TORCH_2)
def test_scaler_stuck(ctx):
    """A scaler that skips every step makes one incident, its cause that the skipping persists."""
    events, trace, before, attached = run(ctx, "b", is_event("diagnosis"), 3)
    anomalies = [ev for ev in events if ev["event"] == "anomaly"]
    diags = [ev for ev in events if ev["event"] == "diagnosis"]
    skips = [ev for ev in events if ev["event"] == "skipped_step"]
    if len(diags) != 1 or diags[0]["cause"] != "scaler_skips_persist":
        raise Fail("diagnoses: %s" % json.dumps(diags))
    d = diags[0]
    if not anomalies or anomalies[0]["phase"] != "backward" or \
            anomalies[0]["step"] != skips[0]["step"] or d["step"] != anomalies[0]["step"]:
        raise Fail("the incident's first anomaly %s is not the first skipped step's gradient "
                   "(%s); diagnosis at step %r" % (json.dumps(anomalies[:1]), json.dumps(skips[:1]),
                                                  d["step"]))
    steps = [ev["step"] for ev in skips]
    if steps != list(range(steps[0], steps[0] + len(steps))) or \
            [ev["consecutive"] for ev in skips] != list(range(1, len(skips) + 1)):
        raise Fail("skipped_step lines are not one a step, in a row: %s" % json.dumps(skips))
    if not any("skipped %d steps in a row" % len(skips) in e for e in d["evidence"]) or \
            not any(e.startswith("what makes the gradient non-finite: ") for e in d["evidence"]):
        raise Fail("the diagnosis does not say the skipping persists and why: %s" %
                   json.dumps(d["evidence"]))
    scales = [ev["scale"] for ev in skips]
    if any(b != a / 2 for a, b in zip(scales, scales[1:])) or scales[-1] > 1:
        raise Fail("the scale does not halve at each skip down to 1 or less: %s" % scales)
    if len(trace["skipped"]) != trace["steps"]:
        raise Fail("the trainer skipped %d of %d steps: not the stuck case" % (
            len(trace["skipped"]), trace["steps"]))
    ctx.log("diagnosis: %s" % json.dumps(d))
    ctx.log("incident after %d skipped steps (scale %s); first anomaly %s %s" % (
        len(skips), scales[-1], anomalies[0]["layer"], anomalies[0]["tensor"]))
