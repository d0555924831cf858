#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""The scan kernel on the device, alone: the fatbin embedded in libnanwatch_cupti.so (its
.nv_fatbin section) loaded with cuModuleLoadData, nw_scan launched with cuLaunchKernel on
torch's stream, answers read from mapped pinned memory by polling `done` (no sync), each
compared with a reference computed by torch on the same bits (bpf/nwfloat.h's
classification and order keys) and with torch.isnan / isposinf / isneginf.

usage: scan_check.py LIB [--quick]

Cases: float16, bfloat16, float32, float64; sizes 0 .. 2^26; views starting 1 and 3
elements into their storage (the head path); NaN payloads, signalling NaN, ±Inf, ±0,
subnormals, ±max finite; grids of 1, 7 and NW_SCAN_MAX_BLOCKS blocks; every scan of a
dtype back to back on one stream through one scratch (left zeroed after each); the gate
(bad gate: scanned, finite gate: GATED_OUT); then bandwidth of a 1 GiB scan against
torch.isfinite(x).all(). Prints one JSON line.
"""
import ctypes
import json
import struct
import sys
import time

import torch

THREADS, MAX_BLOCKS = 256, 264  # cupti/scan.h
DT = {torch.float16: 1, torch.float32: 2, torch.float64: 3, torch.bfloat16: 4}
BITS = {torch.float16: (torch.int16, 16), torch.bfloat16: (torch.int16, 16),
        torch.float32: (torch.int32, 32), torch.float64: (torch.int64, 64)}
EXP = {torch.float16: 0x7C00, torch.bfloat16: 0x7F80, torch.float32: 0x7F800000,
       torch.float64: 0x7FF0000000000000}
R_SCANNED, R_GATED_OUT = 1, 2
OUT_SIZE = 64  # struct nw_scan_out
I64_MIN = -(1 << 63)


class Args(ctypes.Structure):
    _fields_ = [("data", ctypes.c_uint64), ("numel", ctypes.c_uint64),
                ("out", ctypes.c_uint64), ("gate", ctypes.c_uint64),
                ("scratch", ctypes.c_uint64), ("seq", ctypes.c_uint64),
                ("dtype", ctypes.c_uint32), ("pad", ctypes.c_uint32),
                ("flag", ctypes.c_uint64)]


def fatbin_of(lib):
    """The .nv_fatbin section of an ELF64 shared object."""
    elf = open(lib, "rb").read()
    shoff, = struct.unpack_from("<Q", elf, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    hdrs = [struct.unpack_from("<IIQQQQ", elf, shoff + i * shentsize) for i in range(shnum)]
    stroff = hdrs[shstrndx][4]
    for name, _t, _f, _a, off, size in hdrs:
        if elf[stroff + name:elf.index(b"\0", stroff + name)] == b".nv_fatbin":
            return elf[off:off + size]
    raise SystemExit("no .nv_fatbin section in %s" % lib)


class Cuda:
    def __init__(self, fatbin):
        self.cu = ctypes.CDLL("libcuda.so.1")
        vp, u = ctypes.c_void_p, ctypes.c_uint
        for name, args in (("cuModuleLoadData", [ctypes.POINTER(vp), vp]),
                           ("cuModuleGetFunction", [ctypes.POINTER(vp), vp, ctypes.c_char_p]),
                           ("cuMemHostAlloc", [ctypes.POINTER(vp), ctypes.c_size_t, u]),
                           ("cuMemHostGetDevicePointer_v2",
                            [ctypes.POINTER(ctypes.c_uint64), vp, u]),
                           ("cuLaunchKernel", [vp] + [u] * 7 + [vp, vp, vp])):
            getattr(self.cu, name).argtypes = args
            getattr(self.cu, name).restype = ctypes.c_int
        torch.zeros(1, device="cuda")  # the primary context, current on this thread
        self.image = ctypes.create_string_buffer(fatbin, len(fatbin))
        self.mod, self.fn = ctypes.c_void_p(), ctypes.c_void_p()
        self.ck(self.cu.cuModuleLoadData(ctypes.byref(self.mod),
                                         ctypes.cast(self.image, ctypes.c_void_p)),
                "cuModuleLoadData")
        self.ck(self.cu.cuModuleGetFunction(ctypes.byref(self.fn), self.mod, b"nw_scan"),
                "cuModuleGetFunction")
        self.keep = []

    @staticmethod
    def ck(r, what):
        if r:
            raise RuntimeError("%s: CUresult %d" % (what, r))

    def pinned(self, n):
        """n zeroed struct nw_scan_out in mapped pinned memory; device pointer == host."""
        p, dp = ctypes.c_void_p(), ctypes.c_uint64()
        self.ck(self.cu.cuMemHostAlloc(ctypes.byref(p), n * OUT_SIZE, 0x3), "cuMemHostAlloc")
        self.ck(self.cu.cuMemHostGetDevicePointer_v2(ctypes.byref(dp), p, 0),
                "cuMemHostGetDevicePointer")
        if dp.value != p.value:
            raise RuntimeError("device pointer %#x != host pointer %#x" % (dp.value, p.value))
        ctypes.memset(p, 0, n * OUT_SIZE)
        return p.value

    def launch(self, x, out, scratch, seq, blocks, gate=0, dtype=None, flag=0):
        a = Args(x.data_ptr(), x.numel(), out, gate, scratch.data_ptr(), seq,
                 dtype if dtype is not None else DT[x.dtype], 0, flag)
        params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.pointer(a), ctypes.c_void_p))
        self.keep.append((a, params))
        stream = torch.cuda.current_stream().cuda_stream
        self.ck(self.cu.cuLaunchKernel(self.fn, blocks, 1, 1, THREADS, 1, 1, 0, stream,
                                       ctypes.cast(params, ctypes.c_void_p), None),
                "cuLaunchKernel")


def read_out(addr):
    b = ctypes.string_at(addr, OUT_SIZE)
    f = struct.unpack("<QQQQQQIIQ", b)
    return dict(zip(("scanned", "nan", "posinf", "neginf", "min_key", "max_key", "flags",
                     "pad", "done"), f))


def wait_done(addr, seq, timeout=30.0):
    done = ctypes.c_uint64.from_address(addr + 56)
    deadline = time.monotonic() + timeout
    while done.value != seq:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.0002)
    return True


def reference(x):
    """Counts and finite min/max order keys of x's bits, as bpf/nwfloat.h computes them."""
    it, width = BITS[x.dtype]
    b = x.view(it).to(torch.int64)
    if width < 64:
        b = b & ((1 << width) - 1)
    exp, sign = EXP[x.dtype], 1 << (width - 1)
    if width == 64:
        sign_set, mant = b < 0, b & 0x000FFFFFFFFFFFFF
        allexp = (b & exp) == exp
    else:
        sign_set, mant = (b & sign) != 0, b & ((sign - 1) & ~exp)
        allexp = (b & exp) == exp
    nan = allexp & (mant != 0)
    inf = allexp & (mant == 0)
    r = {"scanned": x.numel(), "nan": int(nan.sum()), "posinf": int((inf & ~sign_set).sum()),
         "neginf": int((inf & sign_set).sum()), "min_key": (1 << 64) - 1, "max_key": 0}
    fin = ~allexp
    if int(fin.sum()):
        if width == 64:  # unsigned keys compared as signed: key ^ 2^63
            sk = torch.where(sign_set, (~b) | I64_MIN, b)[fin]
            lo, hi = int(sk.min()), int(sk.max())
            r["min_key"] = (lo % (1 << 64)) ^ (1 << 63)
            r["max_key"] = (hi % (1 << 64)) ^ (1 << 63)
        else:
            key = torch.where(sign_set, (~b) & ((1 << width) - 1), b | sign)[fin]
            r["min_key"], r["max_key"] = int(key.min()), int(key.max())
    # the C library's view, independent of the bit work
    xf = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    r["torch"] = {"nan": int(torch.isnan(xf).sum()), "posinf": int(torch.isposinf(xf).sum()),
                  "neginf": int(torch.isneginf(xf).sum())}
    return r


