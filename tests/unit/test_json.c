// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Unit tests for daemon/output/json.c: the event-line writer (read back with the parser). */
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

#include "output/json.h"
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

/* {"s":<val as n bytes>} */
static const char *one_string(struct json *j, const char *val, size_t n)
{
	json__reset(j);
	json__object_begin(j, NULL);
	json__stringn(j, "s", val, n);
	json__object_end(j);
	return json__str(j);
}

#define STR(lit) one_string(j, lit, sizeof(lit) - 1)

static void test_escape_quotes_backslash(void **state)
{
	struct json *j = *state;

	assert_string_equal(STR("a\"b\\c/d"), "{\"s\":\"a\\\"b\\\\c/d\"}");
	assert_string_equal(STR(""), "{\"s\":\"\"}");
}

static void test_escape_control(void **state)
{
	struct json *j = *state;

	assert_string_equal(STR("\n\t\r\b\f"), "{\"s\":\"\\n\\t\\r\\b\\f\"}");
	assert_string_equal(STR("\x01\x1f\x0b"), "{\"s\":\"\\u0001\\u001f\\u000b\"}");
	assert_string_equal(STR("a\0b"), "{\"s\":\"a\\u0000b\"}");
	/* DEL is not a JSON control character */
	assert_string_equal(STR("\x7f"), "{\"s\":\"\x7f\"}");
}

static void test_utf8_passthrough(void **state)
{
	struct json *j = *state;

	/* 2-, 3- and 4-byte sequences at the edges of their ranges */
	assert_string_equal(STR("caf\xc3\xa9 \xe2\x82\xac \xf0\x9d\x84\x9e"),
			    "{\"s\":\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9d\x84\x9e\"}");
	assert_string_equal(STR("\xc2\x80\xdf\xbf\xe0\xa0\x80\xef\xbf\xbf\xf4\x8f\xbf\xbf"),
			    "{\"s\":\"\xc2\x80\xdf\xbf\xe0\xa0\x80\xef\xbf\xbf\xf4\x8f\xbf\xbf\"}");
}

static void test_utf8_invalid(void **state)
{
	struct json *j = *state;

	assert_string_equal(STR("a\xff"
				"b"),
			    "{\"s\":\"a\\ufffdb\"}");
	/* a truncated sequence is one maximal invalid prefix: one U+FFFD */
	assert_string_equal(STR("\xe2\x82"
				"x"),
			    "{\"s\":\"\\ufffdx\"}");
	assert_string_equal(STR("\xe2\x82"), "{\"s\":\"\\ufffd\"}");
	/* overlong, surrogate and beyond-U+10FFFF encodings: every byte replaced */
	assert_string_equal(STR("\xc0\xaf"), "{\"s\":\"\\ufffd\\ufffd\"}");
	assert_string_equal(STR("\xed\xa0\x80"), "{\"s\":\"\\ufffd\\ufffd\\ufffd\"}");
	assert_string_equal(STR("\xf4\x90\x80\x80"), "{\"s\":\"\\ufffd\\ufffd\\ufffd\\ufffd\"}");
	assert_string_equal(STR("\xe0\x80\x80"), "{\"s\":\"\\ufffd\\ufffd\\ufffd\"}");
	/* stray continuation, then a valid character right after */
	assert_string_equal(STR("\x80\xc3\xa9"), "{\"s\":\"\\ufffd\xc3\xa9\"}");
}

static void test_key_escaped(void **state)
{
	struct json *j = *state;

	json__object_begin(j, NULL);
	json__int(j, "k\"\n\xff", 1);
	json__object_end(j);
	assert_string_equal(json__str(j), "{\"k\\\"\\n\\ufffd\":1}");
}

static void test_string_null(void **state)
{
	struct json *j = *state;

	json__object_begin(j, NULL);
	json__string(j, "a", NULL);
	json__stringn(j, "b", NULL, 5);
	json__null(j, "c");
	json__bool(j, "d", 1);
	json__bool(j, "e", 0);
	json__object_end(j);
	assert_string_equal(json__str(j),
			    "{\"a\":null,\"b\":null,\"c\":null,\"d\":true,\"e\":false}");
}

static void test_integers(void **state)
{
	struct json *j = *state;

	json__array_begin(j, NULL);
	json__int(j, NULL, 0);
	json__int(j, NULL, -1);
	json__int(j, NULL, LLONG_MIN);
	json__int(j, NULL, LLONG_MAX);
	json__uint(j, NULL, ULLONG_MAX);
	json__uint(j, NULL, 42);
	json__array_end(j);
	assert_string_equal(json__str(j), "[0,-1,-9223372036854775808,9223372036854775807,"
					  "18446744073709551615,42]");
}

static const char *one_double(struct json *j, double v)
{
	json__reset(j);
	json__double(j, NULL, v);
	return json__str(j);
}

static const char *one_float(struct json *j, float v)
{
	json__reset(j);
	json__float(j, NULL, v);
	return json__str(j);
}

