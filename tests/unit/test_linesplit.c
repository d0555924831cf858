// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Unit tests for tools/tail/linesplit.c, how nanwatch-tail and nanwatch-collect cut their
 * input: lines whole whatever the reads, a line too long skipped (named once, counted) in a
 * buffer that never grows, the lines after it read as before.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "linesplit.h"

struct got {
	char text[4096]; /* the lines seen, each followed by '|'; a skipped one as "<N>|" */
	size_t len;
	const struct linesplit *ls;
	int stop_at; /* stop after this many lines; 0: never */
	int n;
};

static int on_line(void *ctx, const char *line, size_t len)
{
	struct got *g = ctx;

	if (line)
		assert_int_equal(line[len], 0);
	if (line)
		g->len += snprintf(g->text + g->len, sizeof(g->text) - g->len, "%.*s|", (int)len,
				   line);
	else
		g->len += snprintf(g->text + g->len, sizeof(g->text) - g->len, "<%lu>|",
				   g->ls->lineno);
	return ++g->n == g->stop_at ? -EINTR : 0;
}

/* Feed text in reads of at most step bytes (what the room allows), then the end. */
static int feed(struct linesplit *ls, struct got *g, const char *text, size_t len, size_t step)
{
	size_t room, k, off = 0;
	char *to;
	int ret;

	while (off < len) {
		to = linesplit__space(ls, &room);
		assert_true(room > 0 && room <= ls->max + 1);
		k = len - off < step ? len - off : step;
		k = k < room ? k : room;
		memcpy(to, text + off, k);
		off += k;
		ret = linesplit__feed(ls, k, 0, on_line, g);
		if (ret)
			return ret;
		assert_true(ls->len <= ls->max); /* never more than one line held */
	}
	return linesplit__feed(ls, 0, 1, on_line, g);
}

static void test_whole_lines(void **state)
{
	static const char text[] = "one\ntwo\n\nthree\r\nlast";
	struct linesplit ls;
	size_t step;

	(void)state;
	for (step = 1; step <= sizeof(text); step++) {
		struct got g = {.ls = &ls};

		assert_int_equal(linesplit__init(&ls, 16), 0);
		assert_int_equal(feed(&ls, &g, text, sizeof(text) - 1, step), 0);
		assert_string_equal(g.text, "one|two||three\r|last|");
		assert_int_equal(ls.lineno, 5);
		assert_int_equal(ls.skipped, 0);
		linesplit__free(&ls);
	}
}

/*
 * Lines longer than max among short ones, one of exactly max bytes (kept): each long one is
 * named once (with its number) however it is read, and what follows is read on.
 */
static void test_long_lines(void **state)
{
	char text[4096], *p = text;
	struct linesplit ls;
	size_t step;

	(void)state;
	p += sprintf(p, "a\n");
	memset(p, 'x', 100), p += 100, *p++ = '\n'; /* line 2: too long */
	p += sprintf(p, "b\n");
	memset(p, 'y', 16), p += 16, *p++ = '\n'; /* line 4: exactly max */
	memset(p, 'z', 17), p += 17, *p++ = '\n'; /* line 5: one byte too many */
	memset(p, 'w', 40), p += 40;		  /* line 6: too long, at the end without newline */
	for (step = 1; step <= 64; step++) {
		struct got g = {.ls = &ls};

		assert_int_equal(linesplit__init(&ls, 16), 0);
		assert_int_equal(feed(&ls, &g, text, p - text, step), 0);
		assert_string_equal(g.text, "a|<2>|b|yyyyyyyyyyyyyyyy|<5>|<6>|");
		assert_int_equal(ls.skipped, 3);
		assert_int_equal(ls.lineno, 6);
		linesplit__free(&ls);
	}
}

/* A callback that stops the feed: its value comes back, no line after it is handed over. */
static void test_stop(void **state)
{
	struct linesplit ls;
	struct got g = {.ls = &ls, .stop_at = 2};

	(void)state;
	assert_int_equal(linesplit__init(&ls, 16), 0);
	assert_int_equal(feed(&ls, &g, "1\n2\n3\n", 6, 6), -EINTR);
	assert_string_equal(g.text, "1|2|");
	linesplit__free(&ls);
}

/* After a reset (a file truncated), nothing held and lines counted from 1 again. */
static void test_reset(void **state)
{
	struct linesplit ls;
	struct got g = {.ls = &ls};
	size_t room;
	char *to;

	(void)state;
	assert_int_equal(linesplit__init(&ls, 16), 0);
	to = linesplit__space(&ls, &room);
	memcpy(to, "x\nhalf", 6);
	assert_int_equal(linesplit__feed(&ls, 6, 0, on_line, &g), 0);
	linesplit__reset(&ls);
	assert_int_equal(feed(&ls, &g, "new\n", 4, 4), 0);
	assert_string_equal(g.text, "x|new|");
	assert_int_equal(ls.lineno, 1);
	linesplit__free(&ls);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_whole_lines),
		cmocka_unit_test(test_long_lines),
		cmocka_unit_test(test_stop),
		cmocka_unit_test(test_reset),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
