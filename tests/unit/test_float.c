// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Unit tests for bpf/nwfloat.h (the IEEE bit tricks the BPF scanner runs) and
 * daemon/util/fpconv.c (bits to values for the event stream).
 */
#include <linux/types.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "output/json.h"
#include "util/fpconv.h"
#include "nwfloat.h"

static const __u32 all_dtypes[] = {NW_DT_F16, NW_DT_BF16, NW_DT_F32, NW_DT_F64};

/* Special patterns of one dtype, every one a distinct case the scanner must get right. */
struct fmt {
	__u32 dt;
	__u64 pinf, qnan, snan, max, min_normal, max_sub, one;
};

static const struct fmt fmts[] = {
	{NW_DT_F16, 0x7c00, 0x7e00, 0x7c01, 0x7bff, 0x0400, 0x03ff, 0x3c00},
	{NW_DT_BF16, 0x7f80, 0x7fc0, 0x7f81, 0x7f7f, 0x0080, 0x007f, 0x3f80},
	{NW_DT_F32, 0x7f800000, 0x7fc00000, 0x7f800001, 0x7f7fffff, 0x00800000, 0x007fffff,
	 0x3f800000},
	{NW_DT_F64, 0x7ff0000000000000ULL, 0x7ff8000000000000ULL, 0x7ff0000000000001ULL,
	 0x7fefffffffffffffULL, 0x0010000000000000ULL, 0x000fffffffffffffULL,
	 0x3ff0000000000000ULL},
};

#define NFMTS (sizeof(fmts) / sizeof(fmts[0]))

static __u64 sign_of(__u32 dt)
{
	return 1ULL << (nw_dtype_size(dt) * 8 - 1);
}

static __u64 lane_mask(__u32 dt)
{
	return dt == NW_DT_F64 ? ~0ULL : (1ULL << (nw_dtype_size(dt) * 8)) - 1;
}

static void test_classify_specials(void **state)
{
	const struct fmt *f;
	__u64 s;
	size_t i;

	(void)state;
	for (i = 0; i < NFMTS; i++) {
		f = &fmts[i];
		s = sign_of(f->dt);
		assert_int_equal(nw_classify(f->pinf, f->dt), NW_POSINF);
		assert_int_equal(nw_classify(f->pinf | s, f->dt), NW_NEGINF);
		assert_int_equal(nw_classify(f->qnan, f->dt), NW_NAN);
		assert_int_equal(nw_classify(f->snan, f->dt), NW_NAN);
		assert_int_equal(nw_classify(f->qnan | s, f->dt), NW_NAN);
		assert_int_equal(nw_classify(f->snan | s, f->dt), NW_NAN);
		/* all-ones pattern: negative quiet NaN with full payload */
		assert_int_equal(nw_classify(lane_mask(f->dt), f->dt), NW_NAN);
		assert_int_equal(nw_classify(0, f->dt), NW_FINITE);
		assert_int_equal(nw_classify(s, f->dt), NW_FINITE);
		assert_int_equal(nw_classify(1, f->dt), NW_FINITE);
		assert_int_equal(nw_classify(1 | s, f->dt), NW_FINITE);
		assert_int_equal(nw_classify(f->max_sub, f->dt), NW_FINITE);
		assert_int_equal(nw_classify(f->min_normal, f->dt), NW_FINITE);
		assert_int_equal(nw_classify(f->max, f->dt), NW_FINITE);
		assert_int_equal(nw_classify(f->max | s, f->dt), NW_FINITE);
		assert_int_equal(nw_classify(f->one, f->dt), NW_FINITE);
	}
}

static uint64_t rng_state = 0x243f6a8885a308d3ULL;

static uint64_t rng(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dULL;
}

