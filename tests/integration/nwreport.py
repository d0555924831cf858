"""The incident page as the tests make and read it, shared by test_report.py and
test_service_ddp.py: tools/nanwatch-report run with /usr/bin/python3, the page parsed (the text
of each element with an id, the images, the ranks table's rows), checked to refer to nothing
outside itself, its plots read as PNGs, and loaded in headless chromium
(chromium-headless-shell, every host name unresolvable, a network log that must hold no
request)."""
import base64
import html.parser
import json
import os
import re
import struct
import subprocess
import time

from nwharness import REPO, Fail

PYTHON = "/usr/bin/python3"
REPORT = os.path.join(REPO, "tools", "nanwatch-report")
CHROMIUM = "/usr/bin/chromium-headless-shell"
PLOT_MIN = (200, 100)
JOB_PLOTS = ("plot-loss", "plot-magnitude", "plot-path", "plot-ranks")
REMOTE = re.compile(r"\b(?:https?|wss?|ftp)://", re.I)


def report(ctx, inputs, name, stdin=None, want_rc=0, directory=None):
    """Run nanwatch-report; the page's path (NAME in DIRECTORY, default ctx.tmp) and text."""
    out = os.path.join(directory or ctx.tmp, name)
    t0 = time.monotonic()
    r = subprocess.run([PYTHON, REPORT] + list(inputs) + ["-o", out], stdin=stdin or
                       subprocess.DEVNULL, capture_output=True, timeout=120)
    ctx.log("nanwatch-report %s: exit %d in %.2f s" % (" ".join(inputs), r.returncode,
                                                        time.monotonic() - t0))
    if r.returncode != want_rc:
        raise Fail("nanwatch-report exited %d, want %d: %s" % (r.returncode, want_rc,
                                                               r.stderr.decode()[-600:]))
    with open(out, encoding="utf-8") as f:
        return out, f.read()


