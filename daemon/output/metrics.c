// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Prometheus metrics (see metrics.h): the values, their text exposition, and a non-blocking
 * HTTP/1.x server for GET /metrics. One epoll set holds the listener, the clients and a timer
 * for the earliest client deadline, so the caller polls one descriptor.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* accept4 */
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>
#include "output/metrics.h"
#include "output/sink.h"
#include "session.h"
#include "util/utf8.h"

#define STR_(x) #x
#define STR(x) STR_(x)

#define TAG_LISTEN 0
#define TAG_TIMER 1
#define TAG_CLIENT 2 /* + the client's slot */

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
	uint64_t anomalies, undiagnosed, warnings, probe_hits, tensors, bytes, steps, iterations;
	const char *cause; /* a string of the diagnosis vocabulary, NULL before the diagnosis */
};

struct client {
	int fd;
	uint64_t deadline_ms;
	size_t rlen;
	size_t checked;	 /* bytes of req looked at: each is checked once, as it comes */
	size_t line;	 /* where the line being read begins */
	int lines;	 /* lines of the head complete */
	const char *bad; /* why the request is malformed (answered 400), or NULL */
	char *resp;
	size_t resp_len, resp_off;
	char req[METRICS_MAX_REQUEST];
};

struct metrics {
	int lfd, tfd, epfd;
	int port;
	int timeout_ms;
	int max_clients;
	struct client **clients;
	struct metrics_target *targets;
	int ntargets;
	struct tallies causes; /* counts of targets gone, by cause */
	struct tallies sinks;
	uint64_t gone_warnings, gone_hits, gone_tensors, gone_bytes;
	struct metrics_service svc;
	int have_svc; /* service mode: its counters are part of the exposition */
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000ULL + ts.tv_nsec / 1000000;
}

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
	if (x->cause && !tally_get(ts, x->cause))
		return -ENOMEM;
	none = tally_get(ts, "none");
	if (x->cause)
		c = tally_get(ts, x->cause);
	if (!none || (x->cause && !c))
		return -ENOMEM;
	none->anomalies += x->cause ? x->undiagnosed : x->anomalies;
	if (c) {
		c->anomalies += x->anomalies - x->undiagnosed;
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
	const struct metrics_target *x;

	for (x = m->targets; x; x = x->next) {
		w += x->warnings;
		h += x->probe_hits;
		n += x->tensors;
		b += x->bytes;
	}
	family(t, "nanwatch_warnings_total", "counter",
	       "Warning events written (a layer's output running up towards overflow).");
	sample1(t, "nanwatch_warnings_total", NULL, NULL, w);
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
	family(t, "nanwatch_target_steps_total", "counter",
	       "Optimizer steps of a watched process since its attach.");
	for (x = m->targets; x; x = x->next)
		target_sample(t, "nanwatch_target_steps_total", x, x->steps);
	family(t, "nanwatch_target_iterations_total", "counter",
	       "Forward passes of a watched process's outermost module since its attach.");
	for (x = m->targets; x; x = x->next)
		target_sample(t, "nanwatch_target_iterations_total", x, x->iterations);
	family(t, "nanwatch_target_anomalies_total", "counter",
	       "Anomaly events written for a watched process.");
	for (x = m->targets; x; x = x->next)
		target_sample(t, "nanwatch_target_anomalies_total", x, x->anomalies);
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

void metrics__target_update(struct metrics_target *x, const struct session_stats *st)
{
	x->anomalies = st->anomalies;
	x->undiagnosed = st->cause ? st->anomalies_undiagnosed : st->anomalies;
	x->cause = st->cause;
	x->warnings = st->warnings;
	x->probe_hits = st->probe_hits;
	x->tensors = st->tensors_scanned;
	x->bytes = st->bytes_scanned;
	x->steps = st->steps;
	x->iterations = st->iterations;
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
	m->gone_warnings += x->warnings;
	m->gone_hits += x->probe_hits;
	m->gone_tensors += x->tensors;
	m->gone_bytes += x->bytes;
	free(x->job);
	free(x);
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

/* ---- the listener ---- */

static int parse_port(const char *s, int *port)
{
	char *end;
	long v;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v > 65535)
		return -EINVAL;
	*port = v;
	return 0;
}

/* "ADDR:PORT" with ADDR IPv4, [IPv6] or localhost. */
static int parse_listen(const char *spec, struct sockaddr_storage *sa, socklen_t *len)
{
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)sa;
	struct sockaddr_in *s4 = (struct sockaddr_in *)sa;
	const char *colon;
	char host[64];
	size_t n;
	int port;

	memset(sa, 0, sizeof(*sa));
	if (spec[0] == '[') {
		colon = strstr(spec, "]:");
		n = colon ? (size_t)(colon - spec - 1) : 0;
		if (!colon || n >= sizeof(host) || parse_port(colon + 2, &port))
			return -EINVAL;
		memcpy(host, spec + 1, n);
		host[n] = 0;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(port);
		*len = sizeof(*s6);
		return inet_pton(AF_INET6, host, &s6->sin6_addr) == 1 ? 0 : -EINVAL;
	}
	colon = strrchr(spec, ':');
	n = colon ? (size_t)(colon - spec) : 0;
	if (!colon || n >= sizeof(host) || parse_port(colon + 1, &port))
		return -EINVAL;
	memcpy(host, spec, n);
	host[n] = 0;
	s4->sin_family = AF_INET;
	s4->sin_port = htons(port);
	*len = sizeof(*s4);
	if (!strcmp(host, "localhost")) {
		s4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		return 0;
	}
	return inet_pton(AF_INET, host, &s4->sin_addr) == 1 ? 0 : -EINVAL;
}

