"""Causes from evidence, and the operation by replay.

Each case runs a seeded trainer (tests/trainers/) in one of its forms (--variant: a different
layer class, the fault written inline or through a helper, a custom or a built-in module) as
uid 65534 under `nanwatchd --capture-dir`. The first anomaly must be the forward-hook oracle's,
and the live diagnosis must name the cause the fault was built to produce, from the captured
values (no class name decides). Then `nanwatch-repro --explain --json --class-from TRAINER`
replays the capture under the dispatch-level tracer: its `explanation` event (schema
nanwatch/1) must name the aten operation that first made the value, the cause, and
`reproducible: true`, and nanwatch-tail must show it. nonrepro's layer reads a global the
trainer sets to 0 for the fault step only: the replay of the same bits is finite, and the event
says `reproducible: false`; live, the call's ops (a div) with no zero among the captured tensors
name division_by_zero. batch_of_one --variant groups standardises groups of rows by hand, one
group of one row at the fault step: the replay must name aten::std (NaN of its own, n - 1 = 0),
not the empty_like whose unwritten memory the layer fills. supcon's replay finds the division
of the anchor's sum over positives by their count, 0 (no positive); ctc_short's, the CTC op's
+Inf with the samples whose input is shorter than their target; empty_selection --variant
module's, aten::mean of an empty selection. loss_log_zero --variant b takes the log of a probability that a softmax made exactly 0 inside a
loss module: the live cause must come from the zeros being probabilities (rows in [0, 1] that
sum to 1), and the replay must name aten::log; the evidence must call that loss module,
outermost but not the model, a module called outside the model (the hooks' first anomaly says
which an outermost module is).

LIVE_CASES check the live cause alone, where no layer made the value from finite inputs and
parameters (nothing to replay, and no capture is taken for a first anomaly that is not an
origin), and the diagnosis' origin_step against the trainer's ground truth: loss_jump (a loss
that grows x1e10 in one step and is +Inf at the next, with two finite losses before it:
lr_too_high from the first update) and lr_too_high (a slow divergence until a layer overflows:
from the step of the lowest loss); loss_log_zero --variant a (the log outside any module: the
loss is the first non-finite value); nan_input (a NaN written into the batch, or a constant
sample standardised to 0/0 by the data pipeline's helper: bad_input_data); nonfinite_params (a
learning rate of 3e38, or a weight decay of 3e38 from a helper, for one update:
nonfinite_params from that update).
"""
import json
import os
import re
import subprocess

from nwharness import Fail, oracle_of
from nwcapture import capture_dir, run_repro, watch_capture
from nwchecks import HOST_AND_ROOTS, case_test, describe, environments

