"""tools/nanwatch-run: a training command started with the GPU library in CUDA_INJECTION64_PATH.

run_env: the command runs as the same process (exec: its pid is the one the launcher got), with
CUDA_INJECTION64_PATH the library's absolute path given as a relative --lib, and
NANWATCH_CUPTI_LAUNCH set only when --launch is given; its arguments pass through untouched.
run_errors: no command, an unknown mode, a missing library: one line on stderr naming the
problem, exit status non-zero, the command not run.
"""
import os
import subprocess
import tempfile

from nwharness import Fail

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RUN = os.path.join(ROOT, "tools", "nanwatch-run")
PY = "/usr/bin/python3"
SHOW = "import os, sys; print(os.getpid(), os.environ.get('CUDA_INJECTION64_PATH'), " \
       "os.environ.get('NANWATCH_CUPTI_LAUNCH'), sys.argv[1:])"


def run(argv, cwd):
    env = {k: v for k, v in os.environ.items()
           if k not in ("CUDA_INJECTION64_PATH", "NANWATCH_CUPTI_LAUNCH")}
    p = subprocess.Popen([RUN] + argv, cwd=cwd, env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(timeout=30)
    return p.pid, p.returncode, out, err


def test_run_env():
    with tempfile.TemporaryDirectory() as d:
        lib = os.path.join(d, "libnanwatch_cupti.so")
        open(lib, "wb").close()
        pid, rc, out, err = run(["--lib", "libnanwatch_cupti.so", "--", PY, "-c", SHOW,
                                 "a b", "--lib"], d)
        if rc != 0 or err:
            raise Fail("nanwatch-run failed: rc %d, stderr %r" % (rc, err))
        if out.split(" ", 3)[:3] != [str(pid), lib, "None"]:
            raise Fail("want pid %d, %s, no launch mode; got %r" % (pid, lib, out))
        if not out.rstrip().endswith("['a b', '--lib']"):
            raise Fail("arguments changed on the way: %r" % out)
        pid, rc, out, err = run(["--launch", "interpose", "--lib=" + lib, PY, "-c", SHOW], d)
        if rc != 0 or out.split(" ", 3)[1:3] != [lib, "interpose"]:
            raise Fail("--launch interpose: rc %d, %r, %r" % (rc, out, err))


def test_run_errors():
    with tempfile.TemporaryDirectory() as d:
        marker = os.path.join(d, "ran")
        cmd = ["touch", marker]
        lib = os.path.join(d, "lib.so")
        open(lib, "wb").close()
        cases = [([], "no command"),
                 (["--lib", lib, "--launch", "sideways"] + cmd, "callback or interpose"),
                 (["--lib", os.path.join(d, "missing.so")] + cmd, "no such file"),
                 (["--bogus"] + cmd, "unknown option")]
        for argv, want in cases:
            _, rc, out, err = run(argv, d)
            lines = err.strip().splitlines()
            if rc == 0 or len(lines) != 1 or want not in lines[0]:
                raise Fail("%r: want one stderr line with %r and a failure, got rc %d, %r"
                           % (argv, want, rc, err))
            if not lines[0].startswith("nanwatch-run: "):
                raise Fail("%r: stderr line does not name the tool: %r" % (argv, lines[0]))
            if os.path.exists(marker):
                raise Fail("%r: the command ran" % argv)
