/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * One watched process's session on a thread of its own, from its attach to its detach: its
 * findings, its periodic work and its end. Whatever the target does to the reads of its
 * memory and files (a huge map, a read that blocks), only its own thread waits; the service's
 * loop and every other target go on. The loop asks a runner to stop, reads its counts, and
 * takes it back once it has detached.
 */
#ifndef __RUNNER_H
#define __RUNNER_H

#include <stddef.h>
#include "session/session.h"

struct runner;

/*
 * Run attached session s (the runner owns it from now) on a new thread; done_fd (an eventfd)
 * is written once the session has detached and been freed. NULL with errno set, s untouched.
 */
struct runner *runner__start(struct session *s, int done_fd);

/* Ask the runner to detach now with reason why (no wait); a runner that ended already stays. */
void runner__stop(struct runner *r, enum session_stop why);

/* Whether the session has detached and been freed (runner__free does not wait then). */
int runner__done(struct runner *r);

/* The session's counts as of its last tick (final once done). */
void runner__stats(struct runner *r, struct session_stats *st);

/* Why the watch ended and, for SESSION_ERROR, the negative errno; once done. */
enum session_stop runner__reason(const struct runner *r);
int runner__error(const struct runner *r);

/* Wait for the thread (ask it to stop first, or have it done) and free; accepts NULL. */
void runner__free(struct runner *r);

#endif /* __RUNNER_H */
