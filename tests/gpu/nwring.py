# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""The daemon's half of the GPU path, played from inside a test (bpf/nwgpu.h).

Ring: a memfd laid out like the gpu_ring map (NW_GPU_SLOTS + 1 entries of NW_GPU_REQ_SIZE
bytes; entry 0 the header), written as BPF writes it: the slot, its seq last, then head.
Link: a connection to libnanwatch_cupti.so's socket in this process (cupti.sock in the
directory .nanwatch-cupti-PID.XXXXXX it makes in NANWATCH_CUPTI_DIR or /tmp), HELLO with the
memfd passed by SCM_RIGHTS, READY back, then RESULT, STATS and NOTICE messages read by a thread.
Producer: forward hooks that write a request for every CUDA module output, in the training
thread right after the module returns (where BPF's uretprobe writes it), and for each
tensor input gated on that output (origin against propagated), keeping each request's
context (step, layer, module, role) by seq, as the daemon keeps it in the slot's ctx.

Usable without torch (Ring, Link); nothing here needs a GPU but the library behind the socket.
"""
import mmap
import os
import socket
import struct
import threading
import time

NW_GPU_VERSION = 1
NW_GPU_SLOTS = 4096
NW_GPU_REQ_SIZE = 256
NW_NO_INDEX = 0xFF
MSG_HELLO, MSG_READY, MSG_RESULT, MSG_STATS, MSG_NOTICE = 1, 2, 3, 4, 5
ROLE_OUTPUT, ROLE_INPUT, ROLE_LOSS, ROLE_PARAM = 0, 1, 2, 3
DT_F16, DT_F32, DT_F64, DT_BF16 = 1, 2, 3, 4
R_FLAGS = {1: "scanned", 2: "gated_out", 4: "capturing", 8: "dtype", 16: "no_memory",
           32: "no_stream", 64: "stale", 128: "launch_error"}
STATS = ["requests", "scans", "bytes", "results", "capturing", "dtype", "no_memory", "stale",
         "launch_error", "gated_out", "launches"]
READY_STATE = {1: "subscribed", 2: "other_subscriber", 4: "kernel", 8: "pinned", 16: "late"}
MODES = {1: "callback", 2: "interpose"}

# struct nw_gpu_req's first 64 bytes: seq data numel gate tid dtype role device index0
# index1 flags reserved[2]
REQ = struct.Struct("<QQQQIIBbBBIQQ")
RESULT = struct.Struct("<QQQQQQQII")  # struct nw_gpu_result
MSG = struct.Struct("<II")
HELLO = struct.Struct("<IIII")
READY = struct.Struct("<IIIIiI")
assert REQ.size == 64 and RESULT.size == 64


def flag_names(bits, table):
    return [n for b, n in sorted(table.items()) if bits & b]


def order_key_bits(key, dtype):
    """bpf/nwfloat.h's nw_key_bits: an order key back to the element's bits."""
    width = {DT_F16: 16, DT_BF16: 16, DT_F32: 32, DT_F64: 64}[dtype]
    sign = 1 << (width - 1)
    if key & sign:
        return key & ~sign
    return ~key & (sign | (sign - 1))


def bits_value(bits, dtype):
    """An element's bits as a Python float."""
    if dtype == DT_F64:
        return struct.unpack("<d", struct.pack("<Q", bits))[0]
    if dtype == DT_F32:
        return struct.unpack("<f", struct.pack("<I", bits))[0]
    if dtype == DT_BF16:
        return struct.unpack("<f", struct.pack("<I", bits << 16))[0]
    return struct.unpack("<e", struct.pack("<H", bits))[0]


class Ring:
    """The request ring in a memfd; one producer (this process)."""

    def __init__(self):
        self.size = (NW_GPU_SLOTS + 1) * NW_GPU_REQ_SIZE
        self.fd = os.memfd_create("nw-gpu-ring", os.MFD_CLOEXEC)
        os.ftruncate(self.fd, self.size)
        self.m = mmap.mmap(self.fd, self.size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        self.head = 0
        self.lock = threading.Lock()

    def put(self, data, numel, dtype, device, role=ROLE_OUTPUT, gate=0, index0=NW_NO_INDEX,
            index1=NW_NO_INDEX, tid=None):
        """Write one request; returns its seq (position + 1)."""
        with self.lock:
            p = self.head
            off = (1 + p % NW_GPU_SLOTS) * NW_GPU_REQ_SIZE
            seq = p + 1
            struct.pack_into("<Q", self.m, off, 0)  # the slot is being rewritten
            self.m[off + 8:off + 64] = REQ.pack(
                0, data, numel, gate, tid if tid is not None else threading.get_native_id(),
                dtype, role, device, index0, index1, 0, 0, 0)[8:]
            struct.pack_into("<Q", self.m, off, seq)  # seq last
            self.head = p + 1
            struct.pack_into("<Q", self.m, 0, self.head)
            return seq

    def close(self):
        self.m.close()
        os.close(self.fd)


def sock_path(pid=None):
    """The library's socket in its own directory (bpf/nwgpu.h NW_GPU_SOCK_DIR_FMT); None yet."""
    d = os.environ.get("NANWATCH_CUPTI_DIR") or "/tmp"
    prefix = ".nanwatch-cupti-%d." % (pid or os.getpid())
    for name in os.listdir(d):
        path = os.path.join(d, name, "cupti.sock")
        if name.startswith(prefix) and os.path.exists(path):
            return path
    return None


class Link:
    """A connection to the library's socket: HELLO with the ring, then a reader thread."""

    def __init__(self, ring, pid=None, timeout=20.0):
        deadline = time.monotonic() + timeout
        path = sock_path(pid)
        while path is None:
            if time.monotonic() > deadline:
                raise TimeoutError("no library socket after %.0f s" % timeout)
            time.sleep(0.05)
            path = sock_path(pid)
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.s.connect(path)
        hello = MSG.pack(MSG_HELLO, HELLO.size) + HELLO.pack(NW_GPU_VERSION, NW_GPU_SLOTS,
                                                             NW_GPU_REQ_SIZE, 0)
        socket.send_fds(self.s, [hello], [ring.fd])
        self.s.settimeout(timeout)
        msg = self.s.recv(4096)
        t, n = MSG.unpack_from(msg)
        if t != MSG_READY or n < READY.size:
            raise RuntimeError("expected READY, got type %d (%d bytes)" % (t, n))
        v, mode, state, devices, drv, _ = READY.unpack_from(msg, MSG.size)
        self.ready = {"version": v, "mode": MODES.get(mode, mode), "state": state,
                      "state_names": flag_names(state, READY_STATE), "devices": devices,
                      "cuda_driver": drv}
        self.results, self.notices, self.stats = [], [], None
        self.cond = threading.Condition()
        self.closed = False
        self.s.settimeout(None)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        while True:
            try:
                msg = self.s.recv(8192)
            except OSError:
                msg = b""
            with self.cond:
                if not msg:
                    self.closed = True
                    self.cond.notify_all()
                    return
                t, n = MSG.unpack_from(msg)
                body = msg[MSG.size:MSG.size + n]
                if t == MSG_RESULT:
                    for i in range(len(body) // RESULT.size):
                        f = RESULT.unpack_from(body, i * RESULT.size)
                        self.results.append(dict(zip(
                            ("seq", "scanned", "nan", "posinf", "neginf", "min_key",
                             "max_key", "flags", "pad"), f)))
                elif t == MSG_STATS:
                    vals = struct.unpack_from("<%dQ" % (len(body) // 8), body)
                    self.stats = dict(zip(STATS, vals))
                elif t == MSG_NOTICE:
                    self.notices.append(body.decode("utf-8", "replace"))
                self.cond.notify_all()

    def wait_results(self, pred, timeout):
        """Wait until pred(results) holds (or the link closes); returns whether it held."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while not pred(self.results):
                left = deadline - time.monotonic()
                if left <= 0 or self.closed:
                    return False
                self.cond.wait(min(left, 0.2))
            return True

    def wait_stats(self, timeout):
        """The next STATS message after now (the library sends them periodically)."""
        with self.cond:
            before = self.stats
            deadline = time.monotonic() + timeout
            while self.stats is before and not self.closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(min(left, 0.2))
            return self.stats

    def close(self):
        try:
            self.s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.s.close()


def torch_dtype_id(t):
    import torch
    return {torch.float16: DT_F16, torch.float32: DT_F32, torch.float64: DT_F64,
            torch.bfloat16: DT_BF16}.get(t.dtype)


class Producer:
    """Forward hooks writing requests for a model's CUDA outputs and (gated) inputs."""

    def __init__(self, ring, step_ref, inputs=True, numel_cap=None):
        self.ring, self.step, self.inputs = ring, step_ref, inputs
        self.numel_cap = numel_cap  # requests cut to this many elements (per-request cost)
        self.ctx = {}  # seq -> context, as the daemon keeps it
        self.handles = []
        self.on = True

    def _req(self, t, role, gate=0, index0=NW_NO_INDEX):
        import torch
        if not isinstance(t, torch.Tensor) or not t.is_cuda or not t.is_contiguous():
            return 0
        dt = torch_dtype_id(t)
        if dt is None:
            return 0
        n = t.numel() if self.numel_cap is None else min(t.numel(), self.numel_cap)
        return self.ring.put(t.data_ptr(), n, dt, t.device.index, role, gate, index0)

    def attach(self, model, name=""):
        paths = {m: p for p, m in model.named_modules()}

        def hook(mod, inputs, out):
            if not self.on:
                return
            seq = self._req(out, ROLE_OUTPUT)
            if not seq:
                return
            self.ctx[seq] = {"role": "output", "step": self.step[0], "layer": paths[mod],
                             "module": type(mod).__name__, "model": name}
            if not self.inputs:
                return
            for i, x in enumerate(inputs):
                s = self._req(x, ROLE_INPUT, gate=seq, index0=i)
                if s:
                    self.ctx[s] = {"role": "input", "index": i, "gate": seq}

        for m in model.modules():
            self.handles.append(m.register_forward_hook(hook))

    def detach(self):
        for h in self.handles:
            h.remove()
        self.handles = []


def first_bad(link, ctx, dtype_of=None):
    """The first output result with NaN/±Inf in seq order, with its gated inputs' verdict."""
    res = {r["seq"]: r for r in link.results}
    for seq in sorted(res):
        r, c = res[seq], ctx.get(seq)
        if not c or c["role"] != "output" or not (r["nan"] or r["posinf"] or r["neginf"]):
            continue
        ins = [res.get(s) for s, cc in ctx.items() if cc.get("gate") == seq]
        out = dict(c, seq=seq, nan=r["nan"], posinf=r["posinf"], neginf=r["neginf"],
                   scanned=r["scanned"], flags=flag_names(r["flags"], R_FLAGS),
                   min_key=r["min_key"], max_key=r["max_key"])
        out["inputs_results"] = [None if x is None else flag_names(x["flags"], R_FLAGS) +
                                 ["bad" if x["nan"] or x["posinf"] or x["neginf"] else "finite"]
                                 for x in ins]
        out["inputs_finite"] = all(x is not None and not (x["nan"] or x["posinf"] or x["neginf"])
                                   for x in ins)
        return out
    return None
