"""tools/nanwatch-layout run as its users run it: with the training environment's own Python.

layout_tables (host, trixie): the Python and torch tables it writes in the environment are the
shipped ones (config/layouts/python-X.Y.yaml, torch-X.Y.yaml), key for key and value for value:
the tables are what the tool measures in that CPython and torch, and it still measures them.
layout_optional (host, trixie): a measurement that only an optional feature needs fails (forced
in the tool's own process, every other measurement real): the tool still writes the table,
without the keys of that measurement and with every other, prints one line naming the key and
the feature turned off, exits 0; nanwatchd loads that table, attaches to a trainer with it, and
says in one line for each feature what it goes without.
layout_backward_method (forky): the table names run_backward by its method table entry (a
stripped libtorch_python): with it the loss is read; a target (uid 65534) that points that entry
inside the function, or a table naming a method the file lacks, turns the loss off in one line,
and the uprobe is never placed.
"""
import os
import shutil
import subprocess
import tempfile

from nwharness import (REPO, Fail, read_comm, start_daemon, start_waiting_trainer,
                       start_waiting_trainer_as, wait_attach, wait_daemon_exit)
from nwchecks import HOST_AND_ROOTS, NOBODY, environments, read_table

TOOL = os.path.join(REPO, "tools", "nanwatch-layout")
KEYS = os.path.join(REPO, "daemon", "resolve", "layout_keys.def")
LAYOUTS = os.path.join(REPO, "config", "layouts")
TIMEOUT = 120

# Loads the tool as a module, makes one optional measurement fail, runs its main().
FORCED = """
import importlib.machinery, importlib.util, sys
loader = importlib.machinery.SourceFileLoader("nwlayout", sys.argv[1])
spec = importlib.util.spec_from_loader("nwlayout", loader)
tool = importlib.util.module_from_spec(spec)
loader.exec_module(tool)

def fails(mem, t):
    t["code_localsplusnames"] = 96  # put in first: it must be taken out again
    raise tool.LayoutError("code_names", "forced to fail by the test")

tool.measure_code_names = fails
sys.argv = ["nanwatch-layout", "--python", "--keys", sys.argv[2], "-o", sys.argv[3]]
tool.main()
"""


class ToolDir:
    """A scratch directory the environment's Python sees, holding the tool and its keys: the
    host's own, or one made under the root's /tmp (removed afterwards)."""

    def __init__(self, ctx):
        self.root = ctx.env.root
        base = os.path.join(self.root, "tmp") if self.root else None
        self.path = tempfile.mkdtemp(prefix="nanwatch-layout-", dir=base)
        os.chmod(self.path, 0o755)
        for src in (TOOL, KEYS):
            shutil.copy(src, self.path)
        os.makedirs(self.out)

    @property
    def out(self):
        return os.path.join(self.path, "out")

    def inside(self, path):
        """path as the environment's Python sees it."""
        return "/" + os.path.relpath(path, self.root) if self.root else path

    def remove(self):
        shutil.rmtree(self.path, ignore_errors=True)


# A root entered with chroot has no /proc of its own, and the tool reads /proc/self/maps: in a
# mount namespace of its own, the root gets one (as it would where users build tables).
WITH_PROC = 'mount -t proc proc "$1/proc" && shift && exec "$@"'


def run_tool(ctx, *args):
    argv = ctx.env.argv(*args)
    if ctx.env.root:
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", WITH_PROC, "sh",
                ctx.env.root] + argv
    proc = subprocess.run(argv, capture_output=True, timeout=TIMEOUT)
    return proc.returncode, proc.stdout.decode(errors="replace"), \
        proc.stderr.decode(errors="replace")


def written(d, kind):
    names = [n for n in os.listdir(d.out) if n.startswith(kind + "-") and n.endswith(".yaml")]
    if len(names) != 1:
        raise Fail("nanwatch-layout wrote %s into %s; want one %s table" % (
            sorted(os.listdir(d.out)), d.out, kind))
    return names[0]


@environments(*HOST_AND_ROOTS)
def test_layout_tables(ctx):
    """The tables measured in the environment are the shipped tables."""
    d = ToolDir(ctx)
    try:
        rc, _, err = run_tool(ctx, d.inside(os.path.join(d.path, "nanwatch-layout")),
                              "--keys", d.inside(os.path.join(d.path, "layout_keys.def")),
                              "-o", d.inside(d.out))
        if rc != 0:
            raise Fail("nanwatch-layout exited %d:\n%s" % (rc, err[-2000:]))
        for kind in ("python", "torch"):
            name = written(d, kind)
            got = read_table(os.path.join(d.out, name))
            shipped = os.path.join(LAYOUTS, name)
            if not os.path.isfile(shipped):
                raise Fail("measured %s, but config/layouts has no such table" % name)
            want = read_table(shipped)
            diff = sorted(k for k in set(got) | set(want)
                          if k != "generated_for" and got.get(k) != want.get(k))
            if diff:
                raise Fail("%s measured here differs from the shipped table: %s" % (
                    name, ", ".join("%s %s (shipped %s)" % (k, got.get(k), want.get(k))
                                    for k in diff)))
            ctx.log("%s: %d keys, as shipped" % (name, len(got)))
    finally:
        d.remove()


