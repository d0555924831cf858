// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Backward pass, user-space side: class names from vtable symbols, and the gradient norm
 * bounds from magnitude histograms built the way the BPF side builds them (bits 21..30 of
 * each float32), checked against the norm computed directly.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "explain/backward.h"
#include "resolve/elfsym.h"
#include "resolve/vtable.h"

static void test_vtable_class(void **state)
{
	char out[64];

	(void)state;
	assert_int_equal(vtable__class_name("_ZTVN5torch8autograd9generated12LogBackward0E", out,
					    sizeof(out)),
			 0);
	assert_string_equal(out, "LogBackward0");
	assert_int_equal(
		vtable__class_name("_ZTVN5torch8autograd14AccumulateGradE", out, sizeof(out)), 0);
	assert_string_equal(out, "AccumulateGrad");
	assert_int_equal(vtable__class_name("_ZTV7PyNodeX", out, sizeof(out)), 0);
	assert_string_equal(out, "PyNodeX");
	/* not a vtable, truncated, a length past the end, a name that does not fit */
	assert_int_equal(vtable__class_name("_ZTIN5torch8autograd4NodeE", out, sizeof(out)),
			 -EINVAL);
	assert_int_equal(vtable__class_name("_ZTVN5torch8autograd", out, sizeof(out)), -EINVAL);
	assert_int_equal(vtable__class_name("_ZTVN5torch99autogradE", out, sizeof(out)), -EINVAL);
	assert_int_equal(
		vtable__class_name("_ZTVN5torch8autograd9generated12LogBackward0E", out, 8),
		-EINVAL);
}

/* Node classes to their forward op; other classes refused. */
static void test_op_name(void **state)
{
	static const char *const in[][2] = {
		{"SqrtBackward0", "sqrt"},
		{"LogBackward0", "log"},
		{"WhereBackward0", "where"},
		{"NativeLayerNormBackward0", "native_layer_norm"},
		{"MseLossBackward0", "mse_loss"},
		{"AddmmBackward0", "addmm"},
		{"TBackward0", "t"},
		{"Log2Backward0", "log2"},
		{"Log1PBackward0", "log1p"},
		{"Expm1Backward0", "expm1"},
		{"MaxPool2DWithIndicesBackward0", "max_pool2d_with_indices"},
		{"SmoothL1LossBackward0", "smooth_l1_loss"},
		{"L1LossBackward0", "l1_loss"},
		{"Conv3DBackward0", "conv3d"},
		{"FftC2CBackward0", "fft_c2c"},
		{"SoftmaxBackward1", "softmax"},
		{"CopySlicesBackward", "copy_slices"},
	};
	static const char *const bad[] = {
		"AccumulateGrad", "PyNode",    "Backward0", "sqrtBackward0",
		"SqrtBackward0x", "GraphRoot", ""};
	char out[32];
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(in) / sizeof(in[0]); i++) {
		assert_int_equal(backward__op_name(in[i][0], out, sizeof(out)), 0);
		assert_string_equal(out, in[i][1]);
	}
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(backward__op_name(bad[i], out, sizeof(out)), -EINVAL);
	assert_int_equal(backward__op_name(NULL, out, sizeof(out)), -EINVAL);
	/* "native_layer_norm" and its NUL need 18 bytes */
	assert_int_equal(backward__op_name("NativeLayerNormBackward0", out, 17), -EINVAL);
	assert_int_equal(backward__op_name("NativeLayerNormBackward0", out, 18), 0);
	assert_string_equal(out, "native_layer_norm");
}

static void add(uint32_t *hist, float v)
{
	uint32_t bits;

	memcpy(&bits, &v, sizeof(bits));
	hist[(bits >> 21) & (NW_HIST_BUCKETS - 1)]++;
}

/* Random magnitudes over many binades: the true norm lies within the bounds, 1.25 apart. */
static void test_bounds_hold(void **state)
{
	static uint32_t hist[NW_HIST_BUCKETS];
	double lo2, hi2, mlo, mhi, sum = 0, max = 0;
	uint64_t nonfinite;
	int i, round;

	(void)state;
	srand(7);
	for (round = 0; round < 20; round++) {
		memset(hist, 0, sizeof(hist));
		sum = max = 0;
		for (i = 0; i < 5000; i++) {
			float v = ldexpf((float)rand() / RAND_MAX + 0.001f, rand() % 40 - 20);

			if (i % 2)
				v = -v;
			add(hist, v);
			sum += (double)v * v;
			max = fabs(v) > max ? fabs(v) : max;
		}
		backward__hist_bounds(hist, &lo2, &hi2, &mlo, &mhi, &nonfinite);
		assert_true(lo2 <= sum && sum <= hi2);
		assert_true(sqrt(hi2) <= 1.25 * sqrt(lo2) * (1 + 1e-12));
		assert_true(fabs(sqrt(sqrt(lo2 * hi2)) / sqrt(sum) - 1) <= 0.118);
		assert_true(mlo <= max && max < mhi);
		assert_int_equal(nonfinite, 0);
	}
}

