// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The service config: a full file read back, matchers, and refused files named by line and key. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include "service/config.h"

static struct config *parse(const char *text, char *err, size_t errlen)
{
	err[0] = 0;
	return config__parse("svc.yaml", text, strlen(text), err, errlen);
}

static const char good[] = "watch:\n"
			   "  - name: ddp\n"
			   "    match:\n"
			   "      cmdline: \"train\\\\.py\"\n"
			   "      env: {RANK: '^[0-9]+$'}\n"
			   "    mode: sample\n"
			   "    backward: on\n"
			   "    job: exp-7\n"
			   "    children: true\n"
			   "    capture_dir: /var/lib/nanwatch\n"
			   "    capture_max_mb: 8\n"
			   "  - match: {exe: 'python3', cgroup: 'slurm'}\n"
			   "output:\n"
			   "  - file: /var/log/nanwatch/events.ndjson\n"
			   "  - unix: /run/nanwatch/events.sock\n"
			   "  - stdout: true\n"
			   "metrics:\n"
			   "  listen: 127.0.0.1:9464\n"
			   "scan_interval_ms: 100\n"
			   "stats_interval: 30\n";

static void test_good(void **state)
{
	static const char env[] = "HOME=/root\0RANK=3\0WORLD_SIZE=4";
	char err[256], sum[256];
	struct config *c = parse(good, err, sizeof(err));

	(void)state;
	if (!c)
		fail_msg("%s", err);
	assert_int_equal(c->nrules, 2);
	assert_string_equal(c->rules[0].name, "ddp");
	assert_string_equal(c->rules[0].mode, "sample");
	assert_int_equal(c->rules[0].backward, 2);
	assert_string_equal(c->rules[0].job, "exp-7");
	assert_true(c->rules[0].children);
	assert_int_equal(c->rules[0].capture_max_bytes, 8 << 20);
	assert_string_equal(c->rules[1].name, "rule-2");
	assert_string_equal(c->rules[1].mode, "full");
	assert_int_equal(c->rules[1].backward, 1);
	assert_false(c->rules[1].children);
	assert_int_equal(c->noutputs, 3);
	assert_string_equal(c->outputs[0], "/var/log/nanwatch/events.ndjson");
	assert_string_equal(c->outputs[1], "unix:/run/nanwatch/events.sock");
	assert_string_equal(c->outputs[2], "-");
	assert_string_equal(c->metrics_listen, "127.0.0.1:9464");
	assert_int_equal(c->scan_interval_ms, 100);
	assert_int_equal(c->stats_interval, 30);

	assert_true(config__rule_match(&c->rules[0], "python3 train.py --x", "/usr/bin/python3",
				       env, sizeof(env), "0::/"));
	assert_false(
		config__rule_match(&c->rules[0], "python3 trainXpy", NULL, env, sizeof(env), NULL));
	/* RANK missing */
	assert_false(config__rule_match(&c->rules[0], "python3 train.py", NULL, "HOME=/", 7, NULL));
	assert_true(config__rule_match(&c->rules[1], "x", "/usr/bin/python3.11", NULL, 0,
				       "0::/system.slice/slurmstepd.scope"));
	assert_false(config__rule_match(&c->rules[1], "x", "/usr/bin/python3.11", NULL, 0, NULL));

	config__summary(c, sum, sizeof(sum));
	assert_non_null(strstr(sum, "svc.yaml: 2 rules (ddp, rule-2), 3 outputs"));
	config__free(c);
}

/* Usual regexes are not too complex. */
static void test_usual_regex(void **state)
{
	char err[256];
	struct config *c;

	(void)state;
	c = parse("watch:\n  - match:\n      cmdline: '^(/usr/bin/)?python3(\\.[0-9]+)? "
		  "([^ ]+/)?train_[a-z]{2,12}\\.py( --[a-z-]+(=[^ ]*)?)*$'\n"
		  "      exe: '[[:alnum:]_.-]+/python3\\.[0-9]{1,2}$'\n",
		  err, sizeof(err));
	if (!c)
		fail_msg("%s", err);
	assert_true(config__rule_match(&c->rules[0], "/usr/bin/python3.11 train_mlp.py --lr=3",
				       "/usr/bin/python3.11", NULL, 0, NULL));
	config__free(c);
}

static void test_defaults(void **state)
{
	char err[256];
	struct config *c = parse("watch: [{match: {cmdline: x}}]\n", err, sizeof(err));

	(void)state;
	if (!c)
		fail_msg("%s", err);
	assert_int_equal(c->noutputs, 1);
	assert_string_equal(c->outputs[0], "-");
	assert_int_equal(c->scan_interval_ms, CONFIG_DEFAULT_SCAN_MS);
	assert_string_equal(c->metrics_listen, "");
	config__free(c);
}

