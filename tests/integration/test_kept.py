"""Outputs kept finite by construction are not scanned, nor outputs a norm's finite output
proves finite, and neither can hide the first non-finite one.

tests/trainers/kept_finite.py: Conv2d, BatchNorm2d, ReLU, MaxPool2d, Flatten, Linear. The ReLU,
the pool and the flatten are torch's own and get their previous sibling's finite output: the
daemon does not scan what they return (stats.kept_finite), as long as nothing but torch's code
makes it. Each variant makes the ReLU's call return Inf/NaN at step 4 by other code (a hook
of the instance, a global hook registered mid-run, a class of the user's named ReLU, the
instance's own forward, a patched nn.ReLU.forward, its hook dict replaced by assignment
mid-run): the daemon must name that ReLU first,
with the anomalies of that iteration the forward hooks see.
"""
from nwharness import Fail, oracle_of
from nwchecks import (HOST_AND_ROOTS, HOST_ONLY, case_test, check_anomalies, describe,
                      last_stats, watch)

FAULT_STEP = 4  # kept_finite.py's Trainer.fault_step


def case_kept(ctx, variant):
    """The variant's ReLU named first, as the forward hooks name it; before it, exactly the
    outputs torch's own code made from a finite sibling output were not scanned."""
    oracle, trace = oracle_of(ctx, "kept_finite", "--variant", variant)
    if oracle is None or oracle["layer"] != "features.2" or oracle["step"] != FAULT_STEP:
        raise Fail("kept_finite --variant %s --oracle: %s, want features.2 at step %d" % (
            variant, oracle and describe(oracle), FAULT_STEP))
    events = watch(ctx, "kept_finite", trace, trainer_args=("--variant", variant))
    check_anomalies(events, oracle, events[0]["pid"])
    kept = last_stats(events).get("kept_finite") or {}
    # the ReLU (until the global hook), the pool and the flatten, at steps 1 to 3: a module is
    # vouched for once the daemon read its first call's record (step 0), and the trainer
    # pauses before each step for it; 3 a step where the ReLU was not torch's would fail
    per_step = 3 if variant in ("global", "replaced") else 2
    want = per_step * (FAULT_STEP - 1)
    if kept.get("tensors") != want or not kept.get("bytes", 0) > 0:
        raise Fail("stats.kept_finite %r, want %d outputs (%s)" % (kept, want, variant))


test_kept_global = case_test(case_kept, "global", envs=HOST_AND_ROOTS)
test_kept_hook = case_test(case_kept, "hook", envs=HOST_ONLY)
test_kept_userrelu = case_test(case_kept, "userrelu", envs=HOST_ONLY)
test_kept_override = case_test(case_kept, "override", envs=HOST_ONLY)
test_kept_patched = case_test(case_kept, "patched", envs=HOST_ONLY)
test_kept_replaced = case_test(case_kept, "replaced", envs=HOST_ONLY)


def case_norm_checked(ctx, variant, returns="uretprobe"):
    """tests/trainers/norm_checked.py: the layer the forward hooks name first, named first
    with their counts, whether the Sequential child before a norm went non-finite (its output,
    not scanned at its return, is scanned when the norm's output is not finite), the norm
    itself did, or a forward pre-hook on the norm changed its input first, each with the
    oracle's verdict on its inputs; before the fault, the two outputs the norms proved finite
    were not scanned."""
    want_layer = {"linear": "5", "norm": "6"}.get(variant, "0")
    oracle, trace = oracle_of(ctx, "norm_checked", "--variant", variant)
    if oracle is None or oracle["layer"] != want_layer or oracle["step"] != FAULT_STEP:
        raise Fail("norm_checked --variant %s --oracle: %s, want layer %s at step %d" % (
            variant, oracle and describe(oracle), want_layer, FAULT_STEP))
    events = watch(ctx, "norm_checked", trace, trainer_args=("--variant", variant),
                   daemon_args=("--return-probe", returns))
    # a late report's input verdicts too: the deferred call's input may be gone by then
    check_anomalies(events, oracle, events[0]["pid"], verdicts=True)
    checked = last_stats(events).get("norm_checked") or {}
    # the Conv2d's and the first Linear's outputs at steps 1 to 3 at least (the daemon vouches
    # for them once it read their first call's record, and the trainer pauses before each step)
    want = 2 * (FAULT_STEP - 1)
    if not checked.get("tensors", 0) >= want or not checked.get("bytes", 0) > 0:
        raise Fail("stats.norm_checked %r, want %d outputs or more (%s)" % (checked, want,
                                                                           variant))


test_norm_checked_conv = case_test(case_norm_checked, "conv", envs=HOST_AND_ROOTS)
test_norm_checked_linear = case_test(case_norm_checked, "linear", envs=HOST_ONLY)
test_norm_checked_input = case_test(case_norm_checked, "input", envs=HOST_ONLY)
test_norm_checked_input_session = case_test(case_norm_checked, "input", "session",
                                            envs=HOST_ONLY)
test_norm_checked_prehook_session = case_test(case_norm_checked, "prehook", "session",
                                              envs=HOST_ONLY)
test_norm_checked_norm = case_test(case_norm_checked, "norm", envs=HOST_ONLY)
test_norm_checked_prehook = case_test(case_norm_checked, "prehook", envs=HOST_ONLY)
test_norm_checked_global = case_test(case_norm_checked, "global", envs=HOST_AND_ROOTS)
test_norm_checked_seqpatch = case_test(case_norm_checked, "seqpatch", envs=HOST_AND_ROOTS)
