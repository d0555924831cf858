// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* A session's own thread in service mode (see runner.h). */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include "service/runner.h"
#include "util/clock.h"

#define TICK_S 0.1 /* session ticks: step state, diagnoses, exits */

struct runner {
	pthread_t t;
	struct session *s;
	int done_fd, wake_fd;
	int stop_req; /* an enum session_stop, 0: none (atomic) */
	int done;     /* atomic */
	enum session_stop reason;
	int error;
	pthread_mutex_t lock; /* st */
	struct session_stats st;
};

static void snapshot(struct runner *r)
{
	struct session_stats st;

	session__stats(r->s, &st);
	pthread_mutex_lock(&r->lock);
	r->st = st;
	pthread_mutex_unlock(&r->lock);
}

/* Findings as they come, the periodic work each TICK_S, until the watch ends or is stopped. */
static enum session_stop watch(struct runner *r)
{
	double next_tick = clock__now(), now;
	enum session_stop stop;
	struct pollfd pfd[2];
	int timeout;

	for (;;) {
		pfd[0] = (struct pollfd){.fd = session__fd(r->s), .events = POLLIN};
		pfd[1] = (struct pollfd){.fd = r->wake_fd, .events = POLLIN};
		timeout = (int)((next_tick - clock__now()) * 1000) + 1;
		poll(pfd, 2, timeout > 0 ? timeout : 0);
		stop = __atomic_load_n(&r->stop_req, __ATOMIC_ACQUIRE);
		if (stop)
			return stop;
		stop = session__poll(r->s, 0);
		now = clock__now();
		if (!stop && now >= next_tick) {
			stop = session__tick(r->s);
			snapshot(r);
			next_tick = now + TICK_S;
		}
		if (stop)
			return stop;
	}
}

static void *run(void *arg)
{
	struct runner *r = arg;
	uint64_t one = 1;

	r->reason = watch(r);
	r->error = r->reason == SESSION_ERROR ? session__error(r->s) : 0;
	session__detach(r->s, r->reason);
	snapshot(r);
	session__free(r->s);
	r->s = NULL;
	__atomic_store_n(&r->done, 1, __ATOMIC_RELEASE);
	if (write(r->done_fd, &one, sizeof(one)) < 0) {
		/* an eventfd's counter does not overflow at this rate */
	}
	return NULL;
}

struct runner *runner__start(struct session *s, int done_fd)
{
	struct runner *r = calloc(1, sizeof(*r));
	sigset_t all, old;
	int ret;

	if (!r)
		return NULL;
	r->s = s;
	r->done_fd = done_fd;
	pthread_mutex_init(&r->lock, NULL);
	session__stats(s, &r->st);
	r->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (r->wake_fd < 0) {
		ret = errno;
		goto err;
	}
	/* signals stay with the loop's thread, whose flags they set */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	ret = pthread_create(&r->t, NULL, run, r);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (!ret)
		return r;
	close(r->wake_fd);
err:
	pthread_mutex_destroy(&r->lock);
	free(r);
	errno = ret;
	return NULL;
}

void runner__stop(struct runner *r, enum session_stop why)
{
	uint64_t one = 1;
	int none = 0;

	if (__atomic_compare_exchange_n(&r->stop_req, &none, why, 0, __ATOMIC_RELEASE,
					__ATOMIC_RELAXED) &&
	    write(r->wake_fd, &one, sizeof(one)) < 0) {
		/* the runner sees stop_req at its next tick anyway */
	}
}

int runner__done(struct runner *r)
{
	return __atomic_load_n(&r->done, __ATOMIC_ACQUIRE);
}

void runner__stats(struct runner *r, struct session_stats *st)
{
	pthread_mutex_lock(&r->lock);
	*st = r->st;
	pthread_mutex_unlock(&r->lock);
}

enum session_stop runner__reason(const struct runner *r)
{
	return r->reason;
}

int runner__error(const struct runner *r)
{
	return r->error;
}

void runner__free(struct runner *r)
{
	if (!r)
		return;
	pthread_join(r->t, NULL);
	close(r->wake_fd);
	pthread_mutex_destroy(&r->lock);
	free(r);
}
