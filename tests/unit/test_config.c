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
#include "output/httpd.h"
#include "service/config.h"
#include "util/optval.h"

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

/* /proc/PID/cgroup is lines, each ending in a newline: ^ and $ anchor at each line's ends. */
static void test_cgroup_lines(void **state)
{
	char err[256];
	struct config *c;

	(void)state;
	c = parse("watch:\n  - match: {cgroup: '^0::/slurm/job_42$'}\n", err, sizeof(err));
	if (!c)
		fail_msg("%s", err);
	assert_true(config__rule_match(&c->rules[0], "x", NULL, NULL, 0, "0::/slurm/job_42\n"));
	assert_true(config__rule_match(&c->rules[0], "x", NULL, NULL, 0,
				       "12:cpu,cpuacct:/slurm/job_42\n0::/slurm/job_42\n"));
	assert_false(config__rule_match(&c->rules[0], "x", NULL, NULL, 0, "0::/slurm/job_420\n"));
	assert_false(config__rule_match(&c->rules[0], "x", NULL, NULL, 0, "1:0::/slurm/job_42\n"));
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
	assert_int_equal(c->read_method, OPTVAL_READ_AUTO);
	assert_false(c->learn_layouts);
	assert_string_equal(c->layout_cache, "");
	assert_int_equal(c->learn_timeout_ms, OPTVAL_LEARN_TIMEOUT_DEFAULT * 1000);
	config__free(c);
}

static void refused(const char *text, const char *what);

/* Learning tables: on only when said, its cache an absolute path. */
static void test_learn(void **state)
{
	char err[256];
	struct config *c = parse("watch: [{match: {cmdline: x}}]\nlearn_layouts: true\n"
				 "layout_cache: /var/cache/nw\nlearn_timeout: 30\n",
				 err, sizeof(err));

	(void)state;
	if (!c)
		fail_msg("%s", err);
	assert_true(c->learn_layouts);
	assert_string_equal(c->layout_cache, "/var/cache/nw");
	assert_int_equal(c->learn_timeout_ms, 30000);
	config__free(c);
	refused("watch: [{match: {cmdline: x}}]\nlearn_layouts: yes\n",
		"line 2: learn_layouts: 'yes' is not true or false");
	refused("watch: [{match: {cmdline: x}}]\nlayout_cache: cache\n",
		"line 2: layout_cache: 'cache' is not an absolute path");
}

/* The metrics textfile: an absolute NAME.prom, with or without the endpoint. */
static void test_textfile(void **state)
{
	char err[256];
	struct config *c =
		parse("watch: [{match: {cmdline: x}}]\n"
		      "metrics: {textfile: /var/lib/prometheus/node-exporter/nanwatch.prom}\n",
		      err, sizeof(err));

	(void)state;
	if (!c)
		fail_msg("%s", err);
	assert_string_equal(c->metrics_textfile, "/var/lib/prometheus/node-exporter/nanwatch.prom");
	assert_string_equal(c->metrics_listen, "");
	config__free(c);
	refused("watch: [{match: {cmdline: x}}]\nmetrics: {textfile: nanwatch.prom}\n",
		"line 2: textfile: 'nanwatch.prom' is not an absolute path");
	refused("watch: [{match: {cmdline: x}}]\nmetrics: {textfile: /var/lib/nanwatch.txt}\n",
		"line 2: textfile: '/var/lib/nanwatch.txt' does not end in NAME.prom");
	refused("watch: [{match: {cmdline: x}}]\nmetrics: {textfile: /var/lib/.prom}\n",
		"does not end in NAME.prom");
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
		"line 2: listen: '0.0.0.0:9464' is not a loopback address");
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

/*
 * The options the command line has too, each value read by the config and by what main.c
 * calls for the option (util/optval, httpd__check_listen): both take it or both refuse it,
 * with the same words after the option's name; a value taken is the same setting.
 */
struct both {
	const char *key, *flag, *value;
	int ok;
};

