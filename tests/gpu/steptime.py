#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""Step time of a GPU transformer (bfloat16, AdamW), for the overhead ratios.

  steptime.py [--producer] [--hooks-only] [--wait] [--steps N] [--warmup N]
  steptime.py --phases [--rounds R] [--steps N]

What is loaded is the caller's business (CUDA_INJECTION64_PATH or not, nanwatchd attached
or not); --producer plays the daemon in this process (tests/gpu/nwring.py): a request for
every module output and its inputs, handed to the library, so that every output is scanned;
--hooks-only writes the same requests into a ring nobody reads (the cost of the Python
hooks alone, to tell it from the library's). --wait prints READY <pid> and waits for a line
on stdin after the warm-up (a daemon attaches meanwhile). Each step ends with a
torch.cuda.synchronize(); prints one JSON line with the median and mean step time.

--phases (the library loaded) tells where the checking's time goes, in one process, R rounds
of N steps per phase, interleaved: idle (nothing connected), hooks (requests into a ring
nobody reads), outputs (connected: outputs only), full (outputs and gated inputs, as
--producer), small (full with every request cut to 256 elements: the per-request cost
without the bytes). Per phase the median step, the CPU's enqueue time (until the
synchronize) and the GPU's span between events at the step's start and end: a CPU-bound
step has enqueue close to the step, a GPU-bound one far below it.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--producer", action="store_true")
    ap.add_argument("--hooks-only", action="store_true")
    ap.add_argument("--wait", action="store_true")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--phases", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(d_model=1024, nhead=16, dim_feedforward=4096,
                                       batch_first=True, dropout=0.0)
    model = nn.TransformerEncoder(layer, num_layers=8, enable_nested_tensor=False)
    model = model.to("cuda", torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randn(16, 512, 1024, device="cuda", dtype=torch.bfloat16)
    step = [0]
    link = prod = ring = None
    if args.producer or args.hooks_only:
        import nwring

        ring = nwring.Ring()
        if args.producer:
            link = nwring.Link(ring)
        prod = nwring.Producer(ring, step)
        prod.attach(model)

    def body():
        opt.zero_grad(set_to_none=True)
        loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        step[0] += 1

    def one():
        body()
        torch.cuda.synchronize()

    one.body = body

    for _ in range(args.warmup):
        one()
    if args.phases:
        print(json.dumps(phases(model, one, step, args), sort_keys=True), flush=True)
        return 0
    if args.wait:
        print("READY %d" % os.getpid(), flush=True)
        if not sys.stdin.readline():
            sys.exit("steptime: stdin closed before go")
        for _ in range(3):  # the first steps under a fresh attach
            one()
    times = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        one()
        times.append((time.perf_counter() - t0) * 1e3)
    line = {"steps": args.steps, "median_ms": round(statistics.median(times), 3),
            "mean_ms": round(statistics.mean(times), 3), "min_ms": round(min(times), 3),
            "modules": sum(1 for _ in model.modules()),
            "injected": bool(os.environ.get("CUDA_INJECTION64_PATH")),
            "producer": args.producer, "hooks_only": args.hooks_only}
    if ring:
        line["requests"] = ring.head
    if link:
        line["ready"] = link.ready
        line["stats"] = link.wait_stats(3)
        line["notices"] = link.notices
        link.close()
    print(json.dumps(line, sort_keys=True), flush=True)
    return 0


PHASES = {"idle": None, "hooks": dict(link=False), "outputs": dict(inputs=False),
          "full": dict(), "small": dict(numel_cap=256)}


def timed(one):
    """One step: (step ms, CPU enqueue ms, GPU span ms)."""
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    e0.record()
    one.body()
    e1.record()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    t2 = time.perf_counter()
    return (t2 - t0) * 1e3, (t1 - t0) * 1e3, e0.elapsed_time(e1)


def phases(model, one, step, args):
    import nwring

    acc = {name: [] for name in PHASES}
    stats = {}
    for _ in range(args.rounds):
        for name, how in PHASES.items():
            ring = link = prod = None
            if how is not None:
                ring = nwring.Ring()
                if how.get("link", True):
                    link = nwring.Link(ring)
                prod = nwring.Producer(ring, step, inputs=how.get("inputs", True),
                                       numel_cap=how.get("numel_cap"))
                prod.attach(model)
            for _ in range(2):  # settle
                one()
            for _ in range(args.steps):
                acc[name].append(timed(one))
            if prod:
                prod.detach()
            if link:
                stats[name] = link.wait_stats(3)
                link.close()
            if ring:
                ring.close()
            time.sleep(0.3)  # the library back to idle
    med = lambda xs, k: round(statistics.median(x[k] for x in xs), 3)
    out = {"phases": {n: {"step_ms": med(v, 0), "enqueue_ms": med(v, 1), "gpu_ms": med(v, 2),
                          "steps": len(v)} for n, v in acc.items()},
           "stats": stats, "mode": os.environ.get("NANWATCH_CUPTI_LAUNCH", "default"),
           "injected": bool(os.environ.get("CUDA_INJECTION64_PATH"))}
    idle = out["phases"]["idle"]["step_ms"]
    out["ratios"] = {n: round(v["step_ms"] / idle, 4) for n, v in out["phases"].items()}
    return out


if __name__ == "__main__":
    sys.exit(main())
