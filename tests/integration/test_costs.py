"""The cost guard: counts that a regression would move, checked against limits (timings are
`make bench`'s). tests/trainers/counts.py makes a known number of module calls, each returning
a fresh 1 MiB + 4 byte float32 tensor, and nothing else; the daemon's last `stats` line must
show every module call tracked once, every output scanned once or skipped as already known
(never twice), at most one copy out of the target per 8 KiB chunk (129 a MiB here: 128 whole
chunks and a partial one), and at most HITS_PER_CALL probe hits per module call (measured 2.54
on Python 3.11: the module's __call__, its forward, the ModuleList iterator, and a few frames
at the end of the run), each hit one run of the entry and one of the return program.
"""
from nwharness import Fail, run_trainer
from nwchecks import HOST_ONLY, environments, last_stats, watch

CHUNK = 8192  # bytes one copy may bring in: bpf/state.bpf.h CHUNK_BYTES
HITS_PER_CALL = 3.0
MIB = 1 << 20


def costs(ctx, *args):
    """The counts of one run of counts.py under the daemon; the trainer's facts."""
    result = run_trainer(ctx, "counts", *args)
    facts = result["facts"]
    events = watch(ctx, "counts", result["trace"], trainer_args=args,
                   daemon_args=("--bpf-stats",))
    st = last_stats(events)
    ctx.log("stats: module_calls %d, probe_hits %d, tensors_scanned %d, bytes_scanned %d, "
            "scan_copies %d, scan_ns %d, rescans_avoided %s, bpf %s" % (
                st["module_calls"], st["probe_hits"], st["tensors_scanned"],
                st["bytes_scanned"], st["scan_copies"], st["scan_ns"], st["rescans_avoided"],
                st.get("bpf")))
    return st, facts


def check_costs(st, facts):
    bad = []
    size = facts["output_bytes"]
    avoided = st["rescans_avoided"]
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
    if hits > HITS_PER_CALL:
        bad.append("%.2f probe hits per module call, at most %.1f" % (hits, HITS_PER_CALL))
    bpf = st.get("bpf") or {}
    if not bpf.get("entry_runs") == bpf.get("return_runs") == st["probe_hits"]:
        bad.append("each probe hit is not one run of each program: bpf %s, probe_hits %d" % (
            bpf, st["probe_hits"]))
    if not st["scan_ns"] > 0:
        bad.append("scan_ns %r: no scan rate" % st["scan_ns"])
    if bad:
        raise Fail("cost counts out of bounds: " + "; ".join(bad))


@environments(*HOST_ONLY)
def test_costs_no_grad(ctx):
    """No grad_fn to know an output by: every output, the root's too, scanned exactly once."""
    st, facts = costs(ctx)
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
