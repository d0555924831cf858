#!/usr/bin/python3
"""Start the ranks of a job the ways launchers do, for the service's discovery tests.

    launch.py STYLE --ranks N --dir DIR [--ddp]

STYLE is how the ranks are started:
  relaunch  this script runs itself again once per rank (the same executable and command line,
            RANK, LOCAL_RANK and WORLD_SIZE added to the environment), as scripts that are
            their own launcher do
  elastic   torch.distributed.elastic's start_processes, which torchrun starts its workers
            with (TORCHELASTIC_RUN_ID, RANK, ... in their environment)
  spawn     torch.multiprocessing.spawn (the rank is an argument, not in the environment)
  mpirun    a shell starts each rank in the background with Open MPI's variables
            (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_SIZE)
  srun      the same with Slurm's (SLURM_PROCID, SLURM_LOCALID, SLURM_NTASKS, SLURM_JOB_ID)
  orphan    each rank started with `setsid -f` by a shell that exits at once: the ranks'
            parent is then the init process, as for a job systemd or nohup started

Each rank imports torch, writes DIR/rank-PID.json ({"pid", "rank", "fork_pid"}), forks a
child that does not exec (as a DataLoader worker is made) and waits, then waits for DIR/go
and trains a small model for a few steps; the forked child ends with it. With --ddp (style
relaunch only) each rank is instead one rank of tests/trainers/ddp.py, a gloo job whose rank 1
divides by zero at step 6, started once DIR/go exists. The launcher exits 0 once every rank
did.
"""
import argparse
import json
import os
import runpy
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
GO_TIMEOUT = 300
RANK_ENV = {
    "relaunch": ("RANK", "LOCAL_RANK", "WORLD_SIZE"),
    "elastic": ("RANK", "LOCAL_RANK", "WORLD_SIZE"),
    "mpirun": ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_SIZE"),
    "srun": ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS"),
    "orphan": ("RANK", "LOCAL_RANK", "WORLD_SIZE"),
}


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_go(directory):
    deadline = time.monotonic() + GO_TIMEOUT
    while not os.path.exists(os.path.join(directory, "go")):
        if time.monotonic() > deadline:
            sys.exit("launch: no %s/go in %d s" % (directory, GO_TIMEOUT))
        time.sleep(0.05)


def rank_main(rank, directory, ddp):
    """One rank: announce, fork a worker that does not exec, wait for go, train."""
    import torch

    fork_pid = os.fork()
    if fork_pid == 0:  # the worker: no exec, ends with the rank
        wait_go(directory)
        time.sleep(1)
        os._exit(0)
    path = os.path.join(directory, "rank-%d.json" % os.getpid())
    with open(path + ".tmp", "w") as f:
        json.dump({"pid": os.getpid(), "rank": rank, "fork_pid": fork_pid}, f)
    os.rename(path + ".tmp", path)
    wait_go(directory)
    if ddp:
        sys.argv = [os.path.join(HERE, "ddp.py"), "--fault-step", "6", "--bad-rank", "1"]
        sys.path.insert(0, HERE)
        runpy.run_path(sys.argv[0], run_name="__main__")
    else:
        torch.manual_seed(rank)
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        for _ in range(20):
            loss = model(torch.randn(4, 8)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(0.02)
    os.waitpid(fork_pid, 0)


def env_rank(style):
    return int(os.environ[RANK_ENV[style][0]])


def rank_env(style, rank, world, port):
    names = RANK_ENV[style]
    env = {names[0]: str(rank), names[1]: str(rank), names[2]: str(world),
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)}
    if style == "srun":
        env["SLURM_JOB_ID"] = os.environ.get("SLURM_JOB_ID", "4242")
    return env


def rank_argv(a):
    return [sys.executable, os.path.abspath(__file__), a.style, "--ranks", str(a.ranks), "--dir",
            a.dir, "--rank-process"] + (["--ddp"] if a.ddp else [])


def run_relaunch(a, port):
    # the same command line again: what the rank is comes from the environment
    procs = [subprocess.Popen([sys.executable] + sys.argv,
                              env=dict(os.environ, **rank_env("relaunch", r, a.ranks, port)))
             for r in range(a.ranks)]
    return max(p.wait() for p in procs)


def run_elastic(a, port):
    import inspect

    from torch.distributed.elastic.multiprocessing import Std, start_processes

    args = {r: tuple(rank_argv(a)[1:]) for r in range(a.ranks)}
    envs = {r: dict(rank_env("elastic", r, a.ranks, port),
                    TORCHELASTIC_RUN_ID=os.environ.get("TORCHELASTIC_RUN_ID", "elastic-job"))
            for r in range(a.ranks)}
    kw = dict(name="launch", entrypoint=sys.executable, args=args, envs=envs)
    params = inspect.signature(start_processes).parameters
    if "logs_specs" in params:  # torch 2.3 and later
        from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs
        kw["logs_specs"] = DefaultLogsSpecs(log_dir=os.path.join(a.dir, "elastic-logs"),
                                            redirects=Std.NONE, tee=Std.NONE)
    else:
        kw.update(log_dir=os.path.join(a.dir, "elastic-logs"), redirects=Std.NONE, tee=Std.NONE)
    os.makedirs(os.path.join(a.dir, "elastic-logs"), exist_ok=True)
    ctx = start_processes(**kw)
    result = ctx.wait()
    return 0 if result is not None and not result.is_failed() else 1


def spawned(rank, directory, ddp):
    rank_main(rank, directory, ddp)


def run_spawn(a, port):
    import torch.multiprocessing as mp

    mp.spawn(spawned, args=(a.dir, a.ddp), nprocs=a.ranks, join=True)
    return 0


def run_shell(a, port, background):
    """mpirun/srun/orphan: a shell starts the ranks; orphan's shell exits at once."""
    lines = []
    for r in range(a.ranks):
        env = " ".join("%s=%s" % kv for kv in sorted(rank_env(a.style, r, a.ranks, port).items()))
        argv = " ".join("'%s'" % x for x in rank_argv(a))
        lines.append("env %s %s%s" % (env, "setsid -f " if not background else "", argv)
                     + (" &" if background else ""))
    if background:
        lines.append("wait")
    rc = subprocess.call(["/bin/sh", "-c", "\n".join(lines)])
    if background:
        return rc
    # setsid -f: the ranks outlive the shell; wait until each has written and then exited
    deadline = time.monotonic() + GO_TIMEOUT
    while time.monotonic() < deadline:
        pids = [json.load(open(os.path.join(a.dir, f)))["pid"] for f in os.listdir(a.dir)
                if f.startswith("rank-") and f.endswith(".json")]
        if len(pids) == a.ranks and not any(os.path.exists("/proc/%d" % p) for p in pids):
            return rc
        time.sleep(0.1)
    return 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("style", choices=["relaunch", "elastic", "spawn", "mpirun", "srun", "orphan"])
    ap.add_argument("--ranks", type=int, default=3)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--ddp", action="store_true")
    ap.add_argument("--rank-process", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.ddp and a.style != "relaunch":
        ap.error("--ddp goes with relaunch")
    if a.rank_process or (a.style == "relaunch" and "RANK" in os.environ):
        rank_main(env_rank(a.style), a.dir, a.ddp)
        return 0
    port = free_port()
    run = {"relaunch": run_relaunch, "elastic": run_elastic, "spawn": run_spawn,
           "mpirun": lambda a, p: run_shell(a, p, True), "srun": lambda a, p: run_shell(a, p, True),
           "orphan": lambda a, p: run_shell(a, p, False)}[a.style]
    return run(a, port)


if __name__ == "__main__":
    sys.exit(main())
