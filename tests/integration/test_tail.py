"""nanwatch-tail on a hostile stream (the nanwatch-tail beside --daemon: build/ or build-asan/).

tail_long_line (host): an event line, a line of 100 MB (a JSON object that never ends), and
another event line, written through a pipe: nanwatch-tail prints both events, says once on
stderr that line 2 was skipped, exits 0, and its peak RSS once it has read the long line
(VmHWM) stays under 32 MiB, where holding the line would take 100 MB and more; RSS and time
are logged.
"""
import os
import subprocess
import threading
import time

from nwharness import Fail
from nwchecks import HOST_ONLY, environments

LONG_LINE = 100 * 1000 * 1000
RSS_BOUND_KIB = 32 * 1024  # generous: the line buffer is 1 MiB, the program a few more
EVENT = ('{"schema":"nanwatch/1","event":"attach","time":"2026-11-30T10:00:00Z","seq":%d,'
         '"host":"gpu1","pid":4242,"comm":"python3","python":"3.11.2","torch":"2.6.0",'
         '"probes":2,"mode":"full"}\n')


def tail_bin(ctx):
    path = os.path.join(os.path.dirname(ctx.daemon), "nanwatch-tail")
    if not os.access(path, os.X_OK):
        raise Fail("%s missing: build it with make" % path)
    return path


def vm_hwm(pid):
    """Peak RSS in KiB of pid since its exec (/proc/PID/status VmHWM)."""
    with open("/proc/%d/status" % pid) as f:
        return int([line.split()[1] for line in f if line.startswith("VmHWM:")][0])


def drain(f, into):
    threading.Thread(target=lambda: into.append(f.read()), daemon=True).start()


@environments(*HOST_ONLY)
def test_tail_long_line(ctx):
    r, w = os.pipe()
    p = subprocess.Popen([tail_bin(ctx), "--no-color"], stdin=r, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    os.close(r)
    out, err = [], []
    drain(p.stdout, out)
    drain(p.stderr, err)
    start = time.monotonic()
    chunk = b"a" * (1 << 20)
    try:
        os.write(w, (EVENT % 0).encode() + b'{"event":"anomaly","x":"')
        left = LONG_LINE
        while left > 0:
            left -= os.write(w, chunk[:left])
        # all but what the pipe holds is read: the peak of holding the line, if it is held
        time.sleep(0.2)
        hwm = vm_hwm(p.pid)
        os.write(w, b'"}\n' + (EVENT % 1).encode())
    finally:
        os.close(w)
    rc = p.wait(60)
    took = time.monotonic() - start
    while len(out) + len(err) < 2 and time.monotonic() - start < 60:
        time.sleep(0.05)
    out, err = out[0].decode(), err[0].decode()
    lines = out.splitlines()
    ctx.log("a %d MB line: nanwatch-tail peak RSS %d KiB, %.2f s to read the stream; "
            "stderr %r" % (LONG_LINE // 1000000, hwm, took, err))
    if rc != 0 or len(lines) != 2 or not all("attach" in line for line in lines):
        raise Fail("exit %d, stdout %r" % (rc, out[:500]))
    if err.count("\n") != 1 or "line 2 skipped" not in err:
        raise Fail("stderr %r: want one notice naming line 2" % err[:500])
    if hwm > RSS_BOUND_KIB:
        raise Fail("peak RSS %d KiB over %d KiB" % (hwm, RSS_BOUND_KIB))
