// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * nanwatch-collect's model: per job, per rank, the first anomaly and the first diagnosis;
 * the job's origin is the rank that went non-finite first, ties settled by evidence (see
 * docs/service.md, "nanwatch-collect", and nanwatch-collect(1)).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strptime, timegm, qsort_r */
#endif
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "collect.h"
#include "jsonread.h"
#include "output/json.h"

#define SCHEMA "nanwatch/1"
#define NO_JOB "-"
#define JOB_BUCKETS 1024
#define STR_MAX 1024 /* longer layer names, hosts, ... are cut (and end in "...") */

struct anom {
	int set;
	long long step, iteration, pid;
	int64_t time_ns; /* 0: unknown */
	char *time, *host, *step_source, *phase, *layer, *module, *tensor, *cause, *consumer;
	int origin, inputs_finite, params_finite;
};

struct diag {
	int set;
	long long step, iteration;
	char *cause;
};

struct rank {
	struct rank *hnext, *next; /* hash chain; the job's ranks in arrival order */
	long long rank;		   /* -1: keyed by host and pid */
	char *host;
	long long pid;
	struct anom first;
	struct diag diag;
	uint64_t lost;
	int evidence; /* computed with the verdict */
};

struct job {
	struct job *hnext, *prev, *next;
	char *name;
	struct rank **buckets;
	size_t nbuckets, nranks;
	struct rank *ranks, *last;
	long long world_size;
	uint64_t touched;  /* c->clock at its last event */
	uint64_t printed;  /* signature of the verdict printed last; 0 none */
	int64_t origin_ns; /* for the report's order */
	int found;	   /* a rank saw a non-finite value */
};

struct collect {
	struct job *buckets[JOB_BUCKETS];
	struct job *jobs; /* all jobs, newest first */
	size_t njobs, max_jobs, max_ranks;
	uint64_t clock;
	struct collect_counts n;
};

static uint64_t fnv(const char *s, uint64_t h)
{
	h = h ? h : 1469598103934665603ull;
	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ull;
	return h;
}

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdull;
	x ^= x >> 33;
	return x;
}

/* A copy of s cut to STR_MAX bytes (on a UTF-8 boundary, then "..."); NULL for NULL. */
static char *copy(const char *s)
{
	size_t n, cut;
	char *d;

	if (!s)
		return NULL;
	n = strlen(s);
	cut = n > STR_MAX ? STR_MAX : n;
	while (cut < n && cut > 0 && ((unsigned char)s[cut] & 0xc0) == 0x80)
		cut--;
	d = malloc(cut + (cut < n ? 4 : 1));
	if (!d)
		return NULL;
	memcpy(d, s, cut);
	if (cut < n)
		memcpy(d + cut, "...", 3), cut += 3;
	d[cut] = 0;
	return d;
}

static void anom__clear(struct anom *a)
{
	free(a->time);
	free(a->host);
	free(a->step_source);
	free(a->phase);
	free(a->layer);
	free(a->module);
	free(a->tensor);
	free(a->cause);
	free(a->consumer);
	memset(a, 0, sizeof(*a));
}

static void rank__free(struct rank *r)
{
	if (!r)
		return;
	anom__clear(&r->first);
	free(r->diag.cause);
	free(r->host);
	free(r);
}

static void job__free(struct job *j)
{
	struct rank *r, *n;

	if (!j)
		return;
	for (r = j->ranks; r; r = n) {
		n = r->next;
		rank__free(r);
	}
	free(j->buckets);
	free(j->name);
	free(j);
}

struct collect *collect__new(size_t max_jobs, size_t max_ranks)
{
	struct collect *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->max_jobs = max_jobs ? max_jobs : 1;
	c->max_ranks = max_ranks ? max_ranks : 1;
	return c;
}

void collect__free(struct collect *c)
{
	struct job *j, *n;

	if (!c)
		return;
	for (j = c->jobs; j; j = n) {
		n = j->next;
		job__free(j);
	}
	free(c);
}

void collect__counts(const struct collect *c, struct collect_counts *out)
{
	*out = c->n;
}

/* ---- fields of an event ---- */

