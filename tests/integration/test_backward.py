"""Backward pass: gradients against the node hooks and detect_anomaly; gradient norms."""
import json

from nwharness import Fail, run_trainer
from nwchecks import (EVERYWHERE, HOST_AND_ROOTS, HOST_ONLY, case_test, check_anomaly_fields,
                      check_first, close, describe, environments, last_stats, same, watch)


# detect_anomaly names the node
BACKWARD_NAN = ["backward_sqrt_zero", "backward_where_log", "backward_focal"]
BACKWARD_INF = ["backward_sqrt_inf"]  # Inf: detect_anomaly (NaN only) stops at a later node
BACKWARD_FIELDS = ("step", "iteration", "node", "tensor", "layer", "module", "dtype", "shape",
                   "numel", "nan", "posinf", "neginf")


def backward_oracles(ctx, name):
    """The node hooks' first non-finite node output, and detect_anomaly's node."""
    result = run_trainer(ctx, name, "--oracle")
    first = result.get("backward_first")
    if first is None:
        raise Fail("%s --oracle: the node hooks found no non-finite gradient" % name)
    fwd = result.get("oracle")
    if fwd is not None and fwd["iteration"] <= first["iteration"]:
        raise Fail("%s --oracle: a module output or the loss was non-finite (%s) by iteration "
                   "%d: the case needs a finite forward pass" % (name, describe(fwd),
                                                                 first["iteration"]))
    anomaly = run_trainer(ctx, name, "--anomaly").get("anomaly")
    return first, anomaly, result["trace"], result


def check_backward_first(events, oracle, pid):
    anomalies = [ev for ev in events if ev["event"] == "anomaly"]
    if not anomalies:
        raise Fail("no anomaly event; oracle: %s at step %d" % (oracle["node"], oracle["step"]))
    for ev in anomalies:
        check_anomaly_fields(ev, pid)
    first = check_first(anomalies, oracle)
    for f in ("node", "consumer", "producers", "input_nr"):
        if f not in first:
            raise Fail("backward anomaly lacks %s: %s" % (f, json.dumps(first)))
    diffs = ["%s %r, oracle %r" % (f, first[f], oracle[f]) for f in BACKWARD_FIELDS
             if not same(first[f], oracle[f])]
    diffs += ["%s %r, oracle %r" % (f, first[f], oracle[f]) for f in ("finite_min", "finite_max")
              if not close(first[f], oracle[f])]
    if first["producers"] != 1 or first["origin"] is not True or \
            first["inputs_finite"] is not True:
        diffs.append("producers %r origin %r inputs_finite %r, want 1, true, true" %
                     (first["producers"], first["origin"], first["inputs_finite"]))
    if diffs:
        raise Fail("first backward anomaly differs: " + "; ".join(diffs))
    per_iter = {}
    for ev in anomalies:
        if ev["phase"] == "backward":
            per_iter[ev["iteration"]] = per_iter.get(ev["iteration"], 0) + 1
    if any(n > 1 for n in per_iter.values()):
        raise Fail("more than one backward anomaly in an iteration: %s" % per_iter)
    return first


def case_backward(ctx, name, said=(), fixed=()):
    """Finite forward, non-finite gradient: the node, step, layer and counts of the node
    hooks, and (for NaN) the node and step torch.autograd.detect_anomaly names; the
    diagnosis' evidence says each of said, its fixes each of fixed."""
    oracle, anomaly, trace, result = backward_oracles(ctx, name)
    ctx.log("node hooks: %s %s at step %d (layer %r); detect_anomaly: %s" % (
        oracle["node"], oracle["tensor"], oracle["step"], oracle["layer"],
        anomaly and "%s output %d at step %d" % (anomaly["node"], anomaly["output"],
                                                 anomaly["step"])))
    if name in BACKWARD_NAN:
        if anomaly is None:
            raise Fail("detect_anomaly did not raise on %s" % name)
        want = (oracle["node"], oracle["tensor"], oracle["step"], oracle["iteration"])
        got = (anomaly["node"], "grad[%d]" % anomaly["output"], anomaly["step"],
               anomaly["iteration"])
        if want != got:
            raise Fail("the oracles disagree: node hooks %s, detect_anomaly %s" % (want, got))
    events = watch(ctx, name, trace, daemon_args=("--backward", "on"))
    if events[0].get("backward") != "on":
        raise Fail("attach says backward %r with --backward on" % events[0].get("backward"))
    first = check_backward_first(events, oracle, events[0]["pid"])
    if anomaly is not None and name in BACKWARD_NAN:
        if (first["node"], first["step"], first["tensor"]) != \
                (anomaly["node"], anomaly["step"], "grad[%d]" % anomaly["output"]):
            raise Fail("daemon %s %s step %d, detect_anomaly %s output %d step %d" % (
                first["node"], first["tensor"], first["step"], anomaly["node"],
                anomaly["output"], anomaly["step"]))
    diags = [ev for ev in events if ev["event"] == "diagnosis"]
    want_cause = {"backward_sqrt_inf": "division_by_zero"}.get(name, "invalid_domain")
    if len(diags) != 1 or diags[0]["cause"] != want_cause or diags[0]["layer"] != first["layer"]:
        raise Fail("diagnosis %s, want one with cause %s on layer %r" % (
            json.dumps(diags), want_cause, first["layer"]))
    wrong = ["evidence without %r" % w for w in said
             if not any(w in e for e in diags[0]["evidence"])]
    wrong += ["fixes without %r" % w for w in fixed if not any(w in f for f in diags[0]["fixes"])]
    if wrong:
        raise Fail("diagnosis: %s: %s" % ("; ".join(wrong), json.dumps(diags[0])))
    check_norms(events, result.get("grad_norms"), upto=first["step"])


