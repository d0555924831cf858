"""A hostile stand-in for libnanwatch_cupti.so, run as a thread inside a trainer: the target
itself (its pid, its user: the daemon connects to it) lying to the daemon. Test side only
(tests/integration/test_security_gpu.py); it listens where the library does (fake_cupti.py, and
at the old name with legacy) and plays one act per connection, recording each step, with what
it expects of the daemon, in a JSON-lines file:

 1. the ring: a writable mapping, mprotect, a map update (each tried on every connection,
    each failure's errno); READY; then results: a NaN result
    for one output request (checked, so it may count: "anomaly"), the same again three times
    ("invalid": replays), one for a request BPF has not written ("invalid"), one for the slot
    of that output a round later ("invalid"), counts beyond the request ("invalid"); once the
    ring went round, results for two requests it overwrote ("lost"); then a message whose
    header lies about its length ("invalid", the daemon hangs up).
 2. READY, then a RESULT of 65 bytes ("invalid").
 3. READY, then a message longer than NW_GPU_MSG_MAX ("invalid").
 4. READY of another version ("invalid").
 5. another user's library sockets beside its own, tried; READY, then a flood of STATS
    messages; then quiet, connected, until the trainer ends.
"""
import glob
import mmap
import os
import socket
import struct
import threading
import time

import fake_cupti
from fake_cupti import MSG_READY, MSG_RESULT, MSG_STATS, RESULT, SLOTS, decode, msg

FLOOD = 20000
R_SCANNED = 1


def nan_result(seq, numel, nan=None):
    return RESULT.pack(seq, numel, numel if nan is None else nan, 0, 0, (1 << 64) - 1, 0,
                       R_SCANNED, 0)


