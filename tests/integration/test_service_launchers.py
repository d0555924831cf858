"""Service discovery sees every rank, however the job's launcher starts it (host).

service_launcher[STYLE]: a service daemon (--config, a rule matching an environment marker) is
READY before tests/trainers/launch.py starts three ranks the STYLE's way: relaunch (the script
runs itself again per rank: the same executable and command line as its parent), elastic
(torch.distributed.elastic's start_processes, torchrun's), spawn (torch.multiprocessing.spawn),
mpirun and srun (a shell starting each rank with Open MPI's or Slurm's rank variables), orphan
(each rank started by `setsid -f` from a shell that exits at once: its parent is then the init
process, as for a job systemd or nohup started). Every rank is attached, its events carry the
rank the launcher gave it where the launcher puts it in the environment (RANK, or Open MPI's
and Slurm's variables), every rank is detached with reason target_exit, and the child each
rank forks without exec (as a DataLoader worker is made) is never attached; no error event.
Telling fork from exec is the kernel's exec count: before, the relaunched ranks (same exe and
command line as the parent) were taken for forked children and none was watched.

service_relaunch_ddp: the issue's job: a three-rank gloo job (tests/trainers/ddp.py, rank 1
divides by zero at step 6) whose script relaunches itself once per rank. Every rank is
attached, and nanwatch-collect --json names rank 1 (its pid), at step 6, layer
module.features, cause division_by_zero from the daemon's diagnosis, the other ranks as
receivers.

service_exec_window: 24 processes forked without exec, then each execing at once a copy of
sleep whose pages are not cached (so that each exec waits on the disk between the kernel
counting the exec and setting up the new program's arguments: /proc/PID/cmdline and environ
read empty then), with an environment marker the rule matches. Every one is followed
(nanwatch_processes_followed reaches 24 on the metrics endpoint). Before, a scan that saw such a
process mid-exec read its command line empty, took it for no match, and never looked again:
about half of them were missed, and in a loaded run the third rank of a spawn job was.

service_orphan_no_crash: a process matching a rule whose parent is pid 1 and that never loads
torch (`setsid -f sh -c 'sleep 5; : MARKER'`, run as uid 65534): the daemon (which before
freed memory it never allocated for such a process and aborted within one scan) keeps running,
writes no event about it, and still attaches a trainer started afterwards.
"""
import json
import os
import re
import shutil
import subprocess
import tempfile
import time

import pytest

from nwharness import (ATTACH_TIMEOUT, DETACH_TIMEOUT, TRAINER_TIMEOUT, Fail, Proc, tail,
                       trainer_argv)
from nwchecks import (HOST_ONLY, NOBODY, environments, free_port, has_event, metric,
                      read_events, run_collect, start_ready, start_trainer, stop_service,
                      wait_events, wait_metric, write_config)

RANKS = 3
STYLES = ("relaunch", "elastic", "spawn", "mpirun", "srun", "orphan")
RANKED = ("relaunch", "elastic", "mpirun", "srun", "orphan")  # the rank is in the environment
LAUNCH_TIMEOUT = 180
EXECS = 24
FOLLOW_TIMEOUT = 30
# forks EXECS children that wait on a pipe, prints their pids, lets them exec at once argv[1+i]
EXEC_AT_ONCE = """
import json, os, sys
env = dict(os.environ, NW_EXEC_TEST=sys.argv[1])
r, w = os.pipe()
pids = []
for b in sys.argv[2:]:
    pid = os.fork()
    if pid == 0:
        os.close(w)
        os.read(r, 1)
        os.execve(b, ["sleep", "60"], env)
    pids.append(pid)
os.close(r)
print(json.dumps(pids), flush=True)
os.close(w)
for p in pids:
    os.waitpid(p, 0)
"""


def rank_files(d):
    out = []
    for f in sorted(os.listdir(d)):
        if f.startswith("rank-") and f.endswith(".json"):
            with open(os.path.join(d, f)) as fp:
                out.append(json.load(fp))
    return out


def wait_ranks(d, launcher):
    deadline = time.monotonic() + LAUNCH_TIMEOUT
    while len(rank_files(d)) < RANKS:
        if not launcher.running():
            raise Fail("launcher exited %r before %d ranks started:\n%s" % (
                launcher.p.returncode, RANKS, tail(launcher.stderr_lines())))
        if time.monotonic() > deadline:
            raise Fail("%d of %d ranks started in %d s:\n%s" % (
                len(rank_files(d)), RANKS, LAUNCH_TIMEOUT, tail(launcher.stderr_lines())))
        time.sleep(0.1)
    return rank_files(d)


