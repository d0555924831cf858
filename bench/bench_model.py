#!/usr/bin/python3
"""Benchmark trainer for bench/bench.py: one long-lived, seeded CPU training process.

The driver starts one of these per model and commands it over stdin/stdout, so nanwatchd can
attach to and detach from the same process between measurements:

  start   -> {"ready": true, "pid": ..., "model": ..., "params": ..., ...}   (after warm-up)
  run MODE N
          -> {"mode": MODE, "steps": N, "times": [seconds per step], "loss": ...}
  quit    -> exits 0

MODE is how the process instruments itself; the daemon's modes are `plain` here:
  plain    no instrumentation
  hooks    a forward hook on every module testing torch.isfinite(output).all() (the manual
           method; hooks are registered for the window and removed after it)
  anomaly  every step inside torch.autograd.detect_anomaly()

Models:
  transformer  4 encoder layers, d_model 256, 4 heads, ff 1024, batch 16 x 64 tokens, AdamW
  cnn          3 conv blocks (conv, batchnorm, relu, pool) + linear, 32 x 3x32x32, SGD momentum
  scan         one module whose forward returns a fresh float32 tensor of --scan-mib MiB (no
               children, no backward): what the daemon scans per step is known exactly, for
               the scan-rate measurement. It runs no backward pass and no optimizer step, so
               the daemon counts its calls as iterations but no steps: bench.py counts steps
               by the ones it ran while attached

One compute thread (torch.set_num_threads(1) and OMP/OPENBLAS/MKL_NUM_THREADS=1):
this machine has 2 cores; the daemon's BPF programs run in the training thread itself, while its
ring-buffer consumer, the driver and the kernel need the other core. Debian's torch already runs
one intra-op thread here, but its OpenBLAS starts a second, spinning GEMM thread, and with it
transformer step times swing 200..370 ms from CPU contention alone (about 305..335 ms without).
Step times then measure the instrumentation, not the scheduler. --threads N changes all three.
"""
import argparse
import json
import os
import sys
import time
import warnings


def _threads_from_argv():
    """--threads, read before torch loads: OpenBLAS sizes its own pool from the environment."""
    for i, a in enumerate(sys.argv):
        if a == "--threads" and i + 1 < len(sys.argv):
            return sys.argv[i + 1]
        if a.startswith("--threads="):
            return a.split("=", 1)[1]
    return "1"


for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = _threads_from_argv()

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

SEED = 1234
NBATCH = 4  # distinct pre-generated batches, cycled; no data work inside the timed step


class Transformer(nn.Module):
    def __init__(self, vocab=1000, d_model=256, nhead=4, layers=4, ff=1024):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        layer = nn.TransformerEncoderLayer(d_model, nhead, ff, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, x):
        return self.head(self.norm(self.encoder(self.embed(x))))


def conv_block(cin, cout):
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout),
                         nn.ReLU(), nn.MaxPool2d(2))


class CNN(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.features = nn.Sequential(conv_block(3, 32), conv_block(32, 64), conv_block(64, 128))
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Linear(128, classes)

    def forward(self, x):
        return self.classifier(torch.flatten(self.pool(self.features(x)), 1))


class Producer(nn.Module):
    """Returns a new tensor of the input's size each call: the daemon scans all of it."""

    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(()))

    def forward(self, x):
        return x * self.scale


class Bench:
    def __init__(self, name, scan_mib):
        gen = torch.Generator().manual_seed(SEED)
        self.name = name
        self.backward = True
        if name == "transformer":
            self.model = Transformer()
            self.batches = [(torch.randint(0, 1000, (16, 64), generator=gen),
                             torch.randint(0, 1000, (16, 64), generator=gen))
                            for _ in range(NBATCH)]
            self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4)
            loss = nn.CrossEntropyLoss()
            self.loss = lambda out, y: loss(out.reshape(-1, out.shape[-1]), y.reshape(-1))
        elif name == "cnn":
            self.model = CNN()
            self.batches = [(torch.randn(32, 3, 32, 32, generator=gen),
                             torch.randint(0, 10, (32,), generator=gen))
                            for _ in range(NBATCH)]
            self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.9)
            self.loss = nn.CrossEntropyLoss()
        elif name == "scan":
            self.model = Producer()
            n = (scan_mib << 20) // 4
            self.batches = [(torch.rand(n, generator=gen), None)]
            self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01)
            self.backward = False
        else:
            raise ValueError("unknown model %r" % name)
        self.i = 0

    def params(self):
        return sum(p.numel() for p in self.model.parameters())

    def step(self):
        x, y = self.batches[self.i % len(self.batches)]
        self.i += 1
        self.opt.zero_grad(set_to_none=True)
        if not self.backward:
            with torch.no_grad():
                out = self.model(x)
            self.opt.step()
            return float(out[0])
        loss = self.loss(self.model(x), y)
        loss.backward()
        self.opt.step()
        return loss.item()


def output_tensors(out):
    if isinstance(out, torch.Tensor):
        yield out
    elif isinstance(out, (tuple, list)):
        for item in out:
            if isinstance(item, torch.Tensor):
                yield item


def add_hooks(model, bad):
    """The manual method: a forward hook on every module testing isfinite(output).all()."""

    def hook(module, inputs, out):
        for t in output_tensors(out):
            if t.is_floating_point() and not torch.isfinite(t).all():
                bad.append(type(module).__name__)

    return [m.register_forward_hook(hook) for m in model.modules()]


def run(bench, mode, n):
    times, bad, handles, loss = [], [], [], None
    if mode == "hooks":
        handles = add_hooks(bench.model, bad)
    elif mode not in ("plain", "anomaly"):
        raise ValueError("unknown mode %r" % mode)
    try:
        for _ in range(n):
            t0 = time.perf_counter()
            if mode == "anomaly":
                with torch.autograd.detect_anomaly():
                    loss = bench.step()
            else:
                loss = bench.step()
            times.append(time.perf_counter() - t0)
    finally:
        for h in handles:
            h.remove()
    return {"mode": mode, "steps": n, "times": times, "loss": loss, "nonfinite": len(bad)}


def reply(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, choices=("transformer", "cnn", "scan"))
    ap.add_argument("--warmup", type=int, default=3, help="plain steps before READY")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch intra-op and BLAS threads (default 1)")
    ap.add_argument("--scan-mib", type=int, default=64, help="output size of the scan model")
    args = ap.parse_args()

    warnings.filterwarnings("ignore", message=".*[Aa]nomaly [Dd]etection.*")
    torch.manual_seed(SEED)
    torch.set_num_threads(args.threads)
    bench = Bench(args.model, args.scan_mib)
    t0 = time.perf_counter()
    for _ in range(args.warmup):
        bench.step()
    warm = time.perf_counter() - t0
    reply({"ready": True, "pid": os.getpid(), "model": args.model, "params": bench.params(),
           "torch": torch.__version__, "threads": torch.get_num_threads(),
           "openblas_threads": os.environ["OPENBLAS_NUM_THREADS"],
           "warmup_steps": args.warmup, "warmup_s": warm,
           "scan_bytes": (args.scan_mib << 20) if args.model == "scan" else 0})
    for line in sys.stdin:
        cmd = line.split()
        if not cmd:
            continue
        if cmd[0] == "quit":
            break
        try:
            if cmd[0] != "run" or len(cmd) != 3:
                raise ValueError("expected 'run MODE N' or 'quit'")
            reply(run(bench, cmd[1], int(cmd[2])))
        except Exception as e:  # answer, and let the driver decide
            reply({"error": "%s: %s" % (type(e).__name__, e)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
