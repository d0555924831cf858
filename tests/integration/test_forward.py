"""Forward pass against the forward-hook oracle.

Each faulty trainer (tests/trainers/) runs twice: once with --oracle (forward hooks on every
module say which output went non-finite first), once with --wait under `nanwatchd --pid`. The
daemon's stream must name the same first anomaly, the same anomalies in that iteration, and
detach by itself when the trainer exits, and the trainer's trace (losses, final parameters)
must be the same in both runs. A first non-finite output that is a view with holes or
overlaps (noncontig, strided) is named with the counts the hooks' isnan/isinf give that view.
"""
import json
import math

from nwharness import Fail, oracle_of, run_trainer
from nwchecks import (EVERYWHERE, HOST_AND_ROOTS, HOST_ONLY, case_test, check_anomalies,
                      check_anomaly_fields, close, describe, environments, last_stats, same,
                      watch)


def check_origin_and_trend(events, oracle, trace):
    """The diagnosis' origin_step is the trainer's ground truth (where the trainer defines one),
    and its loss_trend holds exactly the losses the trainer computed, at their steps."""
    d = [ev for ev in events if ev["event"] == "diagnosis"][0]
    if oracle.get("origin_step") is not None and d.get("origin_step") != oracle["origin_step"]:
        raise Fail("diagnosis origin_step %r, the trainer's ground truth %r (%s)" %
                   (d.get("origin_step"), oracle["origin_step"], d["evidence"]))
    trend = d.get("loss_trend")
    if not isinstance(trend, list) or not trend:
        raise Fail("diagnosis has no loss_trend: %s" % json.dumps(d))
    losses = [float.fromhex(v) for v in trace["losses"]]
    if trend[-1]["iteration"] != d["iteration"] and oracle.get("phase") == "loss":
        raise Fail("loss_trend ends at iteration %d, the incident is at %d" %
                   (trend[-1]["iteration"], d["iteration"]))
    for t in trend:
        it = t["iteration"]
        if not 0 <= it < len(losses) or it > d["iteration"]:
            raise Fail("loss_trend iteration %r outside the run (%d losses, incident at %d)" %
                       (it, len(losses), d["iteration"]))
        want = losses[it] if math.isfinite(losses[it]) else None
        if t["loss"] != want or t["step"] != trace["loss_steps"][it]:
            raise Fail("loss_trend at iteration %d: loss %r step %r, the trainer's %r step %r" %
                       (it, t["loss"], t["step"], want, trace["loss_steps"][it]))


def check_warnings(events, oracle):
    """Warnings are well formed; a run-up (lr_too_high) is warned of before its first anomaly."""
    warnings = [ev for ev in events if ev["event"] == "warning"]
    for w in warnings:
        if w.get("reason") not in ("growth", "near_range") or \
                not (isinstance(w.get("max_abs"), (int, float)) and w["max_abs"] > 0) or \
                not isinstance(w.get("message"), str) or type(w.get("step")) is not int:
            raise Fail("malformed warning: %s" % json.dumps(w))
    if oracle["expected_cause"] == "lr_too_high":
        early = [w for w in warnings if w["iteration"] < oracle["iteration"]]
        if not early:
            raise Fail("no warning before the first anomaly (iteration %d) of a run-up; "
                       "warnings: %s" % (oracle["iteration"], [w["message"] for w in warnings]))


def case_trainer(ctx, name):
    oracle, trace = oracle_of(ctx, name)
    if oracle is None:
        raise Fail("%s --oracle found no anomaly (the trainer lost its fault)" % name)
    ctx.log("oracle: %s step %d iteration %d" % (describe(oracle), oracle["step"],
                                                 oracle["iteration"]))
    events = watch(ctx, name, trace)
    check_anomalies(events, oracle, events[0]["pid"])
    check_origin_and_trend(events, oracle, trace)
    check_warnings(events, oracle)
    if name in ("many_modules", "late_branch"):
        # BPF may have had the parameters' list, or the daemon read them late: the verdict
        # above had to be the oracle's either way; say which path this run took
        first = [ev for ev in events if ev["event"] == "anomaly"][0]
        stats = [ev for ev in events if ev["event"] == "stats"][-1]
        ctx.log("first anomaly's parameters checked %s; %d late checks; %d module records "
                "sent again" % ("late by the daemon" if first["params_late"] else "in BPF",
                                stats["params_late"], stats["lost_records"]["module"]))
    if name == "inplace_parent":
        stats = [ev for ev in events if ev["event"] == "stats"][-1]
        avoided = (stats.get("rescans_avoided") or {}).get("tensors")
        if not isinstance(avoided, int) or avoided < 1:
            raise Fail("stats.rescans_avoided.tensors %r: the parent's unchanged output was "
                       "scanned again" % avoided)
    if name == "views":
        # the transposed view is dense; x[:, ::2] has holes: scanned, its span all finite
        stats = last_stats(events)
        if stats["views"]["tensors"] < 1 or stats["skipped"]["noncontiguous"] != 0:
            raise Fail("stats.views %r, skipped.noncontiguous %r: the strided view was not "
                       "scanned" % (stats["views"], stats["skipped"]["noncontiguous"]))


def case_view(ctx, name, *args):
    """A trainer whose first non-finite output is a view with holes or overlaps (a transposed
    slice, a chomped convolution, expand, unfold, a half of a tensor whose other half holds
    the NaN: not named for it, a first token read run by run at once, the NaN of another token
    not counted, overlapping patches of log1p by two unfolds): named first with the counts
    and finite range of the hooks' scan of the view itself, each of that iteration's outputs
    with the hooks' verdicts, the trainer's cause; the view scanned (stats.views), and read
    run by run (views.exact), none skipped."""
    oracle, trace = oracle_of(ctx, name, *args)
    if oracle is None or oracle["contiguous"]:
        raise Fail("%s %s --oracle: %s, want a view first (the trainer lost its view or its "
                   "fault)" % (name, " ".join(args), oracle and describe(oracle)))
    events = watch(ctx, name, trace, trainer_args=args)
    check_anomalies(events, oracle, events[0]["pid"], verdicts=True)
    first = [ev for ev in events if ev["event"] == "anomaly" and ev["first"]][0]
    stats = last_stats(events)
    if stats["views"]["tensors"] < 1 or stats["views"]["exact"] < 1 or \
            stats["skipped"]["noncontiguous"] != 0:
        raise Fail("stats.views %r, skipped.noncontiguous %r: want views scanned, one read "
                   "run by run, none skipped" % (stats["views"],
                                                 stats["skipped"]["noncontiguous"]))
    ctx.log("first %s: nan %d posinf %d neginf %d; views %r" % (
        describe(first), first["nan"], first["posinf"], first["neginf"], stats["views"]))