# (trainer, variant): (live cause, replayed op or None: not checked, replayed cause, reproducible)
CASES = {
    ("zero_norm", "a"): ("division_by_zero", "aten::div", "division_by_zero", True),
    ("zero_norm", "b"): ("division_by_zero", "aten::div", "division_by_zero", True),
    ("softmax_overflow", "a"): ("exp_overflow", "aten::exp", "exp_overflow", True),
    ("softmax_overflow", "b"): ("exp_overflow", "aten::exp", "exp_overflow", True),
    ("masked_mean", "a"): ("division_by_zero", "aten::div", "division_by_zero", True),
    ("masked_mean", "b"): ("division_by_zero", "aten::div", "division_by_zero", True),
    ("zero_variance", "a"): ("norm_zero_variance", "aten::div", "norm_zero_variance", True),
    ("zero_variance", "b"): ("norm_zero_variance", "aten::div", "norm_zero_variance", True),
    ("domain", "a"): ("invalid_domain", "aten::log", "invalid_domain", True),
    ("domain", "b"): ("invalid_domain", None, "invalid_domain", True),
    ("masked_attention", "a"): ("attention_fully_masked", "aten::_softmax",
                                "attention_fully_masked", True),
    ("masked_attention", "b"): ("attention_fully_masked", "aten::_softmax",
                                "attention_fully_masked", True),
    ("masked_attention", "c"): ("attention_fully_masked", "aten::_softmax",
                                "attention_fully_masked", True),
    ("half_overflow", "a"): ("fp16_overflow", "aten::mul", "fp16_overflow", True),
    ("half_overflow", "b"): ("fp16_overflow", "aten::sum", "fp16_overflow", True),
    ("exp_overflow", None): ("exp_overflow", "aten::exp", "exp_overflow", True),
    ("div_zero", None): ("division_by_zero", "aten::div", "division_by_zero", True),
    ("batch_of_one", "groups"): ("norm_zero_variance", "aten::std", "norm_zero_variance", True),
    ("supcon", None): ("division_by_zero", "aten::div", "division_by_zero", True),
    ("ctc_short", "module"): ("loss_log_zero", "aten::_ctc_loss", "loss_log_zero", True),
    ("empty_selection", "module"): ("division_by_zero", "aten::mean", "division_by_zero", True),
    ("loss_log_zero", "b"): ("loss_log_zero", "aten::log", "loss_log_zero", True),
    ("nonrepro", None): ("division_by_zero", None, "unknown", False),
    ("ignored_targets", "functional"): ("division_by_zero", "aten::nll_loss_forward",
                                        "division_by_zero", True),
}
# cases the rules decide alike on every root: the oldest torch and the newest
CASE_ENVS = {("ignored_targets", "functional"): ("host", "forky"),
             ("batch_of_one", "groups"): ("host",), ("supcon", None): ("host", "forky"),
             ("ctc_short", "module"): ("host", "trixie"), ("empty_selection", "module"): ("host",)}


def variant_args(variant):
    return ("--variant", variant) if variant else ()


def check_live(events, oracle, cause):
    first = [ev for ev in events if ev["event"] == "anomaly"][0]
    diffs = ["%s %r, oracle %r" % (f, first[f], oracle[f])
             for f in ("step", "layer", "module", "tensor", "origin") if first[f] != oracle[f]]
    diags = [ev for ev in events if ev["event"] == "diagnosis"]
    if len(diags) != 1:
        raise Fail("%d diagnosis events, want 1" % len(diags))
    d = diags[0]
    if d["cause"] != cause:
        diffs.append("cause %r, the fault is %r (evidence: %s)" % (d["cause"], cause,
                                                                   d["evidence"]))
    if not d["evidence"] or not 0 < d["confidence"] <= 1:
        diffs.append("no evidence or confidence: %s" % json.dumps(d))
    if first["layer"] == "" and "outside_model" in oracle:
        # an outermost module is named as what it is: the model, or one called outside it
        text = " ".join(d["evidence"])
        outside = "a module called outside the model"
        as_model = re.search(r"(?<!outside )the model \(%s\)" % re.escape(first["module"]), text)
        if oracle["outside_model"] and (as_model or outside not in text):
            diffs.append("the evidence calls %s %r, not %r: %s" % (
                first["module"], "the model" if as_model else "nothing", outside,
                d["evidence"]))
        elif not oracle["outside_model"] and outside in text:
            diffs.append("the evidence calls the model %s %r: %s" % (
                first["module"], outside, d["evidence"]))
    if diffs:
        raise Fail("live diagnosis differs: " + "; ".join(diffs))
    return d


def check_explanation(ev, man, op, cause, reproducible):
    diffs = []
    if ev.get("schema") != "nanwatch/1" or ev.get("event") != "explanation":
        diffs.append("schema/event %r/%r" % (ev.get("schema"), ev.get("event")))
    for f in ("layer", "module", "step"):
        if ev.get(f) != man[f]:
            diffs.append("%s %r, the capture's %r" % (f, ev.get(f), man[f]))
    if op is not None and ev.get("op") != op:
        diffs.append("op %r, want %r" % (ev.get("op"), op))
    if ev.get("cause") != cause:
        diffs.append("cause %r, want %r" % (ev.get("cause"), cause))
    if ev.get("reproducible") is not reproducible:
        diffs.append("reproducible %r, want %r" % (ev.get("reproducible"), reproducible))
    if not ev.get("evidence") or not 0 < ev.get("confidence", 0) <= 1:
        diffs.append("no evidence or confidence")
    if reproducible and not ev.get("op_inputs"):
        diffs.append("no facts about the operation's inputs")
    if diffs:
        raise Fail("explanation differs: %s; event %s" % ("; ".join(diffs), json.dumps(ev)))