def check_norms(events, norms, upto=None, stats=None):
    """stats.grad_norm.trend against the trainer's own norms: for every pass whose gradients
    were finite and that the daemon calls complete, each parameter's gradient measured and
    torch's value inside the daemon's [low, high]. A pass it says is not complete (a gradient
    dropped or unreadable: backward.grads_lost, backward.norm_skipped) is not compared. Each
    pass appears once, the incident's included."""
    if stats is None:
        stats = [ev for ev in events if ev["event"] == "stats"][-1]
    gn = stats.get("grad_norm")
    if not isinstance(gn, dict) or not gn.get("trend"):
        raise Fail("stats has no grad_norm trend: %s" % json.dumps(stats))
    want = {i: n for i, n in enumerate(norms or [])}
    iters = [t["iteration"] for t in gn["trend"]]
    if any(b <= a for a, b in zip(iters, iters[1:])):
        # a pass closed before its last gradients were read comes back as a second entry
        raise Fail("the trend's passes are not one an iteration, in order: %s" % iters)
    checked = 0
    for t in gn["trend"]:
        n = want.get(t["iteration"])
        w = n and n["norm"]
        if w is None or w != w or (upto is not None and t["step"] >= upto):
            continue
        if t.get("complete") is False:
            continue
        if t.get("complete") is not True or t.get("params") != n["params"]:
            raise Fail("pass %d: %r parameter gradients measured, torch has %d, complete %r" %
                       (t["iteration"], t.get("params"), n["params"], t.get("complete")))
        if t["nonfinite"] or t["total"] is None:
            raise Fail("pass %d: daemon counts non-finite gradients, torch's norm is %r" %
                       (t["iteration"], w))
        lo, hi = t["low"], t["high"]
        if not (lo * (1 - 1e-6) <= w <= hi * (1 + 1e-6)) or hi > lo * 1.25 * (1 + 1e-9):
            raise Fail("pass %d: torch's gradient norm %r outside the daemon's bounds [%r, %r]"
                       % (t["iteration"], w, lo, hi))
        if abs(t["total"] / w - 1) > 0.118:
            raise Fail("pass %d: norm %r, torch %r: more than 11.8%% off" %
                       (t["iteration"], t["total"], w))
        checked += 1
    if checked < 2:
        raise Fail("only %d passes of the trend could be compared: %s" % (checked, gn["trend"]))
    return checked


@environments(*HOST_AND_ROOTS)
def test_grad_explode(ctx):
    """Exploding gradients: stats lines show the norm growing, each pass within the stated
    bounds of torch's norm, before any parameter or output is non-finite. The daemon counts
    the histograms (the gradients' bytes come to it on the gradient data ring)."""
    events = grad_explode(ctx, ())
    offloaded = (last_stats(events).get("backward") or {}).get("offloaded")
    if not offloaded:
        raise Fail("backward.offloaded %r: no gradient was counted by the daemon" % offloaded)


@environments(*HOST_ONLY)
def test_grad_explode_in_bpf(ctx):
    """The same with --grad-ring-mb 0: every histogram counted in BPF, the same bounds."""
    events = grad_explode(ctx, ("--grad-ring-mb", "0"))
    offloaded = (last_stats(events).get("backward") or {}).get("offloaded")
    if offloaded != 0:
        raise Fail("--grad-ring-mb 0, yet backward.offloaded %r" % offloaded)