static const char *str_of(const struct jv *ev, const char *key)
{
	const struct jv *v = jv__get(ev, key);

	/* a string holding NUL cannot be one of ours: treated as absent */
	if (jv__type(v) != JV_STRING || strlen(jv__string(v)) != jv__string_len(v))
		return NULL;
	return jv__string(v);
}

/* An integer field: a JSON integer, or a string of decimal digits (rank from older daemons). */
static int int_of(const struct jv *ev, const char *key, long long *out)
{
	const struct jv *v = jv__get(ev, key);
	const char *s = NULL;
	char *end;
	double d;

	if (jv__type(v) == JV_NUMBER && !jv__number(v, &d) && d == floor(d) && fabs(d) < 9e15) {
		*out = (long long)d;
		return 0;
	}
	if (jv__type(v) == JV_STRING)
		s = jv__string(v);
	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	*out = strtoll(s, &end, 10);
	return *end || errno ? -EINVAL : 0;
}

static int tri_of(const struct jv *ev, const char *key)
{
	int b;

	return jv__bool(jv__get(ev, key), &b) ? -1 : !!b;
}

/* RFC 3339 as the daemon writes it (Z or an offset, up to 9 fraction digits); 0 if not. */
static int64_t time_of(const char *s)
{
	struct tm tm = {0};
	int64_t ns = 0, scale = 100000000;
	const char *p;
	int off = 0, oh, om;
	time_t t;

	if (!s || !(p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm)))
		return 0;
	if (*p == '.')
		for (p++; *p >= '0' && *p <= '9'; p++, scale /= 10)
			ns += (*p - '0') * scale;
	if ((*p == '+' || *p == '-') && sscanf(p + 1, "%2d:%2d", &oh, &om) == 2)
		off = (*p == '-' ? -1 : 1) * (oh * 3600 + om * 60);
	else if (*p != 'Z')
		return 0;
	t = timegm(&tm) - off;
	/* 1970 to 2262 fit in int64 nanoseconds (the daemon writes nothing before 1970) */
	if (t < 0 || (int64_t)t >= INT64_MAX / 1000000000 - 1)
		return 0;
	return (int64_t)t * 1000000000 + ns;
}

/* ---- jobs and ranks ---- */

static struct job *job__find(struct collect *c, const char *name)
{
	struct job *j;

	for (j = c->buckets[fnv(name, 0) % JOB_BUCKETS]; j; j = j->hnext)
		if (!strcmp(j->name, name))
			return j;
	return NULL;
}

static void job__unlink(struct collect *c, struct job *j)
{
	struct job **pp = &c->buckets[fnv(j->name, 0) % JOB_BUCKETS];

	while (*pp != j)
		pp = &(*pp)->hnext;
	*pp = j->hnext;
	if (j->prev)
		j->prev->next = j->next;
	else
		c->jobs = j->next;
	if (j->next)
		j->next->prev = j->prev;
	c->njobs--;
}

/* The job updated longest ago goes, to make room for a new one. */
static void job__evict(struct collect *c)
{
	struct job *j, *old = NULL;

	for (j = c->jobs; j; j = j->next)
		if (!old || j->touched < old->touched)
			old = j;
	if (!old)
		return;
	job__unlink(c, old);
	job__free(old);
	c->n.evicted_jobs++;
}

static struct job *job__get(struct collect *c, const char *name)
{
	struct job *j = job__find(c, name);
	size_t b;

	if (j)
		return j;
	if (c->njobs >= c->max_jobs)
		job__evict(c);
	j = calloc(1, sizeof(*j));
	if (!j || !(j->name = copy(name))) {
		free(j);
		return NULL;
	}
	j->world_size = -1;
	b = fnv(j->name, 0) % JOB_BUCKETS;
	j->hnext = c->buckets[b];
	c->buckets[b] = j;
	j->next = c->jobs;
	if (c->jobs)
		c->jobs->prev = j;
	c->jobs = j;
	c->njobs++;
	return j;
}

static uint64_t rank__hash(long long rank, const char *host, long long pid)
{
	return rank >= 0 ? mix((uint64_t)rank) : fnv(host, mix((uint64_t)pid + 1));
}

