"""nanwatch-report on real streams, read in a real browser (Debian's chromium-headless-shell).

report_run_and_job: the seeded div_zero trainer runs as RANK=1 with its fault at step 4 under
nanwatchd -o FILE --capture-dir DIR, and nanwatch-repro --explain --json appends its
explanation; RANK=0 runs the same trainer without the fault. The page of rank 1's stream,
loaded in headless chromium (--dump-dom), must show the layer, class, step and iteration the
oracle (forward hooks) names, the daemon's cause (the fault's by construction), the replay's
operation, the capture directory and the replay command; the HTML must hold no reference to
anything outside it (no http(s)://, <script>, <link>, @import, url() or src of a non-data
URI), chromium's network log (--log-net-log) must hold no request, every plot must be a PNG
larger than 200x100 px (read from the IHDR of the base64 data), and the screenshot must have
the window's size. The job's page (both files) must name rank 1 at the oracle's layer, step
and iteration, mark its row of the ranks table (only it) as the first and show rank 0's row
with no anomaly, with every plot, the per-rank one included, such a PNG; the two streams in
one file read from standard input must name the same rank, layer and step. (A real
DataParallel job's page, its first rank and the ranks that received the NaN later:
test_service_ddp.py.) The page's making, loading and checking are nwreport.py's, shared with
test_service_ddp.py.
report_million_lines: a million lines made from the real stream's lines (seq and step
counting up), a garbage line and a line over 1 MiB among them, piped in: the page names the
same first layer and step, counts the two skipped lines; time and peak RSS are logged, the RSS
must stay under 300 MiB (memory is bounded by design; speed is never asserted).
report_hostile: the real stream with markup in every name (layer, class, evidence, host):
the page and chromium's DOM hold no element or attribute from the stream, and show the names
escaped.
report_follow_and_output: --follow on a growing file rewrites the page (clean first, then the
first layer once its lines arrive) and exits 0 on SIGTERM; the page is 0644 or tighter with
no temporary file left; a destination that is a symbolic link is refused, its target
untouched.
"""
import json
import os
import signal
import subprocess
import threading
import time

from nwharness import REPO, TRAINERS, Fail, Proc, oracle_of, run_trainer
from nwchecks import HOST_ONLY, environments, read_events, run_rank
from nwreport import (PYTHON, REPORT, check_job_page, check_plots, check_static, check_verdict,
                      chromium, parse, png_size, report)

REPRO = os.path.join(REPO, "tools", "nanwatch-repro")
TRAINER = "div_zero"
FAULT = ("--fault-step", "4")
NO_FAULT = ("--fault-step", "100", "--steps", "7")  # as many steps as the faulty run trains
WINDOW = (1280, 2400)
BIG_LINES = 1000000
RSS_LIMIT_KIB = 300 * 1024
HOSTILE = ('<script>alert(1)</script>', '"><img src=x onerror=alert(2)>',
           "'><svg onload=alert(3)>", "$\\alpha$ </dd><b>x")
STREAMS = {}  # ctx.tmp -> (path, events, pid) of the faulty rank's real stream


def run_report_rank(ctx, rank, args, trace, extra=()):
    """A rank of a two-rank job that lingers a second after training (the capture's names are
    read from the live target)."""
    return run_rank(ctx, TRAINER, rank, 2, ("--linger", "1") + tuple(args), trace,
                    os.path.join(ctx.tmp, "report-rank%d.ndjson" % rank), daemon_extra=extra)


def faulty_stream(ctx):
    """Rank 1's real stream (with the fault, a capture and the replay's explanation appended),
    its events, its pid and the oracle; made once per run."""
    if ctx.tmp in STREAMS:
        return STREAMS[ctx.tmp]
    oracle, trace = oracle_of(ctx, TRAINER, *FAULT)
    capdir = os.path.join(ctx.tmp, "report-captures")
    os.makedirs(capdir, mode=0o755, exist_ok=True)
    path, pid, events = run_report_rank(ctx, 1, FAULT, trace, extra=["--capture-dir", capdir])
    diag = [ev for ev in events if ev["event"] == "diagnosis"]
    if len(diag) != 1 or not diag[0].get("capture"):
        raise Fail("want one diagnosis with a capture: %s" % diag)
    r = subprocess.run([PYTHON, REPRO, "--explain", "--json", "--class-from",
                        os.path.join(TRAINERS, TRAINER + ".py"), diag[0]["capture"]],
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)
    if r.returncode != 0 or '"explanation"' not in r.stdout:
        raise Fail("nanwatch-repro --explain --json exited %d: %s" % (r.returncode,
                                                                       (r.stdout + r.stderr)[-400:]))
    with open(path, "a") as f:
        f.write(r.stdout.strip() + "\n")
    events = read_events(path)
    STREAMS[ctx.tmp] = (path, events, pid, oracle)
    return STREAMS[ctx.tmp]


