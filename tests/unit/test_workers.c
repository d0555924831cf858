// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Unit tests for daemon/service/workers.c: jobs run on other threads and come back. */
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>
#include <cmocka.h>
#include "service/workers.h"

struct job {
	struct work w;
	pthread_t ran_on;
	int n;
	int block; /* wait on the gate */
};

static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static int gate_open;

static void run(struct work *w)
{
	struct job *j = (struct job *)w;

	j->ran_on = pthread_self();
	if (j->block) {
		pthread_mutex_lock(&gate_lock);
		while (!gate_open)
			pthread_cond_wait(&gate_cond, &gate_lock);
		pthread_mutex_unlock(&gate_lock);
	}
	j->n++;
}

/* Take finished jobs until count have come back; how many came. */
static int take(struct workers *ws, int count)
{
	struct pollfd pfd = {.fd = workers__fd(ws), .events = POLLIN};
	struct work *w;
	int got = 0;

	while (got < count && poll(&pfd, 1, 5000) > 0)
		for (w = workers__take(ws); w; w = w->next)
			got++;
	return got;
}

/* Every job runs once, on a worker thread, and comes back through the descriptor. */
static void test_run_all(void **state)
{
	char err[256];
	struct workers *ws = workers__new(3, err, sizeof(err));
	struct job j[50] = {};
	int i;

	(void)state;
	assert_non_null(ws);
	for (i = 0; i < 50; i++) {
		j[i].w.run = run;
		workers__submit(ws, &j[i].w);
	}
	assert_int_equal(take(ws, 50), 50);
	assert_int_equal(workers__pending(ws), 0);
	for (i = 0; i < 50; i++) {
		assert_int_equal(j[i].n, 1);
		assert_false(pthread_equal(j[i].ran_on, pthread_self()));
	}
	workers__free(ws);
	workers__free(NULL);
}

/* A job that never ends holds one thread: the others still run everything else. */
static void test_blocked_job(void **state)
{
	char err[256];
	struct workers *ws = workers__new(2, err, sizeof(err));
	struct job stuck = {.w.run = run, .block = 1}, j[10] = {};
	int i;

	(void)state;
	gate_open = 0;
	workers__submit(ws, &stuck.w);
	for (i = 0; i < 10; i++) {
		j[i].w.run = run;
		workers__submit(ws, &j[i].w);
	}
	assert_int_equal(take(ws, 10), 10);
	assert_int_equal(workers__pending(ws), 1);
	assert_int_equal(stuck.n, 0);
	pthread_mutex_lock(&gate_lock);
	gate_open = 1;
	pthread_cond_broadcast(&gate_cond);
	pthread_mutex_unlock(&gate_lock);
	assert_int_equal(take(ws, 1), 1);
	assert_int_equal(stuck.n, 1);
	workers__free(ws);
}

/* Stopping runs what is queued first; those jobs can still be taken back. */
static void test_stop_drains(void **state)
{
	char err[256];
	struct workers *ws = workers__new(1, err, sizeof(err));
	struct job j[20] = {};
	struct work *w;
	int i, got = 0;

	(void)state;
	for (i = 0; i < 20; i++) {
		j[i].w.run = run;
		workers__submit(ws, &j[i].w);
	}
	workers__stop(ws);
	for (w = workers__take(ws); w; w = w->next)
		got++;
	assert_int_equal(got, 20);
	for (i = 0; i < 20; i++)
		assert_int_equal(j[i].n, 1);
	workers__free(ws);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_run_all),
		cmocka_unit_test(test_blocked_job),
		cmocka_unit_test(test_stop_drains),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
