"""Hostile files against the root daemon in service mode (nanwatchd --config FILE): a process
of uid 65534 matches a rule and maps files of its own making, named like the interpreter's and
torch's; the daemon opens and reads them as root. A real trainer (inflight --live) matching the
same rule runs alongside in each test and must be attached, and its anomaly reported, whatever
the attacker does.

files_cut_after_open: a 2 GiB sparse ELF named libpython3.11.so, mapped below the interpreter
(so that it is the first Python image the daemon reads), whose .dynsym spans the file, and a
2 GiB libtorch_python.so; the attacker watches both with inotify and truncates each to one page
once someone else opens it (the old daemon read them through a mapping: SIGBUS, exit 135). The
daemon keeps running, the attacker gets exactly one error event naming its libtorch_python.so,
the attacker saw both files opened (so they were read), and no attach.

files_path_swapped: three attackers map a small ELF named libtorch_python.so (no tensor type in
it) and, once the daemon opens their first decoy libpython3.11.so (inotify; a second decoy, with
a 512 MiB table, kept the old daemon busy before torch), rename the mapped file away and put at
its path a FIFO, a symbolic link to a root-only file, or another ELF (one that does export
THPVariableType). No hang (the old daemon blocked in open(2) on the FIFO), none of the three
substitutes is opened or read (inotify watches on them, set by this test as root), and each
attacker gets one error event judging the mapped file: no tensor type in it.

files_huge_refused: a 2 GiB sparse libtorch_python.so whose .dynsym claims nearly all of it,
re-parsed for the 10 s the service retries a resolve: every attempt is refused by its sizes
(the daemon's --verbose line: well under 1 MiB read, under a second even on a loaded machine),
and the daemon's CPU time over the whole retry window stays under 1.5 s (the old daemon walked
2 GiB every time).

files_huge_budget: the same with tables as large as the resolve's budget lets through (a 32 MiB
.dynsym, 95 MiB of names: 128 MiB with the interpreter's tables), written (a sparse table is
refused unread): every attempt reads within the budget (128 MiB, 5 s), and reads the tables;
the times are reported.
"""
import ctypes
import json
import os
import re
import shutil
import struct
import tempfile
import time

from nwharness import ATTACH_TIMEOUT, DETACH_TIMEOUT, TRAINER_TIMEOUT, Fail, Proc
from nwchecks import (HOST_ONLY, NOBODY, environments, has_event, start_ready,
                      start_trainer, stop_service, usage, wait_events, write_config)

ERROR_WAIT = 60  # the service retries a failing resolve for 10 s before the error event
GIB = 1 << 30
MIB = 1 << 20
BUDGET_BYTES = 128 * MIB  # ELFSYM_BUDGET_BYTES
BUDGET_MS = 5000  # ELFSYM_BUDGET_MS
SYMTAB_CAP = 32 * MIB  # ELFSYM_MAX_SYMTAB
STRTAB_CAP = 96 * MIB  # ELFSYM_MAX_STRTAB
IN_ACCESS, IN_OPEN = 0x1, 0x20

