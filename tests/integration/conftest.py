"""nanwatch integration tests: the real daemon against real PyTorch trainers (pytest).

Each faulty trainer (tests/trainers/) runs twice: once with --oracle (forward hooks on every
module say which output went non-finite first), once with --wait under `nanwatchd --pid`; the
daemon's stream must name what the oracle names (test_forward.py, and per area the other
test_*.py files; their docstrings say what each checks).

Environments. A test runs in the environments its `environments(...)` mark lists, as the `env`
fixture's parameter, which names the test: test_trainer_nan_input[host], [trixie], [forky],
[container].
  host       the trainers run with --python (Debian 12's Python 3.11, torch 1.13).
  trixie     with --trixie-root DIR (a root made by `scripts/make-root trixie`: Debian trixie,
             Python 3.13, torch 2.6): tests/trainers/*.py are copied to
             DIR/opt/nanwatch-tests/run-PID/trainers/ and the trainers (oracle runs included, so
             each environment is compared with its own oracle) run as `chroot DIR
             /usr/bin/python3 ...`. The daemon stays the host's, attached by host pid.
             error_not_python's target is `chroot DIR /bin/sleep`, error_python_unsupported
             keeps only that root's torch table.
  forky      the same with --forky-root DIR (`scripts/make-root forky`: Debian forky, Python
             3.14, torch 2.14).
  container  the forky root as a real mount-namespace container whose files do not exist at
             those paths on the host: `unshare --mount sh -c SCRIPT` bind-mounts DIR on a fresh
             empty directory, pivot_roots into it, mounts a new /proc, lazily unmounts the old
             root and execs /usr/bin/python3 (one pid throughout: the READY line's pid is the
             host pid, which is checked). The daemon must open the target's files through
             /proc/PID/root, and each attach event must name the root's interpreter
             (/usr/bin/python3.14). Every mount point is removed with rmdir afterwards (never
             recursively); a leftover one fails the test.
Without --trixie-root (--forky-root) the trixie (forky and container) tests are skipped, saying
so; a DIR without its .nanwatch-ready stamp fails them (never a silent skip). --env picks
environments; -k NAME picks tests by the case name, as before (-k trainer_nan_input,
-k "healthy and container").

  /usr/bin/python3 -m pytest tests/integration --daemon build/nanwatchd [--trixie-root DIR]
                            [--forky-root DIR] [--env host,trixie,forky,container] [-k NAME]

The process harness is tests/lib/nwharness.py (shared with bench/bench.py); nwchecks.py holds the
checks of a daemon stream that several areas use, nwreport.py the incident page's (nanwatch-report
in headless chromium). Standard library and pytest only: torch is
imported by the trainers, never here.
"""
import os
import shutil
import signal
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tests", "lib"))  # nwharness, shared with bench/bench.py

from nwharness import (Context, Env, Fail, TRAINERS, kill_children,  # noqa: E402
                       remove_mnt_dirs, tail)
from nwchecks import CAPTURE_DIRS, ENVIRONMENTS  # noqa: E402

ROOT_STAMP = ".nanwatch-ready"
ROOT_PYTHON = "/usr/bin/python3"  # inside the root
# inside the root; one directory per run, so runs from two checkouts cannot mix trainers
ROOT_TRAINERS = "/opt/nanwatch-tests/run-%d/trainers" % os.getpid()
ROOT_TORCH_VERSION = "usr/lib/python3/dist-packages/torch/version.py"  # in the root
ROOT_COPIES = []  # the per-run trainer directories made inside the roots (host paths)