static int rank__is(const struct rank *r, long long rank, const char *host, long long pid)
{
	if (r->rank != rank)
		return 0;
	return rank >= 0 || (r->pid == pid && !strcmp(r->host, host));
}

static int job__grow(struct job *j)
{
	size_t n = j->nbuckets ? j->nbuckets * 2 : 16, i;
	struct rank **b = calloc(n, sizeof(*b)), *r, *next;

	if (!b)
		return -ENOMEM;
	for (i = 0; i < j->nbuckets; i++)
		for (r = j->buckets[i]; r; r = next) {
			next = r->hnext;
			r->hnext = b[rank__hash(r->rank, r->host, r->pid) % n];
			b[rank__hash(r->rank, r->host, r->pid) % n] = r;
		}
	free(j->buckets);
	j->buckets = b;
	j->nbuckets = n;
	return 0;
}

static struct rank *rank__get(struct collect *c, struct job *j, long long rank, const char *host,
			      long long pid)
{
	struct rank *r;
	uint64_t h = rank__hash(rank, host, pid);

	if (j->nbuckets)
		for (r = j->buckets[h % j->nbuckets]; r; r = r->hnext)
			if (rank__is(r, rank, host, pid))
				return r;
	if (j->nranks >= c->max_ranks) {
		c->n.dropped_events++;
		return NULL;
	}
	if (j->nranks >= j->nbuckets && job__grow(j))
		return NULL;
	r = calloc(1, sizeof(*r));
	if (!r || !(r->host = copy(host))) {
		free(r);
		return NULL;
	}
	r->rank = rank;
	r->pid = pid;
	r->hnext = j->buckets[h % j->nbuckets];
	j->buckets[h % j->nbuckets] = r;
	if (j->last)
		j->last->next = r;
	else
		j->ranks = r;
	j->last = r;
	j->nranks++;
	return r;
}

/* ---- events ---- */

/* Whether a (step, iteration) comes before b's, counted the same way; else the first seen. */
static int earlier(long long as, long long ai, long long bs, long long bi)
{
	if (as != bs)
		return as >= 0 && (bs < 0 || as < bs);
	return ai >= 0 && (bi < 0 || ai < bi);
}

static int anom__set(struct anom *a, const struct jv *ev, long long step, long long iteration,
		     long long pid)
{
	anom__clear(a);
	a->set = 1;
	a->step = step;
	a->iteration = iteration;
	a->pid = pid;
	a->time = copy(str_of(ev, "time"));
	a->time_ns = time_of(a->time);
	a->host = copy(str_of(ev, "host"));
	a->step_source = copy(str_of(ev, "step_source"));
	a->phase = copy(str_of(ev, "phase"));
	a->layer = copy(str_of(ev, "layer"));
	a->module = copy(str_of(ev, "module"));
	a->tensor = copy(str_of(ev, "tensor"));
	a->cause = copy(str_of(ev, "cause"));
	a->consumer = copy(str_of(ev, "consumer"));
	a->origin = tri_of(ev, "origin");
	a->inputs_finite = tri_of(ev, "inputs_finite");
	a->params_finite = tri_of(ev, "params_finite");
	return 0;
}

static void same_source(const struct anom *a, const struct jv *ev, int *same)
{
	const char *s = str_of(ev, "step_source");

	*same = (!s && !a->step_source) || (s && a->step_source && !strcmp(s, a->step_source));
}

static void on_anomaly(struct rank *r, const struct jv *ev, long long pid)
{
	long long step = -1, it = -1;
	int same;

	int_of(ev, "step", &step);
	int_of(ev, "iteration", &it);
	if (r->first.set) {
		/* a rank's first anomaly: the earliest step, or the first seen when uncomparable */
		same_source(&r->first, ev, &same);
		if (!same || !earlier(step, it, r->first.step, r->first.iteration))
			return;
	}
	anom__set(&r->first, ev, step, it, pid);
}

static void on_diagnosis(struct rank *r, const struct jv *ev)
{
	long long step = -1, it = -1;
	const char *cause = str_of(ev, "cause");

	int_of(ev, "step", &step);
	int_of(ev, "iteration", &it);
	if (!cause || (r->diag.set && !earlier(step, it, r->diag.step, r->diag.iteration)))
		return;
	free(r->diag.cause);
	r->diag.cause = copy(cause);
	r->diag.set = 1;
	r->diag.step = step;
	r->diag.iteration = it;
}