def check_live_beside(ev, d):
    """The replay names the live diagnosis of its capture, whether the two agree, and the
    facts the live one rests on."""
    live = ev.get("live") or {}
    agrees = d["cause"] == ev.get("cause")
    line = ("the live diagnosis names the same cause" if agrees else
            "the live diagnosis said %s, from " % d["cause"])
    if live.get("cause") != d["cause"] or live.get("basis") != d["basis"] or \
            ev.get("agrees") is not agrees or not d["basis"] or \
            not any(line in e for e in ev.get("evidence", ())):
        raise Fail("the replay's view of the live diagnosis (%s, basis %s): live %s, agrees %r, "
                   "evidence %s" % (d["cause"], d["basis"], live, ev.get("agrees"),
                                    ev.get("evidence")))


def case_explain(ctx, name, variant):
    """Live cause from the captured values; the operation, cause and verdict by replay."""
    cause, op, replay_cause, reproducible = CASES[(name, variant)]
    extra = variant_args(variant)
    oracle, trace = oracle_of(ctx, name, *extra)
    if oracle is None or not oracle["origin"]:
        raise Fail("%s %s --oracle has no origin anomaly first (the trainer lost its fault)" %
                   (name, " ".join(extra)))
    ctx.log("oracle: %s step %d" % (describe(oracle), oracle["step"]))
    dirpath, inside_dir = capture_dir(ctx)
    events, _ = watch_capture(ctx, name, trace, dirpath, trainer_args=extra)
    d = check_live(events, oracle, cause)
    ctx.log("live: %s (%s): %s" % (d["cause"], d["confidence"], d["evidence"]))
    made = os.listdir(dirpath)
    if len(made) != 1:
        raise Fail("capture directory holds %s, want one capture" % made)
    with open(os.path.join(dirpath, made[0], "manifest.json"), encoding="utf-8") as f:
        man = json.load(f)
    # the daemon's stream as a user keeps it (-o FILE), for the replay to compare with
    events_file = os.path.join(dirpath, "events.ndjson")
    with open(events_file, "w", encoding="utf-8") as f:
        for e in events:
            f.write(json.dumps(e) + "\n")
    os.chmod(events_file, 0o644)
    r = run_repro(ctx, os.path.join(inside_dir, made[0]), "--explain", "--json", "--class-from",
                  os.path.join(ctx.env.trainers, name + ".py"), "--events",
                  os.path.join(inside_dir, "events.ndjson"))
    lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
    if r.returncode != (0 if reproducible else 1) or not lines:
        raise Fail("nanwatch-repro --explain exited %d: %s" % (r.returncode,
                                                              (r.stdout + r.stderr)[-600:]))
    ev = json.loads(lines[-1])
    check_explanation(ev, man, op, replay_cause, reproducible)
    check_live_beside(ev, d)
    check_tail(ctx, lines[-1], ev)