/* Against the C library's own view of the same bits, for the types C has. */
static void test_classify_matches_libc(void **state)
{
	uint64_t b;
	uint32_t b32;
	double d;
	float f;
	int i, want;

	(void)state;
	for (i = 0; i < 200000; i++) {
		b = rng();
		/* bias towards exponent all-ones so NaN/Inf are common */
		if (i & 1)
			b |= 0x7ff0000000000000ULL;
		memcpy(&d, &b, sizeof(d));
		want = isnan(d) ? NW_NAN : isinf(d) ? (d > 0 ? NW_POSINF : NW_NEGINF) : NW_FINITE;
		assert_int_equal(nw_classify(b, NW_DT_F64), want);
		b32 = (uint32_t)b | (i & 1 ? 0x7f800000u : 0);
		memcpy(&f, &b32, sizeof(f));
		want = isnan(f) ? NW_NAN : isinf(f) ? (f > 0 ? NW_POSINF : NW_NEGINF) : NW_FINITE;
		assert_int_equal(nw_classify(b32, NW_DT_F32), want);
		/* bfloat16 is the top half of a float32 */
		b32 &= 0xffff0000u;
		memcpy(&f, &b32, sizeof(f));
		want = isnan(f) ? NW_NAN : isinf(f) ? (f > 0 ? NW_POSINF : NW_NEGINF) : NW_FINITE;
		assert_int_equal(nw_classify(b32 >> 16, NW_DT_BF16), want);
	}
}

/* Every float16 pattern: classification agrees with the decoded value. */
static void test_classify_f16_exhaustive(void **state)
{
	double d;
	__u64 b;
	int want;

	(void)state;
	for (b = 0; b < 0x10000; b++) {
		d = nw_bits_to_double(b, NW_DT_F16);
		want = isnan(d) ? NW_NAN : isinf(d) ? (d > 0 ? NW_POSINF : NW_NEGINF) : NW_FINITE;
		assert_int_equal(nw_classify(b, NW_DT_F16), want);
	}
}

/* Finite values of one dtype in increasing numeric order, -0 just below +0. */
static size_t sorted_values(const struct fmt *f, __u64 *out)
{
	__u64 s = sign_of(f->dt);
	size_t n = 0;

	out[n++] = f->max | s;
	out[n++] = f->one | s;
	out[n++] = f->min_normal | s;
	out[n++] = f->max_sub | s;
	out[n++] = 1 | s;
	out[n++] = s;
	out[n++] = 0;
	out[n++] = 1;
	out[n++] = f->max_sub;
	out[n++] = f->min_normal;
	out[n++] = f->one;
	out[n++] = f->one + 1;
	out[n++] = f->max;
	return n;
}

static void test_order_key_sorted(void **state)
{
	__u64 vals[16], key, prev;
	size_t i, k, n;

	(void)state;
	for (i = 0; i < NFMTS; i++) {
		n = sorted_values(&fmts[i], vals);
		for (k = 0; k < n; k++) {
			key = nw_order_key(vals[k], fmts[i].dt);
			if (k)
				assert_true(key > prev);
			assert_int_equal(nw_key_bits(key, fmts[i].dt), vals[k]);
			/* the empty-range sentinels (0 for max, ~0 for min) are never keys */
			assert_true(key != 0 && key < lane_mask(fmts[i].dt));
			prev = key;
		}
	}
}

/* Key order is numeric order for random finite doubles and floats. */
static void test_order_key_random(void **state)
{
	uint64_t a, b;
	uint32_t a32, b32;
	double da, db;
	float fa, fb;
	int i;

	(void)state;
	for (i = 0; i < 100000; i++) {
		a = rng() >> (i % 7);
		b = rng() >> (i % 5);
		memcpy(&da, &a, 8);
		memcpy(&db, &b, 8);
		if (isfinite(da) && isfinite(db) && da != db)
			assert_true((da < db) ==
				    (nw_order_key(a, NW_DT_F64) < nw_order_key(b, NW_DT_F64)));
		assert_int_equal(nw_key_bits(nw_order_key(a, NW_DT_F64), NW_DT_F64), a);
		a32 = (uint32_t)a;
		b32 = (uint32_t)b;
		memcpy(&fa, &a32, 4);
		memcpy(&fb, &b32, 4);
		if (isfinite(fa) && isfinite(fb) && fa != fb)
			assert_true((fa < fb) ==
				    (nw_order_key(a32, NW_DT_F32) < nw_order_key(b32, NW_DT_F32)));
		assert_int_equal(nw_key_bits(nw_order_key(a32, NW_DT_F32), NW_DT_F32), a32);
		assert_int_equal(nw_key_bits(nw_order_key(a32 >> 16, NW_DT_BF16), NW_DT_BF16),
				 a32 >> 16);
		assert_int_equal(nw_key_bits(nw_order_key(a32 & 0xffff, NW_DT_F16), NW_DT_F16),
				 a32 & 0xffff);
	}
}