test_noncontig = case_test(case_view, "noncontig", envs=HOST_AND_ROOTS)
test_strided_chomp = case_test(case_view, "strided", "--variant", "chomp", envs=HOST_AND_ROOTS)
test_strided_expand = case_test(case_view, "strided", "--variant", "expand", envs=HOST_ONLY)
test_strided_unfold = case_test(case_view, "strided", "--variant", "unfold", envs=HOST_ONLY)
test_strided_halves = case_test(case_view, "strided", "--variant", "halves", envs=HOST_ONLY)
test_strided_cls = case_test(case_view, "strided", "--variant", "cls", envs=HOST_ONLY)
test_strided_patches = case_test(case_view, "strided", "--variant", "patches", envs=HOST_ONLY)


@environments(*EVERYWHERE)
def test_healthy(ctx):
    oracle, trace = oracle_of(ctx, "healthy")
    if oracle is not None:
        raise Fail("healthy --oracle found an anomaly: %s" % describe(oracle))
    events = watch(ctx, "healthy", trace)
    n = sum(1 for ev in events if ev["event"] in ("anomaly", "diagnosis", "warning"))
    if n:
        raise Fail("%d anomaly, diagnosis or warning events on a healthy run" % n)


test_trainer_nan_input = case_test(case_trainer, "nan_input", envs=EVERYWHERE)
test_trainer_div_zero = case_test(case_trainer, "div_zero", envs=EVERYWHERE)
test_trainer_rnn_tuple = case_test(case_trainer, "rnn_tuple", envs=EVERYWHERE)
test_trainer_mha_tuple = case_test(case_trainer, "mha_tuple", envs=EVERYWHERE)
test_trainer_fp16_overflow = case_test(case_trainer, "fp16_overflow", envs=EVERYWHERE)
test_trainer_demo = case_test(case_trainer, "demo", envs=EVERYWHERE)
test_trainer_views = case_test(case_trainer, "views", envs=EVERYWHERE)
test_trainer_loss_log_zero = case_test(case_trainer, "loss_log_zero", envs=EVERYWHERE)
test_trainer_exp_overflow = case_test(case_trainer, "exp_overflow", envs=EVERYWHERE)
test_trainer_invalid_domain = case_test(case_trainer, "invalid_domain", envs=EVERYWHERE)
test_trainer_nonfinite_params = case_test(case_trainer, "nonfinite_params", envs=EVERYWHERE)


@environments(*HOST_ONLY)
def test_embedding_rows(ctx):
    """nonfinite_params --variant c: an Embedding's rows written NaN by Adam with eps 0 while
    no batch looked them up; the first anomaly is the Embedding, its parameters non-finite.
    The diagnosis names no origin step (it named the last update, with the learning rate's
    fixes) and says the eps."""
    args = ("--variant", "c")
    oracle, trace = oracle_of(ctx, "nonfinite_params", *args)
    if oracle is None or oracle["module"] != "Embedding" or oracle["params_finite"] is not False:
        raise Fail("--oracle: %s, want the Embedding first with non-finite parameters" %
                   (oracle and describe(oracle)))
    events = watch(ctx, "nonfinite_params", trace, trainer_args=args)
    check_anomalies(events, oracle, events[0]["pid"])
    d = [ev for ev in events if ev["event"] == "diagnosis"][0]
    if d["origin_step"] is not None or \
            not any("reads only the rows its indices select" in e for e in d["evidence"]) or \
            not any("eps" in f for f in d["fixes"]):
        raise Fail("diagnosis: origin_step %r, evidence %s, fixes %s" %
                   (d["origin_step"], d["evidence"], d["fixes"]))
    ctx.log("first %s: %s %.2f" % (describe(oracle), d["cause"], d["confidence"]))


def case_update(ctx, variant, said, fixed, unsaid=(), unfixed=()):
    """nonfinite_params --variant VARIANT: an update that writes NaN weights from gradients no
    clipping would change. The first anomaly is the hooks'; the diagnosis names that update
    (origin_step), and its evidence and fixes say each of said and fixed, none of unsaid and
    unfixed ("%(step)d" in a phrase: the origin step)."""
    args = ("--variant", variant)
    oracle, trace = oracle_of(ctx, "nonfinite_params", *args)
    if oracle is None or oracle["params_finite"] is not False:
        raise Fail("--oracle: %s, want a layer first with non-finite parameters" %
                   (oracle and describe(oracle)))
    events = watch(ctx, "nonfinite_params", trace, trainer_args=args)
    check_anomalies(events, oracle, events[0]["pid"])
    d = [ev for ev in events if ev["event"] == "diagnosis"][0]
    ev, fx = d["evidence"], d["fixes"]

    def found(phrase, lines):
        return any(phrase % {"step": oracle["origin_step"]} in line for line in lines)
    wrong = ["evidence without %r" % p for p in said if not found(p, ev)]
    wrong += ["fixes without %r" % p for p in fixed if not found(p, fx)]
    wrong += ["evidence with %r" % p for p in unsaid if found(p, ev)]
    wrong += ["fixes with %r" % p for p in unfixed if found(p, fx)]
    if d["cause"] != "nonfinite_params" or d["origin_step"] != oracle["origin_step"] or wrong:
        raise Fail("diagnosis %s: origin_step %r (want %r), %s; evidence %s, fixes %s" %
                   (d["cause"], d["origin_step"], oracle["origin_step"], "; ".join(wrong),
                    d["evidence"], d["fixes"]))
    ctx.log("first %s: %s %.2f" % (describe(oracle), d["cause"], d["confidence"]))


# d: Adam written by hand, its step count back to 0 at the fault step: the bias correction
# divides the moments by 0 and the weights become NaN from ordinary gradients: the optimizer's
# arithmetic, not clipping.
test_hand_optimizer = case_test(case_update, "d", ("only by the update's own arithmetic",),
                                ("bias correction 1 - beta**t is 0 at t = 0",), (),
                                ("clip_grad_norm_",), envs=HOST_ONLY)
