// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The sink's bounded line queue: whole lines or none, the limit, and lines counted as written. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include "output/lineq.h"

static void test_limit_whole_lines(void **state)
{
	struct lineq q;
	const char *p;
	size_t n;

	(void)state;
	lineq__init(&q, 10);
	assert_int_equal(lineq__push_line(&q, "abcd", 4), 0);	 /* 5 bytes */
	assert_int_equal(lineq__push_line(&q, "efgh", 4), 0);	 /* 10: exactly the limit */
	assert_int_equal(lineq__push_line(&q, "", 0), -ENOBUFS); /* even a bare newline */
	assert_int_equal(lineq__len(&q), 10);
	p = lineq__peek(&q, &n);
	assert_int_equal(n, 10);
	assert_memory_equal(p, "abcd\nefgh\n", 10);
	lineq__free(&q);
}

static void test_line_longer_than_limit(void **state)
{
	struct lineq q;
	size_t n;

	(void)state;
	lineq__init(&q, 8);
	assert_int_equal(lineq__push_line(&q, "12345678", 8), -ENOBUFS);
	assert_int_equal(lineq__push_line(&q, "1234567", 7), 0);
	assert_null(lineq__peek(&(struct lineq){0}, &n));
	assert_int_equal(n, 0);
	lineq__free(&q);
}

static void test_consume_counts_lines(void **state)
{
	struct lineq q;
	const char *p;
	size_t n;

	(void)state;
	lineq__init(&q, 100);
	assert_int_equal(lineq__push_line(&q, "one", 3), 0);
	assert_int_equal(lineq__push_line(&q, "two", 3), 0);
	assert_int_equal(lineq__consume(&q, 3), 0); /* "one" without its newline */
	assert_int_equal(lineq__consume(&q, 1), 1);
	assert_int_equal(lineq__consume(&q, 2), 0);
	p = lineq__peek(&q, &n);
	assert_int_equal(n, 2);
	assert_memory_equal(p, "o\n", 2);
	assert_int_equal(lineq__consume(&q, 50), 1); /* more than queued: what there is */
	assert_int_equal(lineq__len(&q), 0);
	assert_null(lineq__peek(&q, &n));
	lineq__free(&q);
}

/* The end of a line the reader has begun is kept even past the limit; new lines are not. */
static void test_tail_passes_limit(void **state)
{
	struct lineq q;
	const char *p;
	size_t n;

	(void)state;
	lineq__init(&q, 6);
	assert_int_equal(lineq__push_line(&q, "full!", 5), 0);
	assert_int_equal(lineq__push_tail(&q, "0123456789", 10, 3), 0);
	assert_int_equal(lineq__push_tail(&q, "xy", 2, 2), 0); /* only its newline was left */
	assert_int_equal(lineq__push_tail(&q, "xy", 2, 3), -EINVAL);
	p = lineq__peek(&q, &n);
	assert_int_equal(n, 6 + 8 + 1);
	assert_memory_equal(p, "full!\n3456789\n\n", n);
	assert_int_equal(lineq__push_line(&q, "z", 1), -ENOBUFS);
	assert_int_equal(lineq__consume(&q, n), 3);
	assert_int_equal(lineq__push_line(&q, "z", 1), 0); /* drained: room again */
	lineq__free(&q);
}

/*
 * A writer that takes a few bytes at a time while lines keep coming: what it
 * receives is exactly the accepted lines, in order, each whole; the counts of
 * lines written and dropped add up to the lines offered.
 */
static void test_slow_reader_stream(void **state)
{
	char out[1 << 16], line[64], want[1 << 16];
	size_t olen = 0, wlen = 0, written = 0, dropped = 0, n;
	unsigned seed = 7;
	struct lineq q;
	const char *p;
	int i;

	(void)state;
	lineq__init(&q, 200);
	for (i = 0; i < 2000; i++) {
		int len = snprintf(line, sizeof(line), "{\"seq\":%d,\"pad\":\"%.*s\"}", i,
				   (int)(i % 23), "xxxxxxxxxxxxxxxxxxxxxxxxxxxx");

		if (lineq__push_line(&q, line, len)) {
			dropped++;
		} else {
			memcpy(want + wlen, line, len);
			want[wlen + len] = '\n';
			wlen += len + 1;
		}
		seed = seed * 1103515245 + 12345;
		p = lineq__peek(&q, &n);
		n = p ? (seed >> 16) % (n + 1) / 2 : 0; /* a reader slower than the writer */
		if (n) {
			memcpy(out + olen, p, n);
			olen += n;
			written += lineq__consume(&q, n);
		}
	}
	p = lineq__peek(&q, &n);
	if (p) {
		memcpy(out + olen, p, n);
		olen += n;
		written += lineq__consume(&q, n);
	}
	assert_true(dropped > 0);
	assert_int_equal(written + dropped, 2000);
	assert_int_equal(olen, wlen);
	assert_memory_equal(out, want, wlen);
	assert_int_equal(q.alloc <= 4096, 1); /* compacted, not grown */
	lineq__free(&q);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_limit_whole_lines),
		cmocka_unit_test(test_line_longer_than_limit),
		cmocka_unit_test(test_consume_counts_lines),
		cmocka_unit_test(test_tail_passes_limit),
		cmocka_unit_test(test_slow_reader_stream),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
