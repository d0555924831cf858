// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Prometheus metrics (see metrics.h): the values their callers hand over and their text
 * exposition, served by output/httpd.c on GET /metrics.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "output/httpd.h"
#include "output/metrics.h"
#include "output/sink.h"
#include "util/clock.h"
#include "util/utf8.h"

/* Counts of one label value (a cause, a sink) that outlive the targets and sinks they came from. */
struct tally {
	char *name;
	uint64_t anomalies, diagnoses; /* causes */
	uint64_t base, last;	       /* sinks: drops of sinks gone + the current sink's count */
};

struct tallies {
	struct tally *v;
	int n;
};

struct metrics_target {
	struct metrics_target *next;
	pid_t pid;
	int rank;
	char *job;
	struct metrics_values v;
};

/* A target's first non-finite value, as its series says it (kept once the target is gone). */
struct first_nf {
	pid_t pid;
	int rank;
	char *job, *layer;
	const char *cause;
	uint64_t step;
	double time;
};

struct metrics {
	struct httpd *http; /* NULL: no endpoint */
	char *textfile;	    /* NULL: none */
	double textfile_at; /* when it was last written (monotonic seconds) */
	char host[256];
	struct first_nf kept[METRICS_FIRST_KEPT]; /* ring, oldest at kept_head once full */
	int nkept, kept_head;
	struct metrics_target *targets;
	int ntargets;
	struct tallies causes; /* counts of targets gone, by cause */
	struct tallies sinks;
	uint64_t gone_warnings, gone_hits, gone_tensors, gone_bytes, gone_skipped;
	uint64_t lost; /* watches ended on an error */
	struct metrics_service svc;
	int have_svc; /* service mode: its counters are part of the exposition */
};

/* ---- the exposition ---- */

struct text {
	char *buf;
	size_t len, cap;
	int err;
};

static void text_grow(struct text *t, size_t need)
{
	size_t cap = t->cap ? t->cap : 4096;
	char *p;

	while (cap < t->len + need + 1)
		cap *= 2;
	if (cap == t->cap)
		return;
	p = realloc(t->buf, cap);
	if (!p) {
		t->err = -ENOMEM;
		return;
	}
	t->buf = p;
	t->cap = cap;
}

static void text_add(struct text *t, const char *s, size_t n)
{
	text_grow(t, n);
	if (t->err)
		return;
	memcpy(t->buf + t->len, s, n);
	t->len += n;
	t->buf[t->len] = 0;
}