# e: SGD with the gradients scaled by hand by max_norm / total_norm, at a step whose loss is
# weighted by 0: every gradient is 0, the scale Inf, the weights NaN; the normalisation is
# guarded, the gradients are not called too large.
test_normalised_gradient = case_test(case_update, "e", ("every gradient of step %(step)d was 0",),
                                     ("total_norm.clamp_min(1e-6)",), ("too large",),
                                     envs=HOST_ONLY)


@environments("forky")
def test_compiled(ctx):
    """A model under torch.compile (backend aot_eager; torch 2): its layers run inside one fx
    GraphModule given their parameters as a list its boxed call empties (torch 2.14; torch
    2.6 calls no GraphModule as a module, and names the compiled model, _orig_mod, first). The
    first anomaly is the GraphModule at the fault step, its inputs not claimed finite (the
    list was emptied before the return: nothing was there to check), and the diagnosis says
    the model runs compiled and how to name the layer."""
    trace = run_trainer(ctx, "compiled")["trace"]
    events = watch(ctx, "compiled", trace)
    bad = [ev for ev in events if ev["event"] == "anomaly"]
    graph = bad and bad[0]["module"] == "GraphModule"
    if not bad or bad[0]["step"] != 4 or not (graph or bad[0]["layer"] == "_orig_mod") or \
            (graph and (bad[0]["inputs_finite"] is not None or bad[0]["origin"] is True)):
        raise Fail("first anomaly %s, want the GraphModule (its inputs not known finite, no "
                   "origin) or _orig_mod at step 4" % (bad and json.dumps(bad[0])))
    d = [ev for ev in events if ev["event"] == "diagnosis"][0]
    if not any("the model runs compiled (torch.compile)" in e for e in d["evidence"]) or \
            not any("TORCHDYNAMO_DISABLE=1" in f for f in d["fixes"]):
        raise Fail("diagnosis: evidence %s, fixes %s" % (d["evidence"], d["fixes"]))
test_trainer_lr_too_high = case_test(case_trainer, "lr_too_high", envs=EVERYWHERE)
test_trainer_inplace_parent = case_test(case_trainer, "inplace_parent", envs=EVERYWHERE)
test_trainer_many_modules = case_test(case_trainer, "many_modules", envs=EVERYWHERE)
test_trainer_late_branch = case_test(case_trainer, "late_branch", envs=EVERYWHERE)


def watch_first(ctx, name, trace, trainer_args=()):
    """The trainer under the daemon: its stream, its anomaly events (each well formed), the
    first of them or None."""
    events = watch(ctx, name, trace, trainer_args=trainer_args)
    anomalies = [ev for ev in events if ev["event"] == "anomaly"]
    for ev in anomalies:
        check_anomaly_fields(ev, events[0]["pid"])
    return events, anomalies, anomalies[0] if anomalies else None


@environments(*HOST_AND_ROOTS)
def test_scan_positions(ctx):
    """tests/trainers/scan_positions.py: one non-finite value at each edge of the scan (chunks,
    blocks, loop groups, a last word's tail; float32, float16, bfloat16, float64), each plant
    after a bad one finite where the bad one's value lay in the scanner's buffer. Every
    anomaly of the fault's iteration with the oracle's counts and finite range, in its order,
    no finite plant named."""
    oracle, trace = oracle_of(ctx, "scan_positions")
    if oracle is None or oracle["layer"] != "plants.0":
        raise Fail("scan_positions --oracle: %s, want plants.0 first" %
                   (oracle and describe(oracle)))
    events, anomalies, first = watch_first(ctx, "scan_positions", trace)
    if first is None or first["first"] is not True or first["iteration"] != oracle["iteration"]:
        raise Fail("first anomaly %s, oracle %s at iteration %d" % (
            first and describe(first), describe(oracle), oracle["iteration"]))
    got = [ev for ev in anomalies if ev["phase"] == "forward" and
           ev["iteration"] == first["iteration"]]
    want = oracle["first_iteration"]
    if [ev["layer"] for ev in got] != [a["layer"] for a in want]:
        raise Fail("anomalies of iteration %d differ:\n    daemon: %s\n    oracle: %s" % (
            first["iteration"], [ev["layer"] for ev in got], [a["layer"] for a in want]))
    fields = ("dtype", "numel", "nan", "posinf", "neginf")
    diffs = ["%s %s %r, oracle %r" % (g["layer"], f, g[f], w[f]) for g, w in zip(got, want)
             for f in fields if not same(g[f], w[f])]
    diffs += ["%s %s %r, oracle %r" % (g["layer"], f, g[f], w[f]) for g, w in zip(got, want)
              for f in ("finite_min", "finite_max") if not close(g[f], w[f])]
    if diffs:
        raise Fail("counts differ: " + "; ".join(diffs))
    ctx.log("%d anomalies of iteration %d, each with the oracle's counts and range" %
            (len(got), first["iteration"]))


@environments(*HOST_AND_ROOTS)
def test_complex_spectral(ctx):
    """tests/trainers/complex_spectral.py: a spectral layer's complex output goes non-finite
    first. The daemon does not read complex tensors: it names the real layer after it first,
    as the hooks do, with their counts, and never says that layer's complex input was finite
    (nor calls it the origin); the complex outputs are counted in stats.skipped.dtype."""
    oracle, trace = oracle_of(ctx, "complex_spectral")
    if oracle is None or oracle["layer"] != "back" or oracle["inputs_finite"] is not False:
        raise Fail("complex_spectral --oracle: %s, want back first, its input not finite" %
                   (oracle and describe(oracle)))
    events, anomalies, first = watch_first(ctx, "complex_spectral", trace)
    if first is None or first["first"] is not True:
        raise Fail("no first anomaly; oracle: %s" % describe(oracle))
    exact = ("step", "iteration", "layer", "module", "tensor", "dtype", "shape", "numel", "nan",
             "posinf", "neginf")
    diffs = ["%s %r, oracle %r" % (f, first[f], oracle[f]) for f in exact
             if not same(first[f], oracle[f])]
    if first["inputs_finite"] is not None or first["origin"] is True:
        diffs.append("inputs_finite %r, origin %r: its input is complex, not read" % (
            first["inputs_finite"], first["origin"]))
    if diffs:
        raise Fail("first anomaly differs: " + "; ".join(diffs))
    got = [ev["layer"] for ev in anomalies if ev["phase"] == "forward" and
           ev["iteration"] == first["iteration"]]
    want = [a["layer"] for a in oracle["first_iteration"]]
    if got != want:
        raise Fail("anomalies of iteration %d: daemon %s, oracle %s" % (first["iteration"], got,
                                                                        want))
    skipped = last_stats(events)["skipped"].get("dtype")
    if not isinstance(skipped, int) or skipped < 1:
        raise Fail("stats.skipped.dtype %r: the complex outputs were not counted" % skipped)
    ctx.log("first %s, inputs_finite %r; skipped.dtype %d" % (describe(first),
                                                              first["inputs_finite"], skipped))


