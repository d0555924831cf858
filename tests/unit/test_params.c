// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Checking a module's parameters from user space, as the daemon does when an
 * anomaly comes before BPF had their list: tensors laid out in a fake target
 * memory (THPVariable, TensorImpl, storage, data), and the verdict on a late
 * reading against the optimizer steps begun since the anomaly.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include "resolve/params.h"
#include "resolve/remote.h"
#include "fakemem.h"

#define TL fakemem_torch /* the tensor offsets the fake memory is laid out with */

/* the tensor type, nn.Parameter's (derived from it) and an unrelated type */
static uint64_t tensor_type, param_type, other_type;
static struct fakemem M;
static struct remote R;
static struct params_reader PR;

static int setup(void **state)
{
	(void)state;
	fakemem__init(&M);
	fakemem__remote(&M, &R);
	tensor_type = fakemem__alloc(&M, 512);
	param_type = fakemem__alloc(&M, 512); /* nn.Parameter: derives from the tensor type */
	fakemem__put64(&M, param_type + TL.type_base, tensor_type);
	other_type = fakemem__alloc(&M, 512);
	PR.r = &R;
	PR.l = &TL;
	PR.tensor_type = tensor_type;
	return 0;
}

/*
 * A Parameter over n float32 values (dims rows x n/rows, strides given; 0: contiguous)
 * whose storage starts off elements before them. Returns the object.
 */
static uint64_t mkparam(const float *v, uint64_t n, uint64_t rows, const uint64_t *strides,
			uint16_t dtype, int borrowed)
{
	uint64_t obj = fakemem__alloc(&M, 64), impl = fakemem__alloc(&M, 256),
		 storage = fakemem__alloc(&M, 64);
	uint64_t off = 3, data = fakemem__alloc(&M, 4 * (n + off)), ndim = 2;
	uint64_t sizes[2] = {rows, n / rows}, st[2] = {n / rows, 1};
	uint8_t b = borrowed;

	if (strides)
		memcpy(st, strides, sizeof(st));
	fakemem__put64(&M, obj + TL.obj_type, param_type);
	fakemem__put(&M, obj + TL.var_borrowed, &b, 1);
	if (borrowed) {
		uint64_t at = fakemem__alloc(
			&M, 16); /* an at::Tensor: its first word is the TensorImpl */

		fakemem__put64(&M, at, impl);
		fakemem__put64(&M, obj + TL.var_tensor, at);
	} else {
		fakemem__put64(&M, obj + TL.var_tensor, impl);
	}
	fakemem__put(&M, impl + TL.impl_dtype, &dtype, 2);
	fakemem__put64(&M, impl + TL.impl_numel, n);
	fakemem__put64(&M, impl + TL.impl_ndim, ndim);
	fakemem__put(&M, impl + TL.impl_sizes, sizes, 16);
	fakemem__put(&M, impl + TL.impl_sizes + 8 * TL.sizes_inline, st, 16);
	fakemem__put64(&M, impl + TL.impl_storage, storage);
	fakemem__put64(&M, impl + TL.impl_storage_offset, off);
	fakemem__put64(&M, storage + TL.storage_data, data);
	fakemem__put(&M, data + 4 * off, v, 4 * n);
	return obj;
}

static void test_scan_finite_and_nonfinite(void **state)
{
	float ok[7] = {1, -2, 3.5f, 0, 1e30f, -1e-30f, 7}; /* odd: the last word half used */
	float bad[7] = {1, 2, 3, 4, 5, 6, INFINITY};
	float nan[6] = {1, NAN, 3, 4, 5, 6};

	(void)state;
	assert_int_equal(params__scan_tensor(&PR, mkparam(ok, 7, 1, NULL, 6, 0)), 0);
	assert_int_equal(params__scan_tensor(&PR, mkparam(bad, 7, 1, NULL, 6, 0)), 1);
	assert_int_equal(params__scan_tensor(&PR, mkparam(nan, 6, 2, NULL, 6, 1)), 1);
}

