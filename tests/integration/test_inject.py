"""Loading a library into a running process (nanwatchd --inject, daemon/inject/inject.c).

The targets are tests/inject/counter (a C program: a counter printed every 2 ms from nanosleep
with two helper threads, or lines echoed from a blocking read on a pipe, or a read inside a
dl_iterate_phdr callback, which holds the loader's lock) and /usr/bin/python3 printing a
counter. The library is tests/inject/marker.c: its constructor appends the process's pid to
"<its own path>.loaded". Each injection loads a fresh copy, so each one is a real dlopen whose
constructor must run once; the target must go on unharmed: its counter without a gap or a
duplicate, its blocked read restarted and handed the data written afterwards, and no tracer
left on it. build/tests/inject/nwinject runs the daemon's injection code on any process (the
daemon itself first requires Python with torch); nanwatchd --inject-lib runs it end to end on
a waiting trainer, in a chroot and a mount-namespace container too, where the library is
copied into the target's /tmp and removed once loaded.

Under seccomp (counter seccomp-kill / seccomp-eperm: a filter that kills the process for an
mmap or mprotect with PROT_EXEC, or refuses it with EPERM; uid 65534, no_new_privs) the
injection is refused in one line before anything is touched: the target alive, its counter
unbroken, no mapping of the library, its constructor never run; the same end to end with
nanwatchd --inject-lib on a python that imported torch and put its threads under such a filter
(TSYNC). A library whose code segment no mmap can map (its file offset past what a file may
have: EOVERFLOW) makes dlopen fail after its first mapping, which glibc leaves: the daemon
unmaps it, says so, and the target counts on; the next injection loads.
"""
import glob
import os
import shutil
import struct
import subprocess

from nwharness import (ERROR_TIMEOUT, Fail, Proc, finish_trainer, run_trainer, start_daemon,
                       start_waiting_trainer, tail, trainer_argv, wait_attach, wait_daemon_exit)
from nwchecks import (EVERYWHERE, HOST_ONLY, NOBODY, environments, expect_refusal,
                      target_untouched)

ROUNDS = 50
PY_COUNTER = """
import threading, time
def side():
    while True:
        time.sleep(0.005)
threading.Thread(target=side, daemon=True).start()
import os
print("PID %d" % os.getpid(), flush=True)
i = 0
while True:
    print(i, flush=True)
    i += 1
    time.sleep(0.002)
"""


def inject_dir(ctx):
    d = os.path.join(os.path.dirname(ctx.daemon), "tests", "inject")
    for name in ("counter", "traced", "nwinject", "libmarker.so"):
        if not os.path.isfile(os.path.join(d, name)):
            raise Fail("%s missing: build it with make unit" % os.path.join(d, name))
    return d


def lib_copy(ctx, name):
    """A fresh copy of the marker library (a new file: dlopen loads it anew)."""
    path = os.path.join(ctx.tmp, name + ".so")
    shutil.copy(os.path.join(inject_dir(ctx), "libmarker.so"), path)
    os.chmod(path, 0o644)
    return path


def nwinject(ctx, pid, lib, user=None):
    argv = [os.path.join(inject_dir(ctx), "nwinject"), str(pid), lib]
    if user is not None:
        argv = ["setpriv", "--reuid=%d" % user, "--regid=%d" % user, "--clear-groups",
                "--inh-caps=-all"] + argv
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    return p.returncode, p.stderr.decode("utf-8", "replace").splitlines()


def check_loaded(pid, lib, marker=None):
    """The copy's constructor ran once, in pid, and the copy is mapped there."""
    marker = marker or lib + ".loaded"
    try:
        with open(marker) as f:
            got = f.read().split()
    except OSError:
        raise Fail("%s was not loaded into %d (no %s)" % (lib, pid, marker))
    if got != [str(pid)]:
        raise Fail("%s: constructor ran in %s, want once in %d" % (marker, got, pid))
    with open("/proc/%d/maps" % pid) as f:
        if lib not in f.read():
            raise Fail("%s is not in /proc/%d/maps" % (lib, pid))


def inject_ok(ctx, pid, lib):
    rc, err = nwinject(ctx, pid, lib)
    if rc != 0:
        raise Fail("injection into %d exited %d:\n%s" % (pid, rc, tail(err)))
    check_loaded(pid, lib)


def started(proc):
    line = proc.wait_out(lambda l: l.startswith(b"PID "), 30)
    if line is None:
        raise Fail("target printed no PID line:\n%s" % tail(proc.stderr_lines()))
    return int(line.split()[1])