def case_many_args(ctx, variant):
    """tests/trainers/many_args.py: mix gets nine positional arguments or a list of nine, the
    one the daemon does not read turning NaN. mix is named first with the hooks' counts, its
    inputs never said finite, never the origin."""
    oracle, trace = oracle_of(ctx, "many_args", "--variant", variant)
    if oracle is None or oracle["layer"] != "mix" or oracle["inputs_finite"] is not False:
        raise Fail("many_args --variant %s --oracle: %s, want mix first, its inputs not finite"
                   % (variant, oracle and describe(oracle)))
    events, anomalies, first = watch_first(ctx, "many_args", trace, ("--variant", variant))
    if first is None or first["first"] is not True:
        raise Fail("no first anomaly; oracle: %s" % describe(oracle))
    diffs = ["%s %r, oracle %r" % (f, first[f], oracle[f])
             for f in ("step", "iteration", "layer", "module", "tensor", "nan", "posinf",
                       "neginf") if not same(first[f], oracle[f])]
    if first["inputs_finite"] is not None or first["origin"] is True:
        diffs.append("inputs_finite %r, origin %r: an argument was not read" % (
            first["inputs_finite"], first["origin"]))
    if diffs:
        raise Fail("first anomaly differs (%s): %s" % (variant, "; ".join(diffs)))


def case_dict_output(ctx, variant):
    """tests/trainers/dict_output.py: the model returns a dict (plain, or of an OrderedDict
    subclass, as a ModelOutput is), a namedtuple or a dataclass, its logits divided by a
    temperature that reaches zero; the loss module takes what it returned. The model is named
    first, output['logits'] (output[1], output.logits), an origin, with the hooks' counts, then
    every anomaly of that iteration in order with the hooks' verdicts (the loss modules'
    input, the dict, namedtuple or dataclass, read: not finite), and the diagnosis the
    trainer's."""
    oracle, trace = oracle_of(ctx, "dict_output", "--variant", variant)
    want = {"named": "output[1]", "fields": "output.logits"}.get(variant, "output['logits']")
    if oracle is None or oracle["tensor"] != want or oracle["origin"] is not True:
        raise Fail("dict_output --variant %s --oracle: %s, want the model's %s first, an "
                   "origin" % (variant, oracle and describe(oracle), want))
    events = watch(ctx, "dict_output", trace, trainer_args=("--variant", variant))
    check_anomalies(events, oracle, events[0]["pid"], verdicts=True)
    ctx.log("first %s" % describe(oracle))


def case_flat_model(ctx, variant):
    """tests/trainers/flat_model.py: a model with no child modules (one nn.Linear; a module
    holding its own parameters and calling functions), so no call of a child names it the
    model: the model is the first outermost module with parameters of its own. The first
    anomaly at the step and iteration the hooks saw, its iteration's anomalies with their
    verdicts, one event in each later iteration, and the diagnosis the trainer's."""
    oracle, trace = oracle_of(ctx, "flat_model", "--variant", variant)
    if oracle is None or oracle["step"] != 4 or oracle["iteration"] != 4:
        raise Fail("flat_model --variant %s --oracle: %s, want step 4, iteration 4" %
                   (variant, oracle and (describe(oracle), oracle["step"], oracle["iteration"])))
    events = watch(ctx, "flat_model", trace, trainer_args=("--variant", variant))
    check_anomalies(events, oracle, events[0]["pid"], verdicts=True)
    ctx.log("first %s at step %d" % (describe(oracle), oracle["step"]))


def case_checkpointed(ctx):
    """tests/trainers/checkpointed.py: blocks under a reentrant torch.utils.checkpoint, whose
    backward pass recomputes each block and differentiates it in a backward pass of its own.
    The first anomaly and its iteration as the hooks saw them, the recomputed calls included;
    one loss anomaly per iteration at most (a nested pass starts from no loss); the nested
    passes counted (three a step), and the steps and iterations the trainer made."""
    oracle, trace = oracle_of(ctx, "checkpointed")
    if oracle is None or oracle["layer"] != "blocks.0" or oracle["origin"] is not True:
        raise Fail("checkpointed --oracle: %s, want blocks.0 first, an origin" %
                   (oracle and describe(oracle)))
    events = watch(ctx, "checkpointed", trace)
    check_anomalies(events, oracle, events[0]["pid"], verdicts=True)
    losses = [ev["iteration"] for ev in events
              if ev["event"] == "anomaly" and ev["phase"] == "loss"]
    if len(losses) != len(set(losses)):
        raise Fail("loss anomalies in iterations %s: a nested backward pass was taken for a loss"
                   % losses)
    stats = last_stats(events)
    steps = len(trace["losses"])
    want = {"nested_backward": 3 * steps, "steps": steps, "iterations": steps}
    diffs = ["%s %r, want %r" % (k, stats[k], v) for k, v in want.items() if stats[k] != v]
    if diffs:
        raise Fail("stats: " + "; ".join(diffs))
    ctx.log("first %s; %d nested backward passes" % (describe(oracle), stats["nested_backward"]))


test_checkpointed = case_test(case_checkpointed, envs=HOST_AND_ROOTS)