def launch(ctx, tmp, style, token, *extra):
    d = os.path.join(tmp, "ranks")
    os.makedirs(d)
    env = ["env", "NW_LAUNCH_TEST=" + token, "TORCHELASTIC_RUN_ID=job-" + token,
           "SLURM_JOB_ID=job-" + token, "USE_LIBUV=0"]
    argv = env + trainer_argv(ctx, "launch", style, "--ranks", str(RANKS), "--dir", d, *extra)
    return Proc(argv, stdin=True), d


def run_style(ctx, tmp, style):
    token = "launch-%d-%s" % (os.getpid(), style)
    config, events_path = write_config(ctx, tmp, [
        "  - name: ranks\n    match: {env: {NW_LAUNCH_TEST: '^%s$'}}\n" % token])
    daemon = start_ready(ctx, tmp, config)
    launcher, d = launch(ctx, tmp, style, token)
    ranks = wait_ranks(d, launcher)
    for r in ranks:
        wait_events(events_path, daemon, has_event("attach", r["pid"]),
                    "%s: attach of rank %d (pid %d)" % (style, r["rank"], r["pid"]),
                    ATTACH_TIMEOUT)
    open(os.path.join(d, "go"), "w").close()
    if launcher.wait(TRAINER_TIMEOUT) != 0:
        raise Fail("%s: launcher failed:\n%s" % (style, tail(launcher.stderr_lines())))
    for r in ranks:
        wait_events(events_path, daemon, has_event("detach", r["pid"]),
                    "%s: detach of rank %d" % (style, r["rank"]), DETACH_TIMEOUT)
    stop_service(daemon)
    return read_events(events_path), ranks


def check_ranks(style, events, ranks):
    for r in ranks:
        mine = [e for e in events if e["pid"] == r["pid"]]
        attach = [e for e in mine if e["event"] == "attach"]
        detach = [e for e in mine if e["event"] == "detach"]
        if len(attach) != 1 or len(detach) != 1 or detach[0].get("reason") != "target_exit":
            raise Fail("%s: rank %d (pid %d): %d attach, detach %s" % (
                style, r["rank"], r["pid"], len(attach), detach))
        if style in RANKED and attach[0].get("rank") != r["rank"]:
            raise Fail("%s: rank %d's attach event says rank %r" % (
                style, r["rank"], attach[0].get("rank")))
        if any(e["pid"] == r["fork_pid"] for e in events):
            raise Fail("%s: the child rank %d forked without exec (pid %d) has events" % (
                style, r["rank"], r["fork_pid"]))
    errors = [e for e in events if e["event"] == "error"]
    if errors:
        raise Fail("%s: error events: %s" % (style, errors[:3]))


@pytest.mark.parametrize("style", STYLES)
@environments(*HOST_ONLY)
def test_service_launcher(ctx, style):
    tmp = tempfile.mkdtemp(dir=ctx.tmp, prefix="launch-%s-" % style)
    try:
        events, ranks = run_style(ctx, tmp, style)
        check_ranks(style, events, ranks)
        ctx.log("%s: ranks %s attached; their forked children not" % (
            style, ", ".join("%d (pid %d)" % (r["rank"], r["pid"]) for r in ranks)))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@environments(*HOST_ONLY)