def pytest_addoption(parser):
    group = parser.getgroup("nanwatch")
    group.addoption("--daemon", default=os.path.join(REPO, "build", "nanwatchd"),
                    help="path to nanwatchd (default %(default)s)")
    group.addoption("--python", default="/usr/bin/python3",
                    help="interpreter with torch for the host's trainers (default %(default)s)")
    group.addoption("--layouts", default=os.path.join(REPO, "config", "layouts"),
                    help="layout tables passed to the daemon (default %(default)s)")
    group.addoption("--trixie-root", metavar="DIR",
                    help="also run the tests with the trainer inside this root (made by "
                         "scripts/make-root trixie), as [trixie]")
    group.addoption("--forky-root", metavar="DIR",
                    help="also run them inside this root (scripts/make-root forky), as "
                         "[forky], and in a mount-namespace container on it, as [container]")
    group.addoption("--env", metavar="NAMES", default=",".join(ENVIRONMENTS),
                    help="comma-separated environments to run in (default %(default)s)")


def pytest_configure(config):
    wanted = [e for e in config.getoption("env").split(",") if e]
    bad = [e for e in wanted if e not in ENVIRONMENTS]
    if bad or not wanted:
        raise pytest.UsageError("--env: choose from %s" % ",".join(ENVIRONMENTS))

    def on_term(signum, frame):  # make's kill: end the children like Ctrl-C does
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_term)