static int take(struct collect *c, const struct jv *ev, char *err, size_t errlen)
{
	const char *event = str_of(ev, "event"), *host = str_of(ev, "host"), *name = NO_JOB;
	const struct jv *jobv = jv__get(ev, "job");
	long long pid = -1, rank = -1, ws;
	struct job *j;
	struct rank *r;

	if (jv__type(jobv) == JV_STRING && str_of(ev, "job"))
		name = str_of(ev, "job");
	else if (jv__type(jobv) == JV_NUMBER)
		name = jv__number_text(jobv);
	if (int_of(ev, "pid", &pid) || !host) {
		snprintf(err, errlen, "%s event without host or pid", event);
		return -EINVAL;
	}
	if (int_of(ev, "rank", &rank) || rank < 0)
		rank = -1;
	j = job__get(c, name);
	if (!j)
		return -ENOMEM;
	j->touched = ++c->clock;
	if (!int_of(ev, "world_size", &ws) && ws > 0)
		j->world_size = ws;
	r = rank__get(c, j, rank, host, pid);
	if (!r)
		return 0;    /* beyond max_ranks: counted */
	if (pid != r->pid) { /* a restarted rank: the newest process is the one to name */
		r->pid = pid;
		free(r->host);
		r->host = copy(host);
	}
	c->n.events++;
	if (!strcmp(event, "anomaly"))
		on_anomaly(r, ev, pid);
	else if (!strcmp(event, "diagnosis"))
		on_diagnosis(r, ev);
	else if (!strcmp(event, "lost")) {
		long long n;

		if (!int_of(ev, "count", &n) && n > 0)
			r->lost += n;
	}
	return 0;
}

int collect__line(struct collect *c, const char *line, size_t len, char *err, size_t errlen)
{
	char why[96];
	struct jv *ev;
	const char *schema;
	int ret = -EINVAL;

	ev = jv__parse(line, len, why, sizeof(why));
	if (!ev) {
		snprintf(err, errlen, "not JSON (%s)", why);
		return -EINVAL;
	}
	schema = str_of(ev, "schema");
	if (jv__type(ev) != JV_OBJECT)
		snprintf(err, errlen, "not a JSON object");
	else if (!schema || strcmp(schema, SCHEMA))
		snprintf(err, errlen, "schema %s, not " SCHEMA, schema ? schema : "missing");
	else if (!str_of(ev, "event"))
		snprintf(err, errlen, "no event name");
	else
		ret = take(c, ev, err, errlen);
	jv__free(ev);
	return ret;
}

/* ---- the verdict ---- */

static const char *cause_of(const struct rank *r)
{
	return r->diag.set ? r->diag.cause : r->first.cause;
}

static int evidence_of(const struct rank *r)
{
	const struct anom *a = &r->first;
	const char *cause = cause_of(r);

	if (a->params_finite == 0 || (cause && !strcmp(cause, "nonfinite_params")))
		return COLLECT_RECEIVED;
	/* a parameter's gradient non-finite without a node of this rank making it */
	if (a->phase && !strcmp(a->phase, "backward") && a->consumer &&
	    !strcmp(a->consumer, "AccumulateGrad") && a->origin != 1)
		return COLLECT_RECEIVED;
	if (a->origin == 1 && a->inputs_finite != 0)
		return COLLECT_CREATED;
	if (a->inputs_finite == 0 && a->params_finite == 1)
		return COLLECT_INPUT;
	return COLLECT_UNKNOWN;
}

static const char *const evidence_names[] = {"received", "unknown", "input_data", "created"};
static const char *const evidence_says[] = {
	"its first anomaly had non-finite parameters or gradients: it received the value",
	"its inputs or parameters were not all checked",
	"its own input data was non-finite while its parameters were finite",
	"its first anomaly is an origin: the value was made there, not passed on",
};

struct order {
	int by_time; /* step counts differ between ranks: event time orders them */
};