@environments(*HOST_AND_ROOTS)
def test_explain_mha_padding_by_keyword(ctx):
    """nn.MultiheadAttention given key_padding_mask= by keyword, one sequence all padding: the
    mask is captured as the call's keyword argument (its key, the file) and the live cause
    reads it. MultiheadAttention holds a child module (out_proj), so no replay is asked."""
    extra = ("--variant", "d")
    oracle, trace = oracle_of(ctx, "masked_attention", *extra)
    if oracle is None or not oracle["origin"]:
        raise Fail("masked_attention --variant d --oracle has no origin anomaly first")
    dirpath, _ = capture_dir(ctx)
    events, _ = watch_capture(ctx, "masked_attention", trace, dirpath, trainer_args=extra)
    d = check_live(events, oracle, "attention_fully_masked")
    ctx.log("live: %s (%s): %s" % (d["cause"], d["confidence"], d["evidence"]))
    made = os.listdir(dirpath)
    if len(made) != 1:
        raise Fail("capture directory holds %s, want one capture" % made)
    with open(os.path.join(dirpath, made[0], "manifest.json"), encoding="utf-8") as f:
        man = json.load(f)
    kw = [e for e in man["tensors"] if e["role"] == "kwarg"]
    mask = [e for e in kw if e.get("key") == "key_padding_mask"]
    if len(mask) != 1 or not mask[0]["file"] or mask[0]["shape"] != [2, 5] or \
            not os.path.exists(os.path.join(dirpath, made[0], mask[0]["file"])):
        raise Fail("the manifest's keyword arguments: %s" % json.dumps(kw))
    want = [e["name"] for e in oracle["capture"]["tensors"] if e["role"] == "kwarg"]
    got = [e["name"] for e in kw if e["file"]]
    if got != want:
        raise Fail("keyword tensors captured %s, the oracle's %s" % (got, want))


def check_tail(ctx, line, ev):
    """nanwatch-tail (beside the daemon) shows the event appended to a stream."""
    tail = os.path.join(os.path.dirname(ctx.daemon), "nanwatch-tail")
    r = subprocess.run([tail, "--no-color"], input=line + "\n", capture_output=True, text=True,
                       timeout=30)
    head = r.stdout.splitlines()[0] if r.stdout else ""
    want = ["explanation", ev["cause"], ev["op"] or "no operation",
            "reproducible" if ev["reproducible"] else "NOT reproducible"]
    if r.returncode != 0 or not all(w in head for w in want) or \
            "evidence: " + ev["evidence"][0] not in r.stdout:
        raise Fail("nanwatch-tail shows the explanation as %r (exit %d)" % (r.stdout,
                                                                           r.returncode))


# (trainer, variant) checked for the live cause alone: no layer made the value from finite
# inputs and parameters, so there is nothing to replay
LIVE_CASES = [("loss_jump", "a"), ("loss_jump", "b"), ("lr_too_high", None),
              ("loss_log_zero", "a"), ("nan_input", "a"), ("nan_input", "b"), ("nan_input", "c"),
              ("nonfinite_params", "a"), ("nonfinite_params", "b")]


def case_live_only(ctx, name, variant):
    """The live cause alone (no layer made the value from finite inputs and parameters), and
    the optimizer step that began it where the trainer defines one."""
    extra = variant_args(variant)
    oracle, trace = oracle_of(ctx, name, *extra)
    if oracle is None:
        raise Fail("%s --oracle found no anomaly" % name)
    dirpath, _ = capture_dir(ctx)
    events, _ = watch_capture(ctx, name, trace, dirpath, trainer_args=extra)
    d = check_live(events, oracle, oracle["expected_cause"])
    ctx.log("live: %s (%s), origin_step %r: %s" % (d["cause"], d["confidence"],
                                                   d.get("origin_step"), d["evidence"]))
    if d.get("origin_step") != oracle["origin_step"]:
        raise Fail("origin_step %r, the trainer's ground truth %r: %s" %
                   (d.get("origin_step"), oracle["origin_step"], d["evidence"]))
    if oracle.get("phase", "forward") == "forward" and not oracle["origin"] and \
            os.listdir(dirpath):
        raise Fail("captured %s, but the first anomaly is not an origin" % os.listdir(dirpath))


for (_name, _variant) in CASES:
    globals()["test_explain_%s%s" % (_name, "_" + _variant if _variant else "")] = case_test(
        case_explain, _name, _variant, envs=CASE_ENVS.get((_name, _variant), HOST_AND_ROOTS))
for (_name, _variant) in LIVE_CASES:
    globals()["test_explain_%s%s" % (_name, "_" + _variant if _variant else "")] = case_test(
        case_live_only, _name, _variant, envs=HOST_AND_ROOTS)