def case_between_calls(ctx, variant, first, maker, names, fixed=(), said=()):
    """tests/trainers/between_calls.py: a module's own code makes the value between its calls
    to its children (a VAE's exp of its log-variance, an attention layer's masked softmax),
    so the first non-finite output is a child's whose input no module returned. The first
    anomaly and the iteration's verdicts are the hooks'; the diagnosis names the enclosing
    module as the maker, the ops its code names (names; None where it names none a rule reads:
    a "/" is no name), and the trainer's cause, with each of fixed among its fixes (a critic's
    atanh of a stored action rounded to 1: the [-1, 1] clamp) and each of said among its
    evidence (a mean over neighbours by hand divided by a count of 0, an inverse distance of
    coinciding atoms: what the code names, index_add or cdist, tells the division)."""
    oracle, trace = oracle_of(ctx, "between_calls", "--variant", variant)
    made = [a for a in (oracle or {}).get("first_iteration", []) if a["origin"]]
    if oracle is None or oracle["layer"] != first or oracle["inputs_finite"] is not False or \
            not made or made[0]["layer"] != maker:
        raise Fail("between_calls --variant %s --oracle: %s, want %r first, its input not "
                   "finite, and %r the first origin" % (variant, oracle and describe(oracle),
                                                        first, maker))
    events = watch(ctx, "between_calls", trace, trainer_args=("--variant", variant))
    check_anomalies(events, oracle, events[0]["pid"], verdicts=True)
    d = [ev for ev in events if ev["event"] == "diagnosis"][0]
    said = ["made them between its calls to its children"] + list(said)
    said += ["names: " + names] if names is not None else []
    wrong = ["evidence without %r" % w for w in said if not any(w in e for e in d["evidence"])]
    wrong += ["fixes without %r" % w for w in fixed if not any(w in f for f in d["fixes"])]
    if wrong:
        raise Fail("diagnosis %s: %s; evidence %s" % (d["cause"], "; ".join(wrong),
                                                      d["evidence"]))
    ctx.log("first %s, made by %r: %s %.2f" % (describe(oracle), maker, d["cause"],
                                                d["confidence"]))


def case_loss_made(ctx, trainer, variant, said, fixed=()):
    """A loss outside any module is the first non-finite tensor, every module output finite;
    the diagnosis reads the ops autograd recorded from the loss down (breadth first) and
    gives the trainer's cause, with each of said among the evidence and each of fixed among
    the fixes.

    loss_targets.py, a regression loss: a NaN target (smooth_l1_loss passed by the walk), a
    sum divided by a mask's sum of 0, or a square that overflowed (no log, division or exp).
    The first two were loss_log_zero, a log of 0 the loss does not take. And a KL divergence
    by hand against targets that come one-hot, t * (t.log() - logp): 0 * log 0, loss_log_zero
    with log_softmax's fixes (the walk stopped at the mul, whose first operand needs no
    gradient), now said as the KL's with torch.xlogy.
    beta_policy.py, a Beta policy's log_prob of an action clipped to 1: log(1 - a) of what
    needs no gradient, said as a distribution's support by lgamma among the loss's ops (the
    fixes were log_softmax's).
    mixture_nll.py, a mixture density's negative log-likelihood by hand: every density's
    exp 0 for a glitched target, log of their sum 0 (division_by_zero before: the loss also
    divides by sigma, an exp).
    loss_exp.py, an exp the loss takes: a softmax by hand whose exps overflow (Inf/Inf), a
    scale that is exp of a log-scale underflowing to 0 (divided by, logged), a Poisson rate
    exp(log_rate) overflowing; all three were loss_log_zero (the walk stopped at the first
    node of two inputs, before the exp). The same rate logged, rate - y * log(rate), NaN: its
    overflow (Inf - Inf), where it was the log of an exp that underflowed. And a cross-entropy
    by hand whose 1 - sigmoid is 0
    (loss_log_zero before too, with log_softmax's fixes and no word of the sigmoid).
    loss_domain.py, an op with a domain or a divisor the loss computed: a correlation by hand
    over a constant prediction (0/0), acos of a cosine past 1, atanh of a norm clamped to 1;
    all three were loss_log_zero with log_softmax's fixes, a log the loss does not take."""
    args = ("--variant", variant) if variant else ()
    oracle, trace = oracle_of(ctx, trainer, *args)
    if oracle is None or oracle["phase"] != "loss":
        raise Fail("%s %s --oracle: %s, want the loss first" %
                   (trainer, " ".join(args), oracle and describe(oracle)))
    events = watch(ctx, trainer, trace, trainer_args=args)
    check_anomalies(events, oracle, events[0]["pid"])
    d = [ev for ev in events if ev["event"] == "diagnosis"][0]
    wrong = ["evidence without %r" % w for w in said if not any(w in e for e in d["evidence"])]
    wrong += ["fixes without %r" % w for w in fixed if not any(w in f for f in d["fixes"])]
    if wrong:
        raise Fail("diagnosis %s: %s; evidence %s" % (d["cause"], "; ".join(wrong),
                                                      d["evidence"]))
    ctx.log("the loss first at step %d: %s %.2f" % (oracle["step"], d["cause"],
                                                   d["confidence"]))