/* <0 when a went non-finite before b (the primary key only), 0 when tied. */
static int primary(const struct order *o, const struct rank *a, const struct rank *b)
{
	const struct anom *x = &a->first, *y = &b->first;

	if (o->by_time) {
		if (x->time_ns != y->time_ns)
			return !y->time_ns || (x->time_ns && x->time_ns < y->time_ns) ? -1 : 1;
		return 0;
	}
	if (earlier(x->step, x->iteration, y->step, y->iteration))
		return -1;
	if (earlier(y->step, y->iteration, x->step, x->iteration))
		return 1;
	return 0;
}

/* The full order: first went non-finite, then evidence, then time, then the lower rank. */
static int before(const struct order *o, const struct rank *a, const struct rank *b)
{
	int p = primary(o, a, b);

	if (p)
		return p < 0;
	if (a->evidence != b->evidence)
		return a->evidence > b->evidence;
	if (a->first.time_ns != b->first.time_ns && a->first.time_ns && b->first.time_ns)
		return a->first.time_ns < b->first.time_ns;
	if (a->rank != b->rank)
		return (unsigned long long)a->rank < (unsigned long long)b->rank;
	return a->pid < b->pid;
}

static void order_of(const struct job *j, struct order *o)
{
	const struct rank *r;
	const char *src = NULL;
	int any = 0;

	o->by_time = 0;
	for (r = j->ranks; r; r = r->next) {
		if (!r->first.set)
			continue;
		if (!any) {
			src = r->first.step_source;
			any = 1;
		} else if ((!src) != (!r->first.step_source) ||
			   (src && strcmp(src, r->first.step_source))) {
			o->by_time = 1;
		}
	}
}

static struct rank *choose(struct job *j, const struct order *o)
{
	struct rank *r, *best = NULL;

	for (r = j->ranks; r; r = r->next) {
		if (!r->first.set)
			continue;
		r->evidence = evidence_of(r);
		if (!best || before(o, r, best))
			best = r;
	}
	return best;
}

static int who(char *buf, size_t len, const struct rank *r)
{
	if (r->rank >= 0)
		return snprintf(buf, len, "rank %lld", r->rank);
	return snprintf(buf, len, "pid %lld on %s", r->pid, r->host);
}

#define APPEND(v, ...)                                                                   \
	do {                                                                             \
		size_t _n = strlen((v)->basis);                                          \
		if (_n < sizeof((v)->basis))                                             \
			snprintf((v)->basis + _n, sizeof((v)->basis) - _n, __VA_ARGS__); \
	} while (0)

/* How the tie with the other ranks at the same point was settled. */
static const char *tie_break(const struct job *j, const struct order *o, const struct rank *best,
			     struct collect_verdict *v)
{
	const struct rank *r;
	int by_ev = 1, by_time = 1;
	char name[300];

	for (r = j->ranks; r; r = r->next) {
		if (r == best || !r->first.set || primary(o, r, best))
			continue;
		v->tied++;
		by_ev &= best->evidence > r->evidence;
		by_time &= best->first.time_ns && r->first.time_ns &&
			   best->first.time_ns < r->first.time_ns;
		who(name, sizeof(name), r);
		APPEND(v, "%s %s", v->tied == 1 ? "; tied with" : ",", name);
		APPEND(v, " (%s)", evidence_names[r->evidence]);
	}
	if (!v->tied)
		return o->by_time ? "earliest_time" : "earliest_step";
	if (by_ev) {
		APPEND(v, ": chosen by evidence");
		return "evidence";
	}
	if (by_time) {
		APPEND(v, ": same evidence, chosen by the earlier event time (clocks of different "
			  "hosts may differ)");
		return "time";
	}
	APPEND(v, ": nothing told them apart, chosen by the lowest rank");
	return "rank";
}

static void fill(struct job *j, struct rank *best, struct collect_verdict *v)
{
	const struct anom *a = &best->first;

	v->found = 1;
	v->rank = best->rank;
	v->host = a->host ? a->host : best->host;
	v->pid = a->pid;
	v->step = a->step;
	v->iteration = a->iteration;
	v->step_source = a->step_source;
	v->phase = a->phase;
	v->layer = a->layer;
	v->module = a->module;
	v->tensor = a->tensor;
	v->cause = cause_of(best);
	v->cause_from = best->diag.set ? "diagnosis" : a->cause ? "anomaly" : NULL;
	v->origin = a->origin;
	v->inputs_finite = a->inputs_finite;
	v->params_finite = a->params_finite;
	v->evidence = best->evidence;
	j->origin_ns = a->time_ns;
}

