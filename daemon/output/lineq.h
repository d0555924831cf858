/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * A bounded queue of output lines for one sink: what its reader has not
 * taken yet. Whole lines are queued or dropped, never cut; the unwritten end
 * of a line already begun is always kept, so a reader never sees half a line
 * followed by another.
 */
#ifndef __LINEQ_H
#define __LINEQ_H

#include <stddef.h>

struct lineq {
	char *buf;
	size_t head;  /* first queued byte */
	size_t len;   /* bytes queued */
	size_t alloc; /* bytes of buf */
	size_t limit; /* bytes new lines may fill */
};

void lineq__init(struct lineq *q, size_t limit);
void lineq__free(struct lineq *q);

/* Queue line and a newline: 0, -ENOBUFS when it would pass the limit, or -ENOMEM. */
int lineq__push_line(struct lineq *q, const char *line, size_t len);

/*
 * Queue the unwritten end of a line: line[done..len) and the newline. Taken
 * whatever the limit (one line may pass it); 0 or -ENOMEM.
 */
int lineq__push_tail(struct lineq *q, const char *line, size_t len, size_t done);

/* The queued bytes, contiguous; NULL when empty. */
const char *lineq__peek(const struct lineq *q, size_t *len);

/* n bytes from the front were written; returns how many lines they completed. */
size_t lineq__consume(struct lineq *q, size_t n);

static inline size_t lineq__len(const struct lineq *q)
{
	return q->len;
}

void lineq__clear(struct lineq *q);

#endif /* __LINEQ_H */