def case_origin_cause(ctx, name, layer, said=(), unsaid=(), fixed=(), args=()):
    """A fault whose cause the diagnosis must read from the call (its docstring says it): the
    oracle's first anomaly is the layer, an origin; the daemon names it with the hooks' counts,
    then every anomaly of that iteration with their verdicts, and one diagnosis with the
    trainer's cause, whose evidence says each of said and none of unsaid, and whose fixes say
    each of fixed.

    teacher_temp: an EMA teacher under no_grad sharpens its logits by a softmax over a division
    by a temperature buffer annealed to 0 (NaN only, no autograd node): the zero scalar buffer.
    batch_of_one: a batch standardised by hand, of one sample: the std over a dimension of one
    value is NaN (n - 1 = 0) whatever epsilon follows: correction=0, not an epsilon; --variant
    groups, a group of one taken by index from a batch of eight: the epsilon after the std.
    entropy_bonus: -(p * log p) of a softmax over logits so far apart that some p is exactly 0:
    0 * log(0), not a log of negatives (the negatives are the logits').
    arcface_margin: acos of a cosine made as a dot product over norms, a collapsed embedding's
    rounding past 1: the domain [-1, 1], not the negatives a cosine may hold.
    token_pool: the log of a length of -1 in a pooling layer that also takes the token ids
    (int64, a sequence of padding alone: no mask) or, --variant keep, a bool mask of the
    positions to keep (rows all true where every token is valid, and no softmax: no fully
    masked attention).
    weight_norm: a row of weight_v pruned to zero under nn.utils.weight_norm: the weight's
    normalization divides it by its norm, 0 (the layer's inputs and parameters all finite, a
    zero row of a parameter no sign alone); --variant param, torch 2's parametrization: the
    row is the _WeightNorm module's input.
    ignored_targets: a token-level cross-entropy over a batch whose labels are all -100
    (ignore_index): its mean over no counted target is 0/0, not a log's domain (the logits
    have negatives); --variant module, an nn.CrossEntropyLoss held by the loss module;
    --variant loop, F.cross_entropy in a plain function divided by the accumulation steps:
    the loss itself is the first anomaly, and nll_loss, under the division, made it.
    tanh_squash: a tanh-squashed policy's log(1 - tanh(u)^2) with u past 9: tanh rounds to 1,
    log(0); the observation is above exp's threshold, but the one exp takes a clamp's output
    (the walk's edges tell), so no exp overflow.
    supcon: a supervised contrastive loss whose anchor of a class seen once has no positive:
    0/0, not the log's domain (it takes a log of a sum of exps: never negative).
    ctc_short: utterances shorter than their targets after a strided convolution: CTC's
    -log(0), +Inf, with the input and target lengths, not the mean's division; --variant
    loop, F.ctc_loss in a plain function: the loss itself.
    empty_selection: a mean of what a mask selected, of nothing: a class-balanced BCE in a
    plain function (--variant loop, the loss itself) or a prototype layer's mean of the
    positives (--variant module): 0/0, not a log of BCE's.
    recurrent_growth: a relu RNN of gain 1.3 over one long document overflows inside its
    call: finite values at the range beside the Inf, relu repeated in the walk, no division.
    gcn_isolated: a graph convolution's D^-1/2 of a node with no edge: Inf times its row's 0,
    the pow named from the code (the adjacency needs no gradient).
    empty_pool: a log-sum-exp pooling by hand over a document with no valid token (masked_fill
    and max over a row all -inf: -Inf - (-Inf), no softmax), and (--variant empty) a mean over
    tokens filtered to nothing (an input that holds no values, captured as such).
    underflow_div: Sinkhorn iterations whose kernel exp(-C / eps) underflows to 0 for points
    far apart (a division by a matrix product, not the squared distance's pow), and
    (--variant pool) a pooling whose softplus weights of one document are all 0 (a division by
    their sum).
    flow_logdet: a flow layer's torch.logdet of a matrix whose determinant turned negative:
    the log of a determinant (slogdet, then where), not the input's negatives.
    hyperbolic: a Poincare distance's acosh below 1 for a point off the unit ball: acosh's
    domain [1, Inf), not a variance by hand.
    poly_features: x ** 4 of a reading of 3.2e10 in a call whose code names no exp: the power
    that overflows, unknown, not exp_overflow.
    learned_scale: a CLIP-style learned temperature, never clamped, past exp's threshold:
    the parameter's value, and the fix bounds it (not a row maximum: no softmax by hand).
    mixture_nll: a mixture density's likelihood in a loss module (--variant module), or an
    HMM's forward algorithm as the model (--variant hmm), summed in probability space: every
    term underflows, log(0); the fixes work in log space (logsumexp, log-alphas), not
    log_softmax (no softmax is logged).
    logit_target: a distillation loss module's torch.logit of a teacher's probabilities that
    round to exactly 1: log(1 / 0), the input reaching 1 (the logit's node is none: the code
    names it)."""
    oracle, trace = oracle_of(ctx, name, *args)
    if oracle is None or oracle["layer"] != layer or oracle["origin"] is not True:
        raise Fail("%s --oracle: %s, want %r first, an origin" %
                   (name, oracle and describe(oracle), layer))
    events = watch(ctx, name, trace, trainer_args=args)
    check_anomalies(events, oracle, events[0]["pid"], verdicts=True)
    d = [ev for ev in events if ev["event"] == "diagnosis"][0]
    wrong = ["evidence without %r" % w for w in said if not any(w in e for e in d["evidence"])]
    wrong += ["evidence with %r" % w for w in unsaid if any(w in e for e in d["evidence"])]
    wrong += ["fixes without %r" % w for w in fixed if not any(w in f for f in d["fixes"])]
    if wrong:
        raise Fail("diagnosis %s: %s; evidence %s, fixes %s" %
                   (d["cause"], "; ".join(wrong), d["evidence"], d["fixes"]))
    ctx.log("first %s, %s %.2f" % (describe(oracle), d["cause"], d["confidence"]))


test_teacher_temp = case_test(case_origin_cause, "teacher_temp", "", ("is a single value, 0",),
                              envs=HOST_ONLY)
test_batch_of_one = case_test(case_origin_cause, "batch_of_one", "std", ("n - 1 = 0",), (),
                              ("correction=0",), envs=HOST_ONLY)
test_batch_of_one_groups = case_test(case_origin_cause, "batch_of_one", "std",
                                     ("std, then add", "n - 1 = 0", "rows by index"),
                                     ("0/0 is NaN",), ("correction=0",),
                                     ("--variant", "groups"), envs=HOST_ONLY)
# the rules are the daemon's, the same on every root: the roots' run is the suite's longer one
test_entropy_bonus = case_test(case_origin_cause, "entropy_bonus", "",
                               ("so softmax makes probabilities that are exactly 0",),
                               envs=HOST_ONLY)
test_arcface_margin = case_test(case_origin_cause, "arcface_margin", "head",
                                ("outside [-1, 1]",), ("negative values reach it",),
                                envs=HOST_ONLY)
test_token_pool_ids = case_test(case_origin_cause, "token_pool", "pool", (), ("masked",),
                                envs=HOST_ONLY)
test_token_pool_keep = case_test(case_origin_cause, "token_pool", "pool",
                                 ("no softmax takes them",), ("every position masked",), (),
                                 ("--variant", "keep"), envs=HOST_ONLY)
test_tanh_squash = case_test(case_origin_cause, "tanh_squash", "policy",
                             ("takes log of 1 minus what tanh made",
                              "what clamp made: a bounded exponent"), (),
                             ("F.softplus(-2 * u)",), envs=HOST_ONLY)
test_weight_norm = case_test(case_origin_cause, "weight_norm", "fc",
                             ("weight_v (float32): 1 of 4 rows", "divided by its norm"),
                             ("negative values reach it",), ("weight_g",),
                             envs=("host", "trixie"))
# torch 2.1 and later: the weight made by a parametrization module called from the layer
test_weight_norm_param = case_test(case_origin_cause, "weight_norm",
                                   "fc.parametrizations.weight.0", ("1 of 4 rows",),
                                   ("negative values reach it",), (), ("--variant", "param"),
                                   envs=("trixie",))
test_ignored_targets = case_test(case_origin_cause, "ignored_targets", "",
                                 ("all 24 values are negative", "0/0 is NaN"),
                                 ("negative values reach it",), ("ignore_index",),
                                 envs=HOST_ONLY)
