"""nanwatchd --learn-layouts: a Python and torch build with no table, learned for the target.

learn_layouts (every environment): the layouts directory is empty; a trainer (uid 65534, root in
the container) waits, and `nanwatchd --pid P --learn-layouts --layout-cache DIR` says it learns
both tables as that uid (65534 for the container's root) inside the process's root, checks them
against the process, and then watches: the first anomaly is the forward-hook oracle's and the
trainer's losses are those of a run alone. The tables kept in DIR/UID/ are 0600 files of root's
in 0700 directories, named by kind, series and the build-id of the interpreter and of
libtorch_python, and hold exactly the shipped tables' keys and values (what the tool measures
there). A second trainer of that user is watched with them: "learned before", nothing run. The
container's trainer is root in a root of its own: nothing is kept for it (uid 0 is the host's
root too), said in one line, and the second trainer is learned for again.

learn_service (host): the same through the configuration (learn_layouts, layout_cache,
learn_timeout): the service attaches to a matching trainer with learned tables and writes its
anomaly.

learn_attacker (host): the target's user controls the interpreter the tool runs (here a
virtualenv of uid 65534's with a copied python, whose .pth runs code of the user's in any
python started there). That code, in the learning run:
  probe   records what it can reach: it runs as uid and gid 65534 with no other group, no
          capability in any set, no_new_privs, only PATH and HOME in its environment, standard
          input, output, error and the schema its only descriptors, no network device but lo,
          no process of another user in /proc, and cannot write the layout cache; the tables it
          then prints are learned, the target watched.
  poison  prints the shipped tables with obj_type moved: the check against the process refuses
          them (NoneType read wrong), one line, exit 1, nothing cached.
  version prints a table for another Python build: refused, naming both versions.
  hang    sleeps: killed at --learn-timeout, said in one line, no process of it left.
  flood   writes 8 MiB: killed past 256 KiB, said in one line.
  slow    sleeps 6 s, then lets the tool run: learned and watched (the wait is not charged to
          the resolve's 5 s budget for reading the target's files).
Each time the daemon exits with its one line and the target trains on. The tables learned for uid
65534 are never used for another user's process of the same build: a trainer of uid 65533
running the same interpreter build gets its own learning run.
"""
import json
import os
import shutil
import signal
import stat
import sys
import tempfile
import time

from nwharness import (REPO, TRAINER_TIMEOUT, Fail, oracle_of, start_daemon,
                       start_waiting_trainer, start_waiting_trainer_as, tail, wait_attach,
                       wait_daemon_exit)
from nwchecks import (EVERYWHERE, HOST_ONLY, NOBODY, check_anomalies, environments, has_event,
                      read_events, read_table, start_ready, start_trainer, stop_service, watch,
                      wait_events, write_config)

LAYOUTS = os.path.join(REPO, "config", "layouts")
TRAINER = "exp_overflow"
OTHER_USER = 65533


def learn_args(cache, *extra):
    return ("--learn-layouts", "--layout-cache", cache) + extra


def said(daemon, words):
    return [line for line in daemon.stderr_lines() if words in line]


def check_cache(cache, uid):
    """The cache holds one python and one torch table for uid, root's and private."""
    top = os.path.join(cache, str(uid))
    for d in (cache, top):
        st = os.lstat(d)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or stat.S_IMODE(st.st_mode) != 0o700:
            raise Fail("%s: owner %d mode %o; want a 0700 directory of root's" % (
                d, st.st_uid, stat.S_IMODE(st.st_mode)))
    names = sorted(os.listdir(top))
    if len(names) != 2 or not names[0].startswith("python-") or \
            not names[1].startswith("torch-"):
        raise Fail("%s holds %s; want one python and one torch table" % (top, names))
    tables = {}
    for n in names:
        st = os.lstat(os.path.join(top, n))
        if not stat.S_ISREG(st.st_mode) or st.st_uid != 0 or stat.S_IMODE(st.st_mode) != 0o600:
            raise Fail("%s: owner %d mode %o; want a 0600 file of root's" % (
                n, st.st_uid, stat.S_IMODE(st.st_mode)))
        kind, series, build_id = n[:-len(".yaml")].split("-")
        if len(build_id) < 16 or any(c not in "0123456789abcdef" for c in build_id):
            raise Fail("%s: %r is not a build-id" % (n, build_id))
        tables["%s-%s.yaml" % (kind, series)] = read_table(os.path.join(top, n))
    return tables