static void test_zero_and_nonfinite(void **state)
{
	static uint32_t hist[NW_HIST_BUCKETS];
	double lo2, hi2, mlo, mhi;
	uint64_t nonfinite;

	(void)state;
	memset(hist, 0, sizeof(hist));
	add(hist, 0.0f);
	add(hist, -0.0f);
	add(hist, INFINITY);
	add(hist, -INFINITY);
	add(hist, NAN);
	add(hist, 3.0f);
	backward__hist_bounds(hist, &lo2, &hi2, &mlo, &mhi, &nonfinite);
	assert_int_equal(nonfinite, 3);
	/* 3.0 = 1.5 * 2^1: bucket [1.5, 1.75) * 2; zeros add at most 2 * (2^-126)^2 */
	assert_true(lo2 == 9.0);
	assert_true(hi2 >= 3.5 * 3.5 && hi2 <= 3.5 * 3.5 * (1 + 1e-15));
	assert_true(mlo == 3.0 && mhi == 3.5);
}

/* Passes end when a gradient of a later iteration arrives, or at flush. */
static void test_passes(void **state)
{
	struct elfsym *e = elfsym__open_fd(open("/proc/self/exe", O_RDONLY | O_CLOEXEC), NULL);
	struct backward *b = backward__new(vtable__open(e, 0x400000, 16), NULL, 24);
	static struct nw_grad g;
	struct grad_norm n[8];
	int k;

	(void)state;
	elfsym__close(e); /* the classes were read: the file need not stay open */
	assert_non_null(b);
	memset(&g, 0, sizeof(g));
	g.type = NW_EV_GRAD;
	g.iteration = 3;
	g.step = 2;
	add(g.hist, 3.0f);
	g.scanned = 1;
	assert_int_equal(backward__grad(b, &g), 0);
	add(g.hist, 4.0f);
	assert_int_equal(backward__grad(b, &g), 0); /* same pass: 3, then 3 and 4 */
	assert_int_equal(backward__norms(b, n, 4), 0);
	g.iteration = 4;
	assert_int_equal(backward__grad(b, &g), 1);
	k = backward__norms(b, n, 4);
	assert_int_equal(k, 1);
	assert_int_equal(n[0].iteration, 3);
	assert_int_equal(n[0].step, 2);
	assert_int_equal(n[0].params, 2);
	assert_true(n[0].complete);
	/* sqrt(9 + 9 + 16) = 5.83 */
	assert_true(n[0].low <= sqrt(34.0) && sqrt(34.0) <= n[0].high);
	backward__flush(b, 0);
	k = backward__norms(b, n, 4);
	assert_int_equal(k, 2);
	assert_int_equal(n[1].iteration, 4);
	assert_true(n[1].complete);
	/* one histogram dropped while pass 6 ran: 6 is incomplete, so is 5 (it may have been
	 * its last), 7 is not */
	g.iteration = 5;
	g.lost = 0;
	backward__grad(b, &g);
	g.iteration = 6;
	g.lost = 1;
	backward__grad(b, &g);
	g.iteration = 7;
	backward__grad(b, &g);
	backward__flush(b, 1);
	k = backward__norms(b, n, 4);
	assert_int_equal(k, 4);
	assert_int_equal(n[1].iteration, 5);
	assert_false(n[1].complete);
	assert_int_equal(n[2].iteration, 6);
	assert_false(n[2].complete);
	assert_int_equal(n[3].iteration, 7);
	assert_true(n[3].complete);
	/* pass 8's last gradient not measured (unreadable, or dropped): only the counters at
	 * the detach say so, and pass 8 is not complete */
	g.iteration = 8;
	backward__grad(b, &g);
	backward__flush(b, 2);
	k = backward__norms(b, n, 8);
	assert_int_equal(k, 6);
	assert_int_equal(n[5].iteration, 8);
	assert_false(n[5].complete);
	backward__free(b);
	backward__free(NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_vtable_class), cmocka_unit_test(test_op_name),
		cmocka_unit_test(test_bounds_hold),  cmocka_unit_test(test_zero_and_nonfinite),
		cmocka_unit_test(test_passes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
