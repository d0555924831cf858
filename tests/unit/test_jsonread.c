// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Unit tests for tools/tail/jsonread.c: the parser nanwatch-tail reads events with. */
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "jsonread.h"

static int setup(void **state)
{
	struct json *j = calloc(1, sizeof(*j));

	if (!j || json__init(j, 16))
		return -1;
	*state = j;
	return 0;
}

static int teardown(void **state)
{
	json__free(*state);
	free(*state);
	return 0;
}

/* Everything the writer can produce comes back through the parser unchanged. */
static void test_parse_roundtrip(void **state)
{
	struct json *j = *state, out;
	const struct jv *arr;
	struct jv *v;
	double d;
	int b;

	json__object_begin(j, NULL);
	json__string(j, "schema", "nanwatch/1");
	json__stringn(j, "name", "q\"\\\n\x01\xc3\xa9\xff\0z", 10);
	json__int(j, "neg", -12);
	json__uint(j, "big", ULLONG_MAX);
	json__double(j, "d", 0.1);
	json__float(j, "f", FLT_TRUE_MIN);
	json__bool(j, "t", 1);
	json__null(j, "n");
	json__array_begin(j, "shape");
	json__int(j, NULL, 16);
	json__int(j, NULL, 32);
	json__array_end(j);
	json__object_end(j);
	v = jv__parse(json__str(j), json__len(j), NULL, 0);
	assert_non_null(v);
	assert_int_equal(jv__type(v), JV_OBJECT);
	assert_string_equal(jv__string(jv__get(v, "schema")), "nanwatch/1");
	assert_int_equal(jv__string_len(jv__get(v, "name")), 12);
	assert_memory_equal(jv__string(jv__get(v, "name")), "q\"\\\n\x01\xc3\xa9\xef\xbf\xbd\0z",
			    12);
	assert_int_equal(jv__number(jv__get(v, "neg"), &d), 0);
	assert_true(d == -12);
	assert_string_equal(jv__number_text(jv__get(v, "big")), "18446744073709551615");
	assert_int_equal(jv__number(jv__get(v, "d"), &d), 0);
	assert_true(d == 0.1);
	assert_int_equal(jv__number(jv__get(v, "f"), &d), 0);
	assert_true((float)d == FLT_TRUE_MIN);
	assert_int_equal(jv__bool(jv__get(v, "t"), &b), 0);
	assert_true(b);
	assert_true(jv__is_null(jv__get(v, "n")));
	arr = jv__get(v, "shape");
	assert_int_equal(jv__len(arr), 2);
	assert_string_equal(jv__number_text(jv__index(arr, 1)), "32");
	/* written back it is the same text, the replacement character now literal */
	assert_int_equal(json__init(&out, 16), 0);
	jv__write(&out, NULL, v);
	assert_string_equal(json__str(&out),
			    "{\"schema\":\"nanwatch/1\",\"name\":\"q\\\"\\\\\\n\\u0001\xc3\xa9"
			    "\xef\xbf\xbd\\u0000z\",\"neg\":-12,\"big\":18446744073709551615,"
			    "\"d\":0.1,\"f\":1e-45,\"t\":true,\"n\":null,\"shape\":[16,32]}");
	json__free(&out);
	jv__free(v);
}

static void test_parse_unicode_escapes(void **state)
{
	const char *text = "[\"\\u00e9\\u20AC\\ud834\\udd1e\\u0000\\/\\b\\f\\n\\r\\t\"]";
	struct jv *v = jv__parse(text, strlen(text), NULL, 0);
	const struct jv *s;

	(void)state;
	assert_non_null(v);
	s = jv__index(v, 0);
	assert_int_equal(jv__string_len(s), 2 + 3 + 4 + 1 + 6);
	assert_memory_equal(jv__string(s), "\xc3\xa9\xe2\x82\xac\xf0\x9d\x84\x9e\0/\b\f\n\r\t", 16);
	jv__free(v);
}

static void test_parse_numbers(void **state)
{
	const char *text = " [ -0 , 1.50 ,1E+2, -12.5e-1, 0, 123456789012345678901234567890 ] ";
	struct jv *v = jv__parse(text, strlen(text), NULL, 0);
	double d;

	(void)state;
	assert_non_null(v);
	assert_int_equal(jv__len(v), 6);
	assert_string_equal(jv__number_text(jv__index(v, 0)), "-0");
	assert_int_equal(jv__number(jv__index(v, 0), &d), 0);
	assert_true(d == 0 && signbit(d));
	assert_string_equal(jv__number_text(jv__index(v, 1)), "1.50");
	assert_int_equal(jv__number(jv__index(v, 2), &d), 0);
	assert_true(d == 100);
	assert_int_equal(jv__number(jv__index(v, 3), &d), 0);
	assert_true(d == -1.25);
	assert_int_equal(jv__number(jv__index(v, 5), &d), 0);
	assert_true(d > 1.2e29 && d < 1.3e29);
	jv__free(v);
}

