// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Unit tests for daemon/util/dtype.c: names, sizes, ranges and codes of element types. */
#include <float.h>
#include <linux/types.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "util/dtype.h"
#include "util/fpconv.h"
#include "nwfloat.h"

static void test_scalar_types(void **state)
{
	(void)state;
	assert_string_equal(dtype__scalar(6)->descr, "<f4");
	assert_string_equal(dtype__scalar(5)->name, "float16");
	assert_string_equal(dtype__scalar(15)->descr, "<u2"); /* bfloat16 as its raw bits */
	assert_string_equal(dtype__scalar(4)->descr, "<i8");
	assert_string_equal(dtype__scalar(11)->descr, "|b1");
	assert_int_equal(dtype__scalar(7)->size, 8);
	assert_int_equal(dtype__scalar(4)->nw, NW_DT_NONE);
	assert_null(dtype__scalar(9)); /* complex float */
	assert_null(dtype__scalar(16));
	assert_null(dtype__scalar(0xffff));
}

static void test_names(void **state)
{
	(void)state;
	assert_string_equal(dtype__name(NW_DT_F16), "float16");
	assert_string_equal(dtype__name(NW_DT_BF16), "bfloat16");
	assert_string_equal(dtype__name(NW_DT_F32), "float32");
	assert_string_equal(dtype__name(NW_DT_F64), "float64");
	assert_null(dtype__name(NW_DT_NONE));
	assert_null(dtype__name(5));
	assert_null(dtype__nw(99));
}

/* Our codes agree with the BPF side's facts: sizes, and the largest finite value's bits. */
static void test_agrees_with_bpf(void **state)
{
	static const struct {
		__u32 dt;
		__u64 max_bits;
	} c[] = {
		{NW_DT_F16, 0x7bff},
		{NW_DT_BF16, 0x7f7f},
		{NW_DT_F32, 0x7f7fffff},
		{NW_DT_F64, 0x7fefffffffffffffULL},
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		assert_int_equal(dtype__size(c[i].dt), nw_dtype_size(c[i].dt));
		assert_int_equal(dtype__nw(c[i].dt)->nw, c[i].dt);
		assert_true(dtype__max(c[i].dt) == nw_bits_to_double(c[i].max_bits, c[i].dt));
		assert_int_equal(nw_classify(c[i].max_bits, c[i].dt), NW_FINITE);
		assert_int_equal(nw_classify(c[i].max_bits + 1, c[i].dt), NW_POSINF);
	}
	assert_int_equal(dtype__size(NW_DT_NONE), 0);
	assert_true(dtype__max(NW_DT_NONE) == DBL_MAX);
	assert_true(dtype__max(NW_DT_F16) == 65504.0);
	assert_true(dtype__max(NW_DT_F32) == FLT_MAX);
}

static void test_layout_codes(void **state)
{
	struct nw_layout l = {.dtype_f16 = 5, .dtype_f32 = 6, .dtype_f64 = 7, .dtype_bf16 = 15};

	(void)state;
	assert_int_equal(dtype__from_layout(&l, 6), NW_DT_F32);
	assert_int_equal(dtype__from_layout(&l, 5), NW_DT_F16);
	assert_int_equal(dtype__from_layout(&l, 7), NW_DT_F64);
	assert_int_equal(dtype__from_layout(&l, 15), NW_DT_BF16);
	assert_int_equal(dtype__from_layout(&l, 4), NW_DT_NONE);
	assert_true(dtype__c10_codes(&l));
	l.dtype_bf16 = 16;
	assert_int_equal(dtype__from_layout(&l, 16), NW_DT_BF16);
	assert_false(dtype__c10_codes(&l));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_scalar_types),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_agrees_with_bpf),
		cmocka_unit_test(test_layout_codes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
