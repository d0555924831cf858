// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Unit tests for daemon/service/budget.c: what one uid's processes may cost the service. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include "service/budget.h"

static struct budgets *defaults(struct budget_limits *l)
{
	budget__defaults(l);
	return budgets__new(l);
}

/* Jobs at once are capped per uid; another uid is not held back by the first. */
static void test_jobs_per_uid(void **state)
{
	struct budget_limits l;
	struct budgets *b = defaults(&l);
	struct budget_uid *u, *v;
	int i;

	(void)state;
	u = budgets__get(b, 65534, 0);
	for (i = 0; i < l.jobs; i++) {
		assert_true(budget__may_run(b, u, 0));
		u->jobs++;
	}
	assert_false(budget__may_run(b, u, 0));
	v = budgets__get(b, 1000, 0);
	assert_true(budget__may_run(b, v, 0));
	u = budgets__get(b, 65534, 0); /* the same account again */
	assert_int_equal(u->jobs, l.jobs);
	budgets__free(b);
	budgets__free(NULL);
}

/* Fruitless CPU: the burst, then the rate; time refills it, never past the burst. */
static void test_cpu_tokens(void **state)
{
	struct budget_limits l;
	struct budgets *b = defaults(&l);
	struct budget_uid *u = budgets__get(b, 65534, 100);
	struct budget_totals t;

	(void)state;
	budget__charge(b, u, l.cpu_burst + 0.5, 100);
	assert_false(budget__may_run(b, u, 100));
	/* 0.5 s of debt at cpu_rate: back after 0.5 / rate seconds */
	assert_false(budget__may_run(b, u, 100 + 0.4 / l.cpu_rate));
	assert_true(budget__may_run(b, u, 100 + 0.6 / l.cpu_rate));
	assert_true(budget__may_run(b, u, 1e6));
	assert_true(u->cpu <= l.cpu_burst);
	budgets__totals(b, &t);
	assert_int_equal(t.cpu_ns, (uint64_t)((l.cpu_burst + 0.5) * 1e9));
	budgets__free(b);
}

/* Errors: the burst, then one per interval; the others counted as suppressed. */
static void test_errors(void **state)
{
	struct budget_limits l;
	struct budgets *b = defaults(&l);
	struct budget_uid *u = budgets__get(b, 65534, 0), *v;
	struct budget_totals t;
	int i, written = 0;

	(void)state;
	for (i = 0; i < 100; i++)
		written += budget__error(b, u, 0);
	assert_int_equal(written, l.err_burst);
	assert_int_equal(u->suppressed, 100 - l.err_burst);
	assert_int_equal(budget__error(b, u, l.err_interval * 0.9), 0);
	assert_int_equal(budget__error(b, u, l.err_interval * 1.1), 1);
	/* another uid has its own burst */
	v = budgets__get(b, 1000, 0);
	assert_int_equal(budget__error(b, v, l.err_interval * 1.1), 1);
	budgets__totals(b, &t);
	assert_int_equal(t.errors, l.err_burst + 2);
	assert_int_equal(t.suppressed, 100 - l.err_burst + 1);
	budgets__free(b);
}

/* Every uid together: the daemon-wide error burst bounds many users at once. */
static void test_global_errors(void **state)
{
	struct budget_limits l;
	struct budgets *b = defaults(&l);
	int uid, written = 0;

	(void)state;
	for (uid = 0; uid < 1000; uid++)
		written += budget__error(b, budgets__get(b, uid + 10000, 5), 5);
	assert_int_equal(written, l.global_err_burst);
	budgets__free(b);
}

static void test_followed(void **state)
{
	struct budget_limits l;
	struct budgets *b = defaults(&l);
	struct budget_uid *u = budgets__get(b, 65534, 0);
	struct budget_totals t;

	(void)state;
	u->followed = l.followed - 1;
	assert_true(budget__may_follow(b, u));
	u->followed++;
	assert_false(budget__may_follow(b, u));
	budgets__get(b, 1000, 0)->followed = 3;
	budgets__totals(b, &t);
	assert_int_equal(t.followed, l.followed + 3);
	assert_int_equal(t.followed_max, l.followed);
	budgets__free(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_jobs_per_uid), cmocka_unit_test(test_cpu_tokens),
		cmocka_unit_test(test_errors),	     cmocka_unit_test(test_global_errors),
		cmocka_unit_test(test_followed),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