def counter_unharmed(ctx, proc, more=50):
    """The target still runs untraced, prints on, and its counter has no gap or duplicate."""
    target_untouched(proc)
    have = len(proc.out)
    if proc.wait_out(lambda l: len(proc.out) >= have + more, 60) is None:
        raise Fail("target stopped printing:\n%s" % tail(proc.stderr_lines()))
    proc.kill()
    nums = [int(l) for l in proc.out if not l.startswith(b"PID ")]
    bad = [(a, b) for a, b in zip(nums, nums[1:]) if b != a + 1]
    if not nums or nums[0] != 0 or bad:
        raise Fail("counter not contiguous: first %r, breaks %r" % (nums[:1], bad[:5]))
    ctx.log("counter ran to %d without a break" % nums[-1])


def inject_rounds(ctx, argv, tag):
    proc = Proc(argv)
    pid = started(proc)
    for i in range(ROUNDS):
        inject_ok(ctx, pid, lib_copy(ctx, "%s%d" % (tag, i)))
    counter_unharmed(ctx, proc)


@environments(*HOST_ONLY)
def test_inject_c_counter(ctx):
    """50 injections into a C program sleeping in nanosleep, with a thread in a condition
    variable and one allocating: each loads, the counter runs on unbroken."""
    inject_rounds(ctx, [os.path.join(inject_dir(ctx), "counter"), "sleep"], "c")


@environments(*HOST_ONLY)
def test_inject_python_counter(ctx):
    """50 injections into /usr/bin/python3 printing a counter, with a second thread."""
    inject_rounds(ctx, [ctx.python, "-u", "-c", PY_COUNTER], "py")


def blocked_read(ctx, mode):
    proc = Proc([os.path.join(inject_dir(ctx), "counter"), mode], stdin=True)
    pid = started(proc)
    for i in range(ROUNDS):
        inject_ok(ctx, pid, lib_copy(ctx, "%s%d" % (mode, i)))
        proc.send(b"line %d\n" % i, close=False)
        want = b"%d line %d\n" % (i, i)
        if proc.wait_out(lambda l: l == want, 30) is None:
            raise Fail("no %r after injection %d: %r" % (want, i, proc.out[-3:]))
    target_untouched(proc)
    proc.p.stdin.close()
    if proc.wait(30) != 0 or len(proc.out) != ROUNDS + 1:
        raise Fail("target ended %r with %d lines: %r" % (proc.p.returncode, len(proc.out),
                                                           proc.out[-2:]))


@environments(*HOST_ONLY)
def test_inject_blocked_read(ctx):
    """A target blocked in read() on a pipe: after each of 50 injections the read is
    restarted and returns the line written afterwards, nothing lost or repeated."""
    blocked_read(ctx, "read")


@environments(*HOST_ONLY)
def test_inject_keeps_fpu_state(ctx):
    """As above, with values in xmm0-xmm3 across the raw system call (the kernel keeps them,
    dlopen does not): the thread's FPU/SSE/AVX state is put back, 50 times."""
    blocked_read(ctx, "xmm")


def refused_inside(ctx, mode, word):
    proc = Proc([os.path.join(inject_dir(ctx), "counter"), mode], stdin=True)
    pid = started(proc)
    if proc.wait_out(lambda l: l == b"IN %s\n" % word, 30) is None:
        raise Fail("target printed no IN %s" % word.decode())
    lib = lib_copy(ctx, mode)
    rc, err = nwinject(ctx, pid, lib)
    if rc == 0 or len(err) != 1 or "no thread at a safe point" not in err[0]:
        raise Fail("inside %s: exit %d, stderr %r" % (word.decode(), rc, err))
    if os.path.exists(lib + ".loaded"):
        raise Fail("library loaded although refused")
    target_untouched(proc)
    proc.send(b"leave\n", close=False)
    if proc.wait_out(lambda l: l == b"OUT %s\n" % word, 30) is None:
        raise Fail("target did not leave the callback")
    inject_ok(ctx, pid, lib)
    proc.send(b"after\n", close=False)
    if proc.wait_out(lambda l: l == b"0 after\n", 30) is None:
        raise Fail("target did not read on after the injection: %r" % proc.out[-3:])
    target_untouched(proc)


@environments(*HOST_ONLY)
def test_inject_refused_inside_loader(ctx):
    """The only thread blocked inside dl_iterate_phdr (the loader's lock held): refused, the
    library not loaded; once the callback returned, the injection goes through."""
    refused_inside(ctx, "phdr", b"PHDR")


@environments(*HOST_ONLY)
def test_inject_refused_inside_fork(ctx):
    """The only thread blocked in a pthread_atfork handler inside fork() (which goes on to
    take every malloc arena's lock): refused; once fork returned, the injection goes
    through."""
    refused_inside(ctx, "fork", b"FORK")