@environments(*HOST_ONLY)
def test_report_run_and_job(ctx):
    path1, faulty, pid1, oracle = faulty_stream(ctx)
    first = next(ev for ev in faulty if ev["event"] == "anomaly")
    diag = next(ev for ev in faulty if ev["event"] == "diagnosis")
    expl = next(ev for ev in faulty if ev["event"] == "explanation")
    if (first["step"], first["iteration"], first["layer"]) != \
            (oracle["step"], oracle["iteration"], oracle["layer"]):
        raise Fail("the daemon's first anomaly %r differs from the oracle's %r" % (
            (first["step"], first["iteration"], first["layer"]),
            (oracle["step"], oracle["iteration"], oracle["layer"])))
    if diag["cause"] != oracle["expected_cause"] or expl["op"] != "aten::div":
        raise Fail("diagnosis %r (the fault is %r), replay op %r" % (
            diag["cause"], oracle["expected_cause"], expl["op"]))

    page_path, page = report(ctx, [path1], "run.html")
    check_static(page)
    check_plots(ctx, page, ("plot-loss", "plot-magnitude", "plot-path"))
    if os.stat(page_path).st_mode & 0o022:
        raise Fail("the page is writable by others: %o" % os.stat(page_path).st_mode)
    dom = chromium(ctx, page_path, "--dump-dom")
    ids = parse(dom).text
    check_verdict(ids, dict(layer=oracle["layer"], module=oracle["module"],
                            step=str(oracle["step"]), iteration=str(oracle["iteration"]),
                            cause=diag["cause"], confidence="%.2f" % diag["confidence"],
                            rank="1", op="aten::div", capture=diag["capture"]))
    if ids.get("replay-command", "").strip() != "nanwatch-repro --explain %s" % diag["capture"]:
        raise Fail("replay command %r" % ids.get("replay-command"))
    fixes = ids.get("fixes", "")
    if not diag["fixes"] or any(f not in fixes for f in diag["fixes"]):
        raise Fail("fixes %r, the diagnosis says %r" % (fixes, diag["fixes"]))
    shot = os.path.join(ctx.tmp, "report-run.png")
    chromium(ctx, page_path, "--screenshot=" + shot, "--window-size=%d,%d" % WINDOW)
    with open(shot, "rb") as f:
        size = png_size(f.read(64))
    if size != WINDOW:
        raise Fail("screenshot %s is %dx%d, the window %dx%d" % ((shot,) + size + WINDOW))
    ctx.log("run: %s (%s) step %s iteration %s rank 1, cause %s, replay %s; screenshot %s "
            "(%d bytes)" % (oracle["layer"], oracle["module"], oracle["step"],
                            oracle["iteration"], diag["cause"], expl["op"], shot,
                            os.path.getsize(shot)))

    # the job: rank 0 clean, rank 1 faulty; as two files, and as one file on stdin
    clean_trace = run_trainer(ctx, TRAINER, *NO_FAULT)["trace"]
    path0, _, clean = run_report_rank(ctx, 0, NO_FAULT, clean_trace)
    if any(ev["event"] == "anomaly" for ev in clean):
        raise Fail("rank 0 (no fault) has anomaly events")
    job_path, job = report(ctx, [path0, path1], "job.html")
    check_job_page(ctx, job_path, job, dict(layer=oracle["layer"], step=str(oracle["step"]),
                                            iteration=str(oracle["iteration"]), rank="1"),
                   clean=(0,))
    both = os.path.join(ctx.tmp, "report-both.ndjson")
    with open(both, "wb") as f:
        for p in (path0, path1):
            with open(p, "rb") as src:
                f.write(src.read())
    with open(both, "rb") as stdin:
        _, one = report(ctx, ["-"], "job-stdin.html", stdin=stdin)
    check_verdict(parse(one).text, dict(layer=oracle["layer"], step=str(oracle["step"]),
                                        rank="1"))
    ctx.log("job: rank 1 named first, rank 0 clean (two files, and one on stdin)")


