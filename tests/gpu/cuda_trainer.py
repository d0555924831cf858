#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""A CUDA model and a CPU model trained side by side in one process, for the device probe.

  cuda_trainer.py [--wait] [--oracle] [--steps N]

The CUDA model (`gpu`) gets a NaN in its input at step FAULT_GPU; the CPU model (`cpu`) at
step FAULT_CPU. Today's nanwatchd checks CPU tensors only: attached, it must count the CUDA
outputs in stats.skipped.device and report the CPU model's first layer at FAULT_CPU.
--oracle finds the first non-finite module output of each model with forward hooks and prints
it as {"oracle": {"gpu": ..., "cpu": ...}} (step: optimizer.step() calls of both models
completed, as nanwatchd counts them); --wait prints READY <pid> and waits for a line on
stdin first (nanwatchd attaches meanwhile).
"""
import argparse
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
            found[name] = {"step": step[0], "layer": paths[mod], "module": type(mod).__name__,
                           "nan": int(torch.isnan(out).sum()), "numel": out.numel(),
                           "device": str(out.device)}

    for m in model.modules():
        m.register_forward_hook(hook)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wait", action="store_true")
    ap.add_argument("--oracle", action="store_true")
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
    if args.wait:
        print("READY %d" % os.getpid(), flush=True)
        if not sys.stdin.readline():
            sys.exit("cuda_trainer: stdin closed before go")
    losses = []
    for s in range(args.steps):
        for k, m in models.items():
            d = dev if k == "gpu" else torch.device("cpu")
            x = torch.randn(16, 32, device=d)
            if (k, s) in (("gpu", FAULT_GPU), ("cpu", FAULT_CPU)):
                x[3, 5] = float("nan")
            opts[k].zero_grad()
            loss = m(x).pow(2).mean()
            loss.backward()
            opts[k].step()
            step[0] += 1  # optimizer steps completed, both models' (as nanwatchd counts)
            losses.append(float(loss))
    torch.cuda.synchronize()
    line = {"steps": args.steps, "losses_finite": sum(1 for v in losses if v == v),
            "device": torch.cuda.get_device_name(0)}
    if args.oracle:
        line["oracle"] = found
    print(json.dumps(line, sort_keys=True), flush=True)


if __name__ == "__main__":
    main()