static int metrics_port_of(const struct sockaddr_storage *sa)
{
	return ntohs(sa->ss_family == AF_INET6 ? ((const struct sockaddr_in6 *)sa)->sin6_port
					       : ((const struct sockaddr_in *)sa)->sin_port);
}

static int is_loopback(const struct sockaddr_storage *sa)
{
	const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
	const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;

	if (sa->ss_family == AF_INET)
		return (ntohl(s4->sin_addr.s_addr) >> 24) == 127;
	if (IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr))
		return 1;
	return IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr) && s6->sin6_addr.s6_addr[12] == 127;
}

int metrics__check_listen(const char *name, const char *spec, char *why, size_t whylen)
{
	struct sockaddr_storage sa;
	socklen_t len;

	if (parse_listen(spec, &sa, &len) || !metrics_port_of(&sa)) {
		snprintf(why, whylen,
			 "%s: '%.64s' is not ADDR:PORT (IPv4, [IPv6] or localhost; port 1..65535)",
			 name, spec);
		return -EINVAL;
	}
	if (!is_loopback(&sa)) {
		snprintf(why, whylen,
			 "%s: '%.64s' is not a loopback address (127.0.0.0/8, [::1], localhost): "
			 "the endpoint has no authentication",
			 name, spec);
		return -EINVAL;
	}
	/* an IPv6 socket of its own (IPV6_V6ONLY) cannot bind one */
	if (sa.ss_family == AF_INET6 &&
	    IN6_IS_ADDR_V4MAPPED(&((struct sockaddr_in6 *)&sa)->sin6_addr)) {
		snprintf(why, whylen,
			 "%s: '%.64s' is a v4-mapped address: give the IPv4 one (127.0.0.1:PORT)",
			 name, spec);
		return -EINVAL;
	}
	return 0;
}

static int epoll_add(int epfd, int fd, uint32_t events, uint64_t tag)
{
	struct epoll_event ev = {.events = events, .data.u64 = tag};

	return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) ? -errno : 0;
}