# The attacker, run as uid NOBODY with /usr/bin/python3: argv[1] is its directory, argv[2] a
# JSON list of files [name, size, tables, address, role], tables as for elf() below (symbol
# tables a whole number of entries, else libelf took them for invalid; a negative size: that
# many bytes, written, no hole), then the
# swap: argv[3] "fifo" | "link:TARGET" | "elf" | "". It makes the files, watches them with
# inotify, maps them (one page each, at the fixed low address given, below the interpreter's
# image), prints READY, and then: a file marked cut is truncated to a page 50 ms after someone
# else opens it ("CUT name"); on the first open of the file marked swap-trigger, the file named
# libtorch_python.so is renamed to sub/libtorch_python.so.1 and the substitute, made before
# READY as sub.*, renamed onto its path ("SWAPPED"). It ends when its stdin closes.
ATTACKER = r'''
import ctypes, json, os, select, struct, sys, time

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int, ctypes.c_long]
IN_OPEN = 0x20


def elf(path, size, tables, syms=()):
    """A 64-bit ELF of size bytes (sparse past its first page): .dynsym at tables[0] of
    tables[1] bytes, its names at tables[2] of tables[3]; syms (name, value) in the page."""
    page = bytearray(4096)
    names = b"\0" + b"".join(n.encode() + b"\0" for n, _ in syms)
    if syms:
        tables = (1024, 24 * (len(syms) + 1), 2048, len(names))
        for i, (n, v) in enumerate(syms, 1):
            off = names.index(b"\0" + n.encode() + b"\0") + 1
            page[1024 + 24 * i:1048 + 24 * i] = struct.pack("<IBBHQQ", off, 0x11, 0, 1, v, 8)
        page[2048:2048 + len(names)] = names
    shstr = b"\0.dynsym\0.dynstr\0.shstrtab\0"
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    page[0:64] = struct.pack("<16sHHIQQQIHHHHHH", ident, 3, 62, 1, 0, 64, 128, 0, 64, 56, 1,
                             64, 4, 3)
    page[64:120] = struct.pack("<IIQQQQQQ", 1, 5, 0, 0, 0, 4096, 4096, 4096)
    shdrs = [(0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
             (1, 11, 2, tables[0], tables[0], tables[1], 2, 1, 8, 24),
             (9, 3, 2, tables[2], tables[2], tables[3], 0, 0, 1, 0),
             (17, 3, 0, 0, 512, len(shstr), 0, 0, 1, 0)]
    for i, sh in enumerate(shdrs):
        page[128 + 64 * i:192 + 64 * i] = struct.pack("<IIQQQQIIQQ", *sh)
    page[512:512 + len(shstr)] = shstr
    with open(path, "wb") as f:
        f.write(page)
        if size < 0:  # written, no hole: -size bytes
            chunk = bytes(1 << 20)
            while f.tell() < -size:
                f.write(chunk[:-size - f.tell()])
        f.truncate(max(abs(size), 4096))


home, files, swap = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
os.makedirs(os.path.join(home, "sub"), exist_ok=True)
torch = os.path.join(home, "libtorch_python.so")
if swap == "fifo":
    os.mkfifo(os.path.join(home, "sub.fifo"))
elif swap.startswith("link:"):
    os.symlink(swap[5:], os.path.join(home, "sub.link"))
elif swap == "elf":
    elf(os.path.join(home, "sub.elf"), 4096, None, [("THPVariableType", 0x800)])
ino = libc.inotify_init1(os.O_CLOEXEC)
watched, fds = {}, []
for name, size, tables, addr, role in files:
    path = os.path.join(home, name)
    elf(path, size, tables, [("_unrelated", 0x800)] if tables is None else ())
    fds.append(os.open(path, os.O_RDONLY))
    wd = libc.inotify_add_watch(ino, path.encode(), IN_OPEN)  # from here on: someone else
    watched[wd] = (name, path, role)
# mapped last, from the descriptors open already: the daemon, which comes for the process
# once it maps libtorch_python, finds this process watching
for (name, size, tables, addr, role), fd in zip(files, fds):
    got = libc.mmap(addr, 4096, 1, 2 | 0x100000, fd, 0)  # MAP_PRIVATE | MAP_FIXED_NOREPLACE
    if got != addr:
        sys.exit("mmap of %s at %#x: %s" % (name, addr, os.strerror(ctypes.get_errno())))
    os.close(fd)
print("READY", os.getpid(), flush=True)
while True:
    ready = select.select([ino, 0], [], [])[0]
    if 0 in ready and not os.read(0, 64):
        break
    if ino not in ready:
        continue
    buf = os.read(ino, 4096)
    for off in range(0, len(buf), 16):
        wd, mask, _, nlen = struct.unpack_from("<iIII", buf, off)
        name, path, role = watched.pop(wd, (None, None, None))
        if role == "cut":
            time.sleep(0.05)  # once the opener had time to map it (the old daemon did)
            os.truncate(path, 4096)
            print("CUT", name, flush=True)
        elif role == "swap-trigger" and swap:
            os.rename(torch, os.path.join(home, "sub", "libtorch_python.so.1"))
            os.rename(os.path.join(home, "sub." + swap.split(":")[0]), torch)
            print("SWAPPED", flush=True)
'''