/* Word of lanes all set to fill, with lane `at` set to bad. */
static __u64 word_with(__u32 dt, __u64 fill, int at, __u64 bad)
{
	__u32 bits = nw_dtype_size(dt) * 8;
	int lanes = 64 / bits, i;
	__u64 w = 0;

	for (i = 0; i < lanes; i++)
		w |= (i == at ? bad : fill) << (i * bits % 64);
	return w;
}

static void test_word_bad_in_every_lane(void **state)
{
	const struct fmt *f;
	struct nw_lanes l;
	__u64 s, w, bad[6];
	int lanes, at, k;
	size_t i;

	(void)state;
	for (i = 0; i < NFMTS; i++) {
		f = &fmts[i];
		s = sign_of(f->dt);
		nw_lanes_for(f->dt, &l);
		lanes = 8 / nw_dtype_size(f->dt);
		bad[0] = f->pinf;
		bad[1] = f->pinf | s;
		bad[2] = f->qnan;
		bad[3] = f->snan;
		bad[4] = f->qnan | s;
		bad[5] = lane_mask(f->dt);
		for (at = 0; at < lanes; at++) {
			for (k = 0; k < 6; k++) {
				w = word_with(f->dt, f->max, at, bad[k]);
				assert_true(nw_word_nonfinite(w, &l));
				w = word_with(f->dt, f->max | s, at, bad[k]);
				assert_true(nw_word_nonfinite(w, &l));
				w = word_with(f->dt, 0, at, bad[k]);
				assert_true(nw_word_nonfinite(w, &l));
			}
		}
	}
}

static void test_word_no_false_positive(void **state)
{
	const struct fmt *f;
	struct nw_lanes l;
	__u64 s, w;
	int at;
	size_t i;

	(void)state;
	for (i = 0; i < NFMTS; i++) {
		f = &fmts[i];
		s = sign_of(f->dt);
		nw_lanes_for(f->dt, &l);
		assert_false(nw_word_nonfinite(word_with(f->dt, f->max, -1, 0), &l));
		assert_false(nw_word_nonfinite(word_with(f->dt, f->max | s, -1, 0), &l));
		assert_false(nw_word_nonfinite(word_with(f->dt, f->max_sub | s, -1, 0), &l));
		assert_false(nw_word_nonfinite(0, &l));
		/* mixed signs: -max in one lane, +max in the others */
		for (at = 0; at < 8 / (int)nw_dtype_size(f->dt); at++) {
			w = word_with(f->dt, f->max, at, f->max | s);
			assert_false(nw_word_nonfinite(w, &l));
		}
	}
}

/* Random words: the word test is non-zero exactly when some lane classifies non-finite. */
static void test_word_matches_lanes(void **state)
{
	__u32 dt, bits;
	struct nw_lanes l;
	__u64 w, lane;
	int i, t, any, k;

	(void)state;
	for (t = 0; t < 4; t++) {
		dt = all_dtypes[t];
		bits = nw_dtype_size(dt) * 8;
		nw_lanes_for(dt, &l);
		for (i = 0; i < 100000; i++) {
			/* raise exponent bits often so non-finite lanes are common */
			w = rng() | (i % 3 ? 0 : rng() & l.mask);
			any = 0;
			for (k = 0; k < 64 / (int)bits; k++) {
				lane = bits == 64 ? w : (w >> (k * bits)) & ((1ULL << bits) - 1);
				any |= nw_classify(lane, dt) != NW_FINITE;
			}
			assert_int_equal(!!nw_word_nonfinite(w, &l), any);
		}
	}
}

