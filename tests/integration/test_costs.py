"""The cost guard: counts that a regression would move, checked against limits (timings are
`make bench`'s). tests/trainers/counts.py makes a known number of module calls, each returning
a fresh 1 MiB + 4 byte float32 tensor, and nothing else; the daemon's last `stats` line must
show every module call tracked once, every output scanned once or skipped as already known
(never twice), at most one copy out of the target per chunk (NW_SCAN_CHUNK, 64 KiB: 17 a
MiB here, 16 whole chunks and a partial one), and at most HITS_PER_CALL probe hits per module
call (measured 2.54 on Python 3.11: the module's __call__, its forward, the ModuleList
iterator, and a few frames at the end of the run), each hit one run of the entry program. The returns: with the attach
line's return_probe "session" (the default on this kernel) exactly one per module call, none
for any other frame; with "uretprobe" one per probe hit. With a backward pass (--backward norms, the default),
the input's gradient, the one an AccumulateGrad node gets, is read once a pass: its check and
its histogram are one pass over its bytes.
"""
import pytest

from nwharness import Fail, run_trainer
from nwchecks import HOST_ONLY, environments, last_stats, scan_chunk, watch

CHUNK = scan_chunk()  # bytes one copy may bring in
HITS_PER_CALL = 3.0
MIB = 1 << 20


def costs(ctx, *args, returns=None, extra=()):
    """The counts of one run of counts.py under the daemon (--return-probe returns, or the
    default); the trainer's facts."""
    result = run_trainer(ctx, "counts", *args)
    facts = result["facts"]
    how = ("--return-probe", returns) if returns else ()
    events = watch(ctx, "counts", result["trace"], trainer_args=args,
                   daemon_args=("--bpf-stats",) + how + tuple(extra))
    st = last_stats(events)
    st["return_probe"] = events[0].get("return_probe")
    ctx.log("stats: return_probe %s, module_calls %d, probe_hits %d, return_hits %d, "
            "tensors_scanned %d, bytes_scanned %d, scan_copies %d, scan_ns %d, "
            "rescans_avoided %s, bpf %s" % (
                st["return_probe"], st["module_calls"], st["probe_hits"], st["return_hits"],
                st["tensors_scanned"], st["bytes_scanned"], st["scan_copies"], st["scan_ns"],
                st["rescans_avoided"], st.get("bpf")))
    return st, facts


def check_returns(st, bad):
    """The return program's runs: a session's one per module call recorded (counts.py has no
    optimizer step), a uretprobe's one per call entered; each a run the bpf stats see."""
    bpf = st.get("bpf") or {}
    # probe_hits counts the loss probe's too (a backward pass's), which has no return
    entry_hits = st["probe_hits"] - bpf.get("loss_runs", 0)
    if bpf.get("entry_runs") != entry_hits or bpf.get("return_runs") != st["return_hits"]:
        bad.append("the programs' runs are not the hits: bpf %s, probe_hits %d, return_hits %d"
                   % (bpf, st["probe_hits"], st["return_hits"]))
    want = st["module_calls"] if st["return_probe"] == "session" else entry_hits
    if st["return_hits"] != want:
        bad.append("return_hits %d with return_probe %s, want %d" % (
            st["return_hits"], st["return_probe"], want))


