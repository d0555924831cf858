// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Per-uid limits of the service (see budget.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "service/budget.h"

struct budgets {
	struct budget_limits l;
	struct budget_uid *u;
	size_t n, cap;
	double gerr, gerr_at; /* the daemon-wide error tokens */
};

void budget__defaults(struct budget_limits *l)
{
	*l = (struct budget_limits){
		.jobs = 2,
		.cpu_rate = 0.05,
		.cpu_burst = 2.0,
		.followed = 64,
		.err_interval = 60.0,
		.err_burst = 5,
		.global_err_interval = 1.0,
		.global_err_burst = 20,
	};
}

struct budgets *budgets__new(const struct budget_limits *l)
{
	struct budgets *b = calloc(1, sizeof(*b));

	if (!b)
		return NULL;
	b->l = *l;
	b->gerr = l->global_err_burst;
	return b;
}

void budgets__free(struct budgets *b)
{
	if (!b)
		return;
	free(b->u);
	free(b);
}

const struct budget_limits *budgets__limits(const struct budgets *b)
{
	return &b->l;
}

/* Tokens refilled at rate per second since *at, up to max. */
static double refill(double tokens, double *at, double rate, double max, double now)
{
	if (now > *at)
		tokens += (now - *at) * rate;
	*at = now;
	return tokens > max ? max : tokens;
}

struct budget_uid *budgets__get(struct budgets *b, uid_t uid, double now)
{
	struct budget_uid *u;
	size_t i;

	/* a node has few users: a list; no user can add entries but by being one */
	for (i = 0; i < b->n; i++)
		if (b->u[i].uid == uid)
			return &b->u[i];
	if (b->n == b->cap) {
		size_t cap = b->cap ? b->cap * 2 : 16;
		struct budget_uid *n = realloc(b->u, cap * sizeof(*n));

		if (!n)
			return NULL;
		b->u = n;
		b->cap = cap;
	}
	u = &b->u[b->n++];
	memset(u, 0, sizeof(*u));
	u->uid = uid;
	u->cpu = b->l.cpu_burst;
	u->err = b->l.err_burst;
	u->cpu_at = u->err_at = now;
	return u;
}

int budget__may_run(const struct budgets *b, struct budget_uid *u, double now)
{
	u->cpu = refill(u->cpu, &u->cpu_at, b->l.cpu_rate, b->l.cpu_burst, now);
	return u->jobs < b->l.jobs && u->cpu > 0;
}

void budget__charge(const struct budgets *b, struct budget_uid *u, double cpu_s, double now)
{
	u->cpu = refill(u->cpu, &u->cpu_at, b->l.cpu_rate, b->l.cpu_burst, now) - cpu_s;
	u->cpu_spent_ns += (uint64_t)(cpu_s * 1e9);
}

int budget__may_follow(const struct budgets *b, const struct budget_uid *u)
{
	return u->followed < b->l.followed;
}

int budget__error(struct budgets *b, struct budget_uid *u, double now)
{
	double rate = b->l.err_interval > 0 ? 1 / b->l.err_interval : 1e9;
	double grate = b->l.global_err_interval > 0 ? 1 / b->l.global_err_interval : 1e9;

	u->err = refill(u->err, &u->err_at, rate, b->l.err_burst, now);
	b->gerr = refill(b->gerr, &b->gerr_at, grate, b->l.global_err_burst, now);
	if (u->err < 1 || b->gerr < 1) {
		u->suppressed++;
		return 0;
	}
	u->err -= 1;
	b->gerr -= 1;
	u->errors++;
	return 1;
}

int budgets__each(struct budgets *b, int (*cb)(struct budget_uid *u, void *ctx), void *ctx)
{
	size_t i;
	int ret;

	for (i = 0; i < b->n; i++) {
		ret = cb(&b->u[i], ctx);
		if (ret)
			return ret;
	}
	return 0;
}

void budgets__totals(const struct budgets *b, struct budget_totals *t)
{
	size_t i;

	memset(t, 0, sizeof(*t));
	for (i = 0; i < b->n; i++) {
		const struct budget_uid *u = &b->u[i];

		t->errors += u->errors;
		t->suppressed += u->suppressed;
		t->cpu_ns += u->cpu_spent_ns;
		t->capped += u->capped;
		t->followed += u->followed;
		if ((uint64_t)u->followed > t->followed_max)
			t->followed_max = u->followed;
	}
}