static void test_parse_accessors(void **state)
{
	const char *text = "{\"a\":1,\"b\":\"s\",\"a\\u0000x\":2,\"c\":[true,false,null],\"d\":{}}";
	struct jv *v = jv__parse(text, strlen(text), NULL, 0);
	const struct jv *a;
	double d;
	int b;

	(void)state;
	assert_non_null(v);
	assert_int_equal(jv__len(v), 5);
	assert_string_equal(jv__key(v, 1), "b");
	assert_null(jv__key(v, 5));
	assert_null(jv__get(v, "missing"));
	a = jv__get(v, "a");
	assert_int_equal(jv__number(a, &d), 0);
	assert_true(d == 1);
	/* wrong types answer NULL / -EINVAL, never a wrong value */
	assert_null(jv__string(a));
	assert_int_equal(jv__bool(a, &b), -EINVAL);
	assert_int_equal(jv__number(jv__get(v, "b"), &d), -EINVAL);
	assert_null(jv__number_text(jv__get(v, "b")));
	assert_false(jv__is_null(a));
	assert_null(jv__get(a, "x"));
	assert_null(jv__index(a, 0));
	assert_int_equal(jv__len(a), 0);
	assert_int_equal(jv__len(jv__get(v, "c")), 3);
	assert_null(jv__index(jv__get(v, "c"), 3));
	assert_true(jv__is_null(jv__index(jv__get(v, "c"), 2)));
	assert_int_equal(jv__type(jv__get(v, "d")), JV_OBJECT);
	assert_int_equal(jv__len(jv__get(v, "d")), 0);
	/* NULL everywhere is safe */
	assert_null(jv__get(NULL, "a"));
	assert_null(jv__string(NULL));
	assert_int_equal(jv__number(NULL, &d), -EINVAL);
	assert_false(jv__is_null(NULL));
	jv__free(v);
	jv__free(NULL);
}

/* Parse must fail with "offset N: ..." naming where. */
static void expect_error(const char *text, size_t len, size_t offset)
{
	char err[128], want[32];
	struct jv *v;

	errno = 0;
	v = jv__parse(text, len, err, sizeof(err));
	if (v)
		fail_msg("parsed, but should not: '%.*s'", (int)len, text);
	assert_int_equal(errno, EINVAL);
	snprintf(want, sizeof(want), "offset %zu: ", offset);
	if (strncmp(err, want, strlen(want)))
		fail_msg("'%.*s': got '%s', want '%s...'", (int)len, text, err, want);
}

#define BAD(lit, off) expect_error(lit, sizeof(lit) - 1, off)

static void test_parse_errors(void **state)
{
	(void)state;
	BAD("", 0);
	BAD("   ", 3);
	BAD("{", 1);
	BAD("[1,]", 3);
	BAD("[1 2]", 3);
	BAD("{\"a\" 1}", 5);
	BAD("{\"a\":1,}", 7);
	BAD("{1:2}", 1);
	BAD("01", 1);
	BAD("1.", 2);
	BAD("1e", 2);
	BAD("-", 1);
	BAD("+1", 0);
	BAD(".5", 0);
	BAD("NaN", 0);
	BAD("tru", 0);
	BAD("nul", 0);
	BAD("\"abc", 4);
	BAD("\"a\x01\"", 2);
	BAD("\"\\x\"", 2);
	BAD("\"\\u12\"", 5);
	BAD("\"\\ud800\"", 7);
	BAD("\"\\ud800\\u0041\"", 13);
	BAD("\"\\udc00\"", 7);
	BAD("\"\xff\"", 1);
	BAD("\"\xe2\x82\"", 1);
	BAD("[1] x", 4);
	BAD("[1]\0", 3);
}

static void test_parse_error_buffer(void **state)
{
	char err[8] = "junk";
	struct jv *v;

	(void)state;
	/* a short buffer is truncated, not overrun; NULL means no message */
	assert_null(jv__parse("[", 1, err, sizeof(err)));
	assert_string_equal(err, "offset ");
	assert_null(jv__parse("[", 1, NULL, 0));
	v = jv__parse("1", 1, err, sizeof(err));
	assert_non_null(v);
	assert_string_equal(err, "");
	jv__free(v);
}

static void test_parse_depth(void **state)
{
	char text[2 * (JV_MAX_DEPTH + 1) + 1];
	struct jv *v;
	int d;

	(void)state;
	for (d = JV_MAX_DEPTH; d <= JV_MAX_DEPTH + 1; d++) {
		memset(text, '[', d);
		memset(text + d, ']', d);
		v = jv__parse(text, 2 * d, NULL, 0);
		if (d <= JV_MAX_DEPTH)
			assert_non_null(v);
		else
			assert_null(v);
		jv__free(v);
	}
	expect_error("[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[", 33, 32);
}

/* The length bounds the parse: text need not be NUL-terminated. */
static void test_parse_length_bound(void **state)
{
	const char text[] = "[1,2]xyz";
	struct jv *v = jv__parse(text, 5, NULL, 0);

	(void)state;
	assert_non_null(v);
	assert_int_equal(jv__len(v), 2);
	jv__free(v);
	assert_null(jv__parse(text, 4, NULL, 0));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_parse_roundtrip, setup, teardown),
		cmocka_unit_test(test_parse_unicode_escapes),
		cmocka_unit_test(test_parse_numbers),
		cmocka_unit_test(test_parse_accessors),
		cmocka_unit_test(test_parse_errors),
		cmocka_unit_test(test_parse_error_buffer),
		cmocka_unit_test(test_parse_depth),
		cmocka_unit_test(test_parse_length_bound),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
