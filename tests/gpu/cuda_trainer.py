#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""A CUDA model and a CPU model trained side by side in one process, for the device probe.

  cuda_trainer.py [--wait] [--oracle] [--producer] [--profile] [--fault nan|inf] [--steps N]

The CUDA model (`gpu`) goes bad at step FAULT_GPU: --fault nan (default) puts a NaN in its
input (first bad layer `0`, propagated from the data), --fault inf scales layer `2`'s weight
so that its output overflows to +Inf and -Inf from finite inputs (an origin). The CPU model
(`cpu`) gets a NaN in its input at step FAULT_CPU. nanwatchd without the GPU library counts
the CUDA outputs in stats.skipped.device and reports the CPU model's first layer.
--oracle finds the first non-finite module output of each model with forward hooks and prints
it as {"oracle": {"gpu": ..., "cpu": ...}} (step: optimizer.step() calls of both models
completed, as nanwatchd counts them; counts; whether the inputs were finite); --wait prints
READY <pid> and waits for a line on stdin first (nanwatchd attaches meanwhile).
--producer plays the daemon in this process (tests/gpu/nwring.py): a request for every CUDA
module output and its inputs written to a ring handed to libnanwatch_cupti.so (loaded by
CUDA_INJECTION64_PATH) over its socket, and prints the library's first bad output as
"producer", with its READY, notices and last stats. --profile runs torch.profiler (CPU
and CUDA activity: Kineto, a CUPTI subscriber) from before READY to the end, and prints how
many CUDA events it recorded.
"""
import argparse
import contextlib
import json
import os
import sys

import torch
import torch.nn as nn

FAULT_GPU = 6
FAULT_CPU = 9


def mlp():
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.LayerNorm(64),
                         nn.Linear(64, 8))


def hooks(model, name, found, step):
    paths = {m: p for p, m in model.named_modules()}

    def hook(mod, inputs, out):
        if name not in found and isinstance(out, torch.Tensor) and \
                not bool(torch.isfinite(out).all()):
            fin = out[torch.isfinite(out)]
            found[name] = {"step": step[0], "layer": paths[mod], "module": type(mod).__name__,
                           "nan": int(torch.isnan(out).sum()),
                           "posinf": int(torch.isposinf(out).sum()),
                           "neginf": int(torch.isneginf(out).sum()), "numel": out.numel(),
                           "finite_min": float(fin.min()) if fin.numel() else None,
                           "finite_max": float(fin.max()) if fin.numel() else None,
                           "inputs_finite": all(bool(torch.isfinite(x).all()) for x in inputs
                                                if isinstance(x, torch.Tensor)),
                           "device": str(out.device)}

    for m in model.modules():
        m.register_forward_hook(hook)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wait", action="store_true")
    ap.add_argument("--oracle", action="store_true")
    ap.add_argument("--producer", action="store_true")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--fault", choices=("nan", "inf"), default="nan")
    ap.add_argument("--steps", type=int, default=12)
    args = ap.parse_args()
    torch.manual_seed(1234)
    dev = torch.device("cuda")
    models = {"gpu": mlp().to(dev), "cpu": mlp()}
    opts = {k: torch.optim.SGD(m.parameters(), lr=0.01) for k, m in models.items()}
    found, step = {}, [0]
    if args.oracle:
        for k, m in models.items():
            hooks(m, k, found, step)
    torch.zeros(1, device=dev).sum().item()  # CUDA initialised before the attach
    prod = start_producer(models["gpu"], step) if args.producer else None
    prof = contextlib.nullcontext()
    if args.profile:
        acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        prof = torch.profiler.profile(activities=acts)
    prof.__enter__()
    if args.wait:
        print("READY %d" % os.getpid(), flush=True)
        if not sys.stdin.readline():
            sys.exit("cuda_trainer: stdin closed before go")
    losses = []
    for s in range(args.steps):
        for k, m in models.items():
            d = dev if k == "gpu" else torch.device("cpu")
            x = torch.randn(16, 32, device=d)
            if (k, s) == ("gpu", FAULT_GPU) and args.fault == "inf":
                with torch.no_grad():
                    m[2].weight.mul_(1e38)
            elif (k, s) in (("gpu", FAULT_GPU), ("cpu", FAULT_CPU)):
                x[3, 5] = float("nan")
            opts[k].zero_grad()
            loss = m(x).pow(2).mean()
            loss.backward()
            opts[k].step()
            step[0] += 1  # optimizer steps completed, both models' (as nanwatchd counts)
            losses.append(float(loss))
    torch.cuda.synchronize()
    prof.__exit__(None, None, None)
    line = {"steps": args.steps, "losses_finite": sum(1 for v in losses if v == v),
            "device": torch.cuda.get_device_name(0)}
    if args.oracle:
        line["oracle"] = found
    if args.profile:
        evs = prof.events()
        line["profiler"] = {"events": len(evs), "cuda_events": sum(
            1 for e in evs if e.device_type == torch.autograd.DeviceType.CUDA)}
    if prod:
        line["producer"] = finish_producer(*prod)
    print(json.dumps(line, sort_keys=True), flush=True)


def start_producer(model, step):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import nwring

    ring = nwring.Ring()
    link = nwring.Link(ring)
    prod = nwring.Producer(ring, step)
    prod.attach(model)
    return nwring, ring, link, prod


def finish_producer(nwring, ring, link, prod):
    """The library's answers once every request had its chance (a drain after the last)."""
    prod.detach()
    torch.cuda.synchronize()
    has_bad = lambda rs: any(r["nan"] or r["posinf"] or r["neginf"] for r in rs)
    link.wait_results(has_bad, 15)
    n = -1
    while n != len(link.results):  # settle: results stop coming
        n = len(link.results)
        link.wait_results(lambda rs: len(rs) > n, 1.5)
    stats = link.wait_stats(3)
    out = {"first": nwring.first_bad(link, prod.ctx), "ready": link.ready,
           "notices": link.notices, "stats": stats, "requests": ring.head,
           "results": len(link.results)}
    f = out["first"]
    if f:
        dt = nwring.DT_F32
        f["finite_min"] = (None if f["min_key"] == (1 << 64) - 1 else
                           nwring.bits_value(nwring.order_key_bits(f["min_key"], dt), dt))
        f["finite_max"] = (None if not f["max_key"] else
                           nwring.bits_value(nwring.order_key_bits(f["max_key"], dt), dt))
    link.close()
    ring.close()
    return out


if __name__ == "__main__":
    main()
