"""How scans copy the target's bytes (--read-method; daemon/attach/readcal.h): every method
finds what the forward-hook oracle finds, the stats say which copies went by
bpf_copy_from_user_task, and a file's pages never do: the task method faults pages in and may
wait for them, and a target that maps a file it serves (FUSE) could hold its read for as long
as it liked. The file-backed case runs its trainer as an unprivileged user, the attacker.
"""
import array
import os
import shutil
import tempfile

from nwharness import Fail, oracle_of, run_trainer
from nwchecks import (HOST_ONLY, NOBODY, check_anomalies, environments, last_stats, scan_chunk,
                      watch)

CHUNK = scan_chunk()  # bytes one copy may bring in
METHODS = ("probe", "task", "adaptive")


def attach_of(events):
    return [ev for ev in events if ev["event"] == "attach"][0]


def scan_of(events, method):
    """The last stats line's scan object, its read method the one asked for."""
    st = last_stats(events)
    sc = st.get("scan")
    if not isinstance(sc, dict) or sc.get("read_method") != method or \
            attach_of(events).get("read_method") != method:
        raise Fail("--read-method %s: attach read_method %r, stats.scan %r" % (
            method, attach_of(events).get("read_method"), sc))
    bwd = st.get("backward") or {}
    if sc["bytes"] != st["bytes_scanned"] + (bwd.get("bytes_scanned") or 0):
        raise Fail("stats.scan.bytes %d is not the bytes scanned: %s" % (sc["bytes"], st))
    # copies are timed in every pass over a tensor (the counting pass of an anomaly's too)
    if not (sc["ns"] > 0 and sc["gbps"] and sc["gbps"] > 0 and sc["copy_ns"] > 0 and
            sc["copy_bytes"] > 0 and sc["copy_gbps"] > 0):
        raise Fail("stats.scan has no rate: %s" % sc)
    # one thread runs the programs in these trainers: no scratch is ever taken from a copy
    if sc.get("scratch_taken") != 0:
        raise Fail("stats.scan.scratch_taken %r in a run of one thread: %s" % (
            sc.get("scratch_taken"), sc))
    return st, sc


@environments(*HOST_ONLY)
def test_read_methods_counts(ctx):
    """counts.py (fresh 1 MiB tensors of the allocator: anonymous memory): each method scans
    every output once; probe copies nothing by the task method, task copies (nearly) every
    chunk by it, adaptive somewhere in between, as this host's pages make it choose."""
    result = run_trainer(ctx, "counts")
    facts, trace = result["facts"], result["trace"]
    chunks = -(-facts["output_bytes"] // CHUNK)
    for method in METHODS:
        events = watch(ctx, "counts", trace, daemon_args=("--read-method", method))
        st, sc = scan_of(events, method)
        if st["tensors_scanned"] != facts["outputs"] or \
                st["bytes_scanned"] != facts["outputs"] * facts["output_bytes"]:
            raise Fail("--read-method %s: %d tensors, %d bytes scanned; want %d outputs of %d "
                       "bytes" % (method, st["tensors_scanned"], st["bytes_scanned"],
                                  facts["outputs"], facts["output_bytes"]))
        if method == "probe" and sc["task_copies"]:
            raise Fail("--read-method probe made %d task copies" % sc["task_copies"])
        # a tensor astride two mappings goes by probe: allow two of them
        if method == "task" and sc["task_copies"] < st["scan_copies"] - 2 * chunks:
            raise Fail("--read-method task: %d of %d copies by the task method" % (
                sc["task_copies"], st["scan_copies"]))
        ctx.log("--read-method %s: scan %.2f GB/s, copies %.2f GB/s, %d of %d copies by task"
                % (method, sc["gbps"], sc["copy_gbps"], sc["task_copies"], st["scan_copies"]))


@environments(*HOST_ONLY)
def test_read_method_task_oracle(ctx):
    """exp_overflow read by the task method: the first anomaly, its counts and finite range,
    and the anomalies of its iteration are the forward-hook oracle's."""
    oracle, trace = oracle_of(ctx, "exp_overflow")
    events = watch(ctx, "exp_overflow", trace, daemon_args=("--read-method", "task"))
    scan_of(events, "task")
    check_anomalies(events, oracle, attach_of(events)["pid"])


@environments(*HOST_ONLY)
def test_read_method_file_pages(ctx):
    """A target (uid 65534) whose module returns a tensor mapped from its own file, watched
    with --read-method task: the file's pages are copied by probe (not one task copy beyond
    the two one-element anonymous outputs a pass), and its NaN is still found, counted once."""
    work = tempfile.mkdtemp(prefix="nw-read-")
    try:
        os.chmod(work, 0o755)
        path = os.path.join(work, "weights.bin")
        values = array.array("f", (0.5 for _ in range((1 << 18) + 1)))
        values[12345] = float("nan")
        with open(path, "wb") as f:
            values.tofile(f)
        os.chown(path, NOBODY, NOBODY)
        os.chown(work, NOBODY, NOBODY)
        ctx.env.run_as = NOBODY
        try:
            result = run_trainer(ctx, "file_backed", "--file", path)
            events = watch(ctx, "file_backed", result["trace"],
                           trainer_args=("--file", path), daemon_args=("--read-method", "task"))
        finally:
            ctx.env.run_as = None
        facts = result["facts"]
        st, sc = scan_of(events, "task")
        chunks = -(-facts["output_bytes"] // CHUNK)
        if sc["task_copies"] != 2 * facts["passes"]:
            raise Fail("%d task copies; want %d (two one-chunk anonymous outputs a pass, and "
                       "none of the file's %d chunks)" % (sc["task_copies"], 2 * facts["passes"],
                                                          chunks))
        if st["scan_copies"] < facts["passes"] * (chunks + 2):
            raise Fail("%d scan copies for %d passes of %d + 2 chunks" % (
                st["scan_copies"], facts["passes"], chunks))
        first = [ev for ev in events if ev["event"] == "anomaly"]
        if not first or first[0]["layer"] != "mapped" or first[0]["nan"] != 1 or \
                first[0]["posinf"] or first[0]["neginf"] or first[0]["finite_max"] != 0.5:
            raise Fail("the mapped file's NaN: %s" % (first[:1],))
    finally:
        shutil.rmtree(work, ignore_errors=True)