static void test_double_shortest(void **state)
{
	struct json *j = *state;

	assert_string_equal(one_double(j, 0.1), "0.1");
	assert_string_equal(one_double(j, 1.0 / 3), "0.3333333333333333");
	assert_string_equal(one_double(j, 100), "100.0");
	assert_string_equal(one_double(j, -2.5), "-2.5");
	assert_string_equal(one_double(j, 0.0), "0.0");
	assert_string_equal(one_double(j, -0.0), "-0.0");
	assert_string_equal(one_double(j, 1e21), "1e+21");
	assert_string_equal(one_double(j, 1e16), "10000000000000000.0");
	assert_string_equal(one_double(j, 1e17), "1e+17");
	assert_string_equal(one_double(j, 123456789), "123456789.0");
	assert_string_equal(one_double(j, -1.25e8), "-125000000.0");
	assert_string_equal(one_double(j, 1.2345e16), "12345000000000000.0");
	/* a loss of 4.6e16 stays a float for readers that type numbers by their text */
	assert_string_equal(one_double(j, 4.627244863874662e16), "46272448638746620.0");
	assert_string_equal(one_double(j, 1e-5), "1e-5");
	assert_string_equal(one_double(j, 1.5e-7), "1.5e-7");
	assert_string_equal(one_double(j, 0.0001), "0.0001");
	assert_string_equal(one_double(j, 5e-324), "5e-324");
	assert_string_equal(one_double(j, DBL_MAX), "1.7976931348623157e+308");
	assert_string_equal(one_double(j, DBL_MIN), "2.2250738585072014e-308");
	assert_string_equal(one_double(j, NAN), "null");
	assert_string_equal(one_double(j, INFINITY), "null");
	assert_string_equal(one_double(j, -INFINITY), "null");
}