static int open_listener(struct metrics *m, const struct sockaddr_storage *sa, socklen_t len)
{
	struct sockaddr_storage bound;
	socklen_t blen = sizeof(bound);
	int one = 1;

	m->lfd = socket(sa->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (m->lfd < 0)
		return -errno;
	setsockopt(m->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (sa->ss_family == AF_INET6)
		setsockopt(m->lfd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	if (bind(m->lfd, (const struct sockaddr *)sa, len) || listen(m->lfd, 16) ||
	    getsockname(m->lfd, (struct sockaddr *)&bound, &blen))
		return -errno;
	m->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
						    : ((struct sockaddr_in *)&bound)->sin_port);
	return 0;
}

static int open_loop(struct metrics *m)
{
	int ret;

	m->epfd = epoll_create1(EPOLL_CLOEXEC);
	m->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (m->epfd < 0 || m->tfd < 0)
		return -errno;
	ret = epoll_add(m->epfd, m->lfd, EPOLLIN, TAG_LISTEN);
	if (!ret)
		ret = epoll_add(m->epfd, m->tfd, EPOLLIN, TAG_TIMER);
	return ret;
}

struct metrics *metrics__new(const struct metrics_opts *o, char *err, size_t errlen)
{
	struct sockaddr_storage sa;
	struct metrics *m = NULL;
	socklen_t len;
	int ret;

	if (parse_listen(o->listen, &sa, &len)) {
		snprintf(err, errlen, "invalid metrics address '%s' (ADDR:PORT, [IPv6]:PORT)",
			 o->listen);
		ret = -EINVAL;
		goto fail;
	}
	if (!o->allow_remote && !is_loopback(&sa)) {
		snprintf(err, errlen,
			 "metrics address '%s' is not a loopback address: the endpoint has no "
			 "authentication; listen on 127.0.0.1 or [::1]",
			 o->listen);
		ret = -EINVAL;
		goto fail;
	}
	m = calloc(1, sizeof(*m));
	if (m) {
		m->lfd = m->tfd = m->epfd = -1;
		m->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : METRICS_DEFAULT_TIMEOUT_MS;
		m->max_clients = o->max_clients > 0 ? o->max_clients : METRICS_DEFAULT_CLIENTS;
		m->clients = calloc(m->max_clients, sizeof(*m->clients));
	}
	if (!m || !m->clients) {
		snprintf(err, errlen, "out of memory");
		ret = -ENOMEM;
		goto fail;
	}
	ret = open_listener(m, &sa, len);
	if (ret) {
		snprintf(err, errlen, "failed to listen on %s for metrics: %s", o->listen,
			 strerror(-ret));
		goto fail;
	}
	ret = open_loop(m);
	if (ret) {
		snprintf(err, errlen, "failed to set up the metrics server: %s", strerror(-ret));
		goto fail;
	}
	return m;
fail:
	metrics__free(m);
	errno = -ret;
	return NULL;
}

int metrics__port(const struct metrics *m)
{
	return m->port;
}

int metrics__fd(const struct metrics *m)
{
	return m->epfd;
}

/* ---- the clients ---- */

static void client_close(struct metrics *m, int i)
{
	struct client *c = m->clients[i];

	if (!c)
		return;
	close(c->fd); /* leaves the epoll set with it */
	free(c->resp);
	free(c);
	m->clients[i] = NULL;
}

/* The timer fires at the earliest deadline; disarmed without clients. */
static void arm_timer(struct metrics *m)
{
	struct itimerspec its = {};
	uint64_t first = 0;
	int i;

	for (i = 0; i < m->max_clients; i++)
		if (m->clients[i] && (!first || m->clients[i]->deadline_ms < first))
			first = m->clients[i]->deadline_ms;
	if (first) {
		its.it_value.tv_sec = first / 1000;
		its.it_value.tv_nsec = (first % 1000) * 1000000 + 1;
	}
	timerfd_settime(m->tfd, TFD_TIMER_ABSTIME, &its, NULL);
}

static void accept_clients(struct metrics *m)
{
	struct client *c;
	int fd, i, n;

	for (n = 0; n < 64; n++) {
		fd = accept4(m->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return; /* EAGAIN, or an aborted connection */
		for (i = 0; i < m->max_clients && m->clients[i]; i++)
			;
		c = i < m->max_clients ? calloc(1, sizeof(*c)) : NULL;
		if (!c || epoll_add(m->epfd, fd, EPOLLIN, TAG_CLIENT + i)) {
			free(c); /* too many clients at once: this one is turned away */
			close(fd);
			continue;
		}
		c->fd = fd;
		c->deadline_ms = now_ms() + m->timeout_ms;
		m->clients[i] = c;
	}
}

static const char body_404[] = "not found: the metrics are at /metrics\n";
static const char body_405[] = "method not allowed: GET or HEAD\n";
static const char body_431[] = "request header fields too large\n";

/* The whole response, headers and body (none for HEAD), into c->resp. */
static int respond(struct client *c, int status, const char *reason, const char *extra,
		   const char *body, size_t blen, int head)
{
	struct text t = {};

	text_printf(&t,
		    "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s"
		    "Connection: close\r\n\r\n",
		    status, reason,
		    status == 200 ? "text/plain; version=0.0.4; charset=utf-8"
				  : "text/plain; charset=utf-8",
		    blen, extra ? extra : "");
	if (!head)
		text_add(&t, body, blen);
	if (t.err) {
		free(t.buf);
		return t.err;
	}
	c->resp = t.buf;
	c->resp_len = t.len;
	return 0;
}

/* A 400 saying why, and so that no client waits for its deadline on a request that cannot be. */
static int respond_400(struct client *c)
{
	char body[128];
	int n = snprintf(body, sizeof(body), "bad request: %s\n", c->bad);

	return respond(c, 400, "Bad Request", NULL, body, n, 0);
}

/* RFC 9110's tchar: what a method or a header name is made of. */
static int is_tchar(unsigned char ch)
{
	return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
	       (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

static size_t token_len(const char *p, const char *end)
{
	const char *s = p;

	while (p < end && is_tchar(*p))
		p++;
	return p - s;
}

/* "METHOD SP TARGET SP HTTP/1.x" (end: before its CRLF): NULL, or why it is not one. */
static const char *check_request_line(const char *p, const char *end)
{
	size_t n = token_len(p, end);

	if (!n)
		return "no method";
	p += n;
	if (p == end || *p++ != ' ')
		return "a method that is not a token, or no request target";
	for (n = 0; p<end && * p> ' ' && *p < 0x7f; p++)
		n++;
	if (!n || p == end || *p++ != ' ')
		return "a request target of other than visible characters, or no version";
	if (end - p != 8 || memcmp(p, "HTTP/1.", 7) || p[7] < '0' || p[7] > '9')
		return "not HTTP/1.x";
	return NULL;
}

/* "name: value" (controls were refused byte by byte): NULL, or why it is not one. */
static const char *check_header(const char *p, const char *end)
{
	size_t n = token_len(p, end);

	if (!n && (*p == ' ' || *p == '\t'))
		return "a folded header line";
	if (!n || p + n == end || p[n] != ':')
		return "a header line that is not name: value";
	return NULL;
}

/*
 * Check the bytes that came since the last look: 1 once the head is complete (an empty line),
 * 0 to wait for more, -EINVAL with c->bad set as soon as it cannot be a request (a NUL or
 * control byte, a CR without LF, a line over METRICS_MAX_LINE, a malformed request line or
 * header). A bare LF ends a line too (RFC 9112 2.2 lets a server take it).
 */
static int client_check(struct client *c)
{
	const char *r = c->req;
	size_t i, end;

	for (; c->checked < c->rlen; c->checked++) {
		i = c->checked;
		if (i > c->line && r[i - 1] == '\r' && r[i] != '\n')
			c->bad = "a CR not followed by LF";
		else if (r[i] == '\n') {
			end = i > c->line && r[i - 1] == '\r' ? i - 1 : i;
			if (end == c->line)
				return c->lines ? 1 : (c->bad = "no request line", -EINVAL);
			c->bad = c->lines ? check_header(r + c->line, r + end)
					  : check_request_line(r + c->line, r + end);
			c->lines++;
			c->line = i + 1;
		} else if (((unsigned char)r[i] < 0x20 && r[i] != '\t' && r[i] != '\r') ||
			   r[i] == 0x7f) {
			c->bad = "a NUL or control byte";
		} else if (i - c->line >= METRICS_MAX_LINE) {
			c->bad = "a line longer than " STR(METRICS_MAX_LINE) " bytes";
		}
		if (c->bad)
			return -EINVAL;
	}
	return 0;
}

/* Answer a complete, well-formed request head: GET or HEAD of /metrics, with or without a query. */
static int answer(struct metrics *m, struct client *c)
{
	const char *method = c->req, *target = strchr(method, ' ') + 1;
	size_t mlen = target - 1 - method, tlen = strcspn(target, " ?");
	char *body = NULL;
	ssize_t n;
	int head, ret;

	head = mlen == 4 && !memcmp(method, "HEAD", 4);
	if (!head && !(mlen == 3 && !memcmp(method, "GET", 3)))
		return respond(c, 405, "Method Not Allowed", "Allow: GET, HEAD\r\n", body_405,
			       sizeof(body_405) - 1, 0);
	if (tlen != 8 || memcmp(target, "/metrics", 8))
		return respond(c, 404, "Not Found", NULL, body_404, sizeof(body_404) - 1, head);
	n = metrics__render(m, &body);
	if (n < 0)
		return n;
	ret = respond(c, 200, "OK", NULL, body, n, head);
	free(body);
	return ret;
}

/* Send what the socket takes; 1 once all is sent, 0 to go on, negative on an error. */
static int client_send(struct client *c)
{
	ssize_t n;

	while (c->resp_off < c->resp_len) {
		n = send(c->fd, c->resp + c->resp_off, c->resp_len - c->resp_off,
			 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -errno;
		c->resp_off += n;
	}
	return 1;
}

/*
 * Read what came; 1 once the request head is complete, 0 to wait, -EINVAL for a malformed
 * one, -E2BIG for one too large, another negative errno to give up.
 */
static int client_read(struct client *c)
{
	size_t room = sizeof(c->req) - 1 - c->rlen;
	ssize_t n;
	int ret;

	if (!room)
		return -E2BIG;
	n = recv(c->fd, c->req + c->rlen, room, MSG_DONTWAIT);
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	if (n == 0)
		return -ECONNRESET; /* closed before the request was complete */
	c->rlen += n;
	c->req[c->rlen] = 0;
	ret = client_check(c);
	if (ret)
		return ret;
	return c->rlen == sizeof(c->req) - 1 ? -E2BIG : 0;
}

static void client_event(struct metrics *m, int i)
{
	struct client *c = m->clients[i];
	struct epoll_event ev = {.events = EPOLLOUT, .data.u64 = TAG_CLIENT + i};
	int ret;

	if (!c)
		return;
	if (!c->resp) {
		ret = client_read(c);
		if (ret == -E2BIG)
			ret = respond(c, 431, "Request Header Fields Too Large", NULL, body_431,
				      sizeof(body_431) - 1, 0);
		else if (ret == -EINVAL)
			ret = respond_400(c);
		else if (ret == 1)
			ret = answer(m, c);
		if (ret < 0)
			goto close;
		if (!c->resp)
			return;
		shutdown(c->fd, SHUT_RD);
		epoll_ctl(m->epfd, EPOLL_CTL_MOD, c->fd, &ev);
	}
	ret = client_send(c);
	if (ret == 0)
		return;
	if (ret == 1)
		shutdown(c->fd, SHUT_WR);
close:
	client_close(m, i);
}

static void expire_clients(struct metrics *m)
{
	uint64_t now = now_ms();
	int i;

	for (i = 0; i < m->max_clients; i++)
		if (m->clients[i] && m->clients[i]->deadline_ms <= now)
			client_close(m, i);
}

int metrics__serve(struct metrics *m)
{
	struct epoll_event ev[16];
	uint64_t ticks;
	int i, n;

	n = epoll_wait(m->epfd, ev, 16, 0);
	if (n < 0)
		return errno == EINTR ? 0 : -errno;
	for (i = 0; i < n; i++) {
		if (ev[i].data.u64 == TAG_LISTEN)
			accept_clients(m);
		else if (ev[i].data.u64 == TAG_TIMER)
			(void)!read(m->tfd, &ticks, sizeof(ticks));
		else
			client_event(m, ev[i].data.u64 - TAG_CLIENT);
	}
	expire_clients(m);
	arm_timer(m);
	return 0;
}

void metrics__free(struct metrics *m)
{
	struct metrics_target *x, *next;
	int i;

	if (!m)
		return;
	for (i = 0; m->clients && i < m->max_clients; i++)
		client_close(m, i);
	free(m->clients);
	for (x = m->targets; x; x = next) {
		next = x->next;
		free(x->job);
		free(x);
	}
	tallies_free(&m->causes);
	tallies_free(&m->sinks);
	if (m->lfd >= 0)
		close(m->lfd);
	if (m->tfd >= 0)
		close(m->tfd);
	if (m->epfd >= 0)
		close(m->epfd);
	free(m);
}
