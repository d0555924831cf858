"""Held-out fault trainers (issue 27): causes on code the diagnosis rules were not written for.

Each tests/trainers/heldout_*.py is a fault in a shape the rest of the suite does not have
(masks by keyword, a zero probability under a log, a float16 cast of a growing activation, a
warm-up to a learning rate too high, a norm over a constant feature, a fractional power of a
negative, a variance that cancels to a negative, a count of nothing, a hand-written
log-sum-exp), its true cause decided from its own code and stated in its docstring. The table
TRUE_CAUSE holds them all.

Each case runs the trainer in flight (--live, seeded, CPU) and attaches nanwatchd to it after
its fifth step; once the daemon counts steps the fault is asked for a few steps ahead
("FAULT n"), and the trainer ends AFTER_FAULT steps after it. The same fault is then run under
the forward-hook oracle (--fault-step n). Checked against the oracle: the first anomaly's layer,
module, tensor, phase, dtype, shape and counts; its step (exactly where the optimizer's state
holds the step; counted from the attach otherwise, so the oracle's step less the daemon's lies
between the steps done before and after the attach, and so does the iteration); the non-finite
outputs of that iteration; one diagnosis, on that anomaly; and that the run trained exactly as
it does alone. The diagnosis' cause must be the true cause, except for the trainers in
CAUSE_NOT_YET, where today's rules name another cause: for those the test checks that the
cause is still not the true one, so a rule change that gets one right fails here until the
trainer leaves the set.
"""
import json

from nwharness import (TRAINER_TIMEOUT, Fail, announced_trainer, is_event, last_json,
                       oracle_of, read_comm, start_daemon, tail, wait_attach, wait_daemon_exit)
from nwchecks import (HOST_ONLY, case_test, check_envelope, check_first_in_flight, describe,
                      listing, parse_stream, step_now, wait_steps)

# trainer -> the cause its code makes (see each trainer's docstring for why)
TRUE_CAUSE = {
    "heldout_encoder_padding": "attention_fully_masked",
    "heldout_hf_attention_mask": "attention_fully_masked",
    "heldout_nll_logits": "loss_log_zero",
    "heldout_kl_soft_labels": "loss_log_zero",
    "heldout_smoothing_off": "loss_log_zero",
    "heldout_fp16_growth": "fp16_overflow",
    "heldout_warmup_peak": "lr_too_high",
    "heldout_layernorm_constant": "norm_zero_variance",
    "heldout_batch_standardize": "norm_zero_variance",
    "heldout_cumprod_pow": "invalid_domain",
    "heldout_var_cancel": "invalid_domain",
    "heldout_prototype_count": "division_by_zero",
    "heldout_manual_logsumexp": "exp_overflow",
}

# Trainers whose diagnosis today names another cause than TRUE_CAUSE (the before table of
# issue 27). The rules work of issue 27 moves them out of this set as it gets each right.
# Both are first layers: the ops on the batch (which needs no gradient) leave no autograd
# node, so the call's operations are not seen and the values alone decide.
CAUSE_NOT_YET = {}

# Trainers whose cause differs between runs of the same seeded fault: the causes seen.
CAUSE_VARIES = {}

# steps trained after the fault step: the fault's first non-finite value comes that many steps
# later at most (a growth over steps); 3 otherwise
AFTER_FAULT = {"heldout_fp16_growth": 10, "heldout_warmup_peak": 16}
FAULT_AHEAD = 4  # the fault is asked for this many steps after the trainer's step then


def stats_counting(line):
    """A stats line that counts steps (the daemon has seen an optimizer step)."""
    if not is_event("stats")(line):
        return False
    return json.loads(line.decode("utf-8")).get("steps", 0) > 0


def watch_in_flight(ctx, name, after):
    """The trainer in flight, attached after its fifth step, the fault asked for once steps are
    counted. Returns (events, pid, trace, fault step, steps done before the attach, steps done
    once attached)."""
    trainer = announced_trainer(ctx, name, "--live", b"LIVE", "--pace", "0.01",
                                "--after-fault", str(after))
    comm = read_comm(trainer.pid)
    wait_steps(trainer, 5, "before the attach")
    before = step_now(trainer)
    daemon = start_daemon(ctx, trainer.pid, extra=("--stats-interval", "1"))
    wait_attach(daemon)
    attached = step_now(trainer)
    if daemon.wait_out(stats_counting, 60) is None:
        raise Fail("no stats line with steps counted in 60 s")
    fault = step_now(trainer) + FAULT_AHEAD
    trainer.send(b"FAULT %d\n" % fault, close=False)
    line = trainer.wait_out(lambda l: l.startswith(b"FAULT AT "), 60)
    if line is None or int(line.split()[-1].rstrip(b")")) >= fault:
        raise Fail("%s took the fault step too late: %r" % (name, line))
    rc = trainer.wait(TRAINER_TIMEOUT)
    if rc != 0:
        raise Fail("%s exited %r under the daemon:\n%s" % (name, rc,
                                                          tail(trainer.stderr_lines())))
    got = last_json(trainer.stdout_text(), "trace")
    if got is None:
        raise Fail("%s printed no trace under the daemon" % name)
    wait_daemon_exit(daemon)
    events = parse_stream(daemon, trainer.pid, comm)
    check_envelope(events, "target_exit")
    return events, trainer.pid, got["trace"], fault, before, attached