class Ids(html.parser.HTMLParser):
    """The text inside each element that has an id, the tags and attributes seen, and the
    src of each img by its id."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.text, self.open, self.tags, self.attrs, self.imgs = {}, [], set(), set(), {}

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        a = dict(attrs)
        self.attrs.update(k for k, _ in attrs)
        if tag == "img":
            self.imgs[a.get("id")] = a.get("src") or ""
        if tag in ("meta", "img", "br", "hr", "input", "link"):
            return
        self.open.append(a.get("id"))
        if a.get("id"):
            self.text.setdefault(a["id"], "")

    def handle_endtag(self, tag):
        if tag in ("meta", "img", "br", "hr", "input", "link"):
            return
        if self.open:
            self.open.pop()

    def handle_data(self, data):
        for i in self.open:
            if i:
                self.text[i] += data


def parse(text):
    p = Ids()
    p.feed(text)
    p.close()
    return p


def png_size(data):
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        raise Fail("not a PNG: %r" % data[:24])
    return struct.unpack(">II", data[16:24])


class Markup(html.parser.HTMLParser):
    """The tags, the attribute values that load something, and the style sheets of a page."""

    LOADS = ("src", "href", "srcset", "action", "data", "poster", "background", "formaction")

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.loads, self.styles, self.in_style = [], [], [], False

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.in_style = tag == "style"
        self.loads += [(tag, k, v or "") for k, v in attrs if k in self.LOADS]
        self.styles += [v or "" for k, v in attrs if k == "style"]

    def handle_endtag(self, tag):
        self.in_style = False

    def handle_data(self, data):
        if self.in_style:
            self.styles.append(data)


def check_static(page):
    """Nothing outside the file is referred to: no remote URL anywhere, no script or link
    element, no attribute loading anything but an embedded PNG, no @import or url() of a
    non-data URI in a style."""
    m = Markup()
    m.feed(page)
    m.close()
    bad = ["<%s>" % t for t in m.tags if t in ("script", "link", "iframe", "object", "embed",
                                               "base", "frame", "audio", "video", "source")]
    bad += ["<%s %s=%r>" % (t, k, v[:60]) for t, k, v in m.loads
            if not (t == "img" and k == "src" and v.startswith("data:image/png;base64,"))]
    for css in m.styles:
        if re.search(r"@import", css, re.I):
            bad.append("@import in a style")
        bad += ["url(%s" % u[:60] for u in re.findall(r"url\(\s*['\"]?([^)]*)", css, re.I)
                if not u.startswith("data:")]
    r = REMOTE.search(page)
    if r:
        bad.append("a remote URL: %r" % page[max(0, r.start() - 40):r.start() + 60])
    if not any(t == "img" for t in m.tags):
        bad.append("no img element at all (the parse found nothing)")
    if bad:
        raise Fail("the page refers outside itself: %s" % "; ".join(bad))


def check_plots(ctx, page, want):
    """Each wanted plot (img id) is a PNG bigger than PLOT_MIN; returns their sizes."""
    imgs = parse(page).imgs
    sizes = {}
    for name in want:
        src = imgs.get(name)
        if not src or not src.startswith("data:image/png;base64,"):
            raise Fail("no plot %s in the page (images: %s)" % (name, sorted(imgs, key=str)))
        w, h = png_size(base64.b64decode(src.split(",", 1)[1], validate=True))
        if w <= PLOT_MIN[0] or h <= PLOT_MIN[1]:
            raise Fail("plot %s is %dx%d px" % (name, w, h))
        sizes[name] = (w, h)
    ctx.log("plots: %s" % ", ".join("%s %dx%d" % (n, w, h) for n, (w, h) in sizes.items()))
    return sizes


def chromium(ctx, page_path, *extra):
    """Run headless chromium on the page with every host name unresolvable and a network log;
    stdout, and the strings of the log that name a remote URL."""
    if not os.access(CHROMIUM, os.X_OK):
        raise Fail("%s missing: scripts/install-deps --test installs it" % CHROMIUM)
    netlog = page_path + ".netlog.json"
    profile = os.path.join(ctx.tmp, "chromium-profile")
    argv = [CHROMIUM, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
            "--user-data-dir=" + profile, "--host-resolver-rules=MAP * ~NOTFOUND",
            "--log-net-log=" + netlog, *extra, "file://" + os.path.abspath(page_path)]
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=90)
    if r.returncode != 0:
        raise Fail("chromium exited %d: %s" % (r.returncode, r.stderr.decode()[-600:]))
    with open(netlog, encoding="utf-8") as f:
        log = json.load(f)
    remote = []

    def walk(o):
        if isinstance(o, dict):
            for k, v in o.items():
                if k == "url" and isinstance(v, str) and not v.startswith(("file:", "data:")):
                    remote.append(v)
                walk(v)
        elif isinstance(o, list):
            for v in o:
                walk(v)
        elif isinstance(o, str) and REMOTE.search(o):
            remote.append(o)
    walk(log.get("events"))
    if "events" not in log:
        raise Fail("chromium's net log %s has no events list" % netlog)
    if remote:
        raise Fail("the page made requests: %s" % remote[:5])
    return r.stdout.decode("utf-8", "replace")


def check_verdict(got, want):
    diffs = ["%s %r, want %r" % (k, got.get(k, "").strip(), w) for k, w in want.items()
             if got.get(k, "").strip() != w]
    if diffs:
        raise Fail("the page's verdict: %s" % "; ".join(diffs))


class Rows(html.parser.HTMLParser):
    """The rows of the table with the given id: each (class of the tr, [text of each cell])."""

    def __init__(self, table_id):
        super().__init__(convert_charrefs=True)
        self.table_id, self.depth, self.rows = table_id, 0, []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table":
            if self.depth or a.get("id") == self.table_id:
                self.depth += 1
        elif self.depth == 1 and tag == "tr":
            self.rows.append((a.get("class") or "", []))
        elif self.depth == 1 and tag in ("td", "th") and self.rows:
            self.rows[-1][1].append("")

    def handle_endtag(self, tag):
        if tag == "table" and self.depth:
            self.depth -= 1

    def handle_data(self, data):
        if self.depth == 1 and self.rows and self.rows[-1][1]:
            self.rows[-1][1][-1] += data


def table_rows(text, table_id):
    """The data rows (header rows left out) of the table TABLE_ID: a list of dicts by the
    header's names, with "class" the row's class."""
    p = Rows(table_id)
    p.feed(text)
    p.close()
    if not p.rows:
        raise Fail("no table %s in the page" % table_id)
    names = [c.strip() for c in p.rows[0][1]]
    return [dict(zip(names, (c.strip() for c in cells)), **{"class": cls})
            for cls, cells in p.rows[1:]]


def check_job_page(ctx, page_path, page, first, later=None, clean=()):
    """A job's page, as written and as chromium's DOM: the verdict names the rank FIRST
    (a dict of the verdict's element ids to their text: rank, layer, step, ...); the ranks
    table marks that rank's row, and only it, as the first, with FIRST's step and iteration;
    each rank of LATER (rank -> its first bad step) has its row at that step, later than the
    first rank's; each rank of CLEAN shows no anomaly; every job plot, the per-rank one
    included, is a PNG bigger than PLOT_MIN. Returns the DOM's rows and the plots' sizes."""
    later = later or {}
    check_static(page)
    sizes = check_plots(ctx, page, JOB_PLOTS)
    dom = chromium(ctx, page_path, "--dump-dom")
    check_verdict(parse(dom).text, first)
    rows = table_rows(dom, "ranks")
    by_rank = {r.get("rank"): r for r in rows}
    want_ranks = sorted([first["rank"]] + [str(r) for r in later] + [str(r) for r in clean])
    if sorted(by_rank) != want_ranks or len(rows) != len(want_ranks):
        raise Fail("the ranks table lists ranks %s, want %s" % ([r.get("rank") for r in rows],
                                                                 want_ranks))
    marked = [r["rank"] for r in rows if "first" in r["class"].split()]
    if marked != [first["rank"]]:
        raise Fail("the ranks table marks %s as the first, want rank %s" % (marked,
                                                                            first["rank"]))
    origin = by_rank[first["rank"]]
    want = "step %s, iteration %s (first)" % (first["step"], first["iteration"])
    if origin.get("first non-finite") != want:
        raise Fail("rank %s's row says %r, want %r" % (first["rank"],
                                                       origin.get("first non-finite"), want))
    for rank, step in sorted(later.items()):
        got = by_rank[str(rank)].get("first non-finite", "")
        m = re.match(r"step (\d+), iteration \d+$", got)
        if not m or int(m.group(1)) != step or step <= int(first["step"]):
            raise Fail("rank %s's row says %r, want step %d, later than the first rank's %s" %
                       (rank, got, step, first["step"]))
    for rank in clean:
        if by_rank[str(rank)].get("first non-finite") != "no anomaly":
            raise Fail("rank %s's row says %r, want no anomaly" % (
                rank, by_rank[str(rank)].get("first non-finite")))
    return rows, sizes
