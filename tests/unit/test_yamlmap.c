// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * yamlmap: bounded YAML documents and schema-driven mapping reads, on a nested document
 * shaped like a service config (mappings in lists in mappings), errors naming the line.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include "util/yamlmap.h"

static const struct yamlmap_limits lim = {
	.max_bytes = 4096,
	.max_nodes = 64,
	.max_scalar = 64,
	.max_key = 16,
	.max_depth = 4,
};

enum {
	F_WATCH,
	F_METRICS,
	F_OUTPUT,
	F_MATCH,
	F_LISTEN,
	F_COMM,
	F_MAX
};

static const struct yamlmap_field root_fields[] = {
	{"watch", YAMLMAP_LIST, 0, 8, F_WATCH},
	{"metrics", YAMLMAP_MAPPING, 0, 0, F_METRICS},
	{"output", YAMLMAP_LIST, 1, 4, F_OUTPUT},
};
static const struct yamlmap_field rule_fields[] = {
	{"match", YAMLMAP_MAPPING, 0, 0, F_MATCH},
};
static const struct yamlmap_field match_fields[] = {
	{"comm", YAMLMAP_STR, 1, 15, F_COMM},
	{"max", YAMLMAP_INT, 1, 100, F_MAX},
};
static const struct yamlmap_field metrics_fields[] = {
	{"listen", YAMLMAP_STR, 1, 64, F_LISTEN},
};

static const struct yamlmap_schema root_schema = {root_fields, 3, NULL};
static const struct yamlmap_schema rule_schema = {rule_fields, 1, NULL};
static const struct yamlmap_schema match_schema = {match_fields, 2, NULL};
static const struct yamlmap_schema metrics_schema = {metrics_fields, 1, NULL};

struct seen {
	const struct yamlmap *y;
	char comm[2][16];
	long long max;
	int rules, outputs;
	char listen[65];
	char err[256];
};

static int on_match(void *ctx, const struct yamlmap_value *v, char *why, size_t whylen)
{
	struct seen *s = ctx;

	if (v->field->id == F_COMM && !strcmp(v->s, "bad")) {
		snprintf(why, whylen, "'%s' names no process", v->key);
		return -EINVAL;
	}
	if (v->field->id == F_COMM)
		snprintf(s->comm[s->rules], sizeof(s->comm[0]), "%s", v->s);
	else
		s->max = v->i;
	return 0;
}

static int on_rule(void *ctx, const struct yamlmap_value *v, char *why, size_t whylen)
{
	struct seen *s = ctx;

	return yamlmap__read(s->y, v->node, &match_schema, on_match, s, why, whylen);
}

static int on_metrics(void *ctx, const struct yamlmap_value *v, char *why, size_t whylen)
{
	struct seen *s = ctx;

	(void)why;
	(void)whylen;
	snprintf(s->listen, sizeof(s->listen), "%s", v->s);
	return 0;
}

static int on_root(void *ctx, const struct yamlmap_value *v, char *why, size_t whylen)
{
	struct seen *s = ctx;
	size_t i;
	int ret;

	switch (v->field->id) {
	case F_WATCH:
		for (i = 0; i < yamlmap__count(v->node); i++, s->rules++) {
			ret = yamlmap__read(s->y, yamlmap__item(v->node, i, NULL), &rule_schema,
					    on_rule, s, why, whylen);
			if (ret)
				return ret;
		}
		return 0;
	case F_METRICS:
		return yamlmap__read(s->y, v->node, &metrics_schema, on_metrics, s, why, whylen);
	default:
		s->outputs = yamlmap__count(v->node);
		return 0;
	}
}

static int read_config(const char *text, struct seen *s)
{
	struct yamlmap *y;
	int ret;

	memset(s, 0, sizeof(*s));
	y = yamlmap__parse("svc.yaml", text, strlen(text), &lim, s->err, sizeof(s->err));
	if (!y)
		return -errno;
	s->y = y;
	ret = yamlmap__read(y, yamlmap__root(y), &root_schema, on_root, s, s->err, sizeof(s->err));
	yamlmap__free(y);
	return ret;
}

static void expect(const char *text, int ret, const char *what)
{
	struct seen s;

	assert_int_equal(read_config(text, &s), ret);
	if (!strstr(s.err, what))
		fail_msg("message '%s' lacks '%s'", s.err, what);
	assert_int_equal(strstr(s.err, "svc.yaml") - s.err, 0); /* named once, first */
	assert_null(strstr(s.err + 1, "svc.yaml"));
	assert_null(strchr(s.err, '\n'));
}