@environments(*EVERYWHERE)
def test_learn_layouts(ctx):
    """No table: learned as the target's user, checked, kept; the watch is the oracle's."""
    oracle, trace = oracle_of(ctx, TRAINER)
    empty = tempfile.mkdtemp(dir=ctx.tmp, prefix="no-layouts-")
    cache = os.path.join(tempfile.mkdtemp(dir=ctx.tmp, prefix="learn-"), "cache")
    uid = NOBODY  # the container's trainers run as its root: learned as nobody too
    owner = 0 if ctx.env.container else NOBODY
    ctx.env.run_as = None if ctx.env.container else NOBODY
    try:
        events, daemon = watch(ctx, TRAINER, trace, daemon_args=learn_args(cache), layouts=empty,
                               return_daemon=True)
        pid = events[0]["pid"]
        check_anomalies(events, oracle, pid)
        want = "nanwatchd: pid %d: no python table for Python " % pid
        learning = said(daemon, "learning it as uid")
        if len(learning) != 1 or not learning[0].startswith(want) or \
                "learning it as uid %d inside the process's root" % uid not in learning[0]:
            raise Fail("nanwatchd said %s; want one line starting %r, as uid %d" % (
                learning, want, uid))
        if len(said(daemon, "the learned tables agree with the process")) != 1:
            raise Fail("no line saying the learned tables were checked:\n%s" %
                       tail(daemon.stderr_lines()))
        ctx.log(learning[0])
        if ctx.env.container:
            # root in a root of its own: learned for this watch only (uid 0 is the host's too)
            kept = [os.path.join(d, n) for d, _, files in os.walk(cache) for n in files]
            if kept or len(said(daemon, "what is learned for it is not kept")) != 1:
                raise Fail("a container's root process: kept %s, said:\n%s" % (
                    kept, tail(daemon.stderr_lines())))
            tables = {}  # not kept, so not compared: the watch above is the oracle's
        else:
            tables = check_cache(cache, owner)
        for name, got in tables.items():
            shipped = read_table(os.path.join(LAYOUTS, name))
            diff = sorted(k for k in set(got) | set(shipped)
                          if k != "generated_for" and got.get(k) != shipped.get(k))
            if diff:
                raise Fail("learned %s differs from the shipped table: %s" % (name, diff))
        if tables:
            ctx.log("kept for uid %d: %s, as shipped" % (owner, ", ".join(sorted(tables))))
        # a second process of that user and build: the kept tables, nothing run
        trainer = start_waiting_trainer(ctx, "healthy")
        daemon = start_daemon(ctx, trainer.pid, layouts=empty, extra=learn_args(cache))
        wait_attach(daemon)
        trainer.kill()
        wait_daemon_exit(daemon)
        daemon.drain(10)
        again = len(said(daemon, "learning it")) == 1 and not said(daemon, "learned before")
        kept = not said(daemon, "learning it") and \
            len(said(daemon, "learned before for uid %d" % owner)) == 1
        if not (again if ctx.env.container else kept):
            raise Fail("the second watch said:\n%s" % tail(daemon.stderr_lines()))
    finally:
        ctx.env.run_as = None