def big_stream(events, n, sink):
    """n lines made of the real stream's: its attach and first iteration's lines, then its
    later anomaly and stats lines over and over with seq and step counting up; a garbage line
    and one over 1 MiB among them."""
    head = []
    for ev in events:
        if ev["event"] in ("stats", "detach"):
            break
        head.append(json.dumps(ev))
    later = [ev for ev in events if ev["event"] == "anomaly"][-1]
    stats = next(ev for ev in events if ev["event"] == "stats")
    a = json.dumps(dict(later, seq=-111, step=-222, iteration=-333, first=False))
    s = json.dumps(dict(stats, seq=-111, step=-222))
    base = later["step"] + 1
    out = [line + "\n" for line in head] + ["not an event\n", '{"x":"' + "y" * (1 << 20) + '"}\n']
    written = len(out)
    sink.write("".join(out).encode())
    batch = []
    for i in range(written, n):
        tmpl = s if i % 97 == 0 else a
        step = base + i // 64
        batch.append(tmpl.replace("-111", str(i)).replace("-222", str(step))
                     .replace("-333", str(2 * step)) + "\n")
        if len(batch) == 4096:
            sink.write("".join(batch).encode())
            batch = []
    sink.write("".join(batch).encode())


@environments(*HOST_ONLY)
def test_report_million_lines(ctx):
    _, events, _, oracle = faulty_stream(ctx)
    out = os.path.join(ctx.tmp, "big.html")
    t0 = time.monotonic()
    p = subprocess.Popen([PYTHON, REPORT, "-", "-o", out], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    errors = []

    def feed():
        try:
            big_stream(events, BIG_LINES, p.stdin)
            p.stdin.close()
        except (BrokenPipeError, OSError) as e:
            errors.append(e)
    feeder = threading.Thread(target=feed)
    feeder.start()
    err = []
    reader = threading.Thread(target=lambda: err.append(p.stderr.read()))
    reader.start()
    _, status, usage = os.wait4(p.pid, 0)
    p.returncode = os.waitstatus_to_exitcode(status)
    elapsed = time.monotonic() - t0
    feeder.join(30)
    reader.join(30)
    rss = usage.ru_maxrss
    ctx.log("%d lines (%s) rendered in %.1f s, peak RSS %.1f MiB" % (
        BIG_LINES, "generated in this process and piped in", elapsed, rss / 1024.0))
    if p.returncode != 0 or errors:
        raise Fail("nanwatch-report exited %d (%s): %s" % (p.returncode, errors,
                                                           b"".join(err).decode()[-400:]))
    if rss > RSS_LIMIT_KIB:
        raise Fail("peak RSS %.1f MiB over %d MiB" % (rss / 1024.0, RSS_LIMIT_KIB // 1024))
    with open(out, encoding="utf-8") as f:
        page = f.read()
    check_static(page)
    check_plots(ctx, page, ("plot-loss", "plot-magnitude", "plot-path"))
    ids = parse(page).text
    check_verdict(ids, dict(layer=oracle["layer"], step=str(oracle["step"]), rank="1"))
    if "%d lines read" % BIG_LINES not in page or "2 lines skipped" not in ids.get("evidence",
                                                                                  ""):
        raise Fail("the page does not count %d lines read and 2 skipped: %r" % (
            BIG_LINES, ids.get("evidence", "")[-300:]))
    if "2 lines skipped" not in b"".join(err).decode():
        raise Fail("stderr does not count the skipped lines: %r" % b"".join(err)[-300:])


@environments(*HOST_ONLY)
def test_report_hostile(ctx):
    _, events, _, oracle = faulty_stream(ctx)
    hostile = []
    for i, ev in enumerate(events):
        ev = dict(ev)
        bad = HOSTILE[i % len(HOSTILE)]
        for k in ("layer", "module"):
            if isinstance(ev.get(k), str):
                ev[k] = ev[k] + bad
        for k in ("evidence", "fixes"):
            if isinstance(ev.get(k), list):
                ev[k] = [x + bad for x in ev[k]] + list(HOSTILE)
        if ev["event"] in ("diagnosis", "explanation"):
            ev["cause"] = HOSTILE[0]
            ev["capture"] = "/tmp/" + HOSTILE[1]
        ev["host"] = ev["host"] + HOSTILE[2]
        hostile.append(json.dumps(ev))
    src = os.path.join(ctx.tmp, "hostile.ndjson")
    with open(src, "w") as f:
        f.write("\n".join(hostile) + "\n")
    page_path, page = report(ctx, [src], "hostile.html")
    check_static(page)
    allowed_tags = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "div",
                    "dl", "dt", "dd", "ul", "li", "code", "pre", "img", "span", "strong",
                    "table", "tr", "th", "td"}
    allowed_attrs = {"lang", "charset", "http-equiv", "content", "class", "id", "alt", "src"}
    for name, text in (("page", page), ("DOM", chromium(ctx, page_path, "--dump-dom"))):
        p = parse(text)
        if p.tags - allowed_tags or p.attrs - allowed_attrs:
            raise Fail("the %s holds markup from the stream: tags %s, attributes %s" % (
                name, sorted(p.tags - allowed_tags), sorted(p.attrs - allowed_attrs)))
        for raw in ("<script>alert(1)", "<img src=x", "<svg onload", "</dd><b>"):
            if raw in text:
                raise Fail("the %s holds %r unescaped" % (name, raw))
        shown = "".join(p.text.values())
        if HOSTILE[0] not in p.text.get("cause", "") or \
                oracle["layer"] + HOSTILE[1] not in p.text.get("layer", "") or \
                HOSTILE[3] not in shown:
            raise Fail("the %s does not show the hostile names as text: cause %r, layer %r" % (
                name, p.text.get("cause"), p.text.get("layer")))
    ctx.log("hostile names shown escaped; no tag or attribute from the stream in the page or "
            "the DOM")


def wait_page(path, pred, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
            if pred(text):
                return text
        except FileNotFoundError:
            pass
        time.sleep(0.2)
    raise Fail("%s: not as wanted in %d s" % (path, timeout))


@environments(*HOST_ONLY)
def test_report_follow_and_output(ctx):
    path, events, _, oracle = faulty_stream(ctx)
    with open(path, "rb") as f:
        lines = f.read().splitlines(keepends=True)
    cut = next(i for i, ev in enumerate(events) if ev["event"] == "anomaly")
    d = os.path.join(ctx.tmp, "follow")
    os.makedirs(d, exist_ok=True)
    live, out = os.path.join(d, "live.ndjson"), os.path.join(d, "live.html")
    with open(live, "wb") as f:
        f.writelines(lines[:cut])
    proc = Proc([PYTHON, REPORT, "--follow", live, "-o", out], term_timeout=10)
    wait_page(out, lambda t: "No non-finite value" in t)
    with open(live, "ab") as f:
        f.writelines(lines[cut:])
    page = wait_page(out, lambda t: parse(t).text.get("layer", "").strip() == oracle["layer"])
    check_verdict(parse(page).text, dict(step=str(oracle["step"]), rank="1"))
    proc.p.send_signal(signal.SIGTERM)
    rc = proc.wait(15)
    if rc != 0:
        raise Fail("nanwatch-report --follow exited %r on SIGTERM" % rc)
    mode = os.stat(out).st_mode
    left = sorted(set(os.listdir(d)) - {"live.ndjson", "live.html"})
    if mode & 0o022 or left:
        raise Fail("page mode %o, files left in its directory: %s" % (mode & 0o777, left))
    ctx.log("--follow: clean page first, then the first layer; SIGTERM exit 0; mode %o" %
            (mode & 0o777))

    # a destination that is a symbolic link is refused, what it points to untouched
    target, link = os.path.join(d, "target.txt"), os.path.join(d, "link.html")
    with open(target, "w") as f:
        f.write("keep\n")
    os.symlink(target, link)
    r = subprocess.run([PYTHON, REPORT, path, "-o", link], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=120)
    with open(target) as f:
        kept = f.read()
    if r.returncode != 1 or "symbolic link" not in r.stderr or kept != "keep\n" or \
            not os.path.islink(link):
        raise Fail("-o SYMLINK: exit %d, stderr %r, target now %r" % (r.returncode, r.stderr,
                                                                      kept[:80]))
    ctx.log("-o SYMLINK refused: %s" % r.stderr.strip())