def data(dtype, n, gen):
    """n elements: normal values over many magnitudes, and every kind of special."""
    it, width = BITS[dtype]
    x = (torch.randn(n + 3, generator=gen, dtype=torch.float64) *
         torch.exp2(torch.randint(-30, 30, (n + 3,), generator=gen).double())).to(dtype)
    if n == 0:
        return x
    exp = EXP[dtype]
    mant = (1 << (width - 1)) - 1 - exp
    sign = -(1 << (width - 1))  # the sign bit as this width's signed integer
    specials = [exp | 1, exp | (mant >> 1), exp | mant, exp | 1 | sign, exp, exp | sign, 0, sign,
                1, 1 | sign, exp - 1, (exp - 1) | sign, mant, mant | sign]
    b = x.view(it)
    k = max(1, n // 50)
    for s in specials:
        idx = torch.randint(0, n + 3, (k,), generator=gen)
        b[idx] = s if s < (1 << (width - 1)) else s - (1 << width)
    return x


def compare(got, want):
    keys = ("scanned", "nan", "posinf", "neginf", "min_key", "max_key")
    bad = {k: (got[k], want[k]) for k in keys if got[k] != want[k]}
    t = want["torch"]
    if (t["nan"], t["posinf"], t["neginf"]) != (want["nan"], want["posinf"], want["neginf"]):
        bad["torch_counts"] = (t, {k: want[k] for k in ("nan", "posinf", "neginf")})
    if got["flags"] != R_SCANNED:
        bad["flags"] = got["flags"]
    return bad


def correctness(cuda, quick):
    gen = torch.Generator().manual_seed(12)
    sizes = [0, 1, 2, 7, 8, 9, 33, 4097, (1 << 20) + 3] + ([] if quick else [1 << 24])
    cases, failures = 0, []
    for dtype in DT:
        scratch = torch.zeros(6, dtype=torch.int64, device="cuda")
        jobs = []
        for n in sizes:
            full = data(dtype, n, gen).cuda()
            for off in (0, 1, 3):
                x = full[off:off + n] if n else full[:0]
                for blocks in (1, 7, MAX_BLOCKS):
                    jobs.append((x, n, off, blocks))
        outs = cuda.pinned(len(jobs))
        for i, (x, n, off, blocks) in enumerate(jobs):  # back to back, one scratch, no sync
            cuda.launch(x, outs + i * OUT_SIZE, scratch, 1000 + i, blocks)
        for i, (x, n, off, blocks) in enumerate(jobs):
            cases += 1
            addr = outs + i * OUT_SIZE
            if not wait_done(addr, 1000 + i):
                failures.append({"dtype": str(dtype), "n": n, "off": off, "blocks": blocks,
                                 "error": "done never written"})
                break
            bad = compare(read_out(addr), reference(x))
            if bad:
                failures.append({"dtype": str(dtype), "n": n, "off": off, "blocks": blocks,
                                 "diff": {k: str(v) for k, v in bad.items()}})
        if int(scratch.abs().sum()):
            failures.append({"dtype": str(dtype), "error": "scratch not zeroed: %s"
                             % scratch.tolist()})
    return cases, failures


def gate_and_flags(cuda):
    scratch = torch.zeros(6, dtype=torch.int64, device="cuda")
    outs = cuda.pinned(6)
    o = [outs + i * OUT_SIZE for i in range(6)]
    verdicts = torch.full((6,), 7, dtype=torch.int32, device="cuda")  # device memory
    v = [verdicts.data_ptr() + 4 * i for i in range(6)]
    bad = torch.randn(1000, device="cuda")
    bad[17] = float("nan")
    good = torch.randn(1000, device="cuda")
    cuda.launch(bad, o[0], scratch, 1, 7, flag=v[0])
    cuda.launch(good, o[1], scratch, 2, 7, gate=v[0], flag=v[1])  # gate bad: scanned
    cuda.launch(good, o[2], scratch, 3, 7, flag=v[2])
    cuda.launch(bad, o[3], scratch, 4, 7, gate=v[2], flag=v[3])  # gate finite: not scanned
    cuda.launch(good, o[4], scratch, 5, 7, dtype=0, flag=v[4])  # no dtype the kernel reads
    ok = all(wait_done(o[i], i + 1) for i in range(5))
    r = [read_out(a) for a in o[:5]]
    want = [(R_SCANNED, 1, 1000), (R_SCANNED, 0, 1000), (R_SCANNED, 0, 1000),
            (R_GATED_OUT, 0, 0), (8, 0, 0)]
    got = [(x["flags"], x["nan"], x["scanned"]) for x in r]
    # each scan's verdict for what it gates: bad, finite, finite, not scanned, not scanned
    got_v, want_v = verdicts.tolist()[:5], [1, 0, 0, 0, 0]
    return {"ok": ok and got == want and got_v == want_v and not int(scratch.abs().sum()),
            "got": got, "want": want, "verdicts": got_v, "want_verdicts": want_v}


def no_sync(cuda):
    """The answer arrives while the host never synchronises: a long matmul, then the scan."""
    scratch = torch.zeros(6, dtype=torch.int64, device="cuda")
    out = cuda.pinned(1)
    a = torch.randn(8192, 8192, device="cuda")
    torch.cuda.synchronize()
    t0 = time.monotonic()
    c = a @ a
    c[5, 5] = float("inf")
    cuda.launch(c, out, scratch, 77, MAX_BLOCKS)
    enq = time.monotonic() - t0
    ok = wait_done(out, 77)
    seen = time.monotonic() - t0
    r = read_out(out)
    return {"ok": ok and r["posinf"] >= 1, "enqueue_ms": round(enq * 1e3, 3),
            "done_seen_ms": round(seen * 1e3, 3), "posinf": r["posinf"]}


def bandwidth(cuda):
    res = {}
    scratch = torch.zeros(6, dtype=torch.int64, device="cuda")
    outs = cuda.pinned(64)
    for dtype in (torch.bfloat16, torch.float32):
        x = torch.randn((1 << 30) // (2 if dtype == torch.bfloat16 else 4), device="cuda",
                        dtype=dtype)
        gb = x.numel() * x.element_size() / 1e9
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        for i in range(3):  # warm
            cuda.launch(x, outs + i * OUT_SIZE, scratch, 500 + i, MAX_BLOCKS)
        torch.cuda.synchronize()
        e0.record()
        for i in range(10):
            cuda.launch(x, outs + (10 + i) * OUT_SIZE, scratch, 600 + i, MAX_BLOCKS)
        e1.record()
        torch.cuda.synchronize()
        ms = e0.elapsed_time(e1) / 10
        e0.record()
        for _ in range(10):
            torch.isfinite(x).all()
        e1.record()
        torch.cuda.synchronize()
        ms_torch = e0.elapsed_time(e1) / 10
        res[str(dtype)] = {"gib": round(gb / 1.073741824, 3), "scan_ms": round(ms, 3),
                           "scan_gbps": round(gb / ms * 1e3, 1),
                           "isfinite_all_ms": round(ms_torch, 3),
                           "ratio_to_isfinite_all": round(ms / ms_torch, 3)}
        del x
    return res


def main():
    if len(sys.argv) < 2:
        sys.exit("usage: scan_check.py LIB [--quick]")
    quick = "--quick" in sys.argv
    fatbin = fatbin_of(sys.argv[1])
    cuda = Cuda(fatbin)
    line = {"fatbin_bytes": len(fatbin), "device": torch.cuda.get_device_name(0),
            "capability": "%d.%d" % torch.cuda.get_device_capability(0)}
    t0 = time.monotonic()
    line["cases"], line["failures"] = correctness(cuda, quick)
    line["correct_s"] = round(time.monotonic() - t0, 2)
    line["gate_and_flags"] = gate_and_flags(cuda)
    line["no_sync"] = no_sync(cuda)
    if not quick:
        line["bandwidth"] = bandwidth(cuda)
    line["ok"] = (not line["failures"] and line["gate_and_flags"]["ok"] and
                  line["no_sync"]["ok"])
    print(json.dumps(line, sort_keys=True), flush=True)
    return 0 if line["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