def pytest_collection_modifyitems(config, items):
    """--env: leave out the tests of the other environments."""
    wanted = set(config.getoption("env").split(","))
    keep, drop = [], []
    for item in items:
        env = getattr(item, "callspec", None) and item.callspec.params.get("env")
        (drop if env is not None and env not in wanted else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.hookimpl(trylast=True)  # after the fixtures' teardown, which reports leftovers
def pytest_sessionfinish(session, exitstatus):
    """Interrupted (Ctrl-C, SIGTERM) in a test: no child outlives the run."""
    kill_children()
    remove_mnt_dirs()


@pytest.fixture(scope="session")
def context(request):
    """The run's shared state (nwharness.Context); at the end every child is killed and every
    directory the run made (scratch, captures and trainers inside the root) removed."""
    opt = request.config.getoption
    ctx = Context(opt("daemon"), opt("layouts"), python=opt("python"))
    yield ctx
    kill_children()
    left = remove_mnt_dirs()
    shutil.rmtree(ctx.tmp, ignore_errors=True)
    for path in CAPTURE_DIRS + ROOT_COPIES:
        shutil.rmtree(path, ignore_errors=True)
    if left:
        pytest.fail("container mount point left behind: %s" % ", ".join(left))


@pytest.fixture(scope="session")
def host_env(context):
    """The host: the trainers run with --python."""
    return context.host


def root_env(context, request, name):
    """The root --NAME-root names, entered with chroot, with the trainers copied in; skipped
    without that option, failed when the root is not usable."""
    root = request.config.getoption("%s_root" % name)
    if root is None:
        pytest.skip("no --%s-root given: the %s environment is off" % (name, name))
    try:
        return make_root_env(context, name, root)
    except Fail as e:
        why = str(e)
    pytest.fail("%s root: %s" % (name, why), pytrace=False)


@pytest.fixture(scope="session")
def trixie_env(context, request):
    return root_env(context, request, "trixie")


@pytest.fixture(scope="session")
def forky_env(context, request):
    return root_env(context, request, "forky")


@pytest.fixture(scope="session")
def container_env(context, forky_env):
    """The forky root as a mount-namespace container (its trainers already copied in)."""
    try:
        return make_container_env(context, forky_env)
    except Fail as e:
        why = str(e)
    pytest.fail("container: %s" % why, pytrace=False)


@pytest.fixture
def env(request):
    """The environment a test runs in: its parameter names one of the fixtures above
    (nwchecks.environments parametrizes it)."""
    return request.getfixturevalue(request.param + "_env")


@pytest.fixture
def ctx(context, env):
    """The context of one test in its environment. Afterwards every child it started is
    killed and every container mount point it made removed: a leftover one fails it."""
    context.env = env
    context.current_daemon = None
    if not os.access(context.daemon, os.X_OK):
        pytest.fail("daemon %s is not an executable file (build it first)" % context.daemon,
                    pytrace=False)
    yield context
    kill_children()
    left = remove_mnt_dirs()
    if left:
        pytest.fail("container mount point left behind: %s" % ", ".join(left), pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failing test's report ends with the stderr of the daemon it started last."""
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    ctx = item.funcargs.get("ctx")
    daemon = ctx.current_daemon if ctx is not None else None
    if daemon is not None:
        daemon.kill()
        err = daemon.stderr_lines()
        report.sections.append(("daemon stderr (last %d of %d lines)" % (min(len(err), 20),
                                                                          len(err)),
                                tail(err, 20) if err else "    (empty)"))


def make_root_env(ctx, name, root):
    """The environment of a root, with the trainers copied in; Fail when it is not usable."""
    root = os.path.abspath(root)
    stamp = os.path.join(root, ROOT_STAMP)
    if not os.path.isfile(stamp):
        raise Fail("%s is not built (no %s): run scripts/make-root %s %s (or make "
                   "%s-root)" % (root, ROOT_STAMP, name, root, name))
    parent = os.path.join(root, os.path.dirname(ROOT_TRAINERS).lstrip("/"))
    dest = os.path.join(root, ROOT_TRAINERS.lstrip("/"))
    # Written as root into a tree whose contents we did not make: never through a symlink.
    sub = root
    for part in ROOT_TRAINERS.strip("/").split("/"):
        sub = os.path.join(sub, part)
        if os.path.islink(sub):
            raise Fail("%s is a symlink; refusing to copy the trainers through it" % sub)
    try:
        os.makedirs(parent, mode=0o755, exist_ok=True)
        os.chmod(parent, 0o755)
        ROOT_COPIES.append(parent)
        if os.path.isdir(dest):
            shutil.rmtree(dest)
        elif os.path.lexists(dest):
            os.unlink(dest)
        os.mkdir(dest, 0o755)
        os.chown(dest, 0, 0)
        os.chmod(dest, 0o755)
        names = sorted(n for n in os.listdir(TRAINERS) if n.endswith(".py"))
        for n in names:
            shutil.copy(os.path.join(TRAINERS, n), os.path.join(dest, n))
    except OSError as e:
        raise Fail("cannot copy the trainers into %s: %s" % (dest, e))
    if not names:
        raise Fail("no trainers in %s" % TRAINERS)
    ctx.log("copied %d trainers into %s" % (len(names), dest))
    return Env(name, ROOT_PYTHON, ROOT_TRAINERS, root=root,
               torch_table=root_torch_table(root))


def root_torch_table(root):
    """The layout table of the root's torch: torch-X.Y.yaml from its torch/version.py."""
    try:
        with open(os.path.join(root, ROOT_TORCH_VERSION)) as f:
            text = f.read(65536)
    except OSError as e:
        raise Fail("cannot read the root's torch version: %s" % e)
    for line in text.splitlines():
        if line.startswith("__version__"):
            ver = line.split("=", 1)[1].strip().strip("'\"").split(".")
            return "torch-%s.%s.yaml" % (ver[0], ver[1])
    raise Fail("no __version__ in the root's %s" % ROOT_TORCH_VERSION)


def make_container_env(ctx, trixie):
    """The container environment on a root's environment (its trainers already copied in)."""
    missing = [tool for tool in ("unshare", "sh") if shutil.which(tool) is None]
    if missing:
        raise Fail("no %s on PATH" % ", ".join(missing))
    env = Env("container", trixie.python, trixie.trainers, root=trixie.root,
              torch_table=trixie.torch_table, container=True)
    # what the container's maps show: the file the root's python3 names (python3.14, ...)
    try:
        env.interpreter = env.interpreter_path()
    except OSError as e:
        raise Fail("the root's %s is not a link to its interpreter: %s" % (ROOT_PYTHON, e))
    env.host_lacks_interpreter = not os.path.lexists(env.interpreter)
    ctx.log("container on %s; the host %s %s" % (
        trixie.root, "lacks" if env.host_lacks_interpreter else "has", env.interpreter))
    return env