@environments(*HOST_ONLY)
def test_learn_service(ctx):
    """learn_layouts in the configuration: a matching trainer is watched with learned tables."""
    tmp = tempfile.mkdtemp(dir=ctx.tmp, prefix="learn-service-")
    empty = tempfile.mkdtemp(dir=tmp, prefix="no-layouts-")
    cache = os.path.join(tmp, "cache")
    token = "learn-%d" % os.getpid()
    saved = ctx.layouts
    ctx.layouts = empty
    try:
        config, events_path = write_config(
            ctx, tmp, ["  - name: a\n    match: {env: {NW_LEARN_TEST: '^%s$'}}\n" % token],
            extra="learn_layouts: true\nlayout_cache: %s\nlearn_timeout: 60\n" % cache)
    finally:
        ctx.layouts = saved
    daemon = start_ready(ctx, tmp, config)
    t = start_trainer(ctx, {"NW_LEARN_TEST": token})
    try:
        if t.wait_out(lambda l: l.startswith(b"STEP "), 120) is None:
            raise Fail("trainer %d did not train:\n%s" % (t.pid, t.stderr_tail()))
        wait_events(events_path, daemon, has_event("attach", t.pid), "attach of %d" % t.pid,
                    120)
        t.send(b"fault\n")
        if t.wait(TRAINER_TIMEOUT) != 0:
            raise Fail("trainer %d failed under the daemon:\n%s" % (t.pid, t.stderr_tail()))
        wait_events(events_path, daemon, has_event("anomaly", t.pid), "anomaly of %d" % t.pid,
                    60)
    finally:
        t.kill()
        stop_service(daemon)
    errors = [e for e in read_events(events_path) if e["event"] == "error"]
    if errors:
        raise Fail("error events: %s" % errors)
    tables = check_cache(cache, 0)  # the trainer runs as root: kept for uid 0, run as nobody
    ctx.log("service learned %s" % ", ".join(sorted(tables)))


HOSTILE = r'''
import json, os, socket, sys, time
VENV = %(venv)r
CACHE = %(cache)r


def fds():
    out = {}
    for n in os.listdir("/proc/self/fd"):
        try:
            out[n] = os.readlink("/proc/self/fd/" + n)
        except OSError:
            pass  # the listing's own descriptor, closed by now
    return out


def facts():
    status = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            status[k] = v.strip()
    out = {"uid": os.getuid(), "euid": os.geteuid(), "gid": os.getgid(), "egid": os.getegid(),
           "groups": os.getgroups(), "env": sorted(os.environ),
           "fds": fds(),
           "caps": {k: status.get(k) for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")},
           "no_new_privs": status.get("NoNewPrivs")}
    with open("/proc/net/dev") as f:
        out["netdev"] = sorted(l.split(":")[0].strip() for l in f.readlines()[2:])
    others = []
    for n in os.listdir("/proc"):
        if n.isdigit():
            try:
                if os.stat("/proc/" + n).st_uid != os.getuid():
                    others.append(int(n))
            except OSError:
                pass
    out["other_processes"] = others
    try:
        fd = os.open(os.path.join(CACHE, "written-by-the-target"), os.O_WRONLY | os.O_CREAT)
        os.close(fd)
        out["cache_write"] = "written"
    except OSError as e:
        out["cache_write"] = e.strerror
    try:
        socket.create_connection(("127.0.0.1", 22), timeout=2).close()
        out["connect"] = "connected"
    except OSError as e:
        out["connect"] = e.strerror or str(e)
    return out


if sys.flags.isolated and "--import-from" in sys.argv:
    with open(os.path.join(VENV, "mode")) as f:
        mode = f.read().strip()
    if mode == "probe":
        with open(os.path.join(VENV, "report.json"), "w") as f:
            json.dump(facts(), f)
    elif mode in ("poison", "version"):
        with open(os.path.join(VENV, mode + ".yaml")) as f:
            sys.stdout.write(f.read())
        sys.stdout.flush()
        os._exit(0)
    elif mode == "hang":
        time.sleep(600)
    elif mode == "slow":
        time.sleep(6)
    elif mode == "flood":
        for _ in range(8):
            os.write(1, b"#" * (1 << 20))
'''