def check_counted_from_attach(first, oracle, before, attached):
    """A step counted from the attach: the oracle's step less the daemon's is the steps done
    before the daemon counted, between those seen before and after the attach (one more for a
    step under way); the iteration likewise."""
    for field in ("step", "iteration"):
        offset = oracle[field] - first[field]
        if not before <= offset <= attached + 1:
            raise Fail("%s %d counted from the attach, oracle %d: %d steps before it, but the "
                       "trainer had done %d to %d" % (field, first[field], oracle[field], offset,
                                                      before, attached))


def check_first_iteration(events, first, oracle):
    """The non-finite outputs of the first anomalous iteration, in call order, as the
    oracle's."""
    got = [(ev["layer"], ev["module"], ev["tensor"]) for ev in events
           if ev["event"] == "anomaly" and ev["phase"] == "forward" and
           ev["iteration"] == first["iteration"]]
    want = [(a["layer"], a["module"], a["tensor"]) for a in oracle["first_iteration"]]
    if got != want:
        raise Fail("anomalies of the first iteration differ:\n    daemon: %s\n    oracle: %s" %
                   (listing(got), listing(want)))


def check_cause(name, d):
    true = TRUE_CAUSE[name]
    if name in CAUSE_VARIES:
        if d["cause"] not in CAUSE_VARIES[name]:
            raise Fail("%s: cause %r, want one of %s" % (name, d["cause"], CAUSE_VARIES[name]))
        return
    if name in CAUSE_NOT_YET:
        if d["cause"] == true:
            raise Fail("%s: the diagnosis now names the true cause %r: move it out of "
                       "CAUSE_NOT_YET" % (name, true))
        return
    if d["cause"] != true:
        raise Fail("%s: cause %r (%s), the fault is %r; evidence: %s" % (
            name, d["cause"], d["confidence"], true, d["evidence"]))
    if not d["fixes"]:
        raise Fail("%s: no fixes: %s" % (name, json.dumps(d)))


def case_heldout(ctx, name):
    """A held-out trainer in flight: the first anomaly against the oracle, and its cause."""
    after = AFTER_FAULT.get(name, 3)
    events, pid, trace, fault, before, attached = watch_in_flight(ctx, name, after)
    oracle, alone = oracle_of(ctx, name, "--fault-step", str(fault), "--after-fault", str(after))
    if oracle is None:
        raise Fail("%s --oracle --fault-step %d found no anomaly" % (name, fault))
    if trace != alone:
        raise Fail("%s trained differently under the daemon than alone (losses or final "
                   "parameters differ)" % name)
    first = check_first_in_flight(events, oracle, pid)
    if first.get("step_source") == "attach":
        check_counted_from_attach(first, oracle, before, attached)
    check_first_iteration(events, first, oracle)
    diags = [ev for ev in events if ev["event"] == "diagnosis"]
    if len(diags) != 1:
        raise Fail("%d diagnosis events, want 1" % len(diags))
    d = diags[0]
    diffs = ["%s %r, first anomaly %r" % (f, d[f], first[f])
             for f in ("step", "iteration", "layer", "module") if d[f] != first[f]]
    if diffs or not d["evidence"] or not 0 < d["confidence"] <= 1:
        raise Fail("diagnosis differs: %s; %s" % ("; ".join(diffs), json.dumps(d)))
    ctx.log("heldout %s" % json.dumps(dict(
        trainer=name, fault=fault, true_cause=TRUE_CAUSE[name],
        oracle="%s@%d" % (describe(oracle), oracle["step"]),
        daemon="%s@%d (%s)" % (describe(first), first["step"], first["step_source"]),
        cause=d["cause"], confidence=d["confidence"], evidence=d["evidence"])))
    check_cause(name, d)


for _name in TRUE_CAUSE:
    globals()["test_%s" % _name] = case_test(case_heldout, _name, envs=HOST_ONLY)
