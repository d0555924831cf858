#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""Assemble tests/gpu/probe's step outputs (a directory of NAME.{out,err,rc,time}) into one
JSON report on stdout.

usage: report.py WORKDIR
"""
import json
import os
import sys


def read(w, name, default=""):
    try:
        with open(os.path.join(w, name), errors="replace") as f:
            return f.read()
    except OSError:
        return default


def json_lines(text):
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def last_json(text):
    found = json_lines(text)
    return found[-1] if found else None


def sections(text):
    """'## name' headed sections of env_facts, as {name: text}."""
    out, cur = {}, None
    for line in text.splitlines():
        if line.startswith("## "):
            cur = line[3:].strip()
            out[cur] = []
        elif cur is not None:
            out[cur].append(line)
    return {k: "\n".join(v).strip() for k, v in out.items()}


def step_info(w, name):
    rc = read(w, name + ".rc").strip()
    return {"rc": int(rc) if rc.lstrip("-").isdigit() else (rc or None),
            "seconds": float(read(w, name + ".time", "0") or 0),
            "stderr_tail": read(w, name + ".err").splitlines()[-6:]}


CAPS = {19: "CAP_SYS_PTRACE", 21: "CAP_SYS_ADMIN", 38: "CAP_PERFMON", 39: "CAP_BPF"}


def env_report(w):
    env = sections(read(w, "env.out"))
    caps = None
    for line in env.get("status", "").splitlines():
        if line.startswith("CapEff:"):
            v = int(line.split()[1], 16)
            caps = {"hex": line.split()[1], **{n: bool(v >> b & 1) for b, n in CAPS.items()}}
    text = " ".join([env.get("uname", ""), env.get("proc_version", ""), env.get("dmesg", "")])
    env["gvisor"] = "gvisor" in text.lower() or " 4.4.0 " in " %s " % env.get("uname", "")
    env["cap_eff"] = caps
    return env


def compare(oracle, ev):
    """The daemon's first anomaly against the oracle's first: which fields agree."""
    if not oracle or not ev:
        return None
    keys = ("step", "iteration", "layer", "module", "tensor", "nan", "posinf", "neginf",
            "inputs_finite", "params_finite", "origin")
    return {k: {"oracle": oracle.get(k), "daemon": ev.get(k),
                "same": oracle.get(k) == ev.get(k)} for k in keys}


def demo_report(w, name="demo"):
    oracle = last_json(read(w, name + "_oracle.out"))
    first = (oracle or {}).get("oracle") or {}
    att = last_json(read(w, name + "_attach.out"))
    fa = (att or {}).get("first_anomaly")
    return {"oracle_first": {k: first.get(k) for k in
                             ("step", "iteration", "layer", "module", "tensor", "nan",
                              "posinf", "neginf", "origin")} if first else None,
            "attach": att, "first_vs_oracle": compare(first, fa)}


def cuda_report(w):
    oracle = last_json(read(w, "cuda_oracle.out"))
    att = last_json(read(w, "cuda_attach.out"))
    stats = (att or {}).get("stats") or {}
    fa = (att or {}).get("first_anomaly")
    cpu = ((oracle or {}).get("oracle") or {}).get("cpu")
    gpu = ((oracle or {}).get("oracle") or {}).get("gpu")
    # The CUDA model goes non-finite first (gpu step) and stays so; the CPU model later. An
    # anomaly before the CPU model's step can only come from a CUDA output read as host memory.
    scanned = None
    if fa and cpu and gpu:
        scanned = fa.get("step", 0) < cpu["step"]
    return {"oracle": oracle, "attach": att,
            "skipped_device": (stats.get("skipped") or {}).get("device"),
            "cuda_tensor_scanned": scanned,
            "cpu_first_vs_oracle": {k: {"oracle": (cpu or {}).get(k), "daemon": (fa or {}).get(k)}
                                    for k in ("step", "layer", "module", "nan")} if fa else None}


def main():
    w = sys.argv[1]
    steps = sorted(n[:-3] for n in os.listdir(w) if n.endswith(".rc"))
    layouts = os.path.join(w, "layouts")
    rep = {
        "steps": {n: step_info(w, n) for n in steps},
        "env": env_report(w),
        "torch": last_json(read(w, "torch.out")),
        "torch_syms": read(w, "torch_syms.out").splitlines(),
        "sysprobe": last_json(read(w, "sysprobe.out")),
        "layouts": {"files": sorted(os.listdir(layouts)) if os.path.isdir(layouts) else [],
                    "stdout": read(w, "layouts.out").splitlines()[-4:]},
        "demo": demo_report(w),
        "div_zero": demo_report(w, "div"),
        "live": last_json(read(w, "live.out")),
        "cupti_baseline": json_lines(read(w, "cupti_baseline.out")),
        "cupti": json_lines(read(w, "cupti.out")),
        "inject": {"output": read(w, "inject.out").strip(),
                   "library": last_json(read(w, "inject.json"))},
        "cuda": cuda_report(w),
    }
    print(json.dumps(rep, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