static void notes(const struct job *j, const struct rank *best, struct collect_verdict *v)
{
	const struct rank *r;
	char name[300];

	if (best->evidence == COLLECT_RECEIVED)
		APPEND(v,
		       "; no rank read shows where the value was made: the rank that made it may "
		       "be missing from the input");
	for (r = j->ranks; r; r = r->next)
		if (r != best && r->first.set && r->first.time_ns && best->first.time_ns &&
		    r->first.time_ns + 1000000000 < best->first.time_ns) {
			who(name, sizeof(name), r);
			APPEND(v,
			       "; but %s's first anomaly is more than a second earlier by the "
			       "clock "
			       "(steps counted from each daemon's attach are offset when one "
			       "attached "
			       "later)",
			       name);
			break;
		}
	if (v->world_size > 0 && (long long)v->ranks < v->world_size)
		APPEND(v, "; %zu of world size %lld ranks seen", v->ranks, v->world_size);
	for (r = j->ranks; r; r = r->next)
		if (r->lost) {
			who(name, sizeof(name), r);
			APPEND(v, "; %s lost %llu events: its first anomaly may be missing", name,
			       (unsigned long long)r->lost);
		}
}

static int job__verdict(struct job *j, struct collect_verdict *v)
{
	struct order o;
	struct rank *best, *r;
	char name[300];

	memset(v, 0, sizeof(*v));
	v->job = j->name;
	v->rank = -1;
	v->pid = -1;
	v->step = v->iteration = -1;
	v->origin = v->inputs_finite = v->params_finite = -1;
	v->world_size = j->world_size;
	v->ranks = j->nranks;
	order_of(j, &o);
	best = choose(j, &o);
	if (!best) {
		v->clean = j->nranks;
		v->decided_by = NULL;
		return 0;
	}
	fill(j, best, v);
	who(name, sizeof(name), best);
	APPEND(v, "%s went non-finite %s", name,
	       o.by_time ? "first by event time (ranks count steps differently)"
			 : "at the earliest step and iteration");
	APPEND(v, "; %s", evidence_says[best->evidence]);
	for (r = j->ranks; r; r = r->next)
		v->clean += !r->first.set;
	v->decided_by = tie_break(j, &o, best, v);
	v->received = j->nranks - v->clean - v->tied - 1;
	if (j->nranks == 1)
		v->decided_by = "only_rank";
	notes(j, best, v);
	return 0;
}

int collect__verdict(struct collect *c, const char *job, struct collect_verdict *v)
{
	struct job *j = job__find(c, job);

	if (!j)
		return -ENOENT;
	return job__verdict(j, v);
}

/* ---- output ---- */

static void tri(struct json *js, const char *key, int v)
{
	if (v < 0)
		json__null(js, key);
	else
		json__bool(js, key, v);
}

static void json_int(struct json *js, const char *key, long long v)
{
	if (v < 0)
		json__null(js, key);
	else
		json__int(js, key, v);
}

/* The verdict's primary order, then by rank: how the other ranks are listed. */
static int by_first(const void *pa, const void *pb, void *arg)
{
	const struct rank *a = *(const struct rank *const *)pa,
			  *b = *(const struct rank *const *)pb;
	int p = primary(arg, a, b);

	if (p)
		return p;
	if (a->rank != b->rank)
		return (unsigned long long)a->rank < (unsigned long long)b->rank ? -1 : 1;
	return a->pid < b->pid ? -1 : a->pid > b->pid;
}

/* The other ranks, ordered as the verdict orders them; NULL when there are none or no memory. */
static struct rank **others(struct job *j, const struct rank *best, size_t *n)
{
	struct rank **v = calloc(j->nranks ? j->nranks : 1, sizeof(*v)), *r;
	struct order o;

	*n = 0;
	if (!v)
		return NULL;
	for (r = j->ranks; r; r = r->next)
		if (r != best && r->first.set)
			v[(*n)++] = r;
	order_of(j, &o);
	qsort_r(v, *n, sizeof(*v), by_first, &o);
	return v;
}