DECOY = 0x100000  # attacker mappings: below the non-PIE interpreter's image at 0x400000
REFUSED_RE = re.compile(r"nanwatchd: pid (\d+) (refused|resolved) in ([0-9.]+) ms, (\d+) KiB")


class Inotify:
    """Watches this (root) process sets on files, read without blocking."""

    def __init__(self):
        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self.fd < 0:
            raise Fail("inotify_init1: %s" % os.strerror(ctypes.get_errno()))
        self.names = {}

    def add(self, path, mask=IN_OPEN | IN_ACCESS):
        wd = self.libc.inotify_add_watch(self.fd, path.encode(), mask)
        if wd < 0:
            raise Fail("inotify_add_watch %s: %s" % (path, os.strerror(ctypes.get_errno())))
        self.names[wd] = path

    def events(self):
        got = []
        while True:
            try:
                buf = os.read(self.fd, 4096)
            except BlockingIOError:
                return got
            for off in range(0, len(buf), 16):
                wd, mask = struct.unpack_from("<iI", buf, off)
                got.append((self.names.get(wd, "?"), mask))

    def close(self):
        os.close(self.fd)


def attacker_home(ctx, name):
    """A directory of uid NOBODY's (ctx.tmp made passable for it)."""
    os.chmod(ctx.tmp, 0o711)
    home = tempfile.mkdtemp(prefix="attacker-%s-" % name, dir=ctx.tmp)
    os.chown(home, NOBODY, NOBODY)
    return home


def start_attacker(ctx, token, home, files, swap=""):
    """The attacker as uid NOBODY matching the rule, once it printed READY."""
    argv = ["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups",
            "env", "NW_SECURITY_TEST=" + token, "/usr/bin/python3", "-c", ATTACKER, home,
            json.dumps(files), swap]
    p = Proc(argv, stdin=True)
    if p.wait_out(lambda l: l.startswith(b"READY "), 60) is None:
        raise Fail("the attacker did not start:\n%s" % p.stderr_tail())
    ctx.log("attacker pid %d in %s: %s%s" % (p.pid, home, ", ".join(f[0] for f in files),
                                              ", swap " + swap if swap else ""))
    return p


def service_config(ctx, name):
    """The service's scratch directory, the token its one rule matches, its configuration and
    events file: the service not started yet."""
    tmp = tempfile.mkdtemp(dir=ctx.tmp, prefix="security-%s-" % name)
    token = "sec-%s-%d" % (name, os.getpid())
    config, events_path = write_config(ctx, tmp, [
        "  - name: t\n    match: {env: {NW_SECURITY_TEST: '^%s$'}}\n" % token])
    return tmp, token, config, events_path


def service(ctx, name):
    tmp, token, config, events_path = service_config(ctx, name)
    return token, config, events_path, start_ready(ctx, tmp, config)


def trainer_reported(ctx, daemon, events_path, trainer):
    """The real trainer attached, told to fault, its anomaly reported, detached at its exit."""
    wait_events(events_path, daemon, has_event("attach", trainer.pid),
                "attach of the trainer %d" % trainer.pid, ATTACH_TIMEOUT)
    trainer.send(b"fault\n")
    if trainer.wait(TRAINER_TIMEOUT) != 0:
        raise Fail("trainer %d failed under the daemon:\n%s" % (trainer.pid,
                                                               trainer.stderr_tail()))
    events = wait_events(events_path, daemon, has_event("detach", trainer.pid),
                         "detach of the trainer %d" % trainer.pid, DETACH_TIMEOUT)
    if not any(e["event"] == "anomaly" and e["pid"] == trainer.pid for e in events):
        raise Fail("no anomaly from the trainer %d" % trainer.pid)


def one_error(ctx, events_path, daemon, pid, words):
    """Exactly one error event for pid, naming every one of words; no attach for it."""
    events = wait_events(events_path, daemon, has_event("error", pid), "error for %d" % pid,
                         ERROR_WAIT)
    mine = [e for e in events if e["pid"] == pid]
    errors = [e for e in mine if e["event"] == "error"]
    if len(errors) != 1 or any(e["event"] == "attach" for e in mine):
        raise Fail("pid %d: events %s, want one error and no attach" %
                   (pid, [e["event"] for e in mine]))
    message = errors[0]["message"]
    missing = [w for w in words if w not in message]
    if missing:
        raise Fail("pid %d's error %r does not name %s" % (pid, message, missing))
    ctx.log("pid %d: %s" % (pid, message))
    return message


