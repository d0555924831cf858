/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * What one local user's processes may cost the service, per uid: jobs at once, CPU time of
 * the work that watched nothing (a refill rate and a burst, like a token bucket), processes
 * followed at once, and error events (a burst, then one per interval, the rest counted and
 * summed up in one line). Whoever starts processes that match a rule spends at most this of
 * the daemon, and every other user's processes are served as before.
 */
#ifndef __BUDGET_H
#define __BUDGET_H

#include <stdint.h>
#include <sys/types.h>

struct budget_limits {
	int jobs;		    /* jobs of one uid running at once */
	double cpu_rate;	    /* CPU seconds per second a uid's fruitless work may take ... */
	double cpu_burst;	    /* ... after this many at once */
	int followed;		    /* processes of one uid waiting for torch or watched */
	double err_interval;	    /* seconds between a uid's error events after ... */
	int err_burst;		    /* ... this many at once */
	double global_err_interval; /* the same over every uid together */
	int global_err_burst;
};

/* The defaults (SECURITY.md states them). */
void budget__defaults(struct budget_limits *l);

struct budget_uid {
	uid_t uid;
	int jobs;
	int followed;
	double cpu; /* tokens: seconds of CPU that may still be spent */
	double cpu_at;
	double err; /* tokens: error events that may still be written */
	double err_at;
	uint64_t cpu_spent_ns; /* everything charged */
	uint64_t errors, suppressed, suppressed_said;
	uint64_t capped; /* processes not followed: the uid had `followed` already */
};

struct budgets;

struct budgets *budgets__new(const struct budget_limits *l);
void budgets__free(struct budgets *b); /* accepts NULL */

const struct budget_limits *budgets__limits(const struct budgets *b);

/* The uid's account, made full on first use; NULL only without memory. */
struct budget_uid *budgets__get(struct budgets *b, uid_t uid, double now);

/* Whether a job of u may start now (jobs at once and CPU tokens left). */
int budget__may_run(const struct budgets *b, struct budget_uid *u, double now);

/* CPU seconds one of u's jobs spent on work that watched nothing. */
void budget__charge(const struct budgets *b, struct budget_uid *u, double cpu_s, double now);

/* Whether u may have one more process followed. */
int budget__may_follow(const struct budgets *b, const struct budget_uid *u);

/* An error event of u: 1 to write it, 0 to count it as suppressed. */
int budget__error(struct budgets *b, struct budget_uid *u, double now);

/* Every uid's account until cb returns non-zero. */
int budgets__each(struct budgets *b, int (*cb)(struct budget_uid *u, void *ctx), void *ctx);

struct budget_totals {
	uint64_t errors, suppressed, cpu_ns, capped;
	uint64_t followed;     /* now, over every uid */
	uint64_t followed_max; /* now, the most of one uid */
};

/* Totals over every uid. */
void budgets__totals(const struct budgets *b, struct budget_totals *t);

#endif /* __BUDGET_H */