static void json_rank_ref(struct json *js, const struct rank *r)
{
	json_int(js, "rank", r->rank);
	json__string(js, "host", r->first.host ? r->first.host : r->host);
	json_int(js, "pid", r->first.set ? r->first.pid : r->pid);
}

static void json_others(struct json *js, struct job *j, const struct rank *best, size_t tied)
{
	struct rank **v, *r;
	size_t n, i;

	v = others(j, best, &n);
	json__array_begin(js, "tied");
	for (i = 0; v && i < tied && i < n; i++) {
		json__object_begin(js, NULL);
		json_rank_ref(js, v[i]);
		json__string(js, "evidence", evidence_names[v[i]->evidence]);
		json__object_end(js);
	}
	json__array_end(js);
	json__array_begin(js, "received");
	for (; v && i < n; i++) {
		json__object_begin(js, NULL);
		json_rank_ref(js, v[i]);
		json_int(js, "step", v[i]->first.step);
		json_int(js, "iteration", v[i]->first.iteration);
		json__string(js, "layer", v[i]->first.layer);
		json__string(js, "evidence", evidence_names[v[i]->evidence]);
		json__object_end(js);
	}
	json__array_end(js);
	json__array_begin(js, "clean");
	for (r = j->ranks; r; r = r->next)
		if (!r->first.set) {
			json__object_begin(js, NULL);
			json_rank_ref(js, r);
			json__object_end(js);
		}
	json__array_end(js);
	free(v);
}

static struct rank *chosen(struct job *j)
{
	struct order o;

	order_of(j, &o);
	return choose(j, &o);
}

static int write_json(struct job *j, const struct collect_verdict *v, FILE *f)
{
	struct json js;
	int err;

	if (json__init(&js, 4096))
		return -ENOMEM;
	json__object_begin(&js, NULL);
	json__string(&js, "job", v->job);
	json__bool(&js, "found", v->found);
	json_int(&js, "rank", v->rank);
	json__string(&js, "host", v->host);
	json_int(&js, "pid", v->pid);
	json_int(&js, "step", v->step);
	json__string(&js, "step_source", v->step_source);
	json_int(&js, "iteration", v->iteration);
	json__string(&js, "phase", v->phase);
	json__string(&js, "layer", v->layer);
	json__string(&js, "module", v->module);
	json__string(&js, "tensor", v->tensor);
	json__string(&js, "cause", v->cause);
	json__string(&js, "cause_from", v->cause_from);
	json__object_begin(&js, "origin_basis");
	json__string(&js, "decided_by", v->decided_by);
	json__string(&js, "evidence", v->found ? evidence_names[v->evidence] : NULL);
	tri(&js, "origin", v->origin);
	tri(&js, "inputs_finite", v->inputs_finite);
	tri(&js, "params_finite", v->params_finite);
	json__string(&js, "why", v->found ? v->basis : NULL);
	json__object_end(&js);
	json_others(&js, j, v->found ? chosen(j) : NULL, v->tied);
	json__uint(&js, "ranks", v->ranks);
	json_int(&js, "world_size", v->world_size);
	json__object_end(&js);
	err = json__str(&js) && fprintf(f, "%s\n", json__str(&js)) >= 0 ? 0 : -EIO;
	json__free(&js);
	return err;
}

static void text_where(const struct collect_verdict *v, FILE *f)
{
	if (v->iteration >= 0)
		fprintf(f, ", iteration %lld", v->iteration);
	if (v->phase && !strcmp(v->phase, "loss"))
		fprintf(f, ", the loss");
	else if (v->layer)
		fprintf(f, ", layer %s (%s)", *v->layer ? v->layer : "\"\"",
			v->module ? v->module : "?");
	else if (v->module)
		fprintf(f, ", module %s", v->module);
	if (v->phase && !strcmp(v->phase, "backward"))
		fprintf(f, " in the backward pass");
}