static const struct both values[] = {
	{"capture_max_mb", "--capture-max-mb", "0.5", 1},
	{"capture_max_mb", "--capture-max-mb", "512", 1},
	{"capture_max_mb", "--capture-max-mb", ".25", 1},
	{"capture_max_mb", "--capture-max-mb", "0.0000001", 0}, /* less than a byte */
	{"capture_max_mb", "--capture-max-mb", "0", 0},
	{"capture_max_mb", "--capture-max-mb", "512.5", 0},
	{"capture_max_mb", "--capture-max-mb", "1e2", 0},
	{"capture_max_mb", "--capture-max-mb", "-1", 0},
	{"capture_max_mb", "--capture-max-mb", "0x10", 0},
	{"capture_max_mb", "--capture-max-mb", "inf", 0},
	{"stats_interval", "--stats-interval", "0", 1},
	{"stats_interval", "--stats-interval", "86400", 1},
	{"stats_interval", "--stats-interval", "86401", 0},
	{"stats_interval", "--stats-interval", "1.5", 0},
	{"stats_interval", "--stats-interval", "+5", 0},
	{"max_scan_mb", "--max-scan-mb", "1", 1},
	{"max_scan_mb", "--max-scan-mb", "1048576", 1},
	{"max_scan_mb", "--max-scan-mb", "0", 0},
	{"max_scan_mb", "--max-scan-mb", "1048577", 0},
	{"max_scan_mb", "--max-scan-mb", "0.5", 0},
	{"max_scan_mb", "--max-scan-mb", "99999999999999999999", 0},
	{"grad_ring_mb", "--grad-ring-mb", "0", 1},
	{"grad_ring_mb", "--grad-ring-mb", "1", 1},
	{"grad_ring_mb", "--grad-ring-mb", "256", 1},
	{"grad_ring_mb", "--grad-ring-mb", "3", 0},
	{"grad_ring_mb", "--grad-ring-mb", "512", 0},
	{"grad_ring_mb", "--grad-ring-mb", "0.5", 0},
	{"grad_ring_mb", "--grad-ring-mb", "-8", 0},
	{"output_queue_kb", "--output-queue-kb", "4", 1},
	{"output_queue_kb", "--output-queue-kb", "0", 0},
	{"output_queue_kb", "--output-queue-kb", "0x10", 0},
	{"mode", "--mode", "sample", 1},
	{"mode", "--mode", "fast", 0},
	{"mode", "--mode", "Full", 0},
	{"backward", "--backward", "on", 1},
	{"backward", "--backward", "yes", 0},
	{"read_method", "--read-method", "auto", 1},
	{"read_method", "--read-method", "probe", 1},
	{"read_method", "--read-method", "task", 1},
	{"read_method", "--read-method", "adaptive", 1},
	{"read_method", "--read-method", "fast", 0},
	{"read_method", "--read-method", "Probe", 0},
	{"return_probe", "--return-probe", "auto", 1},
	{"return_probe", "--return-probe", "Session", 0},
	{"return_probe", "--return-probe", "session", 1},
	{"return_probe", "--return-probe", "uretprobe", 1},
	{"return_probe", "--return-probe", "kretprobe", 0},
	{"learn_timeout", "--learn-timeout", "1", 1},
	{"learn_timeout", "--learn-timeout", "3600", 1},
	{"learn_timeout", "--learn-timeout", "0", 0},
	{"learn_timeout", "--learn-timeout", "3601", 0},
	{"learn_timeout", "--learn-timeout", "2.5", 0},
	{"listen", "--metrics", "localhost:9464", 1},
	{"listen", "--metrics", "[::1]:9464", 1},
	{"listen", "--metrics", "127.3.4.5:1", 1},
	{"listen", "--metrics", "[::ffff:127.0.0.1]:9464", 0},
	{"listen", "--metrics", "0.0.0.0:9464", 0},
	{"listen", "--metrics", "[::]:9464", 0},
	{"listen", "--metrics", "127.0.0.1:0", 0},
	{"listen", "--metrics", "127.0.0.1:65536", 0},
	{"listen", "--metrics", "127.0.0.1", 0},
	{"textfile", "--metrics-textfile", "/var/lib/nanwatch.prom", 1},
	{"textfile", "--metrics-textfile", "nanwatch.prom", 0},
	{"textfile", "--metrics-textfile", "/var/lib/nanwatch.txt", 0},
	{"textfile", "--metrics-textfile", "/var/lib/.prom", 0},
	{"textfile", "--metrics-textfile", "/.prom", 0},
};

/* The config with the value at its key (a rule's, the metrics section's or a top-level one). */
static struct config *config_with(const struct both *b, char *err, size_t errlen)
{
	char text[512];

	if (!strcmp(b->key, "capture_max_mb") || !strcmp(b->key, "mode") ||
	    !strcmp(b->key, "backward"))
		snprintf(text, sizeof(text), "watch:\n  - match: {cmdline: x}\n    %s: %s\n",
			 b->key, b->value);
	else if (!strcmp(b->key, "listen") || !strcmp(b->key, "textfile"))
		snprintf(text, sizeof(text),
			 "watch: [{match: {cmdline: x}}]\nmetrics:\n  %s: '%s'\n", b->key,
			 b->value);
	else
		snprintf(text, sizeof(text), "watch: [{match: {cmdline: x}}]\n%s: %s\n", b->key,
			 b->value);
	return parse(text, err, errlen);
}