test_ignored_targets_module = case_test(case_origin_cause, "ignored_targets", "ce",
                                        ("nll_loss with reduction='mean'",), (), (),
                                        ("--variant", "module"), envs=("trixie",))
test_ignored_targets_loop = case_test(case_origin_cause, "ignored_targets", None,
                                      ("nll_loss made the loss",), (), ("ignore_index",),
                                      ("--variant", "loop"), envs=("host", "forky"))
test_supcon = case_test(case_origin_cause, "supcon", "", ("by a value it made itself",),
                        ("outside its domain",), ("clamp",), envs=HOST_ONLY)
test_ctc_short = case_test(case_origin_cause, "ctc_short", "ctc",
                           ("-log of the probability of every alignment",
                            "from 7 to 7 frames", "from 10 to 10 labels"),
                           ("0/0",), ("zero_infinity=True",), ("--variant", "module"),
                           envs=("host", "forky"))
test_ctc_short_loop = case_test(case_origin_cause, "ctc_short", None,
                                ("-log of the probability of every alignment",), (),
                                ("zero_infinity=True",), ("--variant", "loop"), envs=HOST_ONLY)
test_empty_selection_loop = case_test(case_origin_cause, "empty_selection", None,
                                      ("mean of what it selected by index",), (),
                                      ("mask.sum().clamp_min(1)",), ("--variant", "loop"),
                                      envs=HOST_ONLY)
test_empty_selection_module = case_test(case_origin_cause, "empty_selection", "proto",
                                        ("mean (mean) of what it selected by index",), (),
                                        ("mask.any()",), ("--variant", "module"),
                                        envs=("host", "forky"))
test_recurrent_growth = case_test(case_origin_cause, "recurrent_growth", "rnn",
                                  ("grew past it inside the call", "the call repeats relu"),
                                  ("division by 0",), ("gain at most 1",), envs=HOST_ONLY)
test_gcn_isolated = case_test(case_origin_cause, "gcn_isolated", "conv1",
                              ("a negative power of a sum over an all-zero row",), (),
                              ("add self-loops",), envs=HOST_ONLY)
test_empty_pool_lse = case_test(case_origin_cause, "empty_pool", "pool",
                                ("takes their max: over a row whose every position",
                                 "1 of 6 rows"), ("0/0",), ("large negative finite",),
                                ("--variant", "lse"), envs=HOST_ONLY)
test_empty_pool_empty = case_test(case_origin_cause, "empty_pool", "pool",
                                  ("holds no values", "the call takes mean"), (),
                                  ("x.shape[dim] > 0",), ("--variant", "empty"),
                                  envs=("host", "forky"))
test_underflow_sinkhorn = case_test(case_origin_cause, "underflow_div", "ot",
                                    ("divides (reciprocal) by a mv, and takes exp",
                                     "exp is exactly 0 for an argument below"),
                                    ("outside its domain",), ("logsumexp",),
                                    ("--variant", "sinkhorn"), envs=("host", "forky"))
test_underflow_pool = case_test(case_origin_cause, "underflow_div", "pool",
                                ("by a sum of what softplus made",), ("outside its domain",),
                                ("clamp_min(1e-12)",), ("--variant", "pool"),
                                envs=("host", "forky"))
test_flow_logdet = case_test(case_origin_cause, "flow_logdet", "f2",
                             ("the log of a determinant",), ("negative values reach it",),
                             ("slogdet(W).logabsdet",), envs=HOST_ONLY)
test_hyperbolic = case_test(case_origin_cause, "hyperbolic", "dist",
                            ("acosh of a value below 1", "leaves the unit ball"),
                            ("a difference of close large values",), ("clamp_min(1 + 1e-7)",),
                            envs=HOST_ONLY)
test_poly_features = case_test(case_origin_cause, "poly_features", "poly",
                               ("the layer's code names no exp", "its fourth power is past"),
                               ("above exp's overflow threshold 88.72",),
                               ("normalise or clip them",),
                               envs=HOST_ONLY)
test_mixture_module = case_test(case_origin_cause, "mixture_nll", "",
                                ("takes log of a sum of what exp made",),
                                ("far below its row's maximum",), ("torch.logsumexp",),
                                ("--variant", "module"), envs=HOST_ONLY)
test_hmm_forward = case_test(case_origin_cause, "mixture_nll", "",
                             ("takes log of a sum of what",), ("far below its row's maximum",),
                             ("log-alphas",), ("--variant", "hmm"), envs=HOST_ONLY)
test_learned_scale = case_test(case_origin_cause, "learned_scale", "",
                               ("parameter logit_scale: 95",), (),
                               ("bound the learned log-scale",), envs=HOST_ONLY)
test_logit_target = case_test(case_origin_cause, "logit_target", "",
                              ("takes logit", "holds values in [0, 1] that reach"), (),
                              ("torch.logit(p, eps=1e-6)",), envs=HOST_ONLY)
test_between_calls_vae = case_test(case_between_calls, "vae", "dec.0", "", "exp",
                                   envs=HOST_ONLY)
test_loss_target_nan = case_test(case_loss_made, "loss_targets", "label",
                                 ("smooth_l1_loss compares what it takes with a target",),
                                 ("assert torch.isfinite(y).all()",), envs=HOST_AND_ROOTS)
test_loss_mask_empty = case_test(case_loss_made, "loss_targets", "mask",
                                 ("divides a sum by a tensor that needs no gradient",),
                                 ("clamp_min(1)",), envs=HOST_ONLY)
test_loss_overflow = case_test(case_loss_made, "loss_targets", "overflow",
                               ("past the square root of the float32 range (1.84e+19) at "
                                "this iteration: head,",),
                               ("normalise the targets",), envs=HOST_ONLY)
test_loss_accum_zero = case_test(case_loss_made, "loss_targets", "accum",
                                 ("divides by what it did not compute from them",),
                                 ("loss / max(n, 1)",), envs=HOST_ONLY)
test_loss_kl_by_hand = case_test(case_loss_made, "loss_targets", "kl",
                                 ("the shape of a KL divergence by hand",
                                  "0 * -Inf is NaN"),
                                 ("torch.xlogy(t, t)",), envs=HOST_AND_ROOTS)
test_loss_mixture = case_test(case_loss_made, "mixture_nll", "loss",
                              ("the loss takes the log of a sum of exps",),
                              ("torch.logsumexp",), envs=HOST_AND_ROOTS)