/* "; ranks 0, 3 received it at step 10; rank 5 at step 11" */
static void text_received(struct job *j, const struct collect_verdict *v, FILE *f)
{
	struct rank **o, *r;
	size_t n, i, k;
	char name[300];

	o = others(j, chosen(j), &n);
	for (i = 0; o && i < v->tied && i < n; i++) {
		who(name, sizeof(name), o[i]);
		fprintf(f, "%s%s", i ? ", " : "; tied with ", name);
	}
	for (k = i; o && i < n; i = k) {
		for (k = i; k < n && o[k]->first.step == o[i]->first.step; k++)
			;
		fprintf(f, "; %s ", k - i > 1 ? "ranks" : "rank");
		for (size_t m = i; m < k; m++) {
			if (o[m]->rank >= 0)
				fprintf(f, "%s%lld", m > i ? ", " : "", o[m]->rank);
			else
				fprintf(f, "%spid %lld on %s", m > i ? ", " : "", o[m]->pid,
					o[m]->host);
		}
		fprintf(f, "%s at step %lld", i == v->tied ? " received it" : "", o[i]->first.step);
	}
	free(o);
	for (r = j->ranks, i = 0; r; r = r->next)
		if (!r->first.set) {
			who(name, sizeof(name), r);
			fprintf(f, "%s%s", i++ ? ", " : "; no anomaly on ", name);
		}
}

static int write_text(struct job *j, const struct collect_verdict *v, FILE *f)
{
	if (!v->found) {
		fprintf(f, "job %s: no non-finite value in %zu rank%s\n", v->job, v->ranks,
			v->ranks == 1 ? "" : "s");
		return ferror(f) ? -EIO : 0;
	}
	fprintf(f, "job %s: ", v->job);
	if (v->rank >= 0)
		fprintf(f, "rank %lld (host %s, pid %lld)", v->rank, v->host ? v->host : "?",
			v->pid);
	else
		fprintf(f, "pid %lld on host %s", v->pid, v->host ? v->host : "?");
	fprintf(f, " first non-finite at step %lld", v->step);
	text_where(v, f);
	if (v->cause)
		fprintf(f, ", cause %s", v->cause);
	else
		fprintf(f, ", no cause yet (no diagnosis)");
	text_received(j, v, f);
	fprintf(f, "\n  why: %s (%s)\n", v->basis, v->decided_by);
	fputs("  incident page: nanwatch-report FILE... -o incident.html\n", f);
	return ferror(f) ? -EIO : 0;
}

/* What a --follow reader needs to see again when it changes. */
static uint64_t signature(const struct collect_verdict *v)
{
	char buf[512];

	snprintf(buf, sizeof(buf), "%lld|%s|%lld|%lld|%lld|%s|%s|%s|%zu", v->rank,
		 v->host ? v->host : "", v->pid, v->step, v->iteration, v->layer ? v->layer : "",
		 v->module ? v->module : "", v->cause ? v->cause : "", v->tied);
	return fnv(buf, 0) | 1;
}

static int by_origin(const void *pa, const void *pb)
{
	const struct job *a = *(const struct job *const *)pa, *b = *(const struct job *const *)pb;

	if (a->found != b->found)
		return a->found ? -1 : 1;
	if (!a->origin_ns != !b->origin_ns)
		return a->origin_ns ? -1 : 1;
	if (a->origin_ns != b->origin_ns)
		return a->origin_ns < b->origin_ns ? -1 : 1;
	return strcmp(a->name, b->name);
}

int collect__report(struct collect *c, FILE *f, int json, int changed)
{
	struct collect_verdict v;
	struct job **all, *j;
	size_t n = 0, i;
	int printed = 0, err = 0;

	all = calloc(c->njobs ? c->njobs : 1, sizeof(*all));
	if (!all)
		return -ENOMEM;
	for (j = c->jobs; j; j = j->next) {
		job__verdict(j, &v);
		j->found = v.found;
		all[n++] = j;
	}
	qsort(all, n, sizeof(*all), by_origin);
	for (i = 0; i < n && !err; i++) {
		job__verdict(all[i], &v);
		if (changed && (!v.found || signature(&v) == all[i]->printed))
			continue;
		all[i]->printed = v.found ? signature(&v) : 0;
		err = json ? write_json(all[i], &v, f) : write_text(all[i], &v, f);
		printed++;
	}
	free(all);
	return err ? err : printed;
}