/* What the command line does with the value: main.c's call for the option; 0 or negative. */
static int flag_with(const struct both *b, struct config *want, char *why, size_t whylen)
{
	const char *mode;
	uint64_t u64 = 0;
	size_t sz = 0;
	int i = 0, ret;

	if (!strcmp(b->flag, "--capture-max-mb")) {
		ret = optval__capture_max_mb(b->flag, b->value, &u64, why, whylen);
		assert_true(ret || !want || u64 == want->rules[0].capture_max_bytes);
	} else if (!strcmp(b->flag, "--stats-interval")) {
		ret = optval__stats_interval(b->flag, b->value, &i, why, whylen);
		assert_true(ret || !want || i == want->stats_interval);
	} else if (!strcmp(b->flag, "--max-scan-mb")) {
		ret = optval__max_scan_mb(b->flag, b->value, &u64, why, whylen);
		assert_true(ret || !want || u64 == want->max_scan_bytes);
	} else if (!strcmp(b->flag, "--grad-ring-mb")) {
		uint32_t u32 = 0;

		ret = optval__grad_ring_mb(b->flag, b->value, &u32, why, whylen);
		assert_true(ret || !want || u32 == want->grad_ring_bytes);
	} else if (!strcmp(b->flag, "--output-queue-kb")) {
		ret = optval__queue_kb(b->flag, b->value, &sz, why, whylen);
		assert_true(ret || !want || sz == want->queue_bytes);
	} else if (!strcmp(b->flag, "--mode")) {
		ret = optval__mode(b->flag, b->value, &mode, why, whylen);
		assert_true(ret || !want || !strcmp(mode, want->rules[0].mode));
	} else if (!strcmp(b->flag, "--read-method")) {
		ret = optval__read_method(b->flag, b->value, &i, why, whylen);
		assert_true(ret || !want || i == want->read_method);
	} else if (!strcmp(b->flag, "--return-probe")) {
		ret = optval__return_probe(b->flag, b->value, &i, why, whylen);
		assert_true(ret || !want || i == want->return_probe);
	} else if (!strcmp(b->flag, "--learn-timeout")) {
		unsigned int ms = 0;

		ret = optval__learn_timeout(b->flag, b->value, &ms, why, whylen);
		assert_true(ret || !want || ms == want->learn_timeout_ms);
	} else if (!strcmp(b->flag, "--backward")) {
		ret = optval__backward(b->flag, b->value, &i, why, whylen);
		assert_true(ret || !want || i == want->rules[0].backward);
	} else if (!strcmp(b->flag, "--metrics-textfile")) {
		ret = optval__textfile(b->flag, b->value, why, whylen);
		assert_true(ret || !want || !strcmp(b->value, want->metrics_textfile));
	} else {
		ret = httpd__check_listen(b->flag, b->value, why, whylen);
		assert_true(ret || !want || !strcmp(b->value, want->metrics_listen));
	}
	return ret;
}

static void test_same_as_command_line(void **state)
{
	char err[512], why[512], name[64];
	const char *after_key, *after_flag;
	struct config *c;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
		const struct both *b = &values[i];

		c = config_with(b, err, sizeof(err));
		why[0] = 0;
		if (!!c != b->ok || (flag_with(b, c, why, sizeof(why)) == 0) != b->ok)
			fail_msg("%s %s: config %s (%s), command line %s", b->key, b->value,
				 c ? "takes it" : "refuses it", err, why[0] ? why : "takes it");
		config__free(c);
		if (b->ok)
			continue;
		snprintf(name, sizeof(name), ": %s: ", b->key);
		after_key = strstr(err, name);
		after_flag = why + strlen(b->flag) + 2;
		assert_non_null(after_key);
		assert_memory_equal(why, b->flag, strlen(b->flag));
		assert_string_equal(after_key + strlen(name), after_flag);
	}
}

/* A number in quotes is a string in YAML: refused, as any other type error. */
static void test_quoted_number(void **state)
{
	(void)state;
	refused("watch: [{match: {cmdline: x}}]\nstats_interval: '5'\n",
		"line 2: stats_interval: '5' is quoted: a number is written without quotes");
	refused("watch:\n  - match: {cmdline: x}\n    capture_max_mb: \"0.5\"\n",
		"line 3: capture_max_mb: '0.5' is quoted");
}

/* Every path the service opens is absolute: a relative one would depend on its start. */
static void test_relative_paths(void **state)
{
	(void)state;
	refused("watch:\n  - match: {cmdline: x}\n    capture_dir: captures\n",
		"line 3: capture_dir: 'captures' is not an absolute path");
	refused("watch: [{match: {cmdline: x}}]\nlayouts: config/layouts\n",
		"line 2: layouts: 'config/layouts' is not an absolute path");
	refused("watch: [{match: {cmdline: x}}]\noutput:\n  - unix: run/c.sock\n",
		"line 3: unix: 'run/c.sock' is not an absolute path");
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
		cmocka_unit_test(test_good),
		cmocka_unit_test(test_usual_regex),
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_learn),
		cmocka_unit_test(test_textfile),
		cmocka_unit_test(test_same_as_command_line),
		cmocka_unit_test(test_quoted_number),
		cmocka_unit_test(test_relative_paths),
		cmocka_unit_test(test_missing_file),
		cmocka_unit_test(test_cgroup_lines),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
