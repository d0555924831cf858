// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Lines of bounded length from a stream (see linesplit.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "linesplit.h"

int linesplit__init(struct linesplit *ls, size_t max)
{
	memset(ls, 0, sizeof(*ls));
	ls->max = max;
	ls->buf = malloc(max + 1);
	return ls->buf ? 0 : -ENOMEM;
}

void linesplit__free(struct linesplit *ls)
{
	free(ls->buf);
	ls->buf = NULL;
}

void linesplit__reset(struct linesplit *ls)
{
	ls->len = 0;
	ls->skipping = 0;
	ls->lineno = 0;
}

char *linesplit__space(struct linesplit *ls, size_t *room)
{
	*room = ls->max + 1 - ls->len;
	return ls->buf + ls->len;
}

static int hand_over(struct linesplit *ls, const char *line, size_t len, linesplit_fn fn, void *ctx)
{
	ls->lineno++;
	return fn(ctx, line, len);
}

/* The buffer is full without a newline: the line is too long, its bytes so far let go. */
static int too_long(struct linesplit *ls, linesplit_fn fn, void *ctx)
{
	ls->len = 0;
	if (ls->skipping)
		return 0;
	ls->skipping = 1;
	ls->skipped++;
	return hand_over(ls, NULL, 0, fn, ctx);
}

int linesplit__feed(struct linesplit *ls, size_t n, int at_end, linesplit_fn fn, void *ctx)
{
	size_t start = 0, k;
	char *nl;
	int ret = 0;

	ls->len += n;
	while (!ret && (nl = memchr(ls->buf + start, '\n', ls->len - start))) {
		k = nl - (ls->buf + start);
		*nl = 0; /* a line is handed over NUL-terminated, as getline's were */
		/* the end of a line too long ends the skip: it was counted when it was found */
		if (!ls->skipping)
			ret = hand_over(ls, ls->buf + start, k, fn, ctx);
		ls->skipping = 0;
		start += k + 1;
	}
	memmove(ls->buf, ls->buf + start, ls->len - start);
	ls->len -= start;
	if (!ret && ls->skipping)
		ls->len = 0; /* more of the line too long: never held */
	if (!ret && ls->len > ls->max)
		ret = too_long(ls, fn, ctx);
	if (!ret && at_end && ls->len && !ls->skipping) {
		ls->buf[ls->len] = 0; /* len <= max: room for it */
		ret = hand_over(ls, ls->buf, ls->len, fn, ctx);
	}
	if (at_end) {
		ls->len = 0;
		ls->skipping = 0;
	}
	return ret;
}
