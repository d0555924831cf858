// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The bounded line queue of a sink (see lineq.h): one flat buffer, compacted on demand. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "output/lineq.h"

void lineq__init(struct lineq *q, size_t limit)
{
	memset(q, 0, sizeof(*q));
	q->limit = limit;
}

void lineq__free(struct lineq *q)
{
	free(q->buf);
	memset(q, 0, sizeof(*q));
}

/* Room for need more bytes after the queued ones. */
static int reserve(struct lineq *q, size_t need)
{
	size_t want = q->len + need, size;
	char *b;

	if (q->head + want <= q->alloc)
		return 0;
	if (q->head) {
		memmove(q->buf, q->buf + q->head, q->len);
		q->head = 0;
	}
	if (want <= q->alloc)
		return 0;
	size = q->alloc ? q->alloc : 4096;
	while (size < want)
		size *= 2;
	b = realloc(q->buf, size);
	if (!b)
		return -ENOMEM;
	q->buf = b;
	q->alloc = size;
	return 0;
}

static int append(struct lineq *q, const char *data, size_t len)
{
	int err = reserve(q, len + 1);

	if (err)
		return err;
	memcpy(q->buf + q->head + q->len, data, len);
	q->buf[q->head + q->len + len] = '\n';
	q->len += len + 1;
	return 0;
}

int lineq__push_line(struct lineq *q, const char *line, size_t len)
{
	if (len >= q->limit || q->len > q->limit - len - 1)
		return -ENOBUFS;
	return append(q, line, len);
}

int lineq__push_tail(struct lineq *q, const char *line, size_t len, size_t done)
{
	if (done > len)
		return -EINVAL;
	return append(q, line + done, len - done);
}

const char *lineq__peek(const struct lineq *q, size_t *len)
{
	*len = q->len;
	return q->len ? q->buf + q->head : NULL;
}

size_t lineq__consume(struct lineq *q, size_t n)
{
	const char *p, *end;
	size_t lines = 0;

	if (n > q->len)
		n = q->len;
	p = q->buf + q->head;
	end = p + n;
	while (p < end && (p = memchr(p, '\n', end - p))) {
		lines++;
		p++;
	}
	q->head += n;
	q->len -= n;
	if (!q->len)
		q->head = 0;
	return lines;
}

void lineq__clear(struct lineq *q)
{
	q->head = 0;
	q->len = 0;
}
