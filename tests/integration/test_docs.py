"""The reference pages and guides kept true to the programs (docs/).

docs_options (host): for each command, the options its --help prints and the entries of its
page's OPTIONS section (docs/man/NAME.SECTION.rst) are the same set, and every option of the
page is accepted: run with it (and a made-up argument where it takes one) followed by an option
that does not exist, the program complains about the made-up option only, never about it.
docs_sections: every page has SYNOPSIS, OPTIONS (KEYS for the configuration file), EXIT STATUS
and EXAMPLES. docs_event_fields: every key the daemon writes into an event line (the key
arguments of the JSON writer's calls in daemon/, the capture manifest's files aside) has a row
of a field table of docs/events.md (first column: the field), one field a row. docs_causes:
every cause the diagnosis can conclude (daemon/explain/diagnose.c) and every cause
nanwatch-repro --explain can give has a row of a cause table of docs/diagnosis.md.
docs_config_keys: every key the configuration parser knows is a term of nanwatch.yaml(5).
docs_man_installed: make install into a scratch DESTDIR puts every page where man finds it by
name (man --manpath=... nanwatchd) and it renders with its sections.
"""
import glob
import os
import re
import subprocess
import tempfile

from nwharness import REPO, Fail
from nwchecks import HOST_ONLY, environments

DOCS = os.path.join(REPO, "docs")
MAN = os.path.join(DOCS, "man")
PYTHON = "/usr/bin/python3"
SENTINEL = "--nw-docs-no-such-option"
# command -> (page, how it is run: a binary beside --daemon, or a script under tools/)
COMMANDS = {
    "nanwatchd": ("nanwatchd.8.rst", "build"),
    "nanwatch-tail": ("nanwatch-tail.1.rst", "build"),
    "nanwatch-collect": ("nanwatch-collect.1.rst", "build"),
    "nanwatch-repro": ("nanwatch-repro.1.rst", "python"),
    "nanwatch-layout": ("nanwatch-layout.1.rst", "python"),
    "nanwatch-report": ("nanwatch-report.1.rst", "python"),
    "nanwatch-run": ("nanwatch-run.1.rst", "sh"),
}
OPTION = re.compile(r"--[a-z][a-z0-9-]*|-[A-Za-z]\b")
# a --help line that introduces options: indented a little, starting with a dash
HELP_OPTION_LINE = re.compile(r"^ {1,6}(-\S.*)$")


def tail_args(name):
    """What follows the options: an operand where the parser wants one (argparse checks
    its required arguments before it names the unknown ones)."""
    return ["x"] if COMMANDS[name][1] == "python" else []


def argv_of(ctx, name):
    _, how = COMMANDS[name]
    if how == "build":
        path = os.path.join(os.path.dirname(os.path.abspath(ctx.daemon)), name)
        if not os.access(path, os.X_OK):
            raise Fail("%s missing: build it with make" % path)
        return [path]
    path = os.path.join(REPO, "tools", name)
    return [PYTHON, path] if how == "python" else ["/bin/sh", path]


def run(argv, timeout=60):
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=timeout)
    return r.returncode, r.stdout + r.stderr


def section(text, title):
    """The body of a top-level section of an rst page (title underlined with =), or None."""
    m = re.search(r"^%s\n=+\n(.*?)(?=^[A-Z][A-Z ]+\n=+\n|\Z)" % re.escape(title), text,
                  re.S | re.M)
    return m.group(1) if m else None


def page_text(page):
    path = os.path.join(MAN, page)
    if not os.path.exists(path):
        raise Fail("%s missing" % path)
    with open(path, encoding="utf-8") as f:
        return f.read()


def page_options(page):
    """Option -> its argument's name (None: no argument), from the OPTIONS option list."""
    body = section(page_text(page), "OPTIONS")
    if body is None:
        raise Fail("%s has no OPTIONS section" % page)
    opts = {}
    for line in body.splitlines():
        if not line.startswith("-"):
            continue
        for part in line.split(", "):
            words = part.split()
            if words and OPTION.fullmatch(words[0].split("=")[0]):
                opt = words[0].split("=")[0]
                arg = words[1] if len(words) > 1 else (
                    words[0].split("=", 1)[1] if "=" in words[0] else None)
                opts[opt] = arg
    if not opts:
        raise Fail("%s: no option entries in OPTIONS" % page)
    return opts


def help_options(text):
    """The options a --help text lists (its option lines; the usage line and examples aside)."""
    opts = set()
    for line in text.splitlines():
        m = HELP_OPTION_LINE.match(line)
        if not m:
            continue
        head = re.split(r" {2,}", m.group(1))[0]  # the option column, before its description
        for part in head.split(","):
            words = part.split()
            if words and OPTION.fullmatch(words[0].split("=")[0]):
                opts.add(words[0].split("=")[0])
    return opts


def complaint_about(opt, out):
    """The lines of out that refuse opt as an option."""
    pat = re.compile(r"(unrecognized|unknown|invalid|ambiguous) (option|argument)s?\b.*?'?%s\b"
                     r"|unrecognized arguments:.*(?<!\S)%s(?!\S)|option '?%s'? (requires|doesn't)"
                     % ((re.escape(opt),) * 3))
    return [line for line in out.splitlines() if pat.search(line)]