static void __attribute__((format(printf, 2, 3))) text_printf(struct text *t, const char *fmt, ...)
{
	char line[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	if (n < 0 || (size_t)n >= sizeof(line)) {
		t->err = -EOVERFLOW;
		return;
	}
	text_add(t, line, n);
}

/*
 * A label value: backslash, double quote and line feed escaped as the format asks; invalid
 * UTF-8 (a path from the command line, a job id from a target's environment) as U+FFFD.
 */
static void label_value(struct text *t, const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n = strlen(s);
	int k;

	while (n) {
		k = utf8__check(p, n);
		if (k < 0) {
			text_add(t, "\xef\xbf\xbd", 3);
			k = -k;
		} else if (*p == '\\') {
			text_add(t, "\\\\", 2);
		} else if (*p == '"') {
			text_add(t, "\\\"", 2);
		} else if (*p == '\n') {
			text_add(t, "\\n", 2);
		} else {
			text_add(t, (const char *)p, k);
		}
		p += k;
		n -= k;
	}
}

static void family(struct text *t, const char *name, const char *type, const char *help)
{
	text_printf(t, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* name{label="value"} v, or name v without a label */
static void sample1(struct text *t, const char *name, const char *label, const char *value,
		    uint64_t v)
{
	text_add(t, name, strlen(name));
	if (label) {
		text_printf(t, "{%s=\"", label);
		label_value(t, value);
		text_add(t, "\"}", 2);
	}
	text_printf(t, " %llu\n", (unsigned long long)v);
}

static void target_sample(struct text *t, const char *name, const struct metrics_target *x,
			  uint64_t v)
{
	text_printf(t, "%s{pid=\"%d\"", name, (int)x->pid);
	if (x->rank >= 0)
		text_printf(t, ",rank=\"%d\"", x->rank);
	if (x->job) {
		text_add(t, ",job_id=\"", 9);
		label_value(t, x->job);
		text_add(t, "\"", 1);
	}
	text_printf(t, "} %llu\n", (unsigned long long)v);
}

static struct tally *tally_get(struct tallies *ts, const char *name)
{
	struct tally *v;
	int i;

	for (i = 0; i < ts->n; i++)
		if (!strcmp(ts->v[i].name, name))
			return &ts->v[i];
	v = realloc(ts->v, (ts->n + 1) * sizeof(*v));
	if (!v)
		return NULL;
	ts->v = v;
	v = &ts->v[ts->n];
	memset(v, 0, sizeof(*v));
	v->name = strdup(name);
	if (!v->name)
		return NULL;
	ts->n++;
	return v;
}

static void tallies_free(struct tallies *ts)
{
	int i;

	for (i = 0; i < ts->n; i++)
		free(ts->v[i].name);
	free(ts->v);
	ts->v = NULL;
	ts->n = 0;
}

/* A target's anomalies by cause: those before its diagnosis under "none". */
static int add_causes(struct tallies *ts, const struct metrics_target *x)
{
	struct tally *none, *c = NULL;

	/* each lookup may move the array: the second one made first */
	if (x->v.cause && !tally_get(ts, x->v.cause))
		return -ENOMEM;
	none = tally_get(ts, "none");
	if (x->v.cause)
		c = tally_get(ts, x->v.cause);
	if (!none || (x->v.cause && !c))
		return -ENOMEM;
	none->anomalies += x->v.cause ? x->v.undiagnosed : x->v.anomalies;
	if (c) {
		c->anomalies += x->v.anomalies - x->v.undiagnosed;
		c->diagnoses++;
	}
	return 0;
}

static void render_causes(const struct metrics *m, struct text *t)
{
	struct tallies all = {};
	const struct metrics_target *x;
	int i;

	for (i = 0; i < m->causes.n && !t->err; i++) {
		struct tally *c = tally_get(&all, m->causes.v[i].name);

		if (!c) {
			t->err = -ENOMEM;
		} else {
			c->anomalies = m->causes.v[i].anomalies;
			c->diagnoses = m->causes.v[i].diagnoses;
		}
	}
	for (x = m->targets; x && !t->err; x = x->next)
		if (add_causes(&all, x))
			t->err = -ENOMEM;
	if (!tally_get(&all, "none"))
		t->err = -ENOMEM;
	family(t, "nanwatch_anomalies_total", "counter",
	       "Anomaly events written, by the cause of the target's diagnosis (none: written "
	       "before the diagnosis).");
	for (i = 0; i < all.n; i++)
		sample1(t, "nanwatch_anomalies_total", "cause", all.v[i].name, all.v[i].anomalies);
	family(t, "nanwatch_diagnoses_total", "counter", "Diagnosis events written, by cause.");
	for (i = 0; i < all.n; i++)
		if (strcmp(all.v[i].name, "none"))
			sample1(t, "nanwatch_diagnoses_total", "cause", all.v[i].name,
				all.v[i].diagnoses);
	tallies_free(&all);
}

static void render_totals(const struct metrics *m, struct text *t)
{
	uint64_t w = m->gone_warnings, h = m->gone_hits, n = m->gone_tensors, b = m->gone_bytes;
	uint64_t k = m->gone_skipped;
	const struct metrics_target *x;

	for (x = m->targets; x; x = x->next) {
		k += x->v.skipped_steps;
		w += x->v.warnings;
		h += x->v.probe_hits;
		n += x->v.tensors;
		b += x->v.bytes;
	}
	family(t, "nanwatch_warnings_total", "counter",
	       "Warning events written (a layer's output running up towards overflow).");
	sample1(t, "nanwatch_warnings_total", NULL, NULL, w);
	family(t, "nanwatch_skipped_steps_total", "counter",
	       "Optimizer steps a gradient scaler skipped (its scaled gradients overflowed).");
	sample1(t, "nanwatch_skipped_steps_total", NULL, NULL, k);
	family(t, "nanwatch_probe_hits_total", "counter",
	       "Times a probe in a watched process ran.");
	sample1(t, "nanwatch_probe_hits_total", NULL, NULL, h);
	family(t, "nanwatch_scanned_tensors_total", "counter",
	       "Tensors scanned for NaN and Inf (module outputs, losses, gradients).");
	sample1(t, "nanwatch_scanned_tensors_total", NULL, NULL, n);
	family(t, "nanwatch_scanned_bytes_total", "counter",
	       "Bytes of tensor data scanned for NaN and Inf.");
	sample1(t, "nanwatch_scanned_bytes_total", NULL, NULL, b);
}

static void render_targets(const struct metrics *m, struct text *t)
{
	const struct metrics_target *x;

	family(t, "nanwatch_targets", "gauge", "Processes being watched.");
	sample1(t, "nanwatch_targets", NULL, NULL, m->ntargets);
	family(t, "nanwatch_watches_lost_total", "counter",
	       "Watches that ended on an error (a probe or an output failed) while their process "
	       "ran on: it is no longer watched.");
	sample1(t, "nanwatch_watches_lost_total", NULL, NULL, m->lost);
	family(t, "nanwatch_target_steps_total", "counter",
	       "Optimizer steps of a watched process since its attach.");
	for (x = m->targets; x; x = x->next)
		target_sample(t, "nanwatch_target_steps_total", x, x->v.steps);
	family(t, "nanwatch_target_iterations_total", "counter",
	       "Forward passes of a watched process's outermost module since its attach.");
	for (x = m->targets; x; x = x->next)
		target_sample(t, "nanwatch_target_iterations_total", x, x->v.iterations);
	family(t, "nanwatch_target_anomalies_total", "counter",
	       "Anomaly events written for a watched process.");
	for (x = m->targets; x; x = x->next)
		target_sample(t, "nanwatch_target_anomalies_total", x, x->v.anomalies);
}

/* name{job_id,rank,host,pid,layer,cause} v: the labels a page needs. */
static void first_sample(struct text *t, const char *name, const struct metrics *m,
			 const struct first_nf *f, int is_time)
{
	text_printf(t, "%s{", name);
	if (f->job) {
		text_add(t, "job_id=\"", 8);
		label_value(t, f->job);
		text_add(t, "\",", 2);
	}
	if (f->rank >= 0)
		text_printf(t, "rank=\"%d\",", f->rank);
	text_add(t, "host=\"", 6);
	label_value(t, m->host);
	text_printf(t, "\",pid=\"%d\",layer=\"", (int)f->pid);
	label_value(t, f->layer ? f->layer : "");
	text_add(t, "\",cause=\"", 9);
	label_value(t, f->cause);
	if (is_time)
		text_printf(t, "\"} %.3f\n", f->time);
	else
		text_printf(t, "\"} %llu\n", (unsigned long long)f->step);
}

/* A live target's first non-finite value, once diagnosed; 0 if it has none yet. */
static int first_of(const struct metrics_target *x, struct first_nf *f)
{
	if (!x->v.cause || x->v.first_time <= 0)
		return 0;
	*f = (struct first_nf){.pid = x->pid,
			       .rank = x->rank,
			       .job = x->job,
			       .layer = (char *)x->v.cause_layer,
			       .cause = x->v.cause,
			       .step = x->v.cause_step,
			       .time = x->v.first_time};
	return 1;
}

static void render_first(const struct metrics *m, struct text *t)
{
	static const char *const names[2] = {"nanwatch_first_nonfinite_step",
					     "nanwatch_first_nonfinite_time_seconds"};
	static const char *const help[2] = {
		"The step of a process's first non-finite value (its diagnosis's), with the layer "
		"and cause; kept for the last 256 processes gone.",
		"When a process's first anomaly line was written (Unix time): a job's first rank "
		"has the lowest."};
	const struct metrics_target *x;
	struct first_nf f;
	int k, i;

	for (k = 0; k < 2; k++) {
		family(t, names[k], "gauge", help[k]);
		for (i = 0; i < m->nkept; i++)
			first_sample(t, names[k], m,
				     &m->kept[(m->kept_head + i) % METRICS_FIRST_KEPT], k);
		for (x = m->targets; x; x = x->next)
			if (first_of(x, &f))
				first_sample(t, names[k], m, &f, k);
	}
}

static void render_sinks(const struct metrics *m, struct text *t)
{
	int i;

	family(t, "nanwatch_events_dropped_total", "counter",
	       "Event lines an output dropped because its reader did not keep up.");
	for (i = 0; i < m->sinks.n; i++)
		sample1(t, "nanwatch_events_dropped_total", "sink", m->sinks.v[i].name,
			m->sinks.v[i].base + m->sinks.v[i].last);
}

static void render_service(const struct metrics *m, struct text *t)
{
	if (!m->have_svc)
		return;
	family(t, "nanwatch_errors_total", "counter",
	       "Error events written about processes the service could not watch.");
	sample1(t, "nanwatch_errors_total", NULL, NULL, m->svc.errors);
	family(t, "nanwatch_errors_suppressed_total", "counter",
	       "Error events not written: the processes' user was over its error rate.");
	sample1(t, "nanwatch_errors_suppressed_total", NULL, NULL, m->svc.errors_suppressed);
	family(t, "nanwatch_processes_capped_total", "counter",
	       "Matching processes not watched: their user had the most processes followed.");
	sample1(t, "nanwatch_processes_capped_total", NULL, NULL, m->svc.capped);
	family(t, "nanwatch_processes_followed", "gauge",
	       "Matching processes waited for (torch not loaded yet) or watched.");
	sample1(t, "nanwatch_processes_followed", NULL, NULL, m->svc.followed);
	family(t, "nanwatch_processes_followed_user_max", "gauge",
	       "The most matching processes one user has followed.");
	sample1(t, "nanwatch_processes_followed_user_max", NULL, NULL, m->svc.followed_max);
	family(t, "nanwatch_fruitless_cpu_seconds_total", "counter",
	       "CPU time spent on processes that could not be watched, charged to their users.");
	text_printf(t, "nanwatch_fruitless_cpu_seconds_total %.6f\n", m->svc.refused_cpu_seconds);
	family(t, "nanwatch_jobs_pending", "gauge",
	       "Resolves, attaches and detaches queued or running on the worker threads.");
	sample1(t, "nanwatch_jobs_pending", NULL, NULL, m->svc.jobs_pending);
}

ssize_t metrics__render(const struct metrics *m, char **out)
{
	struct text t = {};

	render_targets(m, &t);
	render_first(m, &t);
	render_causes(m, &t);
	render_totals(m, &t);
	render_sinks(m, &t);
	render_service(m, &t);
	if (t.err) {
		free(t.buf);
		return t.err;
	}
	*out = t.buf;
	return t.len;
}

/* ---- the values ---- */

struct metrics_target *metrics__target_add(struct metrics *m, pid_t pid, int rank, const char *job)
{
	struct metrics_target *x = calloc(1, sizeof(*x));

	if (!x)
		return NULL;
	x->pid = pid;
	x->rank = rank < 0 ? -1 : rank;
	if (job && !(x->job = strdup(job))) {
		free(x);
		return NULL;
	}
	x->next = m->targets;
	m->targets = x;
	m->ntargets++;
	return x;
}

void metrics__target_update(struct metrics_target *x, const struct metrics_values *v)
{
	x->v = *v;
}

static void first_free(struct first_nf *f)
{
	free(f->job);
	free(f->layer);
	memset(f, 0, sizeof(*f));
}

/* A target gone with its first non-finite value: kept, the oldest kept dropped when full. */
static void keep_first(struct metrics *m, const struct metrics_target *x)
{
	struct first_nf f, *slot;

	if (!first_of(x, &f))
		return;
	f.job = x->job ? strdup(x->job) : NULL;
	f.layer = strdup(f.layer);
	if ((x->job && !f.job) || !f.layer) {
		first_free(&f); /* out of memory: not kept */
		return;
	}
	if (m->nkept == METRICS_FIRST_KEPT) {
		slot = &m->kept[m->kept_head];
		first_free(slot);
		m->kept_head = (m->kept_head + 1) % METRICS_FIRST_KEPT;
	} else {
		slot = &m->kept[(m->kept_head + m->nkept) % METRICS_FIRST_KEPT];
		m->nkept++;
	}
	*slot = f;
}

void metrics__target_remove(struct metrics *m, struct metrics_target *x)
{
	struct metrics_target **pp;

	if (!x)
		return;
	for (pp = &m->targets; *pp && *pp != x; pp = &(*pp)->next)
		;
	if (*pp) {
		*pp = x->next;
		m->ntargets--;
	}
	add_causes(&m->causes, x); /* out of memory: these anomalies are not counted */
	keep_first(m, x);
	m->gone_warnings += x->v.warnings;
	m->gone_skipped += x->v.skipped_steps;
	m->gone_hits += x->v.probe_hits;
	m->gone_tensors += x->v.tensors;
	m->gone_bytes += x->v.bytes;
	free(x->job);
	free(x);
}

void metrics__watch_lost(struct metrics *m)
{
	m->lost++;
}

void metrics__service_update(struct metrics *m, const struct metrics_service *s)
{
	m->svc = *s;
	m->have_svc = 1;
}

int metrics__update_sinks(struct metrics *m, const struct sinks *ss)
{
	struct tally *s;
	uint64_t n;
	int i;

	for (i = 0; i < sinks__count(ss); i++) {
		s = tally_get(&m->sinks, sinks__name(ss, i));
		if (!s)
			return -ENOMEM;
		n = sinks__dropped(ss, i);
		if (n <
		    s->last) /* another sinks object with this name: the old one's count stays */
			s->base += s->last;
		s->last = n;
	}
	return 0;
}

/* ---- the endpoint ---- */

static ssize_t render(void *ctx, char **out)
{
	return metrics__render(ctx, out);
}

struct metrics *metrics__new(const struct metrics_opts *o, char *err, size_t errlen)
{
	struct metrics *m = calloc(1, sizeof(*m));
	struct httpd_opts h = {
		.name = "metrics",
		.path = "/metrics",
		.content_type = "text/plain; version=0.0.4; charset=utf-8",
		.render = render,
		.ctx = m,
		.listen = o->listen,
		.allow_remote = o->allow_remote,
		.timeout_ms = o->timeout_ms,
		.max_clients = o->max_clients,
	};
	int ret;

	if (!m) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (gethostname(m->host, sizeof(m->host) - 1))
		snprintf(m->host, sizeof(m->host), "unknown");
	if (o->textfile && !(m->textfile = strdup(o->textfile))) {
		snprintf(err, errlen, "out of memory");
		free(m);
		errno = ENOMEM;
		return NULL;
	}
	if (o->listen)
		m->http = httpd__new(&h, err, errlen);
	if (o->listen && !m->http) {
		ret = errno;
		free(m->textfile);
		free(m);
		errno = ret;
		return NULL;
	}
	return m;
}

int metrics__write_textfile(struct metrics *m)
{
	char tmp[4096 + 16];
	char *text = NULL;
	ssize_t n;
	int fd, ret = 0;

	if (!m->textfile)
		return 0;
	m->textfile_at = clock__now();
	/* node_exporter reads *.prom alone: the half-written file is never read */
	if (snprintf(tmp, sizeof(tmp), "%s.%d.tmp", m->textfile, (int)getpid()) >= (int)sizeof(tmp))
		return -ENAMETOOLONG;
	n = metrics__render(m, &text);
	if (n < 0)
		return (int)n;
	unlink(tmp);
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0 || fchmod(fd, 0644) || write(fd, text, n) != n || fsync(fd))
		ret = -errno;
	if (fd >= 0 && close(fd) && !ret)
		ret = -errno;
	if (!ret && rename(tmp, m->textfile))
		ret = -errno;
	if (ret && fd >= 0)
		unlink(tmp);
	free(text);
	return ret ? ret : 0;
}

int metrics__tick(struct metrics *m)
{
	int ret;

	if (!m->textfile || clock__now() - m->textfile_at < 1.0)
		return 0;
	ret = metrics__write_textfile(m);
	return ret ? ret : 1;
}

int metrics__port(const struct metrics *m)
{
	return m->http ? httpd__port(m->http) : -1;
}

int metrics__fd(const struct metrics *m)
{
	return m->http ? httpd__fd(m->http) : -1;
}

int metrics__serve(struct metrics *m)
{
	return m->http ? httpd__serve(m->http) : 0;
}

void metrics__free(struct metrics *m)
{
	struct metrics_target *x, *next;

	int i;

	if (!m)
		return;
	metrics__write_textfile(m); /* the last state stays for the collector */
	httpd__free(m->http);
	free(m->textfile);
	for (i = 0; i < METRICS_FIRST_KEPT; i++)
		first_free(&m->kept[i]);
	for (x = m->targets; x; x = next) {
		next = x->next;
		free(x->job);
		free(x);
	}
	tallies_free(&m->causes);
	tallies_free(&m->sinks);
	free(m);
}
