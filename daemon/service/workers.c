// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The service's worker threads (see workers.h): one queue in, one list out, an eventfd. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include "service/workers.h"

#define WORKERS_MAX 64

struct workers {
	pthread_mutex_t lock;
	pthread_cond_t more;
	struct work *queue, **queue_tail;
	struct work *done, **done_tail;
	int pending; /* submitted, not taken */
	int stopping;
	int efd;
	int n;
	pthread_t t[WORKERS_MAX];
};

static void *worker(void *arg)
{
	struct workers *ws = arg;
	uint64_t one = 1;
	struct work *w;

	pthread_mutex_lock(&ws->lock);
	for (;;) {
		while (!ws->queue && !ws->stopping)
			pthread_cond_wait(&ws->more, &ws->lock);
		w = ws->queue;
		if (!w)
			break; /* stopping, and nothing left to run */
		ws->queue = w->next;
		if (!ws->queue)
			ws->queue_tail = &ws->queue;
		pthread_mutex_unlock(&ws->lock);
		w->run(w);
		pthread_mutex_lock(&ws->lock);
		w->next = NULL;
		*ws->done_tail = w;
		ws->done_tail = &w->next;
		if (write(ws->efd, &one, sizeof(one)) < 0) {
			/* the counter cannot overflow at this rate: nothing to do */
		}
	}
	pthread_mutex_unlock(&ws->lock);
	return NULL;
}

static int start_threads(struct workers *ws, int n)
{
	sigset_t all, old;
	int ret = 0;

	/* signals stay with the loop's thread, whose flags they set */
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, &old);
	for (ws->n = 0; ws->n < n; ws->n++) {
		ret = -pthread_create(&ws->t[ws->n], NULL, worker, ws);
		if (ret)
			break;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return ws->n ? 0 : ret;
}

struct workers *workers__new(int n, char *err, size_t errlen)
{
	struct workers *ws = calloc(1, sizeof(*ws));
	int ret;

	if (!ws) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	pthread_mutex_init(&ws->lock, NULL);
	pthread_cond_init(&ws->more, NULL);
	ws->queue_tail = &ws->queue;
	ws->done_tail = &ws->done;
	ws->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	ret = ws->efd < 0 ? -errno
			  : start_threads(ws, n < 1		? 1
					      : n > WORKERS_MAX ? WORKERS_MAX
								: n);
	if (ret) {
		snprintf(err, errlen, "failed to start worker threads: %s", strerror(-ret));
		workers__free(ws);
		errno = -ret;
		return NULL;
	}
	return ws;
}

void workers__submit(struct workers *ws, struct work *w)
{
	pthread_mutex_lock(&ws->lock);
	w->next = NULL;
	*ws->queue_tail = w;
	ws->queue_tail = &w->next;
	ws->pending++;
	pthread_cond_signal(&ws->more);
	pthread_mutex_unlock(&ws->lock);
}

int workers__fd(const struct workers *ws)
{
	return ws->efd;
}

struct work *workers__take(struct workers *ws)
{
	struct work *list, *w;
	uint64_t n;

	if (read(ws->efd, &n, sizeof(n)) < 0) {
		/* EAGAIN: nothing finished since the last take, or taken already */
	}
	pthread_mutex_lock(&ws->lock);
	list = ws->done;
	ws->done = NULL;
	ws->done_tail = &ws->done;
	for (w = list; w; w = w->next)
		ws->pending--;
	pthread_mutex_unlock(&ws->lock);
	return list;
}

int workers__pending(const struct workers *ws)
{
	struct workers *w = (struct workers *)ws; /* the lock only */
	int n;

	pthread_mutex_lock(&w->lock);
	n = ws->pending;
	pthread_mutex_unlock(&w->lock);
	return n;
}

void workers__stop(struct workers *ws)
{
	int i;

	pthread_mutex_lock(&ws->lock);
	ws->stopping = 1;
	pthread_cond_broadcast(&ws->more);
	pthread_mutex_unlock(&ws->lock);
	for (i = 0; i < ws->n; i++)
		pthread_join(ws->t[i], NULL);
	ws->n = 0;
}

void workers__free(struct workers *ws)
{
	if (!ws)
		return;
	workers__stop(ws);
	if (ws->efd >= 0)
		close(ws->efd);
	pthread_cond_destroy(&ws->more);
	pthread_mutex_destroy(&ws->lock);
	free(ws);
}
