"""The daemon's lighter modes, --mode sample and --mode loss.

nan_input and demo also run under `--mode sample` (test_sample_*): only outermost module calls
are checked, so the daemon must find the oracle's first bad step and iteration at the root
model's output, report no inner layer, and scan fewer tensors than in full mode.
--mode loss (test_lossmode_*): no module probes; the first bad step and iteration from the
loss alone, one probe hit per backward, and a diagnosis that claims no layer-level cause.
"""
import json
import math

from nwharness import Fail, oracle_of
from nwchecks import (EVERYWHERE, HOST_AND_ROOTS, case_test, check_anomaly_fields, check_first,
                      describe, listing, same, watch)


def tensors_scanned(events, what):
    stats = [ev for ev in events if ev["event"] == "stats"]
    n = stats[-1].get("tensors_scanned") if stats else None
    if type(n) is not int:
        raise Fail("%s stats event has tensors_scanned %r" % (what, n))
    return n


def case_sample(ctx, name):
    """--mode sample: outermost calls only; the first bad step and iteration, at layer ""."""
    oracle, trace = oracle_of(ctx, name)
    if oracle is None:
        raise Fail("%s --oracle found no anomaly (the trainer lost its fault)" % name)
    outer = [a for a in oracle["first_iteration"] if a["layer"] == ""]
    if not outer:
        raise Fail("oracle's iteration %d has no non-finite outermost output (layer \"\"): the "
                   "fault does not reach the model's output" % oracle["iteration"])
    want = outer[0]
    ctx.log("oracle: first %s, outermost %s, step %d iteration %d" %
            (describe(oracle), describe(want), oracle["step"], oracle["iteration"]))
    events = watch(ctx, name, trace, mode="sample")
    pid = events[0]["pid"]
    if events[0].get("mode") != "sample":
        raise Fail("attach event has mode %r, want \"sample\"" % events[0].get("mode"))
    anomalies = [ev for ev in events if ev["event"] == "anomaly"]
    if not anomalies:
        raise Fail("no anomaly event; oracle's outermost: %s at step %d" %
                   (describe(want), want["step"]))
    for ev in anomalies:
        check_anomaly_fields(ev, pid)
    inner = [ev for ev in anomalies if ev["layer"] != ""]
    if inner:
        raise Fail("%d anomaly events name an inner layer, first: %s" %
                   (len(inner), json.dumps(inner[0])))
    first = check_first(anomalies, oracle)
    diffs = ["%s %r, oracle's first %r" % (f, first[f], oracle[f])
             for f in ("step", "iteration") if not same(first[f], oracle[f])]
    diffs += ["%s %r, oracle's outermost %r" % (f, first[f], want[f])
              for f in ("layer", "module", "tensor", "dtype", "shape", "nan", "posinf",
                        "neginf") if not same(first[f], want[f])]
    if diffs:
        raise Fail("first anomaly differs: " + "; ".join(diffs))
    got = [(ev["layer"], ev["module"], ev["tensor"]) for ev in anomalies
           if ev["phase"] == "forward" and ev["iteration"] == first["iteration"]]
    listed = [(a["layer"], a["module"], a["tensor"]) for a in outer]
    if got != listed:
        raise Fail("outermost anomalies of iteration %d differ:\n    daemon: %s\n    oracle: %s"
                   % (first["iteration"], listing(got), listing(listed)))
    sampled = tensors_scanned(events, "sample-mode")
    full = ctx.streams.get((ctx.env.name, name, "full"))
    if full is None:
        ctx.log("no full-mode stream of %s kept: running it" % name)
        full = watch(ctx, name, trace)
    scanned = tensors_scanned(full, "full-mode")
    ctx.log("tensors_scanned: sample %d, full %d" % (sampled, scanned))
    if not 0 < sampled < scanned:
        raise Fail("tensors_scanned %d in sample mode, %d in full mode: want fewer, and not 0" %
                   (sampled, scanned))


def case_loss_mode(ctx, name):
    """--mode loss: no module probes, only the loss; the first bad step and iteration from the
    loss alone, one probe hit per backward, and a diagnosis that claims no layer-level cause."""
    oracle, trace = oracle_of(ctx, name)
    if oracle is None:
        raise Fail("%s --oracle found no anomaly (the trainer lost its fault)" % name)
    losses = [float.fromhex(v) for v in trace["losses"]]
    bad = [i for i, v in enumerate(losses) if not math.isfinite(v)]
    if not bad or bad[0] != oracle["iteration"]:
        raise Fail("the trainer's first non-finite loss is at iteration %s, its first anomaly at "
                   "%d: not a case for mode loss" % (bad[:1], oracle["iteration"]))
    events = watch(ctx, name, trace, mode="loss")
    pid = events[0]["pid"]
    if events[0].get("mode") != "loss" or events[0].get("probes") not in (1, 2):
        raise Fail("attach event: mode %r, probes %r; want mode loss and 1 or 2 probes" %
                   (events[0].get("mode"), events[0].get("probes")))
    anomalies = [ev for ev in events if ev["event"] == "anomaly"]
    if not anomalies:
        raise Fail("no anomaly event; the loss went non-finite at iteration %d" % bad[0])
    for ev in anomalies:
        check_anomaly_fields(ev, pid)
        if ev["phase"] != "loss" or ev["layer"] is not None or ev["origin"] is not None:
            raise Fail("mode loss reported %s" % json.dumps(ev))
    first = anomalies[0]
    want = {"step": trace["loss_steps"][bad[0]], "iteration": bad[0], "first": True}
    diffs = ["%s %r, want %r" % (k, first[k], v) for k, v in want.items() if first[k] != v]
    if diffs:
        raise Fail("first anomaly differs: " + "; ".join(diffs))
    got = [ev["iteration"] for ev in anomalies]
    if got != bad[:len(got)] or len(got) != len(bad):
        raise Fail("anomalies at iterations %s, the non-finite losses at %s" % (got, bad))
    d = [ev for ev in events if ev["event"] == "diagnosis"]
    cause = "lr_too_high" if oracle["expected_cause"] == "lr_too_high" else "unknown"
    if len(d) != 1 or d[0]["cause"] != cause or d[0]["step"] != want["step"]:
        raise Fail("diagnosis %s; want one, cause %s at step %d" %
                   ([json.dumps(x) for x in d], cause, want["step"]))
    stats = [ev for ev in events if ev["event"] == "stats"][-1]
    if stats["module_calls"] != 0 or stats["probe_hits"] != len(losses):
        raise Fail("stats: module_calls %r, probe_hits %r; want 0 and one per backward (%d)" %
                   (stats["module_calls"], stats["probe_hits"], len(losses)))


test_sample_nan_input = case_test(case_sample, "nan_input", envs=EVERYWHERE)
test_sample_demo = case_test(case_sample, "demo", envs=HOST_AND_ROOTS)
test_lossmode_nan_input = case_test(case_loss_mode, "nan_input", envs=HOST_AND_ROOTS)
test_lossmode_loss_log_zero = case_test(case_loss_mode, "loss_log_zero", envs=HOST_AND_ROOTS)
test_lossmode_lr_too_high = case_test(case_loss_mode, "lr_too_high", envs=HOST_AND_ROOTS)
