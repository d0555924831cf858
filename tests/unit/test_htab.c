// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Unit tests for daemon/util/htab.c: the open-addressing table on u64 keys. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "util/htab.h"

struct val {
	uint64_t a, b;
};

static void test_empty(void **state)
{
	struct htab *h = htab__new(sizeof(struct val), 10);

	(void)state;
	assert_non_null(h);
	assert_null(htab__find(h, 0));
	assert_null(htab__find(h, 42));
	assert_int_equal(htab__count(h), 0);
	assert_null(htab__find(NULL, 1));
	assert_int_equal(htab__count(NULL), 0);
	htab__free(h);
	htab__free(NULL);
}

/* Values come zeroed, stay where they were put, and key 0 is a key like any other. */
static void test_get_find(void **state)
{
	struct htab *h = htab__new(sizeof(struct val), 100);
	struct val *v;
	int added;

	(void)state;
	v = htab__get(h, 0, &added);
	assert_non_null(v);
	assert_int_equal(added, 1);
	assert_int_equal(v->a, 0);
	v->a = 7;
	v = htab__get(h, 0, &added);
	assert_int_equal(added, 0);
	assert_int_equal(v->a, 7);
	v = htab__get(h, 0x7f0000001000ULL, NULL);
	v->b = 9;
	assert_int_equal(((struct val *)htab__find(h, 0x7f0000001000ULL))->b, 9);
	assert_int_equal(((struct val *)htab__find(h, 0))->a, 7);
	assert_null(htab__find(h, 0x7f0000001010ULL));
	assert_int_equal(htab__count(h), 2);
	htab__free(h);
}

/* Many aligned addresses (the keys it holds), through several growths, all found again. */
static void test_many(void **state)
{
	enum {
		N = 50000
	};
	struct htab *h = htab__new(sizeof(uint64_t), N);
	uint64_t i, *v;

	(void)state;
	for (i = 0; i < N; i++) {
		v = htab__get(h, 0x7f1200000000ULL + i * 64, NULL);
		assert_non_null(v);
		*v = i;
	}
	assert_int_equal(htab__count(h), N);
	for (i = 0; i < N; i++) {
		v = htab__find(h, 0x7f1200000000ULL + i * 64);
		assert_non_null(v);
		assert_int_equal(*v, i);
		assert_null(htab__find(h, 0x7f1200000000ULL + i * 64 + 8));
	}
	htab__free(h);
}

/* Past max entries: E2BIG, and what is in stays reachable. */
static void test_bounded(void **state)
{
	struct htab *h = htab__new(sizeof(int), 3);
	int added;

	(void)state;
	assert_non_null(htab__get(h, 1, NULL));
	assert_non_null(htab__get(h, 2, NULL));
	assert_non_null(htab__get(h, 3, NULL));
	errno = 0;
	assert_null(htab__get(h, 4, &added));
	assert_int_equal(errno, E2BIG);
	assert_int_equal(added, 0);
	assert_non_null(htab__get(h, 2, &added)); /* an existing key is still found */
	assert_int_equal(added, 0);
	assert_int_equal(htab__count(h), 3);
	htab__free(h);
}

static int sum_cb(uint64_t key, void *val, void *ctx)
{
	uint64_t *sum = ctx;

	*sum += key * *(int *)val;
	return key == 1000 ? 5 : 0;
}

static void test_each(void **state)
{
	struct htab *h = htab__new(sizeof(int), 100);
	uint64_t sum = 0, k;

	(void)state;
	for (k = 1; k <= 10; k++)
		*(int *)htab__get(h, k, NULL) = 2;
	assert_int_equal(htab__each(h, sum_cb, &sum), 0);
	assert_int_equal(sum, 2 * 55);
	*(int *)htab__get(h, 1000, NULL) = 1;
	assert_int_equal(htab__each(h, sum_cb, &sum), 5); /* stops at a non-zero return */
	assert_int_equal(htab__each(NULL, sum_cb, &sum), 0);
	htab__free(h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_empty), cmocka_unit_test(test_get_find),
		cmocka_unit_test(test_many),  cmocka_unit_test(test_bounded),
		cmocka_unit_test(test_each),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