static void test_nested(void **state)
{
	struct seen s;

	(void)state;
	assert_int_equal(read_config("watch:\n"
				     "  - match: {comm: python3, max: 3}\n"
				     "  - match:\n"
				     "      comm: 'torchrun'\n"
				     "metrics:\n"
				     "  listen: \"127.0.0.1:9464\"\n"
				     "output: [stdout, /var/log/nanwatch.ndjson]\n",
				     &s),
			 0);
	assert_int_equal(s.rules, 2);
	assert_string_equal(s.comm[0], "python3");
	assert_string_equal(s.comm[1], "torchrun");
	assert_int_equal(s.max, 3);
	assert_string_equal(s.listen, "127.0.0.1:9464");
	assert_int_equal(s.outputs, 2);
	/* empty containers (an empty list once crashed the builder) */
	assert_int_equal(read_config("watch: []\nmetrics: {}\noutput: [x]\n", &s), 0);
	assert_int_equal(s.rules, 0);
	/* empty document: an empty mapping */
	assert_int_equal(read_config("# nothing\n", &s), 0);
}

static void test_nested_errors(void **state)
{
	(void)state;
	expect("watch:\n  - match:\n      comm: python3\n      pid: 4\noutput: [x]\n", -EINVAL,
	       "svc.yaml: line 4: unknown key 'pid'");
	expect("watch:\n  - match:\n      max: 101\n", -ERANGE,
	       "svc.yaml: line 3: 'max' is 101, outside the plausible range 1..100");
	expect("watch:\n  - match:\n      comm: bad\n", -EINVAL,
	       "svc.yaml: line 3: 'comm' names no process");
	expect("watch:\n  - match: [a]\n", -EINVAL, "line 2: 'match' is a list, not a mapping");
	expect("output: []\n", -ERANGE, "line 1: 'output' has 0 items, not 1..4");
	expect("metrics: 3\n", -EINVAL, "line 1: 'metrics' is a value, not a mapping");
	expect("watch: [[[[1]]]]\n", -E2BIG, "svc.yaml: line 1: nested deeper than 4 levels");
	expect("output: [a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, "
	       "a, "
	       "a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, a, "
	       "a, "
	       "a, a, a, a, a, a, a, a, a, a, a]\n",
	       -E2BIG, "more than 64 nodes");
	expect("a: &x 1\nb: *x\n", -EINVAL, "line 1: anchors are not supported");
	expect("a: 1\na: 2\n", -EEXIST, "line 2: duplicate key 'a' (first on line 1)");
	expect("averyveryverylongkey: 1\n", -ENAMETOOLONG, "key longer than 16 characters");
}

static void test_nodes(void **state)
{
	const char *text = "k: [1, 'two']\n";
	struct yamlmap *y = yamlmap__parse("n.yaml", text, strlen(text), &lim, NULL, 0);
	const struct yamlmap_node *root, *seq;
	const char *key;

	(void)state;
	assert_non_null(y);
	assert_string_equal(yamlmap__name(y), "n.yaml");
	root = yamlmap__root(y);
	assert_int_equal(yamlmap__kind(root), YAMLMAP_MAP);
	assert_int_equal(yamlmap__count(root), 1);
	seq = yamlmap__item(root, 0, &key);
	assert_string_equal(key, "k");
	assert_int_equal(yamlmap__kind(seq), YAMLMAP_SEQ);
	assert_int_equal(yamlmap__line(seq), 1);
	assert_string_equal(yamlmap__text(yamlmap__item(seq, 0, NULL)), "1");
	assert_false(yamlmap__quoted(yamlmap__item(seq, 0, NULL)));
	assert_true(yamlmap__quoted(yamlmap__item(seq, 1, NULL)));
	assert_null(yamlmap__item(seq, 2, NULL));
	assert_null(yamlmap__text(seq));
	yamlmap__free(y);
	yamlmap__free(NULL);
	errno = 0;
	assert_null(yamlmap__parse("big.yaml", text, 5000, &lim, NULL, 0));
	assert_int_equal(errno, EFBIG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_nested),
		cmocka_unit_test(test_nested_errors),
		cmocka_unit_test(test_nodes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