@environments(*HOST_AND_ROOTS)
def test_layout_optional(ctx):
    """An optional measurement fails: the table is written without its keys, said in a line,
    and nanwatchd attaches with that table."""
    d = ToolDir(ctx)
    forced = os.path.join(d.path, "forced.py")
    with open(forced, "w", encoding="utf-8") as f:
        f.write(FORCED)
    try:
        rc, _, err = run_tool(ctx, d.inside(forced),
                              d.inside(os.path.join(d.path, "nanwatch-layout")),
                              d.inside(os.path.join(d.path, "layout_keys.def")),
                              d.inside(d.out))
        if rc != 0:
            raise Fail("nanwatch-layout exited %d with an optional key failing:\n%s" % (
                rc, err[-2000:]))
        said = [line for line in err.splitlines() if "cannot measure" in line]
        want = "nanwatch-layout: cannot measure code_names: forced to fail by the test; the " \
            "table is written without it: the training loop's step counter is not read"
        if len(said) != 1 or not said[0].startswith(want):
            raise Fail("stderr says %r; want one line starting %r" % (said, want))
        name = written(d, "python")
        got = read_table(os.path.join(d.out, name))
        want_keys = read_table(os.path.join(LAYOUTS, name))
        dropped = {"code_localsplusnames", "code_names", "func_code"}
        left = sorted(dropped & set(got))
        if left:
            raise Fail("%s still holds %s" % (name, left))
        missing = sorted(set(want_keys) - set(got) - dropped)
        if missing:
            raise Fail("%s lacks %s, which the failed measurement did not make" % (
                name, missing))
        # nanwatchd takes the table: the shipped torch table beside it, a trainer waiting
        torch_table = [n for n in os.listdir(LAYOUTS) if n.startswith("torch-")]
        for n in torch_table:
            shutil.copy(os.path.join(LAYOUTS, n), d.out)
        trainer = start_waiting_trainer(ctx, "healthy")
        comm = read_comm(trainer.pid)
        daemon = start_daemon(ctx, trainer.pid, layouts=d.out)
        wait_attach(daemon)
        ctx.log("%s (%s) watched with %s: attached" % (comm, trainer.pid, name))
        # one line for each feature the missing keys turn off (all of stderr: once it exited)
        trainer.kill()
        wait_daemon_exit(daemon)
        daemon.drain(10)
        lines = [line for line in daemon.stderr_lines() if " has no " in line]
        want = ["nanwatchd: pid %d: %s has no code_localsplusnames: the training loop's step "
                "counter is not read" % (trainer.pid, name),
                "nanwatchd: pid %d: %s has no code_names: the ops a layer's code names are "
                "not read" % (trainer.pid, name)]
        if lines != want:
            raise Fail("nanwatchd said %s; want %s" % (lines, want))
    finally:
        d.remove()



def backward_lines(ctx, trainer, layouts):
    """nanwatchd attached to trainer with the tables in layouts, until the trainer is killed:
    its stderr lines that say the loss is not read."""
    daemon = start_daemon(ctx, trainer.pid, layouts=layouts)
    wait_attach(daemon)
    trainer.kill()
    wait_daemon_exit(daemon)
    daemon.drain(10)
    return [line for line in daemon.stderr_lines() if "the loss is not read" in line]


@environments("forky")
def test_layout_backward_method(ctx):
    """forky's libtorch_python is stripped: its table names run_backward's method table entry.
    A table naming a method the file lacks, and a target (uid 65534) that points the entry
    inside the function, only turn the loss off, in one line."""
    name = ctx.env.torch_table
    shipped = read_table(os.path.join(LAYOUTS, name))
    if shipped.get("backward_method") != '"run_backward"' or "backward_symbol" in shipped:
        raise Fail("%s does not name run_backward by its method table entry" % name)
    d = tempfile.mkdtemp(prefix="nanwatch-layouts-")
    try:
        for n in os.listdir(LAYOUTS):
            shutil.copy(os.path.join(LAYOUTS, n), d)
        # the shipped table: the loss is read, nothing said
        trainer = start_waiting_trainer(ctx, "healthy")
        lines = backward_lines(ctx, trainer, d)
        if lines:
            raise Fail("with the shipped %s nanwatchd said %s" % (name, lines))
        # a target that points its entry into the middle of run_backward
        trainer = start_waiting_trainer_as(ctx, NOBODY, "hostile_method")
        want = "nanwatchd: pid %d: %s finds run_backward's method at an address where no " \
            "function starts: the loss is not read" % (trainer.pid, name)
        lines = backward_lines(ctx, trainer, d)
        if lines != [want]:
            raise Fail("with the entry moved inside the function nanwatchd said %s; want "
                       "[%r]" % (lines, want))
        ctx.log(want)
        # a table naming a method the file lacks
        with open(os.path.join(LAYOUTS, name), encoding="utf-8") as f:
            text = f.read()
        with open(os.path.join(d, name), "w", encoding="utf-8") as f:
            f.write(text.replace('backward_method: "run_backward"',
                                 'backward_method: "run_backwarx"'))
        trainer = start_waiting_trainer(ctx, "healthy")
        want = "nanwatchd: pid %d: %s names a method whose entry the file does not hold: " \
            "the loss is not read" % (trainer.pid, name)
        lines = backward_lines(ctx, trainer, d)
        if lines != [want]:
            raise Fail("with backward_method run_backwarx nanwatchd said %s; want [%r]"
                       % (lines, want))
        ctx.log(want)
    finally:
        shutil.rmtree(d, ignore_errors=True)