@environments(*HOST_ONLY)
def test_inject_refused_deep_in_malloc(ctx):
    """The only thread blocked in a write deep in stdio's frames (more than 8 KiB of stack)
    inside malloc_stats, which holds the main arena's lock that dlopen's malloc would wait for
    in the same thread: its call chain, unwound, shows it; refused, the target untouched."""
    proc = Proc([os.path.join(inject_dir(ctx), "counter"), "mstats"])
    pid = started(proc)
    if proc.wait_out(lambda l: l == b"IN MSTATS\n", 30) is None:
        raise Fail("target printed no IN MSTATS")
    lib = lib_copy(ctx, "mstats")
    rc, err = nwinject(ctx, pid, lib)
    if rc != 1 or len(err) != 1 or "no thread at a safe point" not in err[0]:
        raise Fail("inside malloc_stats: exit %d, stderr %r" % (rc, err))
    if os.path.exists(lib + ".loaded"):
        raise Fail("library loaded although refused")
    target_untouched(proc)


@environments(*HOST_ONLY)
def test_inject_dlopen_error(ctx):
    """A file dlopen rejects: dlerror's message in one line, exit 1, and the target (its
    thread's registers put back after two calls) counts on unbroken."""
    proc = Proc([os.path.join(inject_dir(ctx), "counter"), "sleep"])
    pid = started(proc)
    bad = os.path.join(ctx.tmp, "notalib.so")
    with open(bad, "w") as f:
        f.write("not an ELF file\n" * 64)
    rc, err = nwinject(ctx, pid, bad)
    if rc != 1 or len(err) != 1 or "failed to load %s" % bad not in err[0] or \
            "invalid ELF header" not in err[0]:
        raise Fail("a non-ELF library: exit %d, stderr %r" % (rc, err))
    ctx.log(err[0])
    inject_ok(ctx, pid, lib_copy(ctx, "after-error"))
    counter_unharmed(ctx, proc)


@environments(*HOST_ONLY)
def test_inject_refused_traced(ctx):
    """A target another tracer holds: one line naming that tracer, exit 1, nothing loaded,
    the target runs on under its tracer, its counter unbroken."""
    d = inject_dir(ctx)
    proc = Proc([os.path.join(d, "traced"), os.path.join(d, "counter"), "sleep"])
    pid = started(proc)
    lib = lib_copy(ctx, "traced")
    rc, err = nwinject(ctx, pid, lib)
    want = "already traced by pid %d" % proc.pid
    if rc != 1 or len(err) != 1 or want not in err[0]:
        raise Fail("traced target: exit %d, stderr %r, want one line with %r" % (rc, err, want))
    if os.path.exists(lib + ".loaded"):
        raise Fail("library loaded although refused")
    with open("/proc/%d/status" % pid) as f:
        if "TracerPid:\t%d\n" % proc.pid not in f.read():
            raise Fail("the target's tracer changed")
    have = len(proc.out)
    if proc.wait_out(lambda l: len(proc.out) >= have + 50, 60) is None:
        raise Fail("target stopped printing")
    proc.kill()
    nums = [int(l) for l in proc.out if not l.startswith(b"PID ")]
    if nums != list(range(len(nums))):
        raise Fail("counter broken under refusal")
    ctx.log(err[0])


@environments(*HOST_ONLY)
def test_inject_refused_other_user(ctx):
    """Without CAP_SYS_PTRACE (another user, no capabilities), a root process is refused in
    one line, untouched."""
    proc = Proc([os.path.join(inject_dir(ctx), "counter"), "sleep"])
    pid = started(proc)
    lib = lib_copy(ctx, "user")
    rc, err = nwinject(ctx, pid, lib, user=65534)
    if rc != 1 or len(err) != 1 or "CAP_SYS_PTRACE" not in err[0]:
        raise Fail("as nobody: exit %d, stderr %r" % (rc, err))
    if os.path.exists(lib + ".loaded"):
        raise Fail("library loaded although refused")
    counter_unharmed(ctx, proc)


def container_marker(ctx, pid):
    """The private copy's marker inside the target's root; the copy itself must be gone."""
    tmp = os.path.join(ctx.env.root, "tmp")
    markers = glob.glob(os.path.join(tmp, ".nanwatch-inject-*-%d.so.loaded" % pid))
    left = glob.glob(os.path.join(tmp, ".nanwatch-inject-*-%d.so" % pid))
    for m in markers:
        os.unlink(m)
    if left:
        raise Fail("the private copy was left in the target's root: %s" % left)
    if len(markers) != 1:
        raise Fail("want one marker in %s, found %r" % (tmp, markers))
    return markers[0]


