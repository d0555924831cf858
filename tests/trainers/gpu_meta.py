#!/usr/bin/python3
"""A seeded model trained in a loop on torch's meta device: GPU check requests without a GPU.

Meta tensors have shapes and dtypes but no data, as CUDA tensors have data the daemon cannot
read; with NANWATCH_TEST_GPU_DEVICE=meta in the daemon's environment (test only) BPF writes a
request for each of them. The batch size grows with the iteration (1 + iteration), so that
the requests of one forward pass match the hooks' log of exactly one iteration.

  gpu_meta.py --live [--pace S] [--log FILE] [--fake-lib FILE --poison LAYER --after N]
              [--legacy-socket] [--no-map]
  gpu_meta.py --live --hostile-lib FILE [--legacy-socket]
  gpu_meta.py --live --device cpu --libcuda PATH

--live prints "LIVE <pid>" and trains at once, "STEP n" after each optimizer step; a line on
stdin ends the run. --log: forward hooks on every module write one JSON line per module output
(iteration, step, tid, module id, layer, class, numel, dtype, shape). --fake-lib: a test-side
stand-in for the GPU library runs in this process (fake_cupti.py) and records to FILE;
--legacy-socket: it also listens at the name the library used to; --no-map: it maps no file of
the library's name until a line "map" on stdin (any other line ends the run). --hostile-lib:
a stand-in that lies to the daemon instead (hostile_cupti.py).
--libcuda: dlopen that library first (the driver stub of the CUDA toolkit), as a process that
initialised CUDA maps libcuda.
"""
import argparse
import ctypes
import json
import os
import select
import sys
import threading
import time

import torch
import torch.nn as nn

SEED = 1234


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(32, 32)
        self.act = nn.ReLU()

    def forward(self, x):
        return self.act(self.lin(x))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(16, 32)
        self.blocks = nn.Sequential(Block(), Block())
        self.out = nn.Linear(32, 4)

    def forward(self, x):
        return self.out(self.blocks(self.inp(x)))


def hook_log(model, path, state):
    log = open(path, "w")
    names = {m: n for n, m in model.named_modules()}

    def hook(module, inputs, output):
        log.write(json.dumps({
            "iteration": state["iteration"], "step": state["step"],
            "tid": threading.get_native_id(), "module": id(module), "layer": names[module],
            "class": type(module).__name__, "numel": output.numel(),
            "dtype": str(output.dtype).replace("torch.", ""), "shape": list(output.shape)}) + "\n")
        if module is model:
            log.flush()

    for m in model.modules():
        m.register_forward_hook(hook)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--live", action="store_true", required=True)
    ap.add_argument("--pace", type=float, default=0.01)
    ap.add_argument("--steps", type=int, default=100000)
    ap.add_argument("--device", default="meta")
    ap.add_argument("--log")
    ap.add_argument("--fake-lib")
    ap.add_argument("--poison", default="blocks.1.lin")
    ap.add_argument("--after", type=int, default=5)
    ap.add_argument("--libcuda")
    ap.add_argument("--legacy-socket", action="store_true")
    ap.add_argument("--no-map", action="store_true")
    ap.add_argument("--hostile-lib")
    a = ap.parse_args()
    if a.libcuda:
        ctypes.CDLL(a.libcuda)
    torch.manual_seed(SEED)
    model = Net().to(a.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    state = {"iteration": 0, "step": 0}
    if a.log:
        hook_log(model, a.log, state)
    lib = None
    if a.fake_lib:
        import fake_cupti
        names = {id(m): n for n, m in model.named_modules()}
        poison = dict(model.named_modules())[a.poison]
        lib = fake_cupti.FakeLibrary(a.fake_lib, id(poison), a.after, names,
                                     legacy=a.legacy_socket, map_lib=not a.no_map)
        lib.start()
    elif a.hostile_lib:
        import hostile_cupti
        lib = hostile_cupti.HostileLibrary(a.hostile_lib, legacy=a.legacy_socket)
        lib.start()
    print("LIVE %d" % os.getpid(), flush=True)
    try:
        for step in range(a.steps):
            state["step"] = step
            state["iteration"] = step
            x = torch.randn(1 + step, 16, device=a.device)
            loss = model(x).square().mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            print("STEP %d" % (step + 1), flush=True)
            if select.select([sys.stdin], [], [], 0)[0]:
                if sys.stdin.readline().strip() != "map" or lib is None:
                    break
                lib.map_library()
            time.sleep(a.pace)
    finally:
        if lib is not None:
            lib.close()


if __name__ == "__main__":
    main()
