/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Metrics for Prometheus: the daemon's counters in the text exposition format (0.0.4), served
 * on GET /metrics by output/httpd.c on a loopback address. The module holds the values its
 * callers feed it: each target's counts and the sinks' drops after each tick; counters of
 * targets gone are kept, so no counter ever goes down. Nothing here blocks: the caller polls
 * metrics__fd for readability (its own loop, or an outer epoll) and calls metrics__serve.
 */
#ifndef __METRICS_H
#define __METRICS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct metrics;
struct metrics_target;
struct sinks;

/*
 * Where and how the endpoint listens: as these fields of struct httpd_opts (output/httpd.h);
 * listen NULL: no endpoint. textfile: also written to this file (node_exporter's textfile
 * collector), replaced at once (a temporary file beside it, renamed), mode 0644, by
 * metrics__tick at most once a second and by metrics__free; NULL: none.
 */
struct metrics_opts {
	const char *listen;
	const char *textfile;
	int allow_remote;
	int timeout_ms;
	int max_clients;
};

/* The endpoint, listening: NULL with errno set and a one-line reason in err, as httpd__new. */
struct metrics *metrics__new(const struct metrics_opts *o, char *err, size_t errlen);
void metrics__free(struct metrics *m); /* closes every connection; accepts NULL */

/* The textfile written now if a second has passed since the last write: 1 written, 0 not
 * yet (or no textfile), -errno. */
int metrics__tick(struct metrics *m);

/* The file written now (0 or -errno; 0 without a textfile). */
int metrics__write_textfile(struct metrics *m);

/* The endpoint's httpd__port, httpd__fd and httpd__serve (-1, -1 and 0 without one). */
int metrics__port(const struct metrics *m);
int metrics__fd(const struct metrics *m);
int metrics__serve(struct metrics *m);

/*
 * A watched process: per-target series carry pid, and rank and job where given (rank < 0,
 * job NULL: no such label). NULL with errno set.
 */
struct metrics_target *metrics__target_add(struct metrics *m, pid_t pid, int rank, const char *job);

/* A target's values, counted since its attach. */
struct metrics_values {
	uint64_t anomalies;   /* anomaly lines written */
	uint64_t undiagnosed; /* ... of them not given to cause (all of them while it is NULL) */
	const char *cause;    /* a string of the diagnosis vocabulary, NULL before the diagnosis */
	uint64_t warnings, probe_hits;
	uint64_t skipped_steps;	 /* steps a gradient scaler skipped */
	uint64_t tensors, bytes; /* scanned; bytes: outputs and gradients */
	uint64_t steps, iterations;
	/* the first non-finite value: the diagnosis's step and layer, the first anomaly's time */
	uint64_t cause_step;
	char cause_layer[256];
	double first_time; /* Unix seconds; 0: no anomaly */
};

/* The target's values now. */
void metrics__target_update(struct metrics_target *t, const struct metrics_values *v);

/*
 * The target is gone: its counts stay in the totals, its own series go, except its first
 * non-finite value's (kept for the last METRICS_FIRST_KEPT targets gone). Accepts NULL.
 */
#define METRICS_FIRST_KEPT 256
void metrics__target_remove(struct metrics *m, struct metrics_target *t);

/* A watch ended on an error while its process ran on (a probe or an output failed). */
void metrics__watch_lost(struct metrics *m);

/* The sinks' dropped lines (totals kept per sink name, also after a sink is gone). */
int metrics__update_sinks(struct metrics *m, const struct sinks *ss);

/* The service's own counters (service mode): error events, limits on local users' processes. */
struct metrics_service {
	uint64_t errors;	    /* error events written about processes without a session */
	uint64_t errors_suppressed; /* ... and not written: their uid was over its rate */
	uint64_t capped;	    /* matching processes not watched: their uid at its cap */
	uint64_t followed;	    /* matching processes waited for or watched, now */
	uint64_t followed_max;	    /* ... the most of one uid */
	double refused_cpu_seconds; /* CPU of work on processes that watched nothing */
	uint64_t jobs_pending;	    /* resolves, attaches and detaches queued or running */
};

void metrics__service_update(struct metrics *m, const struct metrics_service *s);

/* The exposition as served: a malloc'ed text in *out, its length returned; negative errno. */
ssize_t metrics__render(const struct metrics *m, char **out);

#endif /* __METRICS_H */
