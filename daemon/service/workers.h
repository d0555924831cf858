/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * A pool of threads for the work on one process that may take long (reading its files,
 * loading and attaching the probes, detaching them), so that the service's loop never
 * waits on a target. Jobs are the caller's structs: queued, run once on some thread, and
 * handed back in the loop's thread, whose poll sees workers__fd turn readable.
 */
#ifndef __WORKERS_H
#define __WORKERS_H

#include <stddef.h>

struct work {
	void (*run)(struct work *w); /* on a worker thread */
	struct work *next;	     /* the pool's, while queued or done */
};

struct workers;

/* n threads; NULL with errno set and err written. */
struct workers *workers__new(int n, char *err, size_t errlen);

/* Let the job run on the next free thread. */
void workers__submit(struct workers *ws, struct work *w);

/* Readable while finished jobs wait to be taken. */
int workers__fd(const struct workers *ws);

/* The jobs finished since the last call, in the order they finished (linked by next). */
struct work *workers__take(struct workers *ws);

/* Jobs submitted and not yet taken back. */
int workers__pending(const struct workers *ws);

/* Run what is queued, end the threads; jobs finished and not taken are the caller's to free
 * after workers__take, which still works until workers__free. */
void workers__stop(struct workers *ws);
void workers__free(struct workers *ws); /* stops first; accepts NULL */

#endif /* __WORKERS_H */
