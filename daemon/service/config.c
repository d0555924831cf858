// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The service's YAML configuration: schema, checks, compiled matchers. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "output/httpd.h"
#include "service/config.h"
#include "util/optval.h"
#include "util/yamlmap.h"

/* A config is small: anything larger is a mistake, not a config. */
static const struct yamlmap_limits limits = {
	.max_bytes = 1 << 20,
	.max_nodes = 8192,
	.max_scalar = PATH_MAX,
	.max_key = 64,
	.max_depth = 6,
};

enum {
	K_WATCH,
	K_OUTPUT,
	K_METRICS,
	K_SCAN,
	K_LAYOUTS,
	K_STATS,
	K_MAXSCAN,
	K_GRADRING,
	K_READ,
	K_RETURN,
	K_LEARN,
	K_CACHE,
	K_LEARN_TIMEOUT,
	K_QUEUE,
	K_NAME,
	K_MATCH,
	K_MODE,
	K_BACKWARD,
	K_CAPDIR,
	K_CAPMAX,
	K_JOB,
	K_CHILDREN,
	K_CMDLINE,
	K_EXE,
	K_ENV,
	K_CGROUP,
	K_ENVVAR,
	K_FILE,
	K_UNIX,
	K_STDOUT,
	K_LISTEN,
	K_TEXTFILE,
};

static const struct yamlmap_field root_fields[] = {
	{"watch", YAMLMAP_LIST, 1, CONFIG_MAX_RULES, K_WATCH},
	{"output", YAMLMAP_LIST, 1, CONFIG_MAX_OUTPUTS, K_OUTPUT},
	{"metrics", YAMLMAP_MAPPING, 0, 0, K_METRICS},
	{"scan_interval_ms", YAMLMAP_INT, 20, 60000, K_SCAN},
	{"layouts", YAMLMAP_STR, 1, PATH_MAX - 1, K_LAYOUTS},
	/* the options the command line has too: their values are read by util/optval */
	{"stats_interval", YAMLMAP_STR, 1, PATH_MAX, K_STATS},
	{"max_scan_mb", YAMLMAP_STR, 1, PATH_MAX, K_MAXSCAN},
	{"grad_ring_mb", YAMLMAP_STR, 1, PATH_MAX, K_GRADRING},
	{"output_queue_kb", YAMLMAP_STR, 1, PATH_MAX, K_QUEUE},
	{"read_method", YAMLMAP_STR, 1, PATH_MAX, K_READ},
	{"return_probe", YAMLMAP_STR, 1, PATH_MAX, K_RETURN},
	{"learn_layouts", YAMLMAP_STR, 1, 5, K_LEARN},
	{"layout_cache", YAMLMAP_STR, 1, PATH_MAX - 1, K_CACHE},
	{"learn_timeout", YAMLMAP_STR, 1, PATH_MAX, K_LEARN_TIMEOUT},
};
static const struct yamlmap_field rule_fields[] = {
	{"name", YAMLMAP_STR, 1, 63, K_NAME},
	{"match", YAMLMAP_MAPPING, 0, 0, K_MATCH},
	{"mode", YAMLMAP_STR, 1, PATH_MAX, K_MODE},
	{"backward", YAMLMAP_STR, 1, PATH_MAX, K_BACKWARD},
	{"capture_dir", YAMLMAP_STR, 1, PATH_MAX - 1, K_CAPDIR},
	{"capture_max_mb", YAMLMAP_STR, 1, PATH_MAX, K_CAPMAX},
	{"job", YAMLMAP_STR, 1, 127, K_JOB},
	{"children", YAMLMAP_STR, 1, 5, K_CHILDREN},
};
static const struct yamlmap_field match_fields[] = {
	{"cmdline", YAMLMAP_STR, 1, 1024, K_CMDLINE},
	{"exe", YAMLMAP_STR, 1, 1024, K_EXE},
	{"env", YAMLMAP_MAPPING, 0, 0, K_ENV},
	{"cgroup", YAMLMAP_STR, 1, 1024, K_CGROUP},
};
static const struct yamlmap_field output_fields[] = {
	{"file", YAMLMAP_STR, 1, PATH_MAX - 1, K_FILE},
	{"unix", YAMLMAP_STR, 1, 107, K_UNIX}, /* sun_path */
	{"stdout", YAMLMAP_STR, 1, 5, K_STDOUT},
};
static const struct yamlmap_field metrics_fields[] = {
	{"listen", YAMLMAP_STR, 1, PATH_MAX, K_LISTEN},
	{"textfile", YAMLMAP_STR, 1, PATH_MAX - 64, K_TEXTFILE},
};
static const struct yamlmap_field env_field = {"", YAMLMAP_STR, 1, 1024, K_ENVVAR};