@environments(*HOST_ONLY)
def test_docs_options(ctx):
    """--help and the page's OPTIONS list the same options, and each listed one is accepted."""
    problems = []
    for name, (page, _) in COMMANDS.items():
        argv = argv_of(ctx, name)
        rc, out = run(argv + ["--help"])
        if rc != 0:
            raise Fail("%s --help exited %d: %s" % (name, rc, out[-300:]))
        shown = help_options(out)
        documented = page_options(page)
        if "--help" not in shown:
            raise Fail("%s --help: no option lines found in:\n%s" % (name, out[:600]))
        for opt in sorted(shown - set(documented)):
            problems.append("%s: --help prints %s, docs/man/%s does not" % (name, opt, page))
        for opt in sorted(set(documented) - shown):
            problems.append("%s: docs/man/%s lists %s, --help does not" % (name, page, opt))
        # the made-up option is refused by name: the parser reads the command line
        rc, out = run(argv + [SENTINEL] + tail_args(name))
        if rc == 0 or not complaint_about(SENTINEL, out) and SENTINEL not in out:
            raise Fail("%s %s: exit %d, and no complaint about it: %s" %
                       (name, SENTINEL, rc, out[-300:]))
        for opt, arg in sorted(documented.items()):
            args = [opt] + (["1"] if arg else [])
            rc, out = run(argv + args + [SENTINEL] + tail_args(name))
            ctx.log("%s %s: exit %d" % (name, " ".join(args), rc))
            bad = complaint_about(opt, out)
            if bad:
                problems.append("%s refuses %s, which docs/man/%s documents: %s" %
                                (name, " ".join(args), page, bad[0]))
    if problems:
        raise Fail("\n".join(problems))


@environments(*HOST_ONLY)
def test_docs_sections(ctx):
    """Every reference page has the sections a man page reader looks for."""
    pages = sorted(os.path.basename(p) for p in glob.glob(os.path.join(MAN, "*.rst")))
    expected = sorted(page for page, _ in COMMANDS.values()) + ["nanwatch.yaml.5.rst"]
    if sorted(pages) != sorted(expected):
        raise Fail("docs/man holds %s, expected %s" % (pages, expected))
    missing = []
    for page in pages:
        text = page_text(page)
        need = ["SYNOPSIS", "KEYS" if page.startswith("nanwatch.yaml") else "OPTIONS",
                "EXIT STATUS", "EXAMPLES"]
        missing += ["%s: no %s section" % (page, s) for s in need if section(text, s) is None]
        m = re.search(r"^:Manual section: (\d)$", text, re.M)
        if not m or not page.endswith(".%s.rst" % m.group(1)):
            missing.append("%s: its :Manual section: does not match its name" % page)
    if missing:
        raise Fail("\n".join(missing))


def event_keys():
    """Every key the daemon writes into an event line: the key argument of each call that is
    handed the line's JSON writer j, and the key tables such calls index (names[i])."""
    keys = {}
    for path in glob.glob(os.path.join(REPO, "daemon", "**", "*.c"), recursive=True):
        rel = os.path.relpath(path, REPO)
        if rel.startswith("daemon/capture/") or rel == "daemon/output/json.c":
            continue  # the capture manifest is a file of its own, not an event line
        with open(path, encoding="utf-8") as f:
            src = f.read()
        for key in re.findall(r"\b\w+\(\s*&?j\s*,\s*\"([a-z_][a-z0-9_]*)\"", src):
            keys.setdefault(key, rel)
        for table in re.findall(r"\bjson__\w+\(\s*j\s*,\s*(\w+)\[", src):
            m = re.search(r"\b%s\[[^\]]*\]\s*=\s*\{(.*?)\};" % table, src, re.S)
            if not m:
                raise Fail("%s: json key table %s not found" % (rel, table))
            for key in re.findall(r"\"([a-z_][a-z0-9_]*)\"", m.group(1)):
                keys.setdefault(key, rel)
    return keys


def first_columns(path, header):
    """The backquoted names in the first column of each row of the Markdown page's tables whose
    header's first cell is header ("field", "cause"): (line number, names) per row."""
    rows, table = [], None
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            cells = line.strip().split("|")
            if len(cells) < 3 or not line.lstrip().startswith("|"):
                table = None
            elif table is None:
                table = cells[1].strip()  # the header row
            elif table == header and not re.fullmatch(r"\s*:?-+:?\s*", cells[1]):
                rows.append((n, re.findall(r"`([^`]+)`", cells[1])))
    return rows


def first_column_names(path, header):
    """The names of first_columns, split at dots (`phases.forward.found` names phases, forward
    and found)."""
    names = set()
    for _, refs in first_columns(path, header):
        for ref in refs:
            names.update(re.split(r"[.\[\]{}, ]+", ref))
    names.discard("")
    return names


