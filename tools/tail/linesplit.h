/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * An input stream cut into lines in a buffer of fixed size, for nanwatch-tail and
 * nanwatch-collect: a line longer than the limit is skipped to its newline (its bytes are
 * never held), named once to the caller and counted, and the lines after it are read as
 * before. Memory stays at the limit whatever the input.
 */
#ifndef __LINESPLIT_H
#define __LINESPLIT_H

#include <stddef.h>

/* as the daemon's JSON_MAX_CAP: a longer line is not an event */
#define LINESPLIT_MAX (1u << 20)

struct linesplit {
	char *buf; /* max + 1 bytes: a line of max bytes and its newline */
	size_t len, max;
	int skipping;		    /* inside a line longer than max */
	unsigned long lineno;	    /* of the line last handed over or skipped, from 1 */
	unsigned long long skipped; /* lines longer than max */
};

/* 0 or -ENOMEM. */
int linesplit__init(struct linesplit *ls, size_t max);
void linesplit__free(struct linesplit *ls);

/* The input starts anew (a file truncated or replaced): nothing held, lines counted from 1. */
void linesplit__reset(struct linesplit *ls);

/* Where the next read goes, and *room: how many bytes it may take (never 0). */
char *linesplit__space(struct linesplit *ls, size_t *room);

/*
 * Called with each whole line (len bytes, no newline, NUL-terminated: line[len] is 0), and
 * with line NULL once for each line longer than max, when it is found; ls->lineno is its
 * number. Non-zero stops the feed.
 */
typedef int (*linesplit_fn)(void *ctx, const char *line, size_t len);

/*
 * n bytes were read into linesplit__space: hand over the lines they complete; at_end (the
 * input ended) the rest too. 0, or what fn returned to stop.
 */
int linesplit__feed(struct linesplit *ls, size_t n, int at_end, linesplit_fn fn, void *ctx);

#endif /* __LINESPLIT_H */