@environments(*EVERYWHERE)
def test_inject_daemon_trainer(ctx):
    """nanwatchd --inject-lib on a waiting trainer: loaded before the attach line (in a chroot
    or container through a private copy in its /tmp, removed), and the trainer trains exactly
    as it does alone."""
    steps = ("--steps", "6")
    trace = run_trainer(ctx, "healthy", *steps)["trace"]
    trainer = start_waiting_trainer(ctx, "healthy", *steps)
    lib = lib_copy(ctx, "daemon")
    daemon = start_daemon(ctx, trainer.pid, extra=("--inject-lib", lib))
    wait_attach(daemon)
    with open("/proc/%d/maps" % trainer.pid) as f:
        maps = f.read()
    if ctx.env.root is None:
        check_loaded(trainer.pid, lib)
    else:
        marker = container_marker(ctx, trainer.pid)
        ctx.log("loaded through %s" % marker)
        if "/tmp/" + os.path.basename(marker)[:-len(".loaded")] not in maps:
            raise Fail("the private copy is not mapped in %d" % trainer.pid)
    trainer.send(b"go\n")
    finish_trainer(ctx, trainer, "healthy", trace)
    wait_daemon_exit(daemon)


@environments(*HOST_ONLY)
def test_inject_daemon_refused_traced(ctx):
    """nanwatchd --inject on a trainer another tracer holds: one line, no attach, and the
    trainer trains exactly as it does alone."""
    steps = ("--steps", "4")
    trace = run_trainer(ctx, "healthy", *steps)["trace"]
    traced = os.path.join(inject_dir(ctx), "traced")
    trainer = Proc([traced] + trainer_argv(ctx, "healthy", "--wait", *steps), stdin=True)
    line = trainer.wait_out(lambda l: l.startswith(b"READY "), 60)
    if line is None:
        raise Fail("traced trainer printed no READY:\n%s" % tail(trainer.stderr_lines()))
    pid = int(line.split()[1])
    lib = lib_copy(ctx, "daemon-traced")
    daemon = start_daemon(ctx, pid, extra=("--inject-lib", lib))
    expect_refusal(ctx, daemon, ["already traced by pid %d" % trainer.pid])
    if os.path.exists(lib + ".loaded"):
        raise Fail("library loaded although refused")
    trainer.send(b"go\n")
    finish_trainer(ctx, trainer, "healthy", trace)


def as_nobody(argv, **kw):
    """argv as uid NOBODY with no_new_privs: the attacker's (or a sandboxed job's) process."""
    return Proc(["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups",
                 "--no-new-privs"] + argv, **kw)


def mapped(pid, lib):
    with open("/proc/%d/maps" % pid) as f:
        return [line for line in f.read().splitlines() if lib in line]


def world_readable_copy(ctx, name):
    """lib_copy in a directory uid NOBODY can read (the daemon loads it into NOBODY's process)."""
    os.chmod(ctx.tmp, 0o755)
    return lib_copy(ctx, name)


def refused_seccomp(ctx, mode):
    proc = as_nobody([os.path.join(inject_dir(ctx), "counter"), mode])
    pid = started(proc)
    with open("/proc/%d/status" % pid) as f:
        if "Seccomp:\t2\n" not in f.read():
            raise Fail("the target is not under a seccomp filter")
    lib = world_readable_copy(ctx, mode)
    rc, err = nwinject(ctx, pid, lib)
    target_untouched(proc)
    if os.path.exists(lib + ".loaded") or mapped(pid, lib):
        raise Fail("%s: the library was loaded or mapped: %s" % (mode, mapped(pid, lib)))
    if rc != 1 or len(err) != 1 or "under seccomp" not in err[0]:
        raise Fail("%s: exit %d, stderr %r, want one line naming seccomp" % (mode, rc, err))
    ctx.log(err[0])
    counter_unharmed(ctx, proc)


@environments(*HOST_ONLY)
def test_inject_refused_seccomp_kill(ctx):
    """A target whose filter kills the process for mmap(PROT_EXEC): refused in one line, the
    target alive and counting, nothing mapped."""
    refused_seccomp(ctx, "seccomp-kill")


@environments(*HOST_ONLY)
def test_inject_refused_seccomp_eperm(ctx):
    """A target whose filter refuses mmap(PROT_EXEC) with EPERM: refused in one line, no
    mapping of the library left behind, the target counting."""
    refused_seccomp(ctx, "seccomp-eperm")


