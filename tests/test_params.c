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

#define BASE 0x200000ULL
#define ARENA (1 << 16)

struct mem {
	unsigned char bytes[ARENA];
	uint64_t top;
	uint64_t tensor_type, param_type, other_type;
};

static int mem_read(void *ctx, uint64_t addr, void *buf, size_t len)
{
	struct mem *m = ctx;

	if (addr < BASE || addr + len > BASE + ARENA || addr + len < addr)
		return -EFAULT;
	memcpy(buf, m->bytes + (addr - BASE), len);
	return 0;
}

static uint64_t alloc(struct mem *m, size_t n)
{
	uint64_t a = BASE + m->top;

	m->top += (n + 15) & ~15ULL;
	assert_true(m->top <= ARENA);
	return a;
}

static void put(struct mem *m, uint64_t addr, const void *v, size_t n)
{
	memcpy(m->bytes + (addr - BASE), v, n);
}

static void put64(struct mem *m, uint64_t addr, uint64_t v)
{
	put(m, addr, &v, 8);
}

/* Offsets shaped like torch 1.13's; only their consistency matters here. */
static const struct nw_layout TL = {
	.obj_type = 8,
	.type_base = 256,
	.var_borrowed = 24,
	.var_tensor = 16,
	.impl_storage = 48,
	.impl_storage_offset = 152,
	.impl_numel = 160,
	.impl_dtype = 168,
	.impl_device = 170,
	.impl_ndim = 72,
	.impl_sizes = 80,
	.storage_data = 16,
	.sizes_inline = 5,
	.dtype_f16 = 5,
	.dtype_f32 = 6,
	.dtype_f64 = 7,
	.dtype_bf16 = 15,
	.device_cpu = 0,
};

static struct mem M;
static struct remote R;
static struct params_reader PR;

static int setup(void **state)
{
	(void)state;
	memset(&M, 0, sizeof(M));
	memset(&R, 0, sizeof(R));
	R.read = mem_read;
	R.ctx = &M;
	M.tensor_type = alloc(&M, 512);
	M.param_type = alloc(&M, 512); /* nn.Parameter: derives from the tensor type */
	put64(&M, M.param_type + TL.type_base, M.tensor_type);
	M.other_type = alloc(&M, 512);
	PR.r = &R;
	PR.l = &TL;
	PR.tensor_type = M.tensor_type;
	return 0;
}

/*
 * A Parameter over n float32 values (dims rows x n/rows, strides given; 0: contiguous)
 * whose storage starts off elements before them. Returns the object.
 */
static uint64_t mkparam(const float *v, uint64_t n, uint64_t rows, const uint64_t *strides,
			uint16_t dtype, int borrowed)
{
	uint64_t obj = alloc(&M, 64), impl = alloc(&M, 256), storage = alloc(&M, 64);
	uint64_t off = 3, data = alloc(&M, 4 * (n + off)), ndim = 2;
	uint64_t sizes[2] = {rows, n / rows}, st[2] = {n / rows, 1};
	uint8_t b = borrowed;

	if (strides)
		memcpy(st, strides, sizeof(st));
	put64(&M, obj + TL.obj_type, M.param_type);
	put(&M, obj + TL.var_borrowed, &b, 1);
	if (borrowed) {
		uint64_t at = alloc(&M, 16); /* an at::Tensor: its first word is the TensorImpl */

		put64(&M, at, impl);
		put64(&M, obj + TL.var_tensor, at);
	} else {
		put64(&M, obj + TL.var_tensor, impl);
	}
	put(&M, impl + TL.impl_dtype, &dtype, 2);
	put64(&M, impl + TL.impl_numel, n);
	put64(&M, impl + TL.impl_ndim, ndim);
	put(&M, impl + TL.impl_sizes, sizes, 16);
	put(&M, impl + TL.impl_sizes + 8 * TL.sizes_inline, st, 16);
	put64(&M, impl + TL.impl_storage, storage);
	put64(&M, impl + TL.impl_storage_offset, off);
	put64(&M, storage + TL.storage_data, data);
	put(&M, data + 4 * off, v, 4 * n);
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
	/* an integer tensor cannot hold NaN */
	assert_int_equal(params__scan_tensor(&PR, mkparam(v, 6, 2, NULL, 4, 0)), 2);
	/* not a tensor at all */
	obj = mkparam(v, 6, 2, NULL, 6, 0);
	put64(&M, obj + TL.obj_type, M.other_type);
	assert_int_equal(params__scan_tensor(&PR, obj), -EINVAL);
	/* its data outside the target's memory */
	obj = mkparam(v, 6, 2, NULL, 6, 0);
	assert_int_equal(mem_read(&M, obj + TL.var_tensor, &impl, 8), 0);
	assert_int_equal(mem_read(&M, impl + TL.impl_storage, &storage, 8), 0);
	put64(&M, storage + TL.storage_data, BASE + 2 * ARENA);
	assert_int_equal(params__scan_tensor(&PR, obj), -EFAULT);
	/* on another device */
	obj = mkparam(v, 6, 2, NULL, 6, 0);
	assert_int_equal(mem_read(&M, obj + TL.var_tensor, &impl, 8), 0);
	put(&M, impl + TL.impl_device, "\1", 1);
	assert_int_equal(params__scan_tensor(&PR, obj), -ENODEV);
}

static void test_check_counts(void **state)
{
	float ok[4] = {1, 2, 3, 4}, bad[4] = {1, NAN, 3, 4};
	uint64_t holes[2] = {3, 1};
	struct nw_params np = {.n = 4, .more = 2};
	struct params_check pc;

	(void)state;
	np.tensors[0] = mkparam(ok, 4, 2, NULL, 6, 0);
	np.tensors[1] = mkparam(bad, 4, 2, NULL, 6, 0);
	np.tensors[2] = mkparam(ok, 4, 2, holes, 6, 0); /* skipped */
	np.tensors[3] = mkparam(ok, 4, 2, NULL, 3, 0);	/* int: not counted */
	params__check(&PR, &np, &pc);
	assert_int_equal(pc.checked, 2);
	assert_int_equal(pc.nonfinite, 1);
	assert_int_equal(pc.skipped, 1 + 2);
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
