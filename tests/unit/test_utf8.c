// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Unit tests for daemon/util/utf8.c: checking, encoding, and text made safe for a terminal. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "util/utf8.h"

static void test_check(void **state)
{
	(void)state;
	assert_int_equal(utf8__check((const unsigned char *)"a", 1), 1);
	assert_int_equal(utf8__check((const unsigned char *)"\xc3\xa9", 2), 2);
	assert_int_equal(utf8__check((const unsigned char *)"\xe2\x82\xac", 3), 3);
	assert_int_equal(utf8__check((const unsigned char *)"\xf0\x9d\x84\x9e", 4), 4);
	assert_int_equal(utf8__check((const unsigned char *)"\x80", 1), -1);
	assert_int_equal(utf8__check((const unsigned char *)"\xc0\x80", 2), -1);     /* overlong */
	assert_int_equal(utf8__check((const unsigned char *)"\xed\xa0\x80", 3), -1); /* surrogate */
	assert_int_equal(utf8__check((const unsigned char *)"\xf4\x90\x80\x80", 4), -1);
	assert_int_equal(utf8__check((const unsigned char *)"\xe2\x82", 2), -2); /* cut short */
	assert_int_equal(utf8__check((const unsigned char *)"\xf0\x9d\x84x", 4), -3);
}

/* Every code point encodes to what utf8__check takes back as one sequence of that length. */
static void test_encode_all(void **state)
{
	char out[4];
	uint32_t cp;
	size_t n;

	(void)state;
	for (cp = 0; cp < 0x110000; cp++) {
		n = utf8__encode(out, sizeof(out), cp);
		if (cp >= 0xd800 && cp < 0xe000) {
			assert_int_equal(n, 3);
			assert_memory_equal(out, "\xef\xbf\xbd", 3); /* U+FFFD */
			continue;
		}
		assert_int_equal(n, cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4);
		assert_int_equal(utf8__check((const unsigned char *)out, n), (int)n);
	}
	assert_int_equal(utf8__encode(out, sizeof(out), 0x110000), 0);
}

static void test_encode_room(void **state)
{
	char out[4] = "xxx";

	(void)state;
	assert_int_equal(utf8__encode(out, 0, 'a'), 0);
	assert_int_equal(utf8__encode(out, 2, 0x20ac), 0);
	assert_int_equal(utf8__encode(out, 3, 0x1d11e), 0);
	assert_memory_equal(out, "xxx", 3); /* nothing written when it does not fit */
	assert_int_equal(utf8__encode(out, 3, 0x20ac), 3);
	assert_memory_equal(out, "\xe2\x82\xac", 3);
}

static void safe(const char *in, size_t n, const char *want)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	assert_non_null(f);
	utf8__write_safe(f, in, n);
	assert_int_equal(fclose(f), 0);
	assert_string_equal(buf, want);
	free(buf);
}

static void test_write_safe(void **state)
{
	(void)state;
	safe("plain caf\xc3\xa9", 11, "plain caf\xc3\xa9");
	safe("\x1b[31mred\x7f", 9, "?[31mred?");
	safe("a\xc2\x9b"
	     "b",
	     4, "a?b"); /* C1 CSI */
	safe("\xe2\x80\xae"
	     "abc",
	     6, "?abc");			     /* RLO */
	safe("\xe2\x81\xa6x\xe2\x81\xa9", 7, "?x?"); /* LRI .. PDI */
	safe("\xff\xfe", 2, "??");
	safe("nul\0x", 5, "nul?x");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_check),
		cmocka_unit_test(test_encode_all),
		cmocka_unit_test(test_encode_room),
		cmocka_unit_test(test_write_safe),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