def make_venv(ctx, cache):
    """A virtualenv of uid 65534's: a copy of the host's python, a .pth running its code."""
    venv = tempfile.mkdtemp(prefix="nanwatch-hostile-venv-")  # where uid 65534 reaches it
    real = os.path.realpath("/usr/bin/python3")
    ver = "python%d.%d" % sys.version_info[:2] if os.path.basename(real) == "python3" \
        else os.path.basename(real)
    site = os.path.join(venv, "lib", ver, "site-packages")
    os.makedirs(os.path.join(venv, "bin"))
    os.makedirs(site)
    shutil.copy(real, os.path.join(venv, "bin", "python3"))
    with open(os.path.join(venv, "pyvenv.cfg"), "w") as f:
        f.write("home = /usr/bin\ninclude-system-site-packages = true\n")
    with open(os.path.join(site, "nw_hostile.pth"), "w") as f:
        f.write("import nw_hostile\n")
    with open(os.path.join(site, "nw_hostile.py"), "w") as f:
        f.write(HOSTILE % {"venv": venv, "cache": os.path.join(cache, str(NOBODY))})
    for root, dirs, files in os.walk(venv):
        for n in [root] + [os.path.join(root, x) for x in dirs + files]:
            os.chown(n, NOBODY, NOBODY)
    os.chmod(venv, 0o755)
    return venv


def write_as_attacker(venv, name, text):
    path = os.path.join(venv, name)
    with open(path, "w") as f:
        f.write(text)
    os.chown(path, NOBODY, NOBODY)


def refusal(ctx, trainer, empty, cache, words, extra=()):
    """The daemon on trainer with learning: it exits 1 with one error line holding words."""
    start = time.monotonic()
    daemon = start_daemon(ctx, trainer.pid, layouts=empty, extra=learn_args(cache, *extra))
    rc = daemon.wait(120)
    if rc is None:
        daemon.kill()
        raise Fail("the daemon did not exit (%s)" % words)
    daemon.drain(10)
    lines = said(daemon, words)
    if rc != 1 or len(lines) != 1:
        raise Fail("the daemon exited %s, saying:\n%s\nwant one line with %r" % (
            rc, tail(daemon.stderr_lines()), words))
    if not trainer.running():
        raise Fail("the target stopped")
    ctx.log("%.1f s: %s" % (time.monotonic() - start, lines[0]))
    return lines[0]


def learner_left():
    """Processes still running the learning command line."""
    left = []
    for n in os.listdir("/proc"):
        if not n.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % n, "rb") as f:
                if b"--import-from" in f.read():
                    left.append(int(n))
        except OSError:
            pass
    return left