class HostileLibrary(fake_cupti.FakeLibrary):
    def __init__(self, out_path, legacy=False):
        super().__init__(out_path, None, 0, {}, legacy=legacy)
        self.acts = [self.act_results, self.act_bad_len, self.act_truncated,
                     self.act_bad_version, self.act_flood]

    def run(self):
        try:
            for act in self.acts:
                conn = self.accept()
                ring = self.take_hello(conn)
                act(conn, ring)
                if act is not self.act_flood:
                    self.wait_closed(conn)
            self.record({"done": True})
            while True:
                time.sleep(60)
        except (OSError, ValueError) as e:
            import traceback
            self.record({"error": str(e), "where": traceback.format_exc()})

    def take_hello(self, conn):
        data, fds, _, _ = socket.recv_fds(conn, 4096, 4)
        if len(fds) != 1:
            raise ValueError("HELLO with %d descriptors" % len(fds))
        writes = fake_cupti.ring_writes(fds[0])
        ring = mmap.mmap(fds[0], fake_cupti.RING_BYTES, mmap.MAP_SHARED, mmap.PROT_READ)
        os.close(fds[0])
        self.record({"hello": self.conn, "ring_writes": writes})
        return ring

    def sent(self, what, expect, **extra):
        self.record(dict({"sent": what, "expect": expect, "conn": self.conn}, **extra))

    def ready(self, conn, version=1):
        conn.send(msg(MSG_READY, struct.pack("<IIIIiI", version, 2, 1 | 4 | 8, 1, 13000, 0)))

    def wait_closed(self, conn, timeout=10):
        conn.settimeout(timeout)
        try:
            while conn.recv(64):
                pass
            self.record({"closed": self.conn})
        except socket.timeout:
            self.record({"not_closed": self.conn})

    def others(self):
        """Every other library socket in reach: another user's, in its 0700 directory."""
        base = os.environ.get("NANWATCH_CUPTI_DIR") or "/tmp"
        tried = []
        paths = glob.glob(os.path.join(base, ".nanwatch-cupti-*"))
        for path in sorted(paths):
            if path in (self.dir, self.legacy and self.legacy[1]):
                continue
            if os.path.isdir(path):
                path = os.path.join(path, "cupti.sock")
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            try:
                s.connect(path)
                tried.append({"path": path, "error": None})
            except OSError as e:
                tried.append({"path": path, "error": os.strerror(e.errno)})
            s.close()
        self.record({"others": tried})

    @staticmethod
    def head(ring):
        return struct.unpack_from("<Q", ring, 0)[0]

    @staticmethod
    def request(ring, seq):
        off = (1 + (seq - 1) % SLOTS) * fake_cupti.REQ_SIZE
        req = decode(ring[off:off + fake_cupti.REQ_SIZE])
        return req if req["seq"] == seq else None

    def outputs(self, ring, start, n, timeout=30):
        """The first n output requests after position start, as BPF writes them."""
        found, pos, deadline = [], start, time.monotonic() + timeout
        while len(found) < n:
            if time.monotonic() > deadline:
                raise ValueError("only %d output requests in %d s" % (len(found), timeout))
            if pos >= self.head(ring):
                time.sleep(0.005)
                continue
            req = self.request(ring, pos + 1)
            if req is None:
                time.sleep(0.005)
                continue
            pos += 1
            if req["role"] == "output":
                found.append(req)
        return found

    def act_results(self, conn, ring):
        start = self.head(ring)
        self.ready(conn)
        out, other = self.outputs(ring, start, 2)
        s = out["seq"]
        conn.send(msg(MSG_RESULT, nan_result(s, out["numel"])))
        self.sent("nan", "anomaly", seq=s, numel=out["numel"], iteration=out["iteration"])
        time.sleep(0.2)
        for _ in range(3):
            conn.send(msg(MSG_RESULT, nan_result(s, out["numel"])))
            self.sent("replay", "invalid", seq=s)
        ahead = self.head(ring) + 1000000
        conn.send(msg(MSG_RESULT, nan_result(ahead, 1)))
        self.sent("not_written", "invalid", seq=ahead)
        if self.head(ring) + 1000 < s + SLOTS:
            conn.send(msg(MSG_RESULT, nan_result(s + SLOTS, out["numel"])))
            self.sent("next_round", "invalid", seq=s + SLOTS)
        conn.send(msg(MSG_RESULT, nan_result(other["seq"], other["numel"], other["numel"] + 1)))
        self.sent("counts", "invalid", seq=other["seq"])
        # once BPF went round the ring: two requests it overwrote
        old = [q for q in range(start + 1, start + 4) if q not in (s, other["seq"])][:2]
        deadline = time.monotonic() + 60
        while self.head(ring) < max(old) + SLOTS + 500:
            if time.monotonic() > deadline:
                raise ValueError("the ring did not go round in 60 s")
            time.sleep(0.05)
        conn.send(msg(MSG_RESULT, b"".join(nan_result(q, 1) for q in old)))
        for q in old:
            self.sent("overwritten", "lost", seq=q)
        conn.send(struct.pack("<II", MSG_RESULT, 100) + b"\0" * 10)
        self.sent("bad_header", "invalid")

    def act_bad_len(self, conn, ring):
        self.ready(conn)
        conn.send(msg(MSG_RESULT, b"\0" * 65))
        self.sent("bad_len", "invalid")

    def act_truncated(self, conn, ring):
        self.ready(conn)
        conn.send(msg(MSG_STATS, b"\0" * 5000))
        self.sent("too_long", "invalid")

    def act_bad_version(self, conn, ring):
        self.ready(conn, version=99)
        self.sent("bad_version", "invalid")

    def act_flood(self, conn, ring):
        self.others()
        self.ready(conn)
        body = struct.pack("<11Q", *range(11))
        t0 = time.monotonic()
        for _ in range(FLOOD):
            conn.send(msg(MSG_STATS, body))
        self.sent("flood", "stats", count=FLOOD, seconds=round(time.monotonic() - t0, 3))
        threading.Thread(target=self.wait_closed, args=(conn, 3600), daemon=True).start()
