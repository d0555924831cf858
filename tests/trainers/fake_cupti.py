"""A test-side stand-in for libnanwatch_cupti.so, run as a thread inside a trainer (the daemon
checks that its peer is the target itself, as it would be for the real library).

It speaks the socket protocol of bpf/nwgpu.h: listens at cupti.sock in a directory of its own
made in $NANWATCH_CUPTI_DIR (listen_private), maps a page of a file named libnanwatch_cupti.so
there (the daemon connects only to a process that maps the library), takes HELLO and the request
ring's descriptor, maps the ring read-only (and records whether a writable mapping was refused),
answers READY, says one NOTICE, and then reads every request from the ring as the library
would. For tests of whom a daemon connects to: legacy also listens at the name the library used
to bind ($NANWATCH_CUPTI_DIR/.nanwatch-cupti-PID.sock, what a daemon of before looks for), each
connection recorded with the listener it came through; map_lib=False maps no library name until
map_library() is called. It scans nothing (meta tensors have no data):
results follow a plan. The first output request of module `poison` whose iteration is at least
`after` iterations past the first one seen is answered as all NaN; the requests gated on it
(its call's inputs and parameters) as scanned and finite; every other gated request as
GATED_OUT, as the real library answers them. The loss request 10 iterations later is answered
as NaN too. Half a second after the poisoned output's answers
it closes the connection once, as a library that restarts would, and serves the daemon's next
one the same way (NOTICE again included). Every request (with the number of the connection it
came in) and that choice go to a JSON-lines file for the test to compare with the trainer's
forward hooks.
"""
import ctypes
import errno
import json
import mmap
import os
import select
import socket
import struct
import tempfile
import threading
import time

SLOTS = 4096
REQ_SIZE = 256
RING_BYTES = (SLOTS + 1) * REQ_SIZE
MSG_HELLO, MSG_READY, MSG_RESULT, MSG_STATS, MSG_NOTICE = 1, 2, 3, 4, 5
ROLES = ("output", "input", "loss", "param")
DTYPES = {1: "float16", 2: "float32", 3: "float64", 4: "bfloat16"}
R_SCANNED, R_GATED_OUT = 1, 2
STEP_MASK = (1 << 56) - 1
NO_INDEX = 0xFF
# struct nw_gpu_req: the library's 64 bytes, then struct nw_gpu_ctx (bpf/nanwatch.h)
REQ = struct.Struct("<QQQQIIBbBBIQQ")
CTX = struct.Struct("<QQQQ8QIIIIIIBBB5x64s")
RESULT = struct.Struct("<QQQQQQQII")
NOTICE = b"fake library: meta tensors are not scanned, results follow the test's plan"


def decode(raw):
    (seq, data, numel, gate, tid, dtype, role, device, index0, index1, flags, _r0,
     _r1) = REQ.unpack_from(raw, 0)
    c = CTX.unpack_from(raw, REQ.size)
    return {"seq": seq, "data": data, "numel": numel, "gate": gate, "tid": tid,
            "dtype": DTYPES.get(dtype, dtype), "role": ROLES[role] if role < 4 else role,
            "device": device, "index0": index0, "index1": index1, "flags": flags,
            "step": c[0] & STEP_MASK, "iteration": c[1], "root": c[2], "module": c[3],
            "shape": list(c[4:4 + c[13]]), "depth": c[12], "ngated": c[15],
            "inputs_unknown": c[16], "params_unknown": c[17], "phase": c[18],
            "params_known": c[19], "class": c[21].split(b"\0")[0].decode("ascii", "replace")}


def msg(kind, body):
    return struct.pack("<II", kind, len(body)) + body