def unmappable_copy(ctx, name):
    """A copy of the marker library whose code segment's file offset is past 2^63: the
    loader maps the first segment, then the code's mmap fails (EOVERFLOW)."""
    path = lib_copy(ctx, name)
    with open(path, "r+b") as f:
        elf = bytearray(f.read())
        phoff, = struct.unpack_from("<Q", elf, 0x20)
        size, count = struct.unpack_from("<HH", elf, 0x36)
        for i in range(count):
            at = phoff + i * size
            kind, flags, off = struct.unpack_from("<IIQ", elf, at)
            if kind == 1 and flags & 1:  # PT_LOAD, PF_X
                struct.pack_into("<Q", elf, at + 8, off + (1 << 63))  # alignment kept
                break
        else:
            raise Fail("no executable PT_LOAD in %s" % path)
        f.seek(0)
        f.write(elf)
    return path


@environments(*HOST_ONLY)
def test_inject_failed_load_unmapped(ctx):
    """dlopen fails after it mapped the library (a later segment's mmap refused): one line
    with the loader's reason saying the mapping was removed, none of the file left in
    /proc/PID/maps, the target counting on; a good copy loads after it."""
    proc = Proc([os.path.join(inject_dir(ctx), "counter"), "sleep"])
    pid = started(proc)
    bad = unmappable_copy(ctx, "unmappable")
    rc, err = nwinject(ctx, pid, bad)
    target_untouched(proc)
    if mapped(pid, bad):
        raise Fail("mappings of %s left in %d: %s" % (bad, pid, mapped(pid, bad)))
    if rc != 1 or len(err) != 1 or "failed to map segment" not in err[0] or \
            "was unmapped" not in err[0]:
        raise Fail("an unmappable library: exit %d, stderr %r" % (rc, err))
    ctx.log(err[0])
    inject_ok(ctx, pid, lib_copy(ctx, "after-unmappable"))
    counter_unharmed(ctx, proc)


SANDBOXED_TORCH = r"""
import ctypes, os, struct, sys
import torch
def op(code, k, jt=0, jf=0):
    return struct.pack("HBBI", code, jt, jf, k)
LD, JEQ, JSET, RET = 0x20, 0x15, 0x45, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, JSET|K, BPF_RET|K
ALLOW, KILL = 0x7fff0000, 0x80000000  # SECCOMP_RET_ALLOW, SECCOMP_RET_KILL_PROCESS
prog = b"".join([op(LD, 4), op(JEQ, 0xc000003e, 1, 0), op(RET, ALLOW),  # x86-64 only
                 op(LD, 0), op(JEQ, 9, 1, 0), op(JEQ, 10, 0, 3),  # mmap, mprotect
                 op(LD, 32), op(JSET, 4, 0, 1), op(RET, KILL), op(RET, ALLOW)])  # PROT_EXEC
class Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]
libc = ctypes.CDLL(None, use_errno=True)
fprog = Fprog(len(prog) // 8, prog)
# seccomp(SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC): torch's threads too
if libc.prctl(38, 1, 0, 0, 0) or libc.syscall(317, 1, 1, ctypes.byref(fprog)):
    sys.exit("seccomp: errno %d" % ctypes.get_errno())
print("READY %d" % os.getpid(), flush=True)
sys.stdin.read()
"""


@environments(*HOST_ONLY)
def test_inject_daemon_refused_seccomp(ctx):
    """nanwatchd --inject-lib on a python with torch whose threads run under a filter that
    kills the process for mmap(PROT_EXEC), as uid 65534: one line naming seccomp, non-zero
    exit, no attach; the target alive, untraced, nothing of the library mapped."""
    target = as_nobody([ctx.python, "-c", SANDBOXED_TORCH], stdin=True)
    line = target.wait_out(lambda l: l.startswith(b"READY "), 120)
    if line is None:
        raise Fail("sandboxed python printed no READY:\n%s" % tail(target.stderr_lines()))
    pid = int(line.split()[1])
    lib = world_readable_copy(ctx, "daemon-seccomp")
    daemon = start_daemon(ctx, pid, extra=("--inject-lib", lib))
    if daemon.wait(ERROR_TIMEOUT) is None:
        raise Fail("the daemon still runs after %d s" % ERROR_TIMEOUT)
    target_untouched(target)
    if os.path.exists(lib + ".loaded") or mapped(pid, lib):
        raise Fail("the library was loaded or mapped: %s" % mapped(pid, lib))
    expect_refusal(ctx, daemon, ["under seccomp"])
    target.p.stdin.close()
    if target.wait(30) != 0:
        raise Fail("the sandboxed python ended %r:\n%s" % (target.p.returncode,
                                                          tail(target.stderr_lines())))