def grad_explode(ctx, extra):
    name = "grad_explode"
    result = run_trainer(ctx, name, "--oracle")
    norms, trace = result["grad_norms"], result["trace"]
    events = watch(ctx, name, trace, trainer_args=("--pace", "0.4"),
                   daemon_args=("--stats-interval", "1") + tuple(extra))
    if events[0].get("backward") != "norms":
        raise Fail("attach says backward %r by default, want norms" % events[0].get("backward"))
    anomalies = [ev for ev in events if ev["event"] == "anomaly"]
    if not anomalies:
        raise Fail("no anomaly once the values overflowed")
    first_seq = anomalies[0]["seq"]
    before = [ev for ev in events if ev["event"] == "stats" and ev["seq"] < first_seq and
              isinstance(ev.get("grad_norm"), dict)]
    if not before:
        raise Fail("no stats line with gradient norms before the first anomaly")
    last = before[-1]
    check_norms(events, norms, stats=last)
    totals = [t["total"] for t in last["grad_norm"]["trend"] if t["total"] is not None]
    rising = all(a < b for a, b in zip(totals[-4:], totals[-3:]))
    if len(totals) < 4 or not rising or totals[-1] < 20 * min(totals):
        raise Fail("the trend before the first anomaly does not show the growth: %s" % totals)
    if anomalies[0]["step"] <= last["grad_norm"]["step"]:
        raise Fail("the first anomaly (step %d) is not after the trend's last pass (step %d)"
                   % (anomalies[0]["step"], last["grad_norm"]["step"]))
    ctx.log("trend before the first anomaly (step %d): %s" % (
        anomalies[0]["step"], ", ".join("%.3g" % t for t in totals)))
    return events


@environments(*HOST_AND_ROOTS)
def test_backward_off(ctx):
    """--backward off: no backward probe, no backward events, no norms; the same training."""
    name = "backward_sqrt_zero"
    result = run_trainer(ctx, name, "--oracle")
    events = watch(ctx, name, result["trace"], daemon_args=("--backward", "off"))
    if events[0].get("backward") != "off":
        raise Fail("attach says backward %r with --backward off" % events[0].get("backward"))
    bad = [ev for ev in events if ev["event"] == "anomaly" and ev["phase"] == "backward"]
    stats = [ev for ev in events if ev["event"] == "stats"][-1]
    if bad or "grad_norm" in stats:
        raise Fail("backward output with --backward off")


@environments(*HOST_ONLY)
def test_backward_norms_partial(ctx):
    """--backward norms (the default) checks the parameters' gradients alone: the first
    non-finite one names the node that handed it to AccumulateGrad, which may only have
    passed the value on, so its origin and inputs_finite are null and the diagnosis says so,
    with --backward on among the fixes (it claimed "from finite ones", origin true)."""
    name = "backward_sqrt_zero"
    oracle, _, trace, _ = backward_oracles(ctx, name)
    events = watch(ctx, name, trace)
    if events[0].get("backward") != "norms":
        raise Fail("attach says backward %r by default" % events[0].get("backward"))
    bad = [ev for ev in events if ev["event"] == "anomaly"]
    if not bad or bad[0]["phase"] != "backward" or bad[0]["step"] != oracle["step"]:
        raise Fail("first anomaly %s, want a gradient at step %d" %
                   (bad and describe(bad[0]), oracle["step"]))
    first = bad[0]
    if first["consumer"] != "AccumulateGrad" or first["origin"] is not None or \
            first["inputs_finite"] is not None:
        raise Fail("first gradient: consumer %r origin %r inputs_finite %r, want "
                   "AccumulateGrad, null, null" %
                   (first["consumer"], first["origin"], first["inputs_finite"]))
    d = [ev for ev in events if ev["event"] == "diagnosis"]
    if len(d) != 1 or not any("checks the parameters' gradients alone" in e
                              for e in d[0]["evidence"]) or \
            not any("--backward on" in f for f in d[0]["fixes"]) or \
            any("from finite ones" in e for e in d[0]["evidence"]):
        raise Fail("diagnosis %s: want the partial check said" % json.dumps(d))
    ctx.log("node %s for a parameter (the hooks: %s); %s %.2f" % (
        first["node"], oracle["node"], d[0]["cause"], d[0]["confidence"]))