static void test_scan_refuses(void **state)
{
	float v[6] = {1, 2, 3, 4, 5, 6};
	uint64_t holes[2] = {4, 1}, obj, impl = 0, storage = 0;

	(void)state;
	/* 2 x 3 with a row stride of 4: a hole after each row, not one dense block */
	assert_int_equal(params__scan_tensor(&PR, mkparam(v, 6, 2, holes, 6, 0)), -EINVAL);
	/* an integer tensor cannot hold NaN, nor a bool or uint32 one */
	assert_int_equal(params__scan_tensor(&PR, mkparam(v, 6, 2, NULL, 4, 0)), 2);
	assert_int_equal(params__scan_tensor(&PR, mkparam(v, 6, 2, NULL, 11, 0)), 2);
	assert_int_equal(params__scan_tensor(&PR, mkparam(v, 6, 2, NULL, 28, 0)), 2);
	/* complex64 (9), float8_e4m3fn (24), qint8 (12) can: not read, never taken for finite */
	assert_int_equal(params__scan_tensor(&PR, mkparam(v, 6, 2, NULL, 9, 0)), -EPROTONOSUPPORT);
	assert_int_equal(params__scan_tensor(&PR, mkparam(v, 6, 2, NULL, 24, 0)), -EPROTONOSUPPORT);
	assert_int_equal(params__scan_tensor(&PR, mkparam(v, 6, 2, NULL, 12, 0)), -EPROTONOSUPPORT);
	/* not a tensor at all */
	obj = mkparam(v, 6, 2, NULL, 6, 0);
	fakemem__put64(&M, obj + TL.obj_type, other_type);
	assert_int_equal(params__scan_tensor(&PR, obj), -EINVAL);
	/* its data outside the target's memory */
	obj = mkparam(v, 6, 2, NULL, 6, 0);
	assert_int_equal(fakemem__read(&M, obj + TL.var_tensor, &impl, 8), 0);
	assert_int_equal(fakemem__read(&M, impl + TL.impl_storage, &storage, 8), 0);
	fakemem__put64(&M, storage + TL.storage_data, FAKEMEM_BASE + 2 * FAKEMEM_SIZE);
	assert_int_equal(params__scan_tensor(&PR, obj), -EFAULT);
	/* on another device */
	obj = mkparam(v, 6, 2, NULL, 6, 0);
	assert_int_equal(fakemem__read(&M, obj + TL.var_tensor, &impl, 8), 0);
	fakemem__put(&M, impl + TL.impl_device, "\1", 1);
	assert_int_equal(params__scan_tensor(&PR, obj), -ENODEV);
}

static void test_check_counts(void **state)
{
	float ok[4] = {1, 2, 3, 4}, bad[4] = {1, NAN, 3, 4};
	uint64_t holes[2] = {3, 1};
	struct nw_params np = {.n = 5, .more = 2};
	struct params_check pc;

	(void)state;
	np.tensors[0] = mkparam(ok, 4, 2, NULL, 6, 0);
	np.tensors[1] = mkparam(bad, 4, 2, NULL, 6, 0);
	np.tensors[2] = mkparam(ok, 4, 2, holes, 6, 0); /* skipped */
	np.tensors[3] = mkparam(ok, 4, 2, NULL, 3, 0);	/* int: not counted */
	np.tensors[4] = mkparam(ok, 4, 2, NULL, 9, 0);	/* complex64: skipped */
	params__check(&PR, &np, &pc);
	assert_int_equal(pc.checked, 2);
	assert_int_equal(pc.nonfinite, 1);
	assert_int_equal(pc.skipped, 2 + 2);
}

static void test_late_verdict(void **state)
{
	(void)state;
	/* no step began since the anomaly: the values the layer used */
	assert_int_equal(params__late_verdict(1, 0), 1);
	assert_int_equal(params__late_verdict(0, 0), 0);
	assert_int_equal(params__late_verdict(-1, 0), -1);
	/* a step began: finite stands, non-finite may be the update's */
	assert_int_equal(params__late_verdict(1, 1), 1);
	assert_int_equal(params__late_verdict(0, 1), -1);
	assert_int_equal(params__late_verdict(-1, 1), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_scan_finite_and_nonfinite, setup),
		cmocka_unit_test_setup(test_scan_refuses, setup),
		cmocka_unit_test_setup(test_check_counts, setup),
		cmocka_unit_test_setup(test_late_verdict, setup),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