static void test_float_shortest(void **state)
{
	struct json *j = *state;

	assert_string_equal(one_float(j, FLT_TRUE_MIN), "1e-45");
	assert_string_equal(one_float(j, FLT_MAX), "3.4028235e+38");
	assert_string_equal(one_float(j, -FLT_MAX), "-3.4028235e+38");
	assert_string_equal(one_float(j, FLT_MIN), "1.1754944e-38");
	assert_string_equal(one_float(j, 0.1f), "0.1");
	assert_string_equal(one_float(j, 65504.0f), "65504.0");
	assert_string_equal(one_float(j, 1e8f), "100000000.0");
	assert_string_equal(one_float(j, 1e9f), "1e+9");
	/* 123450000 is not a float: the nearest one prints as the shorter decimal */
	assert_string_equal(one_float(j, 1.2345e8f), "123450000.0");
	assert_string_equal(one_float(j, 1.0f / 3), "0.33333334");
	assert_string_equal(one_float(j, -0.0f), "-0.0");
	assert_string_equal(one_float(j, NAN), "null");
	assert_string_equal(one_float(j, -INFINITY), "null");
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t rng(void)
{
	/* xorshift64*: deterministic, so a failure reproduces */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dULL;
}

/* Random finite bit patterns written as a JSON array, read back bit for bit. */
static void test_double_roundtrip_random(void **state)
{
	enum {
		N = 20000
	};
	struct json *j = *state;
	double vals[N];
	struct jv *v;
	double got;
	uint64_t b;
	int i;

	json__array_begin(j, NULL);
	for (i = 0; i < N; i++) {
		do {
			b = rng();
			memcpy(&vals[i], &b, sizeof(b));
		} while (!isfinite(vals[i]));
		json__double(j, NULL, vals[i]);
	}
	json__array_end(j);
	assert_non_null(json__str(j));
	v = jv__parse(json__str(j), json__len(j), NULL, 0);
	assert_non_null(v);
	assert_int_equal(jv__len(v), N);
	for (i = 0; i < N; i++) {
		assert_int_equal(jv__number(jv__index(v, i), &got), 0);
		assert_memory_equal(&got, &vals[i], sizeof(got));
	}
	jv__free(v);
}

static void test_float_roundtrip_random(void **state)
{
	struct json *j = *state;
	uint32_t b;
	float f;
	int i;

	for (i = 0; i < 20000; i++) {
		do {
			b = (uint32_t)rng();
			memcpy(&f, &b, sizeof(f));
		} while (!isfinite(f));
		json__reset(j);
		json__float(j, NULL, f);
		assert_non_null(json__str(j));
		assert_true(strtof(json__str(j), NULL) == f);
		assert_true(signbit(strtof(json__str(j), NULL)) == signbit(f));
		assert_true(json__len(j) <= 15);
		assert_non_null(strpbrk(json__str(j), ".e"));
	}
}

static void test_nesting_commas(void **state)
{
	struct json *j = *state;

	json__object_begin(j, NULL);
	json__array_begin(j, "a");
	json__int(j, NULL, 1);
	json__int(j, NULL, 2);
	json__object_begin(j, NULL);
	json__array_begin(j, "b");
	json__array_end(j);
	json__object_end(j);
	json__array_begin(j, NULL);
	json__array_end(j);
	json__array_end(j);
	json__object_begin(j, "c");
	json__object_end(j);
	json__string(j, "d", "x");
	json__object_end(j);
	assert_string_equal(json__str(j), "{\"a\":[1,2,{\"b\":[]},[]],\"c\":{},\"d\":\"x\"}");
	assert_int_equal(j->depth, 0);
	assert_int_equal(json__len(j), strlen(json__str(j)));
}

static void test_misuse_key_in_array(void **state)
{
	struct json *j = *state;

	json__array_begin(j, NULL);
	json__int(j, "k", 1);
	assert_int_equal(j->err, -EINVAL);
	assert_null(json__str(j));
	/* sticky: later calls change nothing */
	json__array_end(j);
	assert_int_equal(j->err, -EINVAL);
	assert_int_equal(json__len(j), 0);
}

static void test_misuse_missing_key(void **state)
{
	struct json *j = *state;

	json__object_begin(j, NULL);
	json__int(j, NULL, 1);
	assert_int_equal(j->err, -EINVAL);
	json__reset(j);
	json__object_begin(j, "top");
	assert_int_equal(j->err, -EINVAL);
}

static void test_misuse_unbalanced(void **state)
{
	struct json *j = *state;

	json__object_end(j);
	assert_int_equal(j->err, -EINVAL);
	json__reset(j);
	json__object_begin(j, NULL);
	json__array_end(j);
	assert_int_equal(j->err, -EINVAL);
	json__reset(j);
	json__int(j, NULL, 1);
	json__int(j, NULL, 2);
	assert_int_equal(j->err, -EINVAL);
}

static void test_depth_limit(void **state)
{
	struct json *j = *state;
	int i;

	for (i = 0; i < JSON_MAX_DEPTH; i++)
		json__array_begin(j, NULL);
	assert_int_equal(j->err, 0);
	for (i = 0; i < JSON_MAX_DEPTH; i++)
		json__array_end(j);
	assert_int_equal(j->err, 0);
	assert_int_equal(json__len(j), 2 * JSON_MAX_DEPTH);
	json__reset(j);
	for (i = 0; i <= JSON_MAX_DEPTH; i++)
		json__array_begin(j, NULL);
	assert_int_equal(j->err, -EOVERFLOW);
}

static void test_growth(void **state)
{
	struct json *j = *state;
	size_t n = 300000;
	char *big = malloc(n);

	assert_non_null(big);
	memset(big, 'x', n);
	assert_int_equal(j->cap, 64);
	json__array_begin(j, NULL);
	json__stringn(j, NULL, big, n);
	json__array_end(j);
	assert_int_equal(j->err, 0);
	assert_int_equal(json__len(j), n + 4);
	assert_true(j->cap >= n + 5 && j->cap <= JSON_MAX_CAP);
	assert_int_equal(strlen(json__str(j)), n + 4);
	free(big);
}

static void test_growth_limit(void **state)
{
	struct json *j = *state;
	size_t n = JSON_MAX_CAP / 2;
	char *big = malloc(n);

	assert_non_null(big);
	memset(big, 'x', n);
	json__array_begin(j, NULL);
	json__stringn(j, NULL, big, n);
	assert_int_equal(j->err, 0);
	json__stringn(j, NULL, big, n);
	assert_int_equal(j->err, -E2BIG);
	assert_null(json__str(j));
	assert_true(j->cap <= JSON_MAX_CAP);
	/* reset makes the writer usable again, keeping its buffer */
	json__reset(j);
	json__int(j, NULL, 7);
	assert_string_equal(json__str(j), "7");
	free(big);
}

static void test_init_free(void **state)
{
	struct json j;

	(void)state;
	assert_int_equal(json__init(&j, 0), 0);
	assert_string_equal(json__str(&j), "");
	json__free(&j);
	assert_null(j.buf);
	json__free(&j);
	json__free(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_escape_quotes_backslash, setup, teardown),
		cmocka_unit_test_setup_teardown(test_escape_control, setup, teardown),
		cmocka_unit_test_setup_teardown(test_utf8_passthrough, setup, teardown),
		cmocka_unit_test_setup_teardown(test_utf8_invalid, setup, teardown),
		cmocka_unit_test_setup_teardown(test_key_escaped, setup, teardown),
		cmocka_unit_test_setup_teardown(test_string_null, setup, teardown),
		cmocka_unit_test_setup_teardown(test_integers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_double_shortest, setup, teardown),
		cmocka_unit_test_setup_teardown(test_float_shortest, setup, teardown),
		cmocka_unit_test_setup_teardown(test_double_roundtrip_random, setup, teardown),
		cmocka_unit_test_setup_teardown(test_float_roundtrip_random, setup, teardown),
		cmocka_unit_test_setup_teardown(test_nesting_commas, setup, teardown),
		cmocka_unit_test_setup_teardown(test_misuse_key_in_array, setup, teardown),
		cmocka_unit_test_setup_teardown(test_misuse_missing_key, setup, teardown),
		cmocka_unit_test_setup_teardown(test_misuse_unbalanced, setup, teardown),
		cmocka_unit_test_setup_teardown(test_depth_limit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_growth, setup, teardown),
		cmocka_unit_test_setup_teardown(test_growth_limit, setup, teardown),
		cmocka_unit_test(test_init_free),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
