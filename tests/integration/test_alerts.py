"""The alert rules shipped in config/nanwatch-alerts.yml, with Debian's promtool.

alerts_rules (host): `promtool check rules` accepts the file; `promtool test rules
tests/promtool/nanwatch-alerts.test.yml` passes (a job whose ranks on two nodes go non-finite
one after another gives one NanwatchJobNonFinite alert naming the first rank, its host, layer,
cause and step; a second job its own; a scaler that keeps skipping, a lost watch and dropped
lines each their alert, and nothing before); and every nanwatch_ metric the rules name is one
the daemon exports (a family in daemon/output/metrics.c), so a renamed metric cannot leave a
rule that never fires.
"""
import os
import re
import subprocess

from nwharness import REPO, Fail
from nwchecks import HOST_ONLY, environments
from nwprom import RULES

PROMTOOL = "/usr/bin/promtool"
TESTS = os.path.join(REPO, "tests", "promtool", "nanwatch-alerts.test.yml")
METRICS_C = os.path.join(REPO, "daemon", "output", "metrics.c")


def promtool(*args, cwd=None):
    r = subprocess.run([PROMTOOL] + list(args), capture_output=True, text=True, timeout=120,
                       cwd=cwd)
    if r.returncode != 0:
        raise Fail("promtool %s exited %d:\n%s%s" % (" ".join(args), r.returncode, r.stdout,
                                                   r.stderr))
    return r.stdout


@environments(*HOST_ONLY)
def test_alerts_rules(ctx):
    if not os.access(PROMTOOL, os.X_OK):
        raise Fail("%s missing: run scripts/install-deps --test" % PROMTOOL)
    out = promtool("check", "rules", RULES)
    ctx.log(out.strip().splitlines()[-1].strip())
    out = promtool("test", "rules", os.path.basename(TESTS), cwd=os.path.dirname(TESTS))
    if "SUCCESS" not in out:
        raise Fail("promtool test rules printed no SUCCESS:\n%s" % out)
    with open(RULES) as f:
        rules = "\n".join(l for l in f if not l.lstrip().startswith("#"))
    with open(METRICS_C) as f:
        source = f.read()
    # the families: family(t, "NAME", ...), and the first non-finite pair named in a table
    exported = set(re.findall(r'family\(t, "(nanwatch_[a-z_]+)"', source)) | \
        set(re.findall(r'"(nanwatch_first_nonfinite_[a-z_]+)"', source))
    named = set(re.findall(r"\b(nanwatch_[a-z_]+)", rules))
    missing = sorted(named - exported)
    if missing or not named:
        raise Fail("the rules name %s, which the daemon does not export" % missing)
    ctx.log("rules name %s: all exported" % ", ".join(sorted(named)))