def attempts(daemon, pid):
    """(ms, KiB read) of every resolve of pid the daemon's --verbose lines tell of."""
    got = []
    for line in daemon.stderr_lines():
        m = REFUSED_RE.search(line)
        if m and int(m.group(1)) == pid:
            got.append((float(m.group(3)), int(m.group(4))))
    return got


def wait_cut(daemon, attacker, names, timeout=30):
    """Until the attacker has cut every one of names (so the daemon opened them); Fail if the
    daemon exits meanwhile."""
    deadline = time.monotonic() + timeout
    while True:
        cut = sorted(l.decode().split()[1] for l in attacker.out if l.startswith(b"CUT "))
        if not daemon.running():
            raise Fail("the daemon exited %s (the attacker cut %s)" % (daemon.p.returncode, cut))
        if cut == sorted(names):
            return
        if time.monotonic() > deadline:
            raise Fail("the attacker cut %s in %d s: the daemon did not open %s" %
                       (cut, timeout, sorted(names)))
        time.sleep(0.1)


@environments(*HOST_ONLY)
def test_files_cut_after_open(ctx):
    token, config, events_path, daemon = service(ctx, "cut")
    home = attacker_home(ctx, "cut")
    files = [
        # .dynsym over all of it: the old daemon walked it through a mapping
        ["libpython3.11.so", 2 * GIB, [4096, 2 * GIB - 8192, 2 * GIB - 4096, 4096], DECOY,
         "cut"],
        # tables within the caps, at its end
        ["libtorch_python.so", 2 * GIB,
         [2 * GIB - 64 * MIB, 16 * MIB // 24 * 24, 2 * GIB - 32 * MIB, MIB], DECOY + 0x10000,
         "cut"],
    ]
    attacker = start_attacker(ctx, token, home, files)
    wait_cut(daemon, attacker, [f[0] for f in files])
    # the trainer once the files are cut: on two CPUs its training could delay the cut
    trainer = start_trainer(ctx, {"NW_SECURITY_TEST": token})
    message = one_error(ctx, events_path, daemon, attacker.pid,
                        ["failed to read", os.path.join(home, "libtorch_python.so")])
    if not any(w in message for w in ("not an ELF file", "changed while it was read")):
        raise Fail("the error does not say why the file was refused: %r" % message)
    trainer_reported(ctx, daemon, events_path, trainer)
    attacker.send(b"")
    stop_service(daemon)


@environments(*HOST_ONLY)
def test_files_path_swapped(ctx):
    # the service starts once the substitutes are watched: it would swap them into place as
    # soon as it saw an attacker (CI: the watch found no sub.fifo, already renamed)
    tmp, token, config, events_path = service_config(ctx, "swap")
    secret_dir = tempfile.mkdtemp(prefix="root-only-", dir=ctx.tmp)  # 0700, root's
    secret = os.path.join(secret_dir, "libtorch_python.so")
    shutil.copy("/usr/lib/x86_64-linux-gnu/libtorch_python.so.1.13", secret)
    os.chmod(secret, 0o600)
    watch = Inotify()
    watch.add(secret)
    attackers = []
    for swap in ("fifo", "link:" + secret, "elf"):
        home = attacker_home(ctx, swap.split(":")[0])
        files = [
            ["libpython3.11.so", 4096, [1024, 24, 2048, 16], DECOY, "swap-trigger"],
            # a 512 MiB table: the old daemon walked it before it went on to torch (time to
            # swap); this one refuses it unread (a hole)
            ["libpython3.11.so.1", GIB, [8192, 512 * MIB // 24 * 24, 768 * MIB, 4096],
             DECOY + 0x10000, ""],
            ["libtorch_python.so", 4096, None, DECOY + 0x20000, ""],
        ]
        a = start_attacker(ctx, token, home, files, swap)
        sub = os.path.join(home, "sub." + swap.split(":")[0])
        if not swap.startswith("link:"):
            watch.add(sub)  # the substitute's inode: followed through the rename
        attackers.append((a, home))
    daemon = start_ready(ctx, tmp, config)
    trainer = start_trainer(ctx, {"NW_SECURITY_TEST": token})
    trainer_reported(ctx, daemon, events_path, trainer)
    for a, home in attackers:
        one_error(ctx, events_path, daemon, a.pid,
                  ["THPVariableType", os.path.join(home, "sub", "libtorch_python.so.1")])
        if a.wait_out(lambda l: l.startswith(b"SWAPPED"), 0) is None:
            raise Fail("attacker %d never swapped: the daemon did not open its decoy" % a.pid)
    opened = watch.events()
    watch.close()
    if opened:
        raise Fail("substitutes opened or read: %s" % opened)
    for a, _ in attackers:
        a.send(b"")
    stop_service(daemon)


def huge(ctx, name, size, tables, words):
    """The service, a trainer and an attacker whose libtorch_python.so has these tables; the
    attacker's resolve attempts (ms, KiB) and the daemon's CPU seconds until its error, which
    names words."""
    token, config, events_path, daemon = service(ctx, name)
    home = attacker_home(ctx, name)
    cpu0 = usage(daemon.pid)[0]
    attacker = start_attacker(ctx, token, home, [["libtorch_python.so", size, tables, DECOY, ""]])
    started = time.monotonic()
    wait_events(events_path, daemon, has_event("error", attacker.pid),
                "error for %d" % attacker.pid, ERROR_WAIT)
    window = time.monotonic() - started
    cpu = usage(daemon.pid)[0] - cpu0
    tries = attempts(daemon, attacker.pid)
    ms = sorted(t[0] for t in tries) or [0]
    ctx.log("%d attempts in %.1f s: %.1f ms median, %.1f ms max, %d KiB read max; daemon CPU "
            "%.2f s over the window" % (len(tries), window, ms[len(ms) // 2], ms[-1],
                                        max([t[1] for t in tries] or [0]), cpu))
    one_error(ctx, events_path, daemon, attacker.pid,
              [os.path.join(home, "libtorch_python.so")] + words)
    if len(tries) < 2:
        raise Fail("%d resolve attempts of pid %d on stderr (--verbose)" % (len(tries),
                                                                         attacker.pid))
    trainer = start_trainer(ctx, {"NW_SECURITY_TEST": token})
    trainer_reported(ctx, daemon, events_path, trainer)
    attacker.send(b"")
    stop_service(daemon)
    return tries, cpu


@environments(*HOST_ONLY)
def test_files_huge_refused(ctx):
    tries, cpu = huge(ctx, "huge", 2 * GIB, [4096, 2 * GIB - 8192, 2 * GIB - 4096, 4096],
                      ["failed to read", "larger than the daemon reads"])
    bad = [t for t in tries if t[1] >= 1024 or t[0] >= 1000]
    if bad:
        raise Fail("attempts that read a MiB or more, or took a second: %s" % bad)
    if cpu >= 1.5:
        raise Fail("the daemon used %.2f s of CPU refusing one file for 10 s" % cpu)


@environments(*HOST_ONLY)
def test_files_huge_budget(ctx):
    symtab = SYMTAB_CAP // 24 * 24
    strtab = BUDGET_BYTES - SYMTAB_CAP - MIB  # a MiB left for the interpreter's tables
    size = 4096 + symtab + strtab  # written: a sparse one is refused unread
    tries, cpu = huge(ctx, "budget", -size, [4096, symtab, 4096 + symtab, strtab],
                      ["THPVariableType"])
    bad = [t for t in tries if t[1] * 1024 > BUDGET_BYTES or t[0] > BUDGET_MS]
    if bad:
        raise Fail("attempts over the budget (%d MiB, %d ms): %s" % (BUDGET_BYTES // MIB,
                                                                    BUDGET_MS, bad))
    if min(t[1] for t in tries) * 1024 < symtab + strtab:
        raise Fail("an attempt did not read the tables: the test does not test the budget")