static void test_bits_to_double_f16(void **state)
{
	(void)state;
	assert_true(nw_bits_to_double(0x0001, NW_DT_F16) == 0x1p-24);
	assert_true(nw_bits_to_double(0x8001, NW_DT_F16) == -0x1p-24);
	assert_true(nw_bits_to_double(0x03ff, NW_DT_F16) == 1023 * 0x1p-24);
	assert_true(nw_bits_to_double(0x0400, NW_DT_F16) == 0x1p-14);
	assert_true(nw_bits_to_double(0x7bff, NW_DT_F16) == 65504);
	assert_true(nw_bits_to_double(0xfbff, NW_DT_F16) == -65504);
	assert_true(nw_bits_to_double(0x3c00, NW_DT_F16) == 1);
	assert_true(nw_bits_to_double(0xc000, NW_DT_F16) == -2);
	assert_true(nw_bits_to_double(0x3555, NW_DT_F16) == 0.333251953125);
	assert_true(nw_bits_to_double(0x3c01, NW_DT_F16) == 1 + 0x1p-10);
	assert_true(nw_bits_to_double(0x0000, NW_DT_F16) == 0);
	assert_true(signbit(nw_bits_to_double(0x8000, NW_DT_F16)));
	assert_true(isinf(nw_bits_to_double(0x7c00, NW_DT_F16)));
	assert_true(nw_bits_to_double(0xfc00, NW_DT_F16) < 0);
	assert_true(isnan(nw_bits_to_double(0x7c01, NW_DT_F16)));
	assert_true(isnan(nw_bits_to_double(0xfe00, NW_DT_F16)));
}

#ifdef __FLT16_MAX__
/* Every pattern against the compiler's own _Float16 conversion. */
static void test_bits_to_double_f16_exhaustive(void **state)
{
	_Float16 h;
	uint16_t u;
	double got, want;
	__u32 b;

	(void)state;
	for (b = 0; b < 0x10000; b++) {
		u = b;
		memcpy(&h, &u, sizeof(h));
		want = h;
		got = nw_bits_to_double(b, NW_DT_F16);
		if (isnan(want))
			assert_true(isnan(got));
		else
			assert_memory_equal(&got, &want, sizeof(got));
	}
}
#endif

static void test_bits_to_double_bf16(void **state)
{
	(void)state;
	assert_true(nw_bits_to_double(0x3f80, NW_DT_BF16) == 1);
	assert_true(nw_bits_to_double(0x4049, NW_DT_BF16) == 3.140625);
	assert_true(nw_bits_to_double(0xc2f7, NW_DT_BF16) == -123.5);
	assert_true(nw_bits_to_double(0x0001, NW_DT_BF16) == 0x1p-133);
	assert_true(nw_bits_to_double(0x0080, NW_DT_BF16) == 0x1p-126);
	assert_true(nw_bits_to_double(0x7f7f, NW_DT_BF16) == 0x1.fep127);
	assert_true(nw_bits_to_double(0xff80, NW_DT_BF16) == -INFINITY);
	assert_true(isnan(nw_bits_to_double(0x7fc1, NW_DT_BF16)));
}

static void test_bits_to_double_f32_f64(void **state)
{
	(void)state;
	assert_true(nw_bits_to_double(0x3dcccccd, NW_DT_F32) == (double)0.1f);
	assert_true(nw_bits_to_double(0x00000001, NW_DT_F32) == 0x1p-149);
	assert_true(nw_bits_to_double(0x7f7fffff, NW_DT_F32) == 0x1.fffffep127);
	assert_true(nw_bits_to_double(0xff800000, NW_DT_F32) == -INFINITY);
	assert_true(nw_bits_to_double(0x3fb999999999999aULL, NW_DT_F64) == 0.1);
	assert_true(nw_bits_to_double(1, NW_DT_F64) == 0x1p-1074);
	assert_true(isnan(nw_bits_to_double(0xfff8000000000000ULL, NW_DT_F64)));
	assert_true(isnan(nw_bits_to_double(0x3c00, NW_DT_NONE)));
	assert_true(isnan(nw_bits_to_double(0x3c00, 99)));
}

static __u64 f32_of(float f)
{
	__u32 u;

	memcpy(&u, &f, 4);
	return u;
}

static __u64 f64_of(double f)
{
	__u64 u;

	memcpy(&u, &f, 8);
	return u;
}