test_backward_sqrt_zero = case_test(case_backward, "backward_sqrt_zero", envs=EVERYWHERE)
test_backward_where_log = case_test(case_backward, "backward_where_log", envs=HOST_AND_ROOTS)
test_backward_sqrt_inf = case_test(case_backward, "backward_sqrt_inf", envs=HOST_AND_ROOTS)
test_backward_focal = case_test(case_backward, "backward_focal",
                                ("the derivative of pow at 0 is infinite",),
                                ("(1 - p).clamp_min(1e-6) ** gamma",), envs=("host", "forky"))


# backward_masked --variant: node, and the module that holds the op (layer, class; None:
# between two modules, outside any module call)
MASKED = {
    "sqrt-nested": ("SqrtBackward0", "blocks.1.gate", "MaskedGate"),
    "log-nested": ("LogBackward0", "blocks.1.gate", "MaskedGate"),
    "sqrt-top": ("SqrtBackward0", "", "MaskedTop"),
    "log-top": ("LogBackward0", "", "MaskedTop"),
    "sqrt-between": ("SqrtBackward0", None, None),
    "log-between": ("LogBackward0", None, None),
}


def case_masked(ctx, variant):
    """torch.where(z > 0, sqrt(z) or log(z), 0) made inside a module's forward (nested two deep,
    or the model's own) or between two modules: the daemon names detect_anomaly's node and
    step, the module whose forward holds the op (detect_anomaly's forward traceback, and the
    trainer's design) or null outside any, the op in words, and the masked-where pattern."""
    name, args = "backward_masked", ("--variant", variant)
    node, layer, module = MASKED[variant]
    anomaly = run_trainer(ctx, name, "--anomaly", *args).get("anomaly")
    if anomaly is None:
        raise Fail("detect_anomaly did not raise on %s %s" % (name, variant))
    ctx.log("detect_anomaly: %s output %d at step %d, made at %s in %s %s" % (
        anomaly["node"], anomaly["output"], anomaly["step"], anomaly["op_line"],
        anomaly["op_module"], anomaly["op_layers"]))
    want_layers = [] if layer is None else [layer]
    if (anomaly["node"], anomaly["op_module"], anomaly["op_layers"]) != (node, module,
                                                                         want_layers):
        raise Fail("detect_anomaly: %s made in %s %s; the trainer puts %s in %s %r" % (
            anomaly["node"], anomaly["op_module"], anomaly["op_layers"], node, module, layer))
    result = run_trainer(ctx, name, "--oracle", *args)
    fwd = result.get("oracle")
    if fwd is not None and fwd["iteration"] <= anomaly["iteration"]:
        raise Fail("the forward pass was not finite: %s" % describe(fwd))
    events = watch(ctx, name, result["trace"], trainer_args=args,
                   daemon_args=("--backward", "on"))
    if events[0].get("backward_layer") != "made":
        raise Fail("attach says backward_layer %r: the autograd counter was not located" %
                   events[0].get("backward_layer"))
    bwd = [ev for ev in events if ev["event"] == "anomaly" and ev["phase"] == "backward"]
    if not bwd:
        raise Fail("no backward anomaly; detect_anomaly: %s at step %d" % (anomaly["node"],
                                                                          anomaly["step"]))
    first = bwd[0]
    check_anomaly_fields(first, events[0]["pid"])
    got = {f: first.get(f) for f in ("node", "step", "iteration", "tensor", "layer", "module",
                                     "op", "upstream")}
    want = dict(node=anomaly["node"], step=anomaly["step"], iteration=anomaly["iteration"],
                tensor="grad[%d]" % anomaly["output"], layer=layer, module=module,
                op=node[:-len("Backward0")].lower(), upstream="WhereBackward0")
    if got != want:
        raise Fail("first backward anomaly %s, want %s" % (json.dumps(got, sort_keys=True),
                                                           json.dumps(want, sort_keys=True)))
    diags = [ev for ev in events if ev["event"] == "diagnosis"]
    if len(diags) != 1 or diags[0]["cause"] != "invalid_domain" or \
            diags[0]["layer"] != layer or \
            not any("WhereBackward0" in e for e in diags[0]["evidence"]) or \
            not any("before the op" in f for f in diags[0]["fixes"]):
        raise Fail("diagnosis %s: want invalid_domain on layer %r naming the masked "
                   "torch.where" % (json.dumps(diags), layer))


for _v in MASKED:
    globals()["test_backward_masked_" + _v.replace("-", "_")] = case_test(
        case_masked, _v, envs=EVERYWHERE)