def test_service_relaunch_ddp(ctx):
    tmp = tempfile.mkdtemp(dir=ctx.tmp, prefix="relaunch-ddp-")
    try:
        token = "relaunch-%d" % os.getpid()
        job = "job-" + token
        config, events_path = write_config(ctx, tmp, [
            "  - name: ddp\n    match: {env: {NW_LAUNCH_TEST: '^%s$'}}\n" % token])
        daemon = start_ready(ctx, tmp, config)
        launcher, d = launch(ctx, tmp, "relaunch", token, "--ddp")
        ranks = wait_ranks(d, launcher)
        for r in ranks:
            wait_events(events_path, daemon, has_event("attach", r["pid"]),
                        "attach of rank %d" % r["rank"], ATTACH_TIMEOUT)
        open(os.path.join(d, "go"), "w").close()
        if launcher.wait(TRAINER_TIMEOUT) != 0:
            raise Fail("the job failed:\n%s" % tail(launcher.stderr_lines()))
        for r in ranks:
            wait_events(events_path, daemon, has_event("detach", r["pid"]),
                        "detach of rank %d" % r["rank"], DETACH_TIMEOUT)
        stop_service(daemon)
        out, _ = run_collect(ctx, "--json", events_path)
        verdicts = [json.loads(line) for line in out.splitlines() if line.strip()]
        by_rank = {r["rank"]: r["pid"] for r in ranks}
        if len(verdicts) != 1:
            raise Fail("%d verdicts for one job: %s" % (len(verdicts), out))
        v = verdicts[0]
        want = dict(job=job, found=True, rank=1, pid=by_rank[1], step=6,
                    layer="module.features", module="RatioFeatures", cause="division_by_zero",
                    cause_from="diagnosis", world_size=RANKS)
        diffs = ["%s %r, want %r" % (k, v.get(k), w) for k, w in want.items() if v.get(k) != w]
        if diffs:
            raise Fail("nanwatch-collect: %s\n    %s" % ("; ".join(diffs), json.dumps(v)))
        received = sorted(int(r["rank"]) for r in v["received"])
        if received != [0, 2]:
            raise Fail("received by ranks %s, want [0, 2]" % received)
        ctx.log("relaunched job: rank %d (pid %d) first at step %d, %s, %s" % (
            v["rank"], v["pid"], v["step"], v["layer"], v["cause"]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def cold_copies(d, n):
    """n copies of sleep in d, none of their pages in the page cache."""
    out = []
    for i in range(n):
        path = os.path.join(d, "sleep-%d" % i)
        shutil.copy("/bin/sleep", path)
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        out.append(path)
    return out


@environments(*HOST_ONLY)
def test_service_exec_window(ctx):
    tmp = tempfile.mkdtemp(dir=ctx.tmp, prefix="exec-window-")
    try:
        token = "exec-%d" % os.getpid()
        port = free_port()
        config, _ = write_config(ctx, tmp, [
            "  - name: e\n    match: {env: {NW_EXEC_TEST: '^%s$'}}\n" % token],
            metrics_port=port)
        daemon = start_ready(ctx, tmp, config)
        bins = cold_copies(tmp, EXECS)
        procs = Proc(["/usr/bin/python3", "-c", EXEC_AT_ONCE, token] + bins)
        line = procs.wait_out(lambda l: l.startswith(b"["), 30)
        if line is None:
            raise Fail("the exec helper printed no pids:\n%s" % procs.stderr_tail())
        pids = json.loads(line)
        try:
            wait_metric(daemon, port,
                        lambda s: metric(s, "nanwatch_processes_followed") == EXECS,
                        "%d processes followed" % EXECS, FOLLOW_TIMEOUT)
        except Fail as e:
            seen = set(int(m) for m in re.findall(r"pid (\d+) matches rule",
                                                   "\n".join(daemon.stderr_lines())))
            raise Fail("%s; of the processes execed at once, not matched: %s" % (
                e, [p for p in pids if p not in seen]))
        procs.kill()
        stop_service(daemon)
        ctx.log("%d processes execed at once from cold binaries: all followed" % EXECS)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@environments(*HOST_ONLY)
def test_service_orphan_no_crash(ctx):
    tmp = tempfile.mkdtemp(dir=ctx.tmp, prefix="orphan-")
    try:
        token = "orphan-%d" % os.getpid()
        config, events_path = write_config(ctx, tmp, [
            "  - name: o\n    match: {cmdline: '%s'}\n" % token,
            "  - name: t\n    match: {env: {NW_ORPHAN_TEST: '^%s$'}}\n" % token])
        daemon = start_ready(ctx, tmp, config)
        subprocess.check_call(["setpriv", "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY,
                               "--clear-groups", "setsid", "-f", "sh", "-c",
                               "sleep 4; : %s" % token])
        time.sleep(2)  # ten scans with the orphan there
        if not daemon.running():
            raise Fail("daemon exited %r with an orphan matching a rule:\n%s" % (
                daemon.p.returncode, daemon.stderr_tail(8)))
        trainer = start_trainer(ctx, {"NW_ORPHAN_TEST": token})
        if trainer.wait_out(lambda l: l.startswith(b"STEP "), 120) is None:
            raise Fail("trainer did not train:\n%s" % trainer.stderr_tail())
        wait_events(events_path, daemon, has_event("attach", trainer.pid), "attach",
                    ATTACH_TIMEOUT)
        trainer.kill()
        stop_service(daemon)
        orphan = [e for e in read_events(events_path) if e["pid"] != trainer.pid]
        if orphan:
            raise Fail("events about other processes: %s" % orphan[:3])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
