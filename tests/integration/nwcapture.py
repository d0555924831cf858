"""Captures as the tests make and replay them, shared by the capture and explain areas: a
capture directory the environment's Python can read, a trainer run as CAPTURE_USER under
`nanwatchd --capture-dir`, and tools/nanwatch-repro run as that user with the environment's
Python."""
import os
import shutil
import subprocess
import tempfile

from nwharness import (REPO, Fail, Proc, finish_trainer, read_comm, start_daemon, tail,
                       trainer_argv, wait_attach, wait_daemon_exit)
from nwchecks import CAPTURE_DIRS, NOBODY, check_envelope, parse_stream

CAPTURE_USER = NOBODY  # the trainers of the capture cases run as this user
REPRO = os.path.join(REPO, "tools", "nanwatch-repro")
TRIXIE_REPRO = "/opt/nanwatch-tests/nanwatch-repro"  # inside the root


def as_user(ctx, argv):
    """argv run as CAPTURE_USER in the current environment (argv from Env.argv)."""
    if ctx.env.root is None:
        return ["setpriv", "--reuid=%d" % CAPTURE_USER, "--regid=%d" % CAPTURE_USER,
                "--clear-groups"] + argv
    assert argv[0] == "chroot"
    return ["chroot", "--userspec=%d:%d" % (CAPTURE_USER, CAPTURE_USER)] + argv[1:]


def capture_dir(ctx):
    """An empty directory for captures, where the environment's Python can read it."""
    base = ctx.tmp if ctx.env.root is None else os.path.join(ctx.env.root, "tmp")
    os.chmod(ctx.tmp, 0o711)  # traversable, not listable
    path = tempfile.mkdtemp(prefix="nanwatch-capture-", dir=base)
    os.chmod(path, 0o755)  # the user's repro must reach its own capture inside
    if ctx.env.root is not None:
        CAPTURE_DIRS.append(path)
    inside = path if ctx.env.root is None else "/" + os.path.relpath(path, ctx.env.root)
    return path, inside


def install_repro(ctx):
    """The repro tool as the environment's Python sees it."""
    if ctx.env.root is None:
        return REPRO
    dest = os.path.join(ctx.env.root, TRIXIE_REPRO.lstrip("/"))
    if os.path.islink(dest) or os.path.islink(os.path.dirname(dest)):
        raise Fail("%s is a symlink; refusing to copy through it" % dest)
    shutil.copy(REPRO, dest)
    os.chmod(dest, 0o755)
    return TRIXIE_REPRO


def watch_capture(ctx, name, trace, dirpath, *daemon_args, trainer_args=()):
    """The trainer, as CAPTURE_USER, under the daemon with captures into dirpath. It stays a
    second after training: the daemon reads the captured module's names and attributes from
    the live target (see docs/captures.md), and a run does not end milliseconds after its
    first NaN."""
    argv = as_user(ctx, trainer_argv(ctx, name, "--wait", "--linger", "1", *trainer_args))
    trainer = Proc(argv, stdin=True)
    line = trainer.wait_out(lambda l: l.startswith(b"READY "), 60)
    if line is None:
        raise Fail("%s --wait as uid %d printed no READY line:\n%s" %
                   (name, CAPTURE_USER, tail(trainer.stderr_lines())))
    pid = int(line.split()[1])
    with open("/proc/%d/status" % pid) as f:
        uid = [l.split()[1] for l in f if l.startswith("Uid:")][0]
    if int(uid) != CAPTURE_USER:
        raise Fail("trainer runs as uid %s, not %d" % (uid, CAPTURE_USER))
    comm = read_comm(pid)
    daemon = start_daemon(ctx, pid, extra=["--capture-dir", dirpath] + list(daemon_args))
    wait_attach(daemon)
    trainer.send(b"go\n")
    finish_trainer(ctx, trainer, name, trace)
    wait_daemon_exit(daemon)
    events = parse_stream(daemon, pid, comm)
    check_envelope(events, "target_exit")
    return events, pid


def run_repro(ctx, inside, *args):
    argv = as_user(ctx, ctx.env.argv(install_repro(ctx), *args, inside))
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=120)
    ctx.log("repro exit %d: %s" % (r.returncode, (r.stdout + r.stderr).strip()[-300:]))
    return r