@environments(*HOST_ONLY)
def test_docs_event_fields(ctx):
    """Each key the daemon writes has a row in docs/events.md."""
    keys = event_keys()
    if len(keys) < 50:
        raise Fail("only %d event keys found in daemon/: the extraction is broken" % len(keys))
    path = os.path.join(DOCS, "events.md")
    crowded = ["line %d: %s" % (n, ", ".join(refs)) for n, refs in first_columns(path, "field")
               if len(refs) > 1]
    if crowded:
        raise Fail("docs/events.md: rows naming several fields (one row per field): %s" %
                   "; ".join(crowded))
    rows = first_column_names(path, "field")
    missing = sorted("%s (%s)" % (k, where) for k, where in keys.items() if k not in rows)
    ctx.log("%d keys, %d names in events.md rows" % (len(keys), len(rows)))
    if missing:
        raise Fail("event fields with no row in docs/events.md: %s" % ", ".join(missing))


def causes():
    with open(os.path.join(REPO, "daemon", "explain", "diagnose.c"), encoding="utf-8") as f:
        live = set(re.findall(r"\bconclude\(\s*\w+\s*,\s*\"([a-z_0-9]+)\"", f.read()))
    with open(os.path.join(REPO, "tools", "nanwatch-repro"), encoding="utf-8") as f:
        src = f.read()
    # describe() returns (cause, agreement, evidence, facts); cause = "unknown" elsewhere
    replay = set(re.findall(r"\breturn\s+\"([a-z_0-9]+)\",\s", src))
    replay |= set(re.findall(r"\bcause\s*=\s*\"([a-z_0-9]+)\"", src))
    return live, replay


@environments(*HOST_ONLY)
def test_docs_causes(ctx):
    """Each cause the diagnosis or the replay can give has a row in docs/diagnosis.md."""
    live, replay = causes()
    if len(live) < 8:
        raise Fail("only %d causes found in diagnose.c: the extraction is broken" % len(live))
    rows = first_column_names(os.path.join(DOCS, "diagnosis.md"), "cause")
    ctx.log("causes: live %s, replay %s" % (sorted(live), sorted(replay)))
    missing = sorted((live | replay) - rows)
    if missing:
        raise Fail("causes with no row in docs/diagnosis.md: %s" % ", ".join(missing))


def config_keys():
    """Every key the configuration parser knows, from its tables of keys in config.c."""
    with open(os.path.join(REPO, "daemon", "service", "config.c"), encoding="utf-8") as f:
        src = f.read()
    return set(re.findall(r"\{\s*\"([a-z_]+)\"\s*,", src))


@environments(*HOST_ONLY)
def test_docs_config_keys(ctx):
    """Each key of the configuration file is a term of nanwatch.yaml(5)."""
    keys = config_keys()
    if len(keys) < 10:
        raise Fail("only %d keys found in config.c: the extraction is broken" % len(keys))
    body = section(page_text("nanwatch.yaml.5.rst"), "KEYS")
    terms = set()
    for term in re.findall(r"^``([^`]+)``", body or "", re.M):
        terms.update(re.split(r"[.\[\]]+", term))
    missing = sorted(keys - terms)
    if missing:
        raise Fail("configuration keys with no term in nanwatch.yaml(5): %s" % ", ".join(missing))


@environments(*HOST_ONLY)
def test_docs_man_installed(ctx):
    """make install puts the pages where man finds them by name, and they render."""
    dest = tempfile.mkdtemp(prefix="nanwatch-install-", dir=ctx.tmp)
    r = subprocess.run(["make", "-C", REPO, "--no-print-directory", "install", "DESTDIR=" + dest],
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        raise Fail("make install DESTDIR=%s exited %d: %s" % (dest, r.returncode,
                                                              (r.stdout + r.stderr)[-600:]))
    manpath = os.path.join(dest, "usr", "local", "share", "man")
    for page in sorted(os.path.basename(p) for p in glob.glob(os.path.join(MAN, "*.rst"))):
        name, sec = page[:-len(".rst")].rsplit(".", 1)
        path = os.path.join(manpath, "man" + sec, "%s.%s" % (name, sec))
        if not os.path.isfile(path):
            raise Fail("make install left no %s" % path)
        if os.stat(path).st_mode & 0o022:
            raise Fail("%s is writable by others: %o" % (path, os.stat(path).st_mode))
        r = subprocess.run(["man", "--manpath=" + manpath, sec, name], capture_output=True,
                           text=True, timeout=60, env=dict(os.environ, MANPAGER="cat",
                                                           PAGER="cat", MANWIDTH="100"))
        heads = ["SYNOPSIS", "EXIT STATUS", "EXAMPLES"]
        if r.returncode != 0 or any(h not in r.stdout for h in heads):
            raise Fail("man %s %s (from %s): exit %d, sections %s missing: %s" %
                       (sec, name, manpath, r.returncode,
                        [h for h in heads if h not in r.stdout], (r.stdout + r.stderr)[-300:]))
        ctx.log("man %s %s: %d lines" % (sec, name, r.stdout.count("\n")))