static void refused(const char *text, const char *what)
{
	char err[256];
	struct config *c = parse(text, err, sizeof(err));

	if (c)
		fail_msg("accepted: %s", text);
	assert_true(errno > 0);
	if (!strstr(err, what))
		fail_msg("message '%s' lacks '%s'", err, what);
	assert_null(strchr(err, '\n'));
	assert_int_equal(strncmp(err, "svc.yaml: line ", 15), 0);
}

static void test_refused(void **state)
{
	(void)state;
	refused("watch:\n  - match:\n      cmdline: 'a(b'\n",
		"svc.yaml: line 3: cmdline: invalid regular expression 'a(b'");
	refused("watch:\n  - match:\n      env:\n        RANK: '[0-'\n",
		"line 4: RANK: invalid regular expression");
	refused("watch:\n  - match: {cmdline: x}\n    pid: 4\n", "line 3: unknown key 'pid'");
	refused("watch:\n  - match: {comm: x}\n", "line 2: unknown key 'comm'");
	refused("watch:\n  - name: a\n    match: {}\n", "line 2: match: rule 'a' has no matcher");
	refused("watch:\n  - name: a\n", "line 2: match: rule 'a' has no matcher");
	refused("watch:\n  - match: {cmdline: x}\n    mode: fast\n",
		"line 3: mode: 'fast' is not full, sample or loss");
	refused("watch:\n  - match: {cmdline: x}\n    backward: yes\n",
		"line 3: backward: 'yes' is not off, norms or on");
	refused("watch:\n  - match: {cmdline: x}\n    children: 'true'\n",
		"line 3: children: 'true' is not true or false");
	refused("watch:\n  - match: {env: {'1X': a}}\n", "line 2: unknown key '1X'");
	refused("watch: [{match: {cmdline: x}}]\nmetrics: {listen: '0.0.0.0:9464'}\n",
		"line 2: listen: '0.0.0.0' is not a loopback address");
	refused("watch: [{match: {cmdline: x}}]\nmetrics: {listen: '127.0.0.1:0'}\n",
		"line 2: listen: '127.0.0.1:0' is not ADDR:PORT");
	refused("watch: [{match: {cmdline: x}}]\nmetrics: {listen: '127.0.0.1'}\n",
		"line 2: listen:");
	refused("watch: [{match: {cmdline: x}}]\noutput:\n  - file: rel/path\n",
		"line 3: file: 'rel/path' is not an absolute path");
	refused("watch: [{match: {cmdline: x}}]\noutput:\n  - {file: /a, stdout: true}\n",
		"line 3: stdout: one destination per output entry");
	refused("watch: [{match: {cmdline: x}}]\noutput:\n  - stdout: false\n", "line 3: stdout:");
	refused("watch: [{match: {cmdline: x}}]\nscan_interval_ms: 1\n",
		"line 2: 'scan_interval_ms' is 1, outside");
	refused("output: [{stdout: true}]\n", "line 1: watch: no rules");
	refused("watch: [{match: {cmdline: x}}]\nwatchh: []\n", "line 2: unknown key 'watchh'");
	/* glibc's regcomp copies repeated atoms: these would take gigabytes */
	refused("watch: [{match: {cgroup: 'slur+++++++++++++++++++++++++++++'}}]\n",
		"line 1: cgroup: regular expression 'slur+++");
	refused("watch: [{match: {cmdline: '((a{1,100}){1,100}){1,100}'}}]\n",
		"too complex (a repetition repeated, or repetitions that expand it past 4096 "
		"atoms)");
	refused("watch: [{match: {cmdline: 'ab???????????????????????++++++++'}}]\n",
		"cmdline: regular expression 'ab?");
	refused("watch: [{match: {exe: '([[:alpha:]]{1,99}[]x]{1,99}){99}'}}]\n", "exe: regular");
}

static void test_missing_file(void **state)
{
	char err[256] = "";

	(void)state;
	assert_null(config__load("/nonexistent/nanwatch.yaml", err, sizeof(err)));
	assert_int_equal(errno, ENOENT);
	assert_non_null(strstr(err, "/nonexistent/nanwatch.yaml"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_good),	     cmocka_unit_test(test_usual_regex),
		cmocka_unit_test(test_defaults),     cmocka_unit_test(test_refused),
		cmocka_unit_test(test_missing_file),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