/* Magnitude marks: 0 below the floor, +1 every 16x, the same for every float type. */
static void test_mag_mark(void **state)
{
	(void)state;
	assert_int_equal(nw_mag_mark(0, NW_DT_F32), 0);
	assert_int_equal(nw_mag_mark(f32_of(1023.0f), NW_DT_F32), 0);
	assert_int_equal(nw_mag_mark(f32_of(1024.0f), NW_DT_F32), 1);
	assert_int_equal(nw_mag_mark(f32_of(16383.0f), NW_DT_F32), 1);
	assert_int_equal(nw_mag_mark(f32_of(16384.0f), NW_DT_F32), 2);
	assert_int_equal(nw_mag_mark(f32_of(3.4e38f), NW_DT_F32), (127 - 10) / 4 + 1);
	assert_int_equal(nw_mag_mark(f64_of(16384.0), NW_DT_F64), 2);
	assert_int_equal(nw_mag_mark(f32_of(16384.0f) >> 16, NW_DT_BF16), 2);
	assert_int_equal(nw_mag_mark(0x4b00, NW_DT_F16), 0); /* 14.0 */
	assert_int_equal(nw_mag_mark(0x4c00, NW_DT_F16), 1); /* 16.0 */
	assert_int_equal(nw_mag_mark(0x7bff, NW_DT_F16), 3); /* 65504 */
	assert_int_equal(nw_exponent(f32_of(0.75f), NW_DT_F32), -1);
	assert_int_equal(nw_mag_mark(0x7f800000, NW_DT_F32), 0); /* Inf */
	assert_int_equal(nw_mag_mark(0x7fc00000, NW_DT_F32), 0); /* NaN */
	assert_int_equal(nw_mag_mark(0x7c00, NW_DT_F16), 0);
}

static void test_json_element(void **state)
{
	static const struct {
		__u64 bits;
		__u32 dt;
		const char *want;
	} cases[] = {
		{0x3c00, NW_DT_F16, "1.0"},
		{0x7bff, NW_DT_F16, "65504.0"},
		{0x0001, NW_DT_F16, "5.9604645e-8"},
		{0x2e66, NW_DT_F16, "0.099975586"},
		{0x8000, NW_DT_F16, "-0.0"},
		{0x7c00, NW_DT_F16, "null"},
		{0x7e00, NW_DT_F16, "null"},
		{0x3dcd, NW_DT_BF16, "0.100097656"},
		{0xc2f7, NW_DT_BF16, "-123.5"},
		{0x7f7f, NW_DT_BF16, "3.3895314e+38"},
		{0xff80, NW_DT_BF16, "null"},
		{0x3dcccccd, NW_DT_F32, "0.1"},
		{0x00000001, NW_DT_F32, "1e-45"},
		{0x7f7fffff, NW_DT_F32, "3.4028235e+38"},
		{0x7fc00000, NW_DT_F32, "null"},
		{0x3fb999999999999aULL, NW_DT_F64, "0.1"},
		{0x7fefffffffffffffULL, NW_DT_F64, "1.7976931348623157e+308"},
		{0xfff0000000000000ULL, NW_DT_F64, "null"},
		{0x3c00, NW_DT_NONE, "null"},
	};
	struct json j;
	size_t i;

	(void)state;
	assert_int_equal(json__init(&j, 64), 0);
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		json__reset(&j);
		json__element(&j, NULL, cases[i].bits, cases[i].dt);
		assert_non_null(json__str(&j));
		if (strcmp(json__str(&j), cases[i].want))
			fail_msg("case %zu: got %s, want %s", i, json__str(&j), cases[i].want);
	}
	json__reset(&j);
	json__object_begin(&j, NULL);
	json__element(&j, "finite_min", 0xbc00, NW_DT_F16);
	json__element(&j, "finite_max", 0x7c00, NW_DT_F16);
	json__object_end(&j);
	assert_string_equal(json__str(&j), "{\"finite_min\":-1.0,\"finite_max\":null}");
	json__free(&j);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_classify_specials),
		cmocka_unit_test(test_classify_matches_libc),
		cmocka_unit_test(test_classify_f16_exhaustive),
		cmocka_unit_test(test_order_key_sorted),
		cmocka_unit_test(test_order_key_random),
		cmocka_unit_test(test_word_bad_in_every_lane),
		cmocka_unit_test(test_word_no_false_positive),
		cmocka_unit_test(test_word_matches_lanes),
		cmocka_unit_test(test_bits_to_double_f16),
#ifdef __FLT16_MAX__
		cmocka_unit_test(test_bits_to_double_f16_exhaustive),
#endif
		cmocka_unit_test(test_bits_to_double_bf16),
		cmocka_unit_test(test_bits_to_double_f32_f64),
		cmocka_unit_test(test_json_element),
		cmocka_unit_test(test_mag_mark),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
