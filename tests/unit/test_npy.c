// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The .npy writer: headers numpy accepts, and dense tensors reordered into C order. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include "capture/npy.h"

static void test_header_2d(void **state)
{
	static const char dict[] = "{'descr': '<f4', 'fortran_order': False, 'shape': (5, 8), }";
	__u64 shape[] = {5, 8};
	char buf[NPY_HEADER_MAX];
	int n, i;

	(void)state;
	n = npy__header(buf, sizeof(buf), "<f4", shape, 2);
	assert_int_equal(n, 128); /* magic to newline: a multiple of 64, as numpy pads */
	assert_memory_equal(buf, "\x93NUMPY\x01\x00", 8);
	assert_int_equal((unsigned char)buf[8] | (unsigned char)buf[9] << 8, n - 10);
	assert_memory_equal(buf + 10, dict, strlen(dict));
	for (i = 10 + strlen(dict); i < n - 1; i++)
		assert_int_equal(buf[i], ' ');
	assert_int_equal(buf[n - 1], '\n');
}

static void test_header_scalar_and_1d(void **state)
{
	__u64 shape[] = {7};
	char buf[NPY_HEADER_MAX];
	int n;

	(void)state;
	n = npy__header(buf, sizeof(buf), "<i8", shape, 0);
	assert_int_equal(n, 128);
	assert_non_null(strstr(buf + 10, "'shape': (), }"));
	n = npy__header(buf, sizeof(buf), "|b1", shape, 1);
	assert_int_equal(n, 128);
	assert_non_null(strstr(buf + 10, "'shape': (7,), }")); /* a 1-tuple keeps its comma */
}

static void test_header_bounds(void **state)
{
	__u64 shape[NPY_MAX_DIMS + 1];
	char buf[NPY_HEADER_MAX];
	int i, n;

	(void)state;
	for (i = 0; i <= NPY_MAX_DIMS; i++)
		shape[i] = UINT64_MAX;
	n = npy__header(buf, sizeof(buf), "<f8", shape, NPY_MAX_DIMS);
	assert_true(n > 0 && n <= NPY_HEADER_MAX && n % 64 == 0);
	assert_int_equal(npy__header(buf, sizeof(buf), "<f8", shape, NPY_MAX_DIMS + 1), -EINVAL);
	assert_int_equal(npy__header(buf, 63, "<f8", shape, 1), -E2BIG);
}

static void test_c_order_contiguous(void **state)
{
	int32_t src[6] = {1, 2, 3, 4, 5, 6}, dst[6];
	__u64 shape[] = {2, 3}, strides[] = {3, 1};

	(void)state;
	assert_int_equal(npy__c_order(dst, src, 4, 2, shape, strides, 6), 0);
	assert_memory_equal(dst, src, sizeof(src));
}

static void test_c_order_transposed(void **state)
{
	/* a (3, 2) tensor t stored as its (2, 3) transpose: t[i][j] = src[j * 3 + i] */
	int32_t src[6] = {1, 2, 3, 4, 5, 6}, dst[6];
	int32_t want[6] = {1, 4, 2, 5, 3, 6};
	__u64 shape[] = {3, 2}, strides[] = {1, 3};

	(void)state;
	assert_int_equal(npy__c_order(dst, src, 4, 2, shape, strides, 6), 0);
	assert_memory_equal(dst, want, sizeof(want));
}

static void test_c_order_channels_last(void **state)
{
	/* N=1, C=2, H=1, W=3 in channels_last: strides (6, 1, 6, 2); memory is (w, c) pairs */
	uint16_t src[6] = {10, 20, 11, 21, 12, 22}, dst[6];
	uint16_t want[6] = {10, 11, 12, 20, 21, 22};
	__u64 shape[] = {1, 2, 1, 3}, strides[] = {6, 1, 6, 2};

	(void)state;
	assert_int_equal(npy__c_order(dst, src, 2, 4, shape, strides, 6), 0);
	assert_memory_equal(dst, want, sizeof(want));
}

static void test_c_order_rejects(void **state)
{
	int32_t src[6] = {0}, dst[6];
	__u64 shape[] = {2, 3}, strides[] = {3, 1}, wide[] = {4, 1};
	__u64 huge[] = {UINT64_MAX, 2}, hstr[] = {2, 1};

	(void)state;
	/* strides that reach past the block: never read outside it */
	assert_int_equal(npy__c_order(dst, src, 4, 2, shape, wide, 6), -EINVAL);
	/* shape and numel disagree */
	assert_int_equal(npy__c_order(dst, src, 4, 2, shape, strides, 5), -EINVAL);
	/* overflowing products */
	assert_int_equal(npy__c_order(dst, src, 4, 2, huge, hstr, 6), -EINVAL);
	assert_int_equal(npy__c_order(dst, src, 4, NPY_MAX_DIMS + 1, shape, strides, 6), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_header_2d),
		cmocka_unit_test(test_header_scalar_and_1d),
		cmocka_unit_test(test_header_bounds),
		cmocka_unit_test(test_c_order_contiguous),
		cmocka_unit_test(test_c_order_transposed),
		cmocka_unit_test(test_c_order_channels_last),
		cmocka_unit_test(test_c_order_rejects),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
