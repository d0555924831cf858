#!/usr/bin/env python3
# SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
"""What this kernel lets a root process do, as one JSON line: the facts nanwatchd and a
ptrace-driven injector depend on, each tried for real with raw system calls (x86-64).

  bpf_map / bpf_map_mmapable   BPF_MAP_CREATE of an array map, plain and BPF_F_MMAPABLE (+ mmap)
  bpf_prog_socket / _kprobe    BPF_PROG_LOAD of "r0 = 0; exit" as a socket filter and as a
                               kprobe-type program (the type uprobes take)
  uprobe_perf_event            perf_event_open on the uprobe PMU at libc's getpid in this process
  uprobe_set_bpf               PERF_EVENT_IOC_SET_BPF of the kprobe program on that event
  ptrace_attach                PTRACE_ATTACH to a child, then detach
  process_vm_readv             8 bytes of a child's memory
Each is {"ok": bool, "errno": name or null}.
"""
import ctypes
import errno
import json
import os
import struct
import subprocess
import sys

SYS_BPF, SYS_PERF_EVENT_OPEN = 321, 298
BPF_MAP_CREATE, BPF_PROG_LOAD = 0, 5
BPF_MAP_TYPE_ARRAY, BPF_F_MMAPABLE = 2, 1 << 10
PROG_SOCKET_FILTER, PROG_KPROBE = 1, 2
PERF_EVENT_IOC_SET_BPF = 0x40042408
PTRACE_ATTACH, PTRACE_DETACH = 16, 17

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]


def result(ret):
    if ret >= 0:
        return {"ok": True, "errno": None}, ret
    e = ctypes.get_errno()
    return {"ok": False, "errno": errno.errorcode.get(e, str(e))}, ret


def bpf(cmd, attr):
    buf = ctypes.create_string_buffer(attr.ljust(128, b"\0"), 128)
    return result(libc.syscall(SYS_BPF, cmd, buf, 128))


def map_create(flags):
    return bpf(BPF_MAP_CREATE, struct.pack("IIIII", BPF_MAP_TYPE_ARRAY, 4, 8, 1, flags))


def prog_load(kind):
    insns = ctypes.create_string_buffer(struct.pack("<BBhi", 0xb7, 0, 0, 0) +
                                        struct.pack("<BBhi", 0x95, 0, 0, 0))
    lic = ctypes.create_string_buffer(b"GPL")
    attr = struct.pack("IIQQIIQII", kind, 2, ctypes.addressof(insns), ctypes.addressof(lic),
                       0, 0, 0, 0, 0)
    return bpf(BPF_PROG_LOAD, attr)


def getpid_offset():
    """(path, file offset) of libc's getpid in this process."""
    addr = ctypes.cast(libc.getpid, ctypes.c_void_p).value
    with open("/proc/self/maps") as f:
        for line in f:
            parts = line.split()
            lo, hi = (int(x, 16) for x in parts[0].split("-"))
            if lo <= addr < hi and len(parts) >= 6:
                return parts[5], addr - lo + int(parts[2], 16)
    return None, None


def uprobe_event():
    try:
        with open("/sys/bus/event_source/devices/uprobe/type") as f:
            pmu = int(f.read())
    except OSError as e:
        return {"ok": False, "errno": "no uprobe PMU: %s" % e.strerror}, -1
    path, off = getpid_offset()
    if path is None:
        return {"ok": False, "errno": "getpid not found in maps"}, -1
    cpath = ctypes.create_string_buffer(path.encode())
    attr = struct.pack("IIQQQQQIIQQ", pmu, 128, 0, 0, 0, 0, 0, 0, 0,
                       ctypes.addressof(cpath), off).ljust(128, b"\0")
    buf = ctypes.create_string_buffer(attr, 128)
    return result(libc.syscall(SYS_PERF_EVENT_OPEN, buf, os.getpid(), -1, -1, 0))


def child_checks():
    out = {}
    child = subprocess.Popen(["sleep", "30"])
    try:
        r, _ = result(libc.ptrace(PTRACE_ATTACH, child.pid, None, None))
        if r["ok"]:
            os.waitpid(child.pid, 0)
            libc.ptrace(PTRACE_DETACH, child.pid, None, None)
        out["ptrace_attach"] = r
        with open("/proc/%d/maps" % child.pid) as f:
            lo = int(f.readline().split("-")[0], 16)
        buf = ctypes.create_string_buffer(8)
        local = struct.pack("QQ", ctypes.addressof(buf), 8)
        remote = struct.pack("QQ", lo, 8)
        lbuf = ctypes.create_string_buffer(local)
        rbuf = ctypes.create_string_buffer(remote)
        libc.process_vm_readv.restype = ctypes.c_ssize_t
        out["process_vm_readv"], _ = result(libc.process_vm_readv(
            child.pid, lbuf, ctypes.c_ulong(1), rbuf, ctypes.c_ulong(1), ctypes.c_ulong(0)))
    finally:
        child.kill()
        child.wait()
    return out


def main():
    out = {}
    out["bpf_map"], fd = map_create(0)
    out["bpf_map_mmapable"], fd = map_create(BPF_F_MMAPABLE)
    if fd >= 0:
        p = libc.mmap(None, 4096, 3, 1, fd, 0)     # PROT_READ|WRITE, MAP_SHARED
        out["bpf_map_mmap"] = {"ok": p not in (None, ctypes.c_void_p(-1).value),
                               "errno": None if p not in (None, ctypes.c_void_p(-1).value)
                               else errno.errorcode.get(ctypes.get_errno())}
    out["bpf_prog_socket"], _ = prog_load(PROG_SOCKET_FILTER)
    out["bpf_prog_kprobe"], prog = prog_load(PROG_KPROBE)
    out["uprobe_perf_event"], ev = uprobe_event()
    if ev >= 0 and prog >= 0:
        out["uprobe_set_bpf"], _ = result(libc.ioctl(ev, PERF_EVENT_IOC_SET_BPF, prog))
    try:
        out.update(child_checks())
    except OSError as e:
        out["child_checks"] = {"ok": False, "errno": str(e)}
    print(json.dumps(out, sort_keys=True))


if __name__ == "__main__":
    sys.exit(main())