#define SCHEMA(f)                                 \
	{                                         \
		f, sizeof(f) / sizeof(f[0]), NULL \
	}
static const struct yamlmap_schema root_schema = SCHEMA(root_fields);
static const struct yamlmap_schema rule_schema = SCHEMA(rule_fields);
static const struct yamlmap_schema match_schema = SCHEMA(match_fields);
static const struct yamlmap_schema output_schema = SCHEMA(output_fields);
static const struct yamlmap_schema metrics_schema = SCHEMA(metrics_fields);

struct reader {
	const struct yamlmap *y;
	struct config *c;
	struct config_rule *r; /* the rule being read */
	int nkeys;	       /* keys of the output entry being read */
};

/* An environment variable's name: what a shell would take. */
static const struct yamlmap_field *env_lookup(void *ctx, const char *key, char *why, size_t whylen)
{
	const char *p;

	(void)ctx;
	for (p = key; *p; p++)
		if (!(*p == '_' || (*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
		      (p > key && *p >= '0' && *p <= '9')))
			break;
	if (*p || strlen(key) >= sizeof(((struct config_env *)0)->name)) {
		snprintf(why, whylen, "not an environment variable name");
		return NULL;
	}
	return &env_field;
}

#define REGEX_MAX_COST 4096 /* atoms after repetitions are expanded */
#define REGEX_MAX_NEST 32

static unsigned long sat_mul(unsigned long a, unsigned long b)
{
	return a && b > REGEX_MAX_COST * 2UL / a ? REGEX_MAX_COST * 2UL : a * b;
}

/* "{m}", "{m,}" or "{m,n}" at *p: how many copies of the atom glibc's regcomp makes. */
static unsigned long interval_copies(const char **p)
{
	unsigned long m = strtoul(*p + 1, (char **)p, 10), n = m;

	if (**p == ',')
		n = **p && (*p)[1] != '}' ? strtoul(*p + 1, (char **)p, 10) : (++*p, m + 1);
	if (**p == '}')
		++*p;
	return (m > n ? m : n) + 1;
}

/* Past the bracket expression at p ("[a-z]", "[]x]", "[^[:digit:]]"). */
static const char *skip_bracket(const char *p)
{
	p += p[1] == '^' ? 2 : 1;
	if (*p == ']')
		p++; /* a leading ']' is a member */
	while (*p && *p != ']') {
		const char *end = NULL;

		if (*p == '[' && (p[1] == ':' || p[1] == '.' || p[1] == '='))
			end = strstr(p + 2, (const char[]){p[1], ']', 0});
		p = end ? end + 2 : p + 1;
	}
	return *p ? p + 1 : p;
}

/*
 * How many atoms a regex becomes once regcomp copies each repeated atom or group ("x+" is "xx*",
 * "x{2,5}" five copies): glibc builds that tree, so "a++++++++++++++++++++" or nested intervals
 * take memory exponential in their length. An estimate, kept high on purpose; a repetition of
 * a repetition ("a?+", undefined in POSIX) counts as too many.
 */
static unsigned long regex_cost(const char *p)
{
	unsigned long sum[REGEX_MAX_NEST + 1] = {0}, last = 0, f;
	int depth = 0, repeated = 0; /* the last atom has a repetition already */

	while (*p) {
		if (repeated && strchr("*+?{", *p))
			return REGEX_MAX_COST *
			       2UL; /* "a**", "a?+": undefined in POSIX, and slow */
		repeated = 0;
		switch (*p) {
		case '(':
			if (depth == REGEX_MAX_NEST)
				return REGEX_MAX_COST * 2UL;
			sum[++depth] = 0;
			last = 0;
			p++;
			continue;
		case ')':
			last = depth ? sum[depth--] : 0;
			sum[depth] += last;
			p++;
			continue;
		case '*':
		case '+':
		case '?':
		case '{':
			if (*p == '{')
				f = interval_copies(&p);
			else
				f = *p++ == '+' ? 2 : 1;
			sum[depth] += sat_mul(last, f - 1);
			last = sat_mul(last, f);
			repeated = 1;
			break;
		case '[': /* a bracket expression: one atom */
			p = skip_bracket(p);
			sum[depth] += last = 1;
			break;
		case '\\':
			p += p[1] ? 2 : 1;
			sum[depth] += last = 1;
			break;
		default:
			p++;
			sum[depth] += last = 1;
		}
		if (sum[depth] > REGEX_MAX_COST)
			return sum[depth];
	}
	while (depth)
		sum[depth - 1] += sum[depth], depth--;
	return sum[0];
}

/* flags: more regcomp flags (REG_NEWLINE for a text of lines: ^ and $ at each line's ends). */
static int compile(regex_t *re, const struct yamlmap_value *v, int flags, char *why, size_t whylen)
{
	char msg[160];
	int ret;

	if (regex_cost(v->s) > REGEX_MAX_COST) {
		snprintf(why, whylen,
			 "%s: regular expression '%.80s' too complex (a repetition repeated, or "
			 "repetitions that expand it past %d atoms)",
			 v->key, v->s, REGEX_MAX_COST);
		return -E2BIG;
	}
	ret = regcomp(re, v->s, REG_EXTENDED | REG_NOSUB | flags);

	if (!ret)
		return 0;
	regerror(ret, re, msg, sizeof(msg));
	snprintf(why, whylen, "%s: invalid regular expression '%.80s': %s", v->key, v->s, msg);
	return -EINVAL;
}

static int on_env(void *ctx, const struct yamlmap_value *v, char *why, size_t whylen)
{
	struct config_rule *r = ((struct reader *)ctx)->r;
	struct config_env *e;
	int ret;

	if (r->nenv == CONFIG_MAX_ENV) {
		snprintf(why, whylen, "%s: more than %d environment matchers", v->key,
			 CONFIG_MAX_ENV);
		return -E2BIG;
	}
	e = &r->env[r->nenv];
	ret = compile(&e->re, v, 0, why, whylen);
	if (ret)
		return ret;
	snprintf(e->name, sizeof(e->name), "%s", v->key);
	r->nenv++;
	return 0;
}

static int on_match(void *ctx, const struct yamlmap_value *v, char *why, size_t whylen)
{
	struct reader *rd = ctx;
	struct config_rule *r = rd->r;
	const struct yamlmap_schema env_schema = {NULL, 0, env_lookup};
	int ret;

	switch (v->field->id) {
	case K_CMDLINE:
		ret = compile(&r->cmdline, v, 0, why, whylen);
		r->has_cmdline = !ret;
		return ret;
	case K_EXE:
		ret = compile(&r->exe, v, 0, why, whylen);
		r->has_exe = !ret;
		return ret;
	case K_CGROUP:
		ret = compile(&r->cgroup, v, REG_NEWLINE, why, whylen); /* a line per hierarchy */
		r->has_cgroup = !ret;
		return ret;
	default:
		return yamlmap__read(rd->y, v->node, &env_schema, on_env, rd, why, whylen);
	}
}

static int parse_bool(const struct yamlmap_value *v, bool *out, char *why, size_t whylen)
{
	if (!yamlmap__quoted(v->node) && !strcmp(v->s, "true"))
		*out = true;
	else if (!yamlmap__quoted(v->node) && !strcmp(v->s, "false"))
		*out = false;
	else {
		snprintf(why, whylen, "%s: '%.20s' is not true or false", v->key, v->s);
		return -EINVAL;
	}
	return 0;
}

/* A number for util/optval: written as one (a quoted scalar is a string in YAML). */
static int unquoted(const struct yamlmap_value *v, char *why, size_t whylen)
{
	if (!yamlmap__quoted(v->node))
		return 0;
	snprintf(why, whylen, "%s: '%.64s' is quoted: a number is written without quotes", v->key,
		 v->s);
	return -EINVAL;
}

/*
 * A path the daemon opens: absolute, since what a relative one would name depends on the
 * working directory the service was started in (the command line takes it from the user's).
 */
static int absolute(const struct yamlmap_value *v, char *why, size_t whylen)
{
	if (v->s[0] == '/')
		return 0;
	snprintf(why, whylen, "%s: '%.80s' is not an absolute path", v->key, v->s);
	return -EINVAL;
}

static int on_rule(void *ctx, const struct yamlmap_value *v, char *why, size_t whylen)
{
	struct reader *rd = ctx;
	struct config_rule *r = rd->r;
	const char *mode;
	int ret;

	switch (v->field->id) {
	case K_NAME:
		snprintf(r->name, sizeof(r->name), "%s", v->s);
		return 0;
	case K_MATCH:
		return yamlmap__read(rd->y, v->node, &match_schema, on_match, rd, why, whylen);
	case K_MODE:
		ret = optval__mode(v->key, v->s, &mode, why, whylen);
		if (!ret)
			snprintf(r->mode, sizeof(r->mode), "%s", mode);
		return ret;
	case K_BACKWARD:
		return optval__backward(v->key, v->s, &r->backward, why, whylen);
	case K_CAPDIR:
		snprintf(r->capture_dir, sizeof(r->capture_dir), "%s", v->s);
		return absolute(v, why, whylen);
	case K_CAPMAX:
		ret = unquoted(v, why, whylen);
		return ret ? ret
			   : optval__capture_max_mb(v->key, v->s, &r->capture_max_bytes, why,
						    whylen);
	case K_JOB:
		snprintf(r->job, sizeof(r->job), "%s", v->s);
		return 0;
	default:
		return parse_bool(v, &r->children, why, whylen);
	}
}

static int read_rules(struct reader *rd, const struct yamlmap_node *list, char *why, size_t whylen)
{
	const char *name = yamlmap__name(rd->y);
	size_t i;
	int ret;

	for (i = 0; i < yamlmap__count(list); i++) {
		const struct yamlmap_node *item = yamlmap__item(list, i, NULL);
		struct config_rule *r = &rd->c->rules[rd->c->nrules++];

		rd->r = r;
		snprintf(r->name, sizeof(r->name), "rule-%zu", i + 1);
		strcpy(r->mode, "full");
		r->backward = 1;
		ret = yamlmap__read(rd->y, item, &rule_schema, on_rule, rd, why, whylen);
		if (ret)
			return ret;
		if (!r->has_cmdline && !r->has_exe && !r->has_cgroup && !r->nenv) {
			yamlmap__errorf(why, whylen,
					"%s: line %d: match: rule '%s' has no matcher (cmdline, "
					"exe, env or cgroup)",
					name, yamlmap__line(item), r->name);
			return -EINVAL;
		}
	}
	return 0;
}

static int on_output(void *ctx, const struct yamlmap_value *v, char *why, size_t whylen)
{
	struct reader *rd = ctx;
	char *spec = rd->c->outputs[rd->c->noutputs];
	bool on;
	int ret;

	if (rd->nkeys++) {
		snprintf(why, whylen, "%s: one destination per output entry", v->key);
		return -EINVAL;
	}
	switch (v->field->id) {
	case K_FILE:
		snprintf(spec, PATH_MAX + 8, "%s", v->s);
		return absolute(v, why, whylen);
	case K_UNIX:
		snprintf(spec, PATH_MAX + 8, "unix:%s", v->s);
		return absolute(v, why, whylen);
	default:
		ret = parse_bool(v, &on, why, whylen);
		if (!ret && !on) {
			snprintf(why, whylen,
				 "stdout: false names no output (leave the entry out)");
			ret = -EINVAL;
		}
		if (!ret)
			strcpy(spec, "-");
		return ret;
	}
}

static int read_outputs(struct reader *rd, const struct yamlmap_node *list, char *why,
			size_t whylen)
{
	size_t i;
	int ret;

	for (i = 0; i < yamlmap__count(list); i++) {
		const struct yamlmap_node *item = yamlmap__item(list, i, NULL);

		rd->nkeys = 0;
		ret = yamlmap__read(rd->y, item, &output_schema, on_output, rd, why, whylen);
		if (ret)
			return ret;
		if (!rd->nkeys) {
			yamlmap__errorf(why, whylen,
					"%s: line %d: output: empty entry (file, unix or stdout)",
					yamlmap__name(rd->y), yamlmap__line(item));
			return -EINVAL;
		}
		rd->c->noutputs++;
	}
	return 0;
}

/* What --metrics takes (output/metrics checks both). */
static int on_metrics(void *ctx, const struct yamlmap_value *v, char *why, size_t whylen)
{
	struct config *c = ((struct reader *)ctx)->c;
	int ret;

	if (v->field->id == K_TEXTFILE) {
		snprintf(c->metrics_textfile, sizeof(c->metrics_textfile), "%s", v->s);
		return optval__textfile(v->key, v->s, why, whylen);
	}
	ret = httpd__check_listen(v->key, v->s, why, whylen);
	if (!ret)
		snprintf(c->metrics_listen, sizeof(c->metrics_listen), "%s", v->s);
	return ret;
}

static int on_root(void *ctx, const struct yamlmap_value *v, char *why, size_t whylen)
{
	struct reader *rd = ctx;
	struct config *c = rd->c;
	int ret;

	switch (v->field->id) {
	case K_WATCH:
		return read_rules(rd, v->node, why, whylen);
	case K_OUTPUT:
		return read_outputs(rd, v->node, why, whylen);
	case K_METRICS:
		return yamlmap__read(rd->y, v->node, &metrics_schema, on_metrics, rd, why, whylen);
	case K_SCAN:
		c->scan_interval_ms = v->i;
		return 0;
	case K_LAYOUTS:
		snprintf(c->layouts, sizeof(c->layouts), "%s", v->s);
		return absolute(v, why, whylen);
	case K_LEARN:
		return parse_bool(v, &c->learn_layouts, why, whylen);
	case K_CACHE:
		snprintf(c->layout_cache, sizeof(c->layout_cache), "%s", v->s);
		return absolute(v, why, whylen);
	}
	ret = unquoted(v, why, whylen);
	if (ret)
		return ret;
	switch (v->field->id) {
	case K_STATS:
		return optval__stats_interval(v->key, v->s, &c->stats_interval, why, whylen);
	case K_MAXSCAN:
		return optval__max_scan_mb(v->key, v->s, &c->max_scan_bytes, why, whylen);
	case K_GRADRING:
		return optval__grad_ring_mb(v->key, v->s, &c->grad_ring_bytes, why, whylen);
	case K_READ:
		return optval__read_method(v->key, v->s, &c->read_method, why, whylen);
	case K_RETURN:
		return optval__return_probe(v->key, v->s, &c->return_probe, why, whylen);
	case K_LEARN_TIMEOUT:
		return optval__learn_timeout(v->key, v->s, &c->learn_timeout_ms, why, whylen);
	default:
		return optval__queue_kb(v->key, v->s, &c->queue_bytes, why, whylen);
	}
}

static struct config *read_doc(struct yamlmap *y, char *err, size_t errlen)
{
	struct config *c = calloc(1, sizeof(*c));
	struct reader rd = {.y = y, .c = c};
	int ret = -ENOMEM;

	if (!c)
		goto fail;
	snprintf(c->path, sizeof(c->path), "%s", yamlmap__name(y));
	c->scan_interval_ms = CONFIG_DEFAULT_SCAN_MS;
	c->max_scan_bytes = 1024ULL << 20;
	c->grad_ring_bytes = OPTVAL_GRAD_RING_MB_DEFAULT << 20;
	c->queue_bytes = 1024 * 1024;
	c->read_method = OPTVAL_READ_AUTO;
	c->return_probe = OPTVAL_RETURN_AUTO;
	c->learn_timeout_ms = OPTVAL_LEARN_TIMEOUT_DEFAULT * 1000;
	ret = yamlmap__read(y, yamlmap__root(y), &root_schema, on_root, &rd, err, errlen);
	if (!ret && !c->nrules) {
		yamlmap__errorf(err, errlen,
				"%s: line 1: watch: no rules (a list of rules is needed)",
				yamlmap__name(y));
		ret = -EINVAL;
	}
	if (!ret && !c->noutputs)
		strcpy(c->outputs[c->noutputs++], "-");
	if (!ret)
		return c;
fail:
	if (ret == -ENOMEM)
		snprintf(err, errlen, "%s: %s", yamlmap__name(y), strerror(ENOMEM));
	config__free(c);
	errno = -ret;
	return NULL;
}

/* The config of a parsed document; y is freed. */
static struct config *from_doc(struct yamlmap *y, char *err, size_t errlen)
{
	struct config *c;
	int saved;

	if (!y)
		return NULL;
	c = read_doc(y, err, errlen);
	saved = errno;
	yamlmap__free(y);
	errno = saved;
	return c;
}

struct config *config__load(const char *path, char *err, size_t errlen)
{
	return from_doc(yamlmap__load(path, &limits, err, errlen), err, errlen);
}

struct config *config__parse(const char *name, const char *text, size_t len, char *err,
			     size_t errlen)
{
	return from_doc(yamlmap__parse(name, text, len, &limits, err, errlen), err, errlen);
}

void config__free(struct config *c)
{
	int i, k;

	if (!c)
		return;
	for (i = 0; i < c->nrules; i++) {
		struct config_rule *r = &c->rules[i];

		if (r->has_cmdline)
			regfree(&r->cmdline);
		if (r->has_exe)
			regfree(&r->exe);
		if (r->has_cgroup)
			regfree(&r->cgroup);
		for (k = 0; k < r->nenv; k++)
			regfree(&r->env[k].re);
	}
	free(c);
}

void config__summary(const struct config *c, char *buf, size_t len)
{
	size_t n;
	int i;

	n = snprintf(buf, len, "%s: %d rule%s (", c->path, c->nrules, c->nrules == 1 ? "" : "s");
	for (i = 0; i < c->nrules && n < len; i++)
		n += snprintf(buf + n, len - n, "%s%s", i ? ", " : "", c->rules[i].name);
	if (n < len)
		n += snprintf(buf + n, len - n, "), %d output%s, scan every %d ms, metrics %s",
			      c->noutputs, c->noutputs == 1 ? "" : "s", c->scan_interval_ms,
			      c->metrics_listen[0] ? c->metrics_listen : "off");
	if (n < len && c->metrics_textfile[0])
		n += snprintf(buf + n, len - n, ", textfile %s", c->metrics_textfile);
	if (n < len && c->learn_layouts)
		snprintf(buf + n, len - n, ", learns missing layout tables");
}

/* The value of NAME in a NUL-separated environment block, or NULL. */
static const char *env_value(const char *env, size_t len, const char *name)
{
	size_t nl = strlen(name);
	const char *p = env, *end = env + len;

	while (p < end) {
		const char *nul = memchr(p, 0, end - p);
		size_t n = nul ? (size_t)(nul - p) : (size_t)(end - p);

		if (n > nl && p[nl] == '=' && !memcmp(p, name, nl))
			return nul ? p + nl + 1 : NULL; /* an unterminated last entry: cut */
		p += n + 1;
	}
	return NULL;
}

bool config__rule_match(const struct config_rule *r, const char *cmdline, const char *exe,
			const char *env, size_t env_len, const char *cgroup)
{
	int i;

	if (r->has_cmdline && (!cmdline || regexec(&r->cmdline, cmdline, 0, NULL, 0)))
		return false;
	if (r->has_exe && (!exe || regexec(&r->exe, exe, 0, NULL, 0)))
		return false;
	if (r->has_cgroup && (!cgroup || regexec(&r->cgroup, cgroup, 0, NULL, 0)))
		return false;
	for (i = 0; i < r->nenv; i++) {
		const char *v = env ? env_value(env, env_len, r->env[i].name) : NULL;

		if (!v || regexec(&r->env[i].re, v, 0, NULL, 0))
			return false;
	}
	return true;
}