def listen_private(base=None):
    """The library's socket as it makes it: cupti.sock (0600) in a directory of its own that
    mkdtemp makes (0700) in base, NANWATCH_CUPTI_DIR or /tmp. Returns (listener, dir, path)."""
    base = base or os.environ.get("NANWATCH_CUPTI_DIR") or "/tmp"
    d = tempfile.mkdtemp(prefix=".nanwatch-cupti-%d." % os.getpid(), dir=base)
    path = os.path.join(d, "cupti.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    os.chmod(path, 0o600)
    listener.listen(1)
    return listener, d, path


def map_library_name(d):
    """A page of a file named libnanwatch_cupti.so in d, mapped: the stand-in is no shared
    library, but the daemon looks for that name in the target's maps before it connects.
    Returns (mapping, path); keep the mapping."""
    path = os.path.join(d, "libnanwatch_cupti.so")
    with open(path, "wb") as f:
        f.write(b"\0" * mmap.PAGESIZE)
    fd = os.open(path, os.O_RDONLY)
    try:
        return mmap.mmap(fd, mmap.PAGESIZE, mmap.MAP_SHARED, mmap.PROT_READ), path
    finally:
        os.close(fd)


def listen_legacy():
    """The name the library used to listen at (its pid in NANWATCH_CUPTI_DIR or /tmp): what
    a daemon that guesses the path connects to. Returns (listener, path), or None when another
    user took the name first (as the library then could not listen at all)."""
    base = os.environ.get("NANWATCH_CUPTI_DIR") or "/tmp"
    path = os.path.join(base, ".nanwatch-cupti-%d.sock" % os.getpid())
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        listener.bind(path)
    except OSError:
        listener.close()
        return None
    os.chmod(path, 0o600)
    listener.listen(1)
    return listener, path


def ring_writes(fd):
    """What a peer holding the ring's descriptor can write, each tried: a shared writable
    mapping, a read-only one made writable (mprotect), a BPF_MAP_UPDATE_ELEM (one that works
    zeroes slot 1). Each None (it worked) or the errno name it failed with."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.syscall.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_void_p, ctypes.c_uint]
    failed = lambda: errno.errorcode.get(ctypes.get_errno(), ctypes.get_errno())
    out = {}
    try:
        mmap.mmap(fd, RING_BYTES, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        out["mmap_write"] = None
    except OSError as e:
        out["mmap_write"] = errno.errorcode.get(e.errno, e.errno)
    addr = libc.mmap(None, RING_BYTES, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if addr in (None, ctypes.c_void_p(-1).value):
        out["mprotect_write"] = "mmap: %s" % failed()
    else:
        r = libc.mprotect(addr, RING_BYTES, mmap.PROT_READ | mmap.PROT_WRITE)
        out["mprotect_write"] = None if r == 0 else failed()
        libc.munmap(addr, RING_BYTES)
    key, value = ctypes.c_uint32(1), ctypes.create_string_buffer(REQ_SIZE)
    attr = struct.pack("<IIQQQ", fd, 0, ctypes.addressof(key), ctypes.addressof(value), 0)
    buf = ctypes.create_string_buffer(attr, 128)
    r = libc.syscall(321, 2, buf, 128)  # bpf(BPF_MAP_UPDATE_ELEM)
    out["bpf_update"] = None if r == 0 else failed()
    return out


def remove_private(d):
    """Everything listen_private and map_library_name made (the mapping stays, of a removed
    file)."""
    for name in ("cupti.sock", "libnanwatch_cupti.so"):
        try:
            os.unlink(os.path.join(d, name))
        except OSError:
            pass
    try:
        os.rmdir(d)
    except OSError:
        pass


class FakeLibrary(threading.Thread):
    def __init__(self, out_path, poison, after, names, legacy=False, map_lib=True):
        super().__init__(daemon=True)
        self.out = open(out_path, "w")
        self.poison = poison  # id() of the module whose output is answered as NaN
        self.after = after
        self.names = names  # id() -> layer path, for the record
        self.listener, self.dir, self.path = listen_private()
        self.libmap = None
        if map_lib:
            self.map_library()
        self.legacy = listen_legacy() if legacy else None
        if legacy:
            self.record({"legacy": self.legacy[1] if self.legacy else "taken"})
        self.stats = [0] * 11
        self.poisoned = None  # the poisoned output's seq
        self.poisoned_iter = None
        self.poisoned_loss = False
        self.hung_up = None  # when the poisoned output's answers went out; then: done
        self.conn = 0  # connections served

    def record(self, obj):
        self.out.write(json.dumps(obj) + "\n")
        self.out.flush()

    def map_library(self):
        if self.libmap is None:
            self.libmap = map_library_name(self.dir)[0]
            self.record({"mapped": True})

    def close(self):
        remove_private(self.dir)
        if self.legacy is not None:
            try:
                os.unlink(self.legacy[1])
            except OSError:
                pass

    def accept(self):
        """The next connection, on whichever listener; recorded with it."""
        listeners = {self.listener: "private"}
        if self.legacy is not None:
            listeners[self.legacy[0]] = "legacy"
        ready = select.select(list(listeners), [], [])[0]
        conn, _ = ready[0].accept()
        self.conn += 1
        self.record({"accepted": self.conn, "listener": listeners[ready[0]]})
        return conn

    def run(self):
        while True:
            conn = self.accept()
            try:
                self.serve(conn)
            except (OSError, ValueError) as e:
                import traceback
                self.record({"error": str(e), "where": traceback.format_exc()})
            conn.close()

    def hello(self, conn):
        data, fds, _, _ = socket.recv_fds(conn, 4096, 4)
        kind, length = struct.unpack_from("<II", data)
        version, slots, req_size, _ = struct.unpack_from("<IIII", data, 8)
        if kind != MSG_HELLO or length != 16 or len(fds) != 1:
            raise ValueError("bad HELLO: type %d len %d fds %d" % (kind, length, len(fds)))
        try:
            mmap.mmap(fds[0], RING_BYTES, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            writable = True
        except OSError:
            writable = False
        ring = mmap.mmap(fds[0], RING_BYTES, mmap.MAP_SHARED, mmap.PROT_READ)
        os.close(fds[0])
        self.record({"hello": {"version": version, "slots": slots, "req_size": req_size},
                     "ring_writable": writable})
        conn.send(msg(MSG_READY, struct.pack("<IIIIiI", 1, 2, 1 | 4 | 8, 1, 13000, 0)))
        conn.send(msg(MSG_NOTICE, NOTICE))
        return ring

    def serve(self, conn):
        ring = self.hello(conn)
        conn.setblocking(False)
        # what was written before this connection is an earlier reader's
        pos = ready_head = struct.unpack_from("<Q", ring, 0)[0]
        first_iter, last_stats = None, 0.0
        while True:
            if self.hung_up is not None and self.hung_up is not True and \
                    time.monotonic() - self.hung_up > 0.5:
                self.hung_up = True
                self.record({"hangup": self.conn})
                return
            try:
                if conn.recv(16) == b"":
                    return  # the daemon went away: idle again
            except BlockingIOError:
                pass
            head = struct.unpack_from("<Q", ring, 0)[0]
            results = []
            # a request is taken a few milliseconds after it was written, as the library
            # takes it at the thread's next launch, after the uprobe that wrote it returned
            while pos < ready_head:
                if ready_head - pos > SLOTS:
                    pos = ready_head - SLOTS
                raw = ring[(1 + pos % SLOTS) * REQ_SIZE:(2 + pos % SLOTS) * REQ_SIZE]
                req = decode(raw)
                if req["seq"] != pos + 1:
                    break
                pos += 1
                self.stats[0] += 1
                if first_iter is None and req["role"] == "output":
                    first_iter = req["iteration"]
                results += self.answer(req, first_iter)
            ready_head = head
            for i in range(0, len(results), 63):
                conn.send(msg(MSG_RESULT, b"".join(results[i:i + 63])))
                self.stats[3] += len(results[i:i + 63])
            if time.monotonic() - last_stats > 0.5:
                conn.send(msg(MSG_STATS, struct.pack("<11Q", *self.stats)))
                last_stats = time.monotonic()
            time.sleep(0.005)

    def answer(self, req, first_iter):
        req["layer"] = self.names.get(req["module"])
        self.record({"req": req, "conn": self.conn})
        n = req["numel"]
        if req["role"] == "output" and self.poisoned is None and \
                req["module"] == self.poison and req["iteration"] >= first_iter + self.after:
            self.poisoned, self.poisoned_iter = req["seq"], req["iteration"]
            self.record({"poisoned": req})
            return [RESULT.pack(req["seq"], n, n, 0, 0, (1 << 64) - 1, 0, R_SCANNED, 0)]
        if req["role"] == "loss" and not self.poisoned_loss and self.poisoned is not None \
                and req["iteration"] >= self.poisoned_iter + 10:
            self.poisoned_loss = True
            self.record({"poisoned_loss": req})
            return [RESULT.pack(req["seq"], 1, 1, 0, 0, (1 << 64) - 1, 0, R_SCANNED, 0)]
        if req["role"] in ("input", "param"):
            if req["gate"] == self.poisoned:
                if self.hung_up is None:
                    self.hung_up = time.monotonic()
                # finite: min and max keys of 0.0 and 1.0 (nw_order_key of float32 bits)
                lo, hi = 0x80000000, 0x80000000 | 0x3F800000
                return [RESULT.pack(req["seq"], n, 0, 0, 0, lo, hi, R_SCANNED, 0)]
            self.stats[9] += 1
            return [RESULT.pack(req["seq"], 0, 0, 0, 0, (1 << 64) - 1, 0, R_GATED_OUT, 0)]
        return []