test_loss_beta_support = case_test(case_loss_made, "beta_policy", None,
                                   ("a distribution's log_prob",),
                                   ("inside the open support",), envs=HOST_AND_ROOTS)
test_loss_exp_softmax = case_test(case_loss_made, "loss_exp", "softmax",
                                  ("takes a sum of exps",), ("log_softmax",),
                                  envs=HOST_AND_ROOTS)
test_loss_exp_scale = case_test(case_loss_made, "loss_exp", "scale",
                                ("the loss divides by an exp", "below -103.3 in float32"),
                                ("torch.exp(-s)",), envs=HOST_ONLY)
test_loss_sigmoid_one = case_test(case_loss_made, "loss_exp", "logit",
                                  ("takes the log of 1 - sigmoid",), ("F.logsigmoid(-x)",),
                                  envs=HOST_ONLY)
test_loss_exp_rate = case_test(case_loss_made, "loss_exp", "rate",
                               ("takes an exp and uses it in sub",),
                               ("clamp(max=20)",), envs=HOST_ONLY)
test_loss_exp_rate_log = case_test(case_loss_made, "loss_exp", "ratelog",
                                   ("takes an exp and uses it in sub",
                                    "an Inf of the exp met another"),
                                   ("clamp(max=20)",), envs=HOST_ONLY)
test_loss_correlation = case_test(case_loss_made, "loss_domain", "corr",
                                  ("the loss divides by a spread it computed", "0/0 is NaN"),
                                  ("1e-8",), envs=HOST_AND_ROOTS)
test_loss_acos = case_test(case_loss_made, "loss_domain", "angle",
                           ("the loss takes acos", "rounds just past 1"), ("atan2",),
                           envs=HOST_ONLY)
test_loss_atanh = case_test(case_loss_made, "loss_domain", "hyper",
                            ("the loss takes atanh: atanh(x) is ±Inf at ±1",),
                            ("x.clamp(-1 + 1e-7, 1 - 1e-7)",), envs=HOST_ONLY)
test_logdet_singular = case_test(case_origin_cause, "loss_domain", "inv",
                                 ("takes linalg_slogdet: log|det| of a singular matrix",), (),
                                 ("LU decomposition",), ("--variant", "logdet"), envs=HOST_ONLY)
test_log_relu = case_test(case_origin_cause, "loss_domain", "feat",
                          ("takes log of what relu made",), (), ("F.softplus(x)",),
                          ("--variant", "logrelu"), envs=HOST_ONLY)
test_loss_in_model = case_test(case_origin_cause, "loss_domain", "",
                               ("by a sqrt of a sum of squares it made",), ("outside its domain",),
                               ("1e-8",), ("--variant", "corrmodel"), envs=HOST_ONLY)
test_gumbel_temperature = case_test(case_origin_cause, "loss_domain", "samp",
                                    ("divides (div) the scores of a softmax",), (),
                                    ("temperature above a floor",), ("--variant", "gumbel"),
                                    envs=HOST_ONLY)
test_between_calls_critic = case_test(case_between_calls, "critic", "q", "", "atanh",
                                      ("x.clamp(-1 + 1e-7, 1 - 1e-7)",), envs=HOST_ONLY)
test_between_calls_attn = case_test(case_between_calls, "attn", "attn.out", "attn",
                                    "masked_fill, softmax", envs=("host", "forky"))
test_between_calls_scatter = case_test(case_between_calls, "scatter", "conv.lin", "conv", None,
                                       ("n.clamp_min(1)",),
                                       ("the code names index_add and returned NaN alone",),
                                       envs=HOST_AND_ROOTS)
test_between_calls_gumbel = case_test(case_between_calls, "gumbel", "q.code", "q",
                                      "gumbel_softmax", ("tau = max(tau, 0.1)",),
                                      ("by its temperature tau: at tau = 0",), envs=HOST_ONLY)
test_between_calls_invdist = case_test(case_between_calls, "invdist", "pair.lin", "pair", None,
                                       ("1 / (d + 1e-6)",),
                                       ("the code names cdist: a distance is 0",),
                                       envs=HOST_ONLY)
test_softmax_by_hand = case_test(case_origin_cause, "softmax_overflow", "attn",
                                 ("divides an exp by a sum of exps (a softmax by hand",), (),
                                 ("torch.softmax(scores, dim)",), ("--variant", "c"),
                                 envs=HOST_AND_ROOTS)
test_log1p_sigmoid = case_test(case_origin_cause, "loss_domain", "",
                               ("takes log1p of minus what sigmoid made", "log1p(-1) = -Inf"),
                               (), ("F.logsigmoid(-x)",), ("--variant", "survival"),
                               envs=HOST_AND_ROOTS)
test_masked_logits = case_test(case_origin_cause, "loss_domain", "",
                               ("last op fills a mask (masked_fill) and it returned -Inf alone",),
                               (), ("torch.finfo(scores.dtype).min",), ("--variant", "masked"),
                               envs=HOST_ONLY)
test_log_of_data = case_test(case_origin_cause, "loss_domain", "logx",
                             ("takes log (and divides by nothing)", "log(0) = -Inf"), (),
                             ("torch.log1p(x) for counts",), ("--variant", "logdata"),
                             envs=HOST_ONLY)
test_bce_module = case_test(case_origin_cause, "loss_domain", "",
                            ("takes log of 1 minus a value it received", "reaches exactly 1"),
                            ("outside its domain",), ("F.logsigmoid(-x)",),
                            ("--variant", "bce"), envs=HOST_AND_ROOTS)
test_flat_model = case_test(case_flat_model, "params", envs=HOST_AND_ROOTS)
test_flat_linear = case_test(case_flat_model, "linear", envs=HOST_ONLY)
test_dict_output = case_test(case_dict_output, "plain", envs=HOST_AND_ROOTS)
test_dict_output_ordered = case_test(case_dict_output, "ordered", envs=HOST_ONLY)
test_namedtuple_output = case_test(case_dict_output, "named", envs=HOST_ONLY)
# an object that is no dict: its attributes read where 3.11, 3.13 and 3.14 keep them
test_dataclass_output = case_test(case_dict_output, "fields", envs=HOST_AND_ROOTS)
test_many_args = case_test(case_many_args, "args", envs=HOST_AND_ROOTS)
test_many_list_items = case_test(case_many_args, "list", envs=HOST_ONLY)