@environments(*HOST_ONLY)
def test_learn_attacker(ctx):
    """The target's user's code in the learning run: confined, and only its own watch hurt."""
    empty = tempfile.mkdtemp(dir=ctx.tmp, prefix="no-layouts-")
    cache = os.path.join(tempfile.mkdtemp(dir=ctx.tmp, prefix="learn-"), "cache")
    venv = make_venv(ctx, cache)
    series = "%d.%d" % sys.version_info[:2]
    with open(os.path.join(LAYOUTS, "python-%s.yaml" % series)) as f:
        py = f.read()
    torch_name = [n for n in os.listdir(LAYOUTS) if n.startswith("torch-") and
                  n == ctx.env.torch_table] or \
        [n for n in os.listdir(LAYOUTS) if n.startswith("torch-1.")]
    with open(os.path.join(LAYOUTS, torch_name[0])) as f:
        tt = f.read()
    moved = "\n".join("obj_type: 16" if l.startswith("obj_type:") else l
                      for l in py.splitlines()) + "\n"
    write_as_attacker(venv, "poison.yaml", moved + "---\n" + tt)
    gen = [l for l in py.splitlines() if l.startswith("generated_for:")][0]
    write_as_attacker(venv, "version.yaml",
                      py.replace(gen, 'generated_for: "%s.99"' % series) + "---\n" + tt)
    ctx.env.python = os.path.join(venv, "bin", "python3")
    try:
        trainer = start_waiting_trainer_as(ctx, NOBODY, "healthy")
    finally:
        ctx.env.python = ctx.python
    try:
        write_as_attacker(venv, "mode", "poison")
        refusal(ctx, trainer, empty, cache, "does not agree with the process: NoneType reads")
        if os.path.isdir(os.path.join(cache, str(NOBODY))) and \
                os.listdir(os.path.join(cache, str(NOBODY))):
            raise Fail("a refused table was kept: %s" % os.listdir(
                os.path.join(cache, str(NOBODY))))
        write_as_attacker(venv, "mode", "version")
        refusal(ctx, trainer, empty, cache, "nanwatch-layout measured python %s.99, but pid "
                "%d runs" % (series, trainer.pid))
        write_as_attacker(venv, "mode", "hang")
        start = time.monotonic()
        refusal(ctx, trainer, empty, cache, "nanwatch-layout did not finish in 3 s (killed)",
                ("--learn-timeout", "3"))
        if time.monotonic() - start > 60:
            raise Fail("a 3 s limit took %.0f s" % (time.monotonic() - start))
        time.sleep(0.5)
        if learner_left():
            raise Fail("the killed learning run left processes %s" % learner_left())
        write_as_attacker(venv, "mode", "flood")
        refusal(ctx, trainer, empty, cache, "nanwatch-layout wrote more than 256 KiB (killed)")
        # a run slower than the resolve's 5 s budget for reading files: still watched
        write_as_attacker(venv, "mode", "slow")
        daemon = start_daemon(ctx, trainer.pid, layouts=empty,
                              extra=learn_args(cache + "-slow"))
        wait_attach(daemon)
        daemon.p.send_signal(signal.SIGTERM)
        wait_daemon_exit(daemon)
        # what the user's code sees, then a learning run that goes through
        write_as_attacker(venv, "mode", "probe")
        daemon = start_daemon(ctx, trainer.pid, layouts=empty, extra=learn_args(cache))
        wait_attach(daemon)
        with open(os.path.join(venv, "report.json")) as f:
            seen = json.load(f)
        ctx.log("the user's code in the learning run saw: %s" % json.dumps(seen))
        zero = "0000000000000000"
        want = {"uid": NOBODY, "euid": NOBODY, "gid": NOBODY, "egid": NOBODY, "groups": [],
                "env": ["HOME", "LC_CTYPE", "PATH"],
                "caps": {k: zero for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb")},
                "no_new_privs": "1", "netdev": ["lo"], "other_processes": [],
                "cache_write": "Permission denied", "connect": "Network is unreachable"}
        bad = ["%s %r (want %r)" % (k, seen.get(k), v) for k, v in want.items()
               if seen.get(k) != v]
        # the program on stdin, the two pipes, the schema; the rest its own (.pth, report)
        fds = seen.get("fds", {})
        ours = {"0": os.path.realpath(os.path.join(REPO, "tools", "nanwatch-layout")),
                "3": os.path.realpath(os.path.join(REPO, "daemon", "resolve",
                                                   "layout_keys.def"))}
        for fd, target in sorted(fds.items()):
            if ours.get(fd, target) != target or (fd in "12" and not target.startswith("pipe:")) \
                    or (fd not in "0123" and not target.startswith(venv + "/")):
                bad.append("descriptor %s is %s" % (fd, target))
        if sorted(fds)[:4] != ["0", "1", "2", "3"]:
            bad.append("descriptors %s" % sorted(fds))
        if bad:
            raise Fail("the learning run was not confined: %s" % "; ".join(bad))
        trainer.kill()
        wait_daemon_exit(daemon)
    finally:
        trainer.kill()
    check_cache(cache, NOBODY)
    # another user's process of the same interpreter build: never the tables uid 65534 made
    other = start_waiting_trainer_as(ctx, OTHER_USER, "healthy")
    try:
        daemon = start_daemon(ctx, other.pid, layouts=empty, extra=learn_args(cache))
        wait_attach(daemon)
        other.kill()
        wait_daemon_exit(daemon)
        daemon.drain(10)
        if len(said(daemon, "learning it as uid %d" % OTHER_USER)) != 1 or \
                said(daemon, "learned before"):
            raise Fail("uid %d's process was watched with another user's tables:\n%s" % (
                OTHER_USER, tail(daemon.stderr_lines())))
    finally:
        other.kill()
    check_cache(cache, OTHER_USER)
    shutil.rmtree(venv, ignore_errors=True)