def check_costs(st, facts, hits_bound=True):
    bad = []
    size = facts["output_bytes"]
    avoided = st["rescans_avoided"]
    # a backward pass's loss (the output's sum, a float32 scalar) is scanned by its own probe
    losses = facts.get("backward_passes", 0)
    st = dict(st, tensors_scanned=st["tensors_scanned"] - losses,
              bytes_scanned=st["bytes_scanned"] - 4 * losses,
              scan_copies=st["scan_copies"] - losses)
    if st["module_calls"] != facts["module_calls"]:
        bad.append("module_calls %d, the trainer made %d" % (st["module_calls"],
                                                             facts["module_calls"]))
    if st["tensors_scanned"] + avoided["tensors"] != facts["outputs"]:
        bad.append("tensors scanned %d + not scanned again %d != %d outputs" % (
            st["tensors_scanned"], avoided["tensors"], facts["outputs"]))
    if st["bytes_scanned"] + avoided["bytes"] != facts["outputs"] * size:
        bad.append("bytes scanned %d + not scanned again %d != %d outputs x %d bytes" % (
            st["bytes_scanned"], avoided["bytes"], facts["outputs"], size))
    chunks = -(-size // CHUNK)
    if not st["tensors_scanned"] <= st["scan_copies"] <= st["tensors_scanned"] * chunks:
        bad.append("scan_copies %d for %d tensors of %d chunks (%.1f a MiB, at most %.1f)" % (
            st["scan_copies"], st["tensors_scanned"], chunks,
            st["scan_copies"] / (st["bytes_scanned"] / MIB), chunks / (size / MIB)))
    hits = st["probe_hits"] / facts["module_calls"]  # the calls made, not the ones counted
    if hits_bound and hits > HITS_PER_CALL:
        bad.append("%.2f probe hits per module call, at most %.1f" % (hits, HITS_PER_CALL))
    check_returns(st, bad)
    if not st["scan_ns"] > 0:
        bad.append("scan_ns %r: no scan rate" % st["scan_ns"])
    if bad:
        raise Fail("cost counts out of bounds: " + "; ".join(bad))


@environments(*HOST_ONLY)
def test_costs_no_grad(ctx):
    """No grad_fn to know an output by: every output, the root's too, scanned exactly once;
    with the default return probe, a uprobe session on this kernel (Linux 6.13+), a return run
    per module call, none for the other frames."""
    st, facts = costs(ctx)
    if st["return_probe"] != "session":
        raise Fail("attach line's return_probe %r, the default here is session" %
                   st["return_probe"])
    check_costs(st, facts)


@environments(*HOST_ONLY)
def test_costs_uretprobe(ctx):
    """As test_costs_no_grad with --return-probe uretprobe: the same counts, and a return run
    per frame entered."""
    st, facts = costs(ctx, returns="uretprobe")
    if st["return_probe"] != "uretprobe":
        raise Fail("attach line's return_probe %r, asked for uretprobe" % st["return_probe"])
    check_costs(st, facts)


@environments(*HOST_ONLY)
def test_costs_grad(ctx):
    """Outputs with a grad_fn: the root's return, its last kid's output, is not scanned again."""
    st, facts = costs(ctx, "--grad")
    check_costs(st, facts)
    if st["rescans_avoided"]["tensors"] != facts["passes"]:
        raise Fail("rescans_avoided.tensors %d, want %d (one root return a pass)" % (
            st["rescans_avoided"]["tensors"], facts["passes"]))


@environments(*HOST_ONLY)
def test_costs_identity(ctx):
    """An nn.Identity after each kid returns its input, its previous sibling's output, as it
    got it: with a grad_fn to know it by, not scanned again (nor the root's return); without
    one, every output is scanned once."""
    st, facts = costs(ctx, "--grad", "--identity")
    check_costs(st, facts)
    want = facts["identities"] + facts["passes"]
    if st["rescans_avoided"]["tensors"] != want:
        raise Fail("rescans_avoided.tensors %d, want %d (each Identity's return and the root's)"
                   % (st["rescans_avoided"]["tensors"], want))
    st, facts = costs(ctx, "--identity")
    check_costs(st, facts)
    if st["rescans_avoided"]["tensors"]:
        raise Fail("no grad_fn, yet %d outputs not scanned" % st["rescans_avoided"]["tensors"])


@environments(*HOST_ONLY)
@pytest.mark.parametrize("ring", ["default", "0"])
def test_costs_backward(ctx, ring):
    """A backward pass a forward: the input's gradient scanned once a pass and measured for the
    norms in that same pass, at most one copy per chunk of it (torch's backward frames
    add probe hits: their bound is not this test's). Its 1 MiB go to the daemon, which counts
    their histogram (the gradient data ring's default 8 MiB hold several); with
    --grad-ring-mb 0 none do, and BPF counts it. The trainer runs its passes flat out: a
    daemon kept off the CPU longer than a few passes (a loaded machine) finds the ring without
    room for the next gradient, which BPF then counts itself, by design (once in 40 in a CI run
    beside other tests): half of them at least must go to the daemon, none may be lost."""
    extra = () if ring == "default" else ("--grad-ring-mb", ring)
    st, facts = costs(ctx, "--backward", extra=extra)
    check_costs(st, facts, hits_bound=False)
    bwd = st.get("backward") or {}
    size, passes = facts["output_bytes"], facts["backward_passes"]
    chunks = -(-size // CHUNK)
    want = {"grads_scanned": passes, "param_grads": passes, "bytes_scanned": passes * size,
            "anomalies": 0, "norm_skipped": 0, "grads_lost": 0}
    bad = ["%s %r, want %d" % (k, bwd.get(k), v) for k, v in want.items() if bwd.get(k) != v]
    low, high = (passes // 2, passes) if ring == "default" else (0, 0)
    if not low <= bwd.get("offloaded", -1) <= high:
        bad.append("offloaded %r, want %d to %d" % (bwd.get("offloaded"), low, high))
    if not passes <= bwd.get("copies", -1) <= passes * chunks:
        bad.append("copies %r for %d gradients of %d chunks: at most %d" % (
            bwd.get("copies"), passes, chunks, passes * chunks))
    gn = st.get("grad_norm")
    if not isinstance(gn, dict) or gn.get("complete") is not True or \
            gn.get("params") != 1 or not gn.get("total"):
        bad.append("grad_norm %r: want the input's, complete" % gn)
    if bad:
        raise Fail("backward counts out of bounds: " + "; ".join(bad))


@environments(*HOST_ONLY)
def test_costs_backward_mixed(ctx):
    """Two leaves a pass, one gradient each way: the input's 1 MiB to the daemon, a 12 MiB one
    counted in BPF (the 8 MiB ring cannot take it whole). Both come back in the order of the
    passes: every pass's norm is of both, complete, and holds torch's. The input's goes to the
    daemon at least every other pass (test_costs_backward: a loaded machine), the wide one
    never."""
    st, facts = costs(ctx, "--backward", "--wide")
    bwd = st.get("backward") or {}
    passes, want_norm = facts["backward_passes"], facts["grad_norm"]
    want = {"param_grads": 2 * passes, "grads_lost": 0, "anomalies": 0}
    bad = ["%s %r, want %d" % (k, bwd.get(k), v) for k, v in want.items() if bwd.get(k) != v]
    if not passes // 2 <= bwd.get("offloaded", -1) <= passes:
        bad.append("offloaded %r, want %d to %d" % (bwd.get("offloaded"), passes // 2, passes))
    gn = st.get("grad_norm") or {}
    trend = gn.get("trend") or []
    if len(trend) < 8:
        bad.append("%d passes in the trend: %s" % (len(trend), gn))
    for t in trend:
        if t.get("complete") is not True or t.get("nonfinite"):
            bad.append("pass %r: complete %r, nonfinite %r" % (
                t.get("iteration"), t.get("complete"), t.get("nonfinite")))
        elif not t["low"] * (1 - 1e-6) <= want_norm <= t["high"] * (1 + 1e-6):
            bad.append("pass %r: torch's norm %r outside [%r, %r]" % (
                t.get("iteration"), want_norm, t["low"], t["high"]))
    if gn.get("params") != 2:
        bad.append("the last pass has %r parameters, want 2" % gn.get("params"))
    if bad:
        raise Fail("mixed gradients: " + "; ".join(bad[:6]))
