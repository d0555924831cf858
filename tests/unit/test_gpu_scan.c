// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Unit tests for the scan kernel's host-compiled half (cupti/classify.h): a host
 * loop plays the grid (blocks in a shuffled order, each block's threads folded
 * as the warp shuffles fold them, the scratch and its last-block ticket), and
 * every answer is compared with the CPU scanner's on the same bytes (bpf/scan.bpf.h's
 * full pass: 64-bit words, lanes, bpf/nwfloat.h's classification and order keys),
 * for every dtype, every special value, random data, odd alignments and grid
 * shapes, the gate and the scans that do not run.
 */
#include <linux/types.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "classify.h"

static const __u32 all_dtypes[] = {NW_DT_F16, NW_DT_BF16, NW_DT_F32, NW_DT_F64};
#define NDTYPES (sizeof(all_dtypes) / sizeof(all_dtypes[0]))

/* Grid shapes: blocks x threads (the library launches NW_SCAN_THREADS). */
static const __u32 grids[][2] = {{1, 32}, {3, 64}, {7, NW_SCAN_THREADS}, {NW_SCAN_MAX_BLOCKS, 32}};
#define NGRIDS (sizeof(grids) / sizeof(grids[0]))

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t rng(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545f4914f6cdd1dULL;
}

/* Every special pattern of one dtype (positive; the tests add the negatives). */
static size_t specials(__u32 dt, __u64 *out)
{
	static const __u64 f16[] = {0x0000, 0x0001, 0x03ff, 0x0400, 0x3bff, 0x3c00, 0x3c01,
				    0x7bff, 0x7c00, 0x7c01, 0x7d55, 0x7e00, 0x7e01, 0x7fff};
	static const __u64 bf16[] = {0x0000, 0x0001, 0x007f, 0x0080, 0x3f7f, 0x3f80, 0x3f81,
				     0x7f7f, 0x7f80, 0x7f81, 0x7faa, 0x7fc0, 0x7fc1, 0x7fff};
	static const __u64 f32[] = {0x00000000, 0x00000001, 0x007fffff, 0x00800000, 0x3f7fffff,
				    0x3f800000, 0x7f7fffff, 0x7f800000, 0x7f800001, 0x7fa00000,
				    0x7fc00000, 0x7fc00001, 0x7fffffff};
	static const __u64 f64[] = {0x0ULL,
				    0x1ULL,
				    0x000fffffffffffffULL,
				    0x0010000000000000ULL,
				    0x3ff0000000000000ULL,
				    0x7fefffffffffffffULL,
				    0x7ff0000000000000ULL,
				    0x7ff0000000000001ULL,
				    0x7ff4000000000000ULL,
				    0x7ff8000000000000ULL,
				    0x7ff8000000000001ULL,
				    0x7fffffffffffffffULL};
	const __u64 *p;
	size_t n;

	switch (dt) {
	case NW_DT_F16:
		p = f16, n = sizeof(f16) / sizeof(*p);
		break;
	case NW_DT_BF16:
		p = bf16, n = sizeof(bf16) / sizeof(*p);
		break;
	case NW_DT_F32:
		p = f32, n = sizeof(f32) / sizeof(*p);
		break;
	default:
		p = f64, n = sizeof(f64) / sizeof(*p);
	}
	memcpy(out, p, n * sizeof(*p));
	return n;
}

static __u64 sign_of(__u32 dt)
{
	return 1ULL << (nw_dtype_size(dt) * 8 - 1);
}

static void put(void *data, __u32 dt, size_t i, __u64 bits)
{
	memcpy((char *)data + i * nw_dtype_size(dt), &bits, nw_dtype_size(dt)); /* little-endian */
}

/*
 * The CPU scanner's full pass (bpf/scan.bpf.h: read_chunk + full_word) on the same
 * bytes: whole little-endian words, zero-padded, lanes of each word in order.
 */
static void cpu_scan(const void *data, __u64 numel, __u32 dt, struct nw_scan_out *r)
{
	__u32 size = nw_dtype_size(dt), width = size * 8, lanes = 8 / size, k;
	__u64 bytes = numel * size, words = (bytes + 7) / 8, wi, elem = 0, w, bits, key;
	struct nw_fmt f;

	memset(r, 0, sizeof(*r));
	r->min_key = ~0ULL;
	nw_fmt_for(dt, &f);
	for (wi = 0; wi < words; wi++) {
		w = 0;
		memcpy(&w, (const char *)data + wi * 8, bytes - wi * 8 < 8 ? bytes - wi * 8 : 8);
		for (k = 0; k < lanes && elem < numel; k++, elem++) {
			bits = width == 64 ? w : (w >> (k * width)) & f.all;
			switch (nw_classify_f(bits, &f)) {
			case NW_NAN:
				r->nan++;
				break;
			case NW_POSINF:
				r->posinf++;
				break;
			case NW_NEGINF:
				r->neginf++;
				break;
			default:
				key = nw_order_key_f(bits, &f);
				if (key < r->min_key)
					r->min_key = key;
				if (key > r->max_key)
					r->max_key = key;
			}
		}
	}
	r->scanned = numel;
	r->flags = NW_GPU_R_SCANNED;
}

/* The kernel on the host: blocks in a shuffled order, scratch, ticket, last block's answer. */
static void run_grid(const struct nw_scan_args *a, __u32 blocks, __u32 threads)
{
	volatile struct nw_scan_out *out = (volatile struct nw_scan_out *)(uintptr_t)a->out;
	struct nw_scan_scratch *s = (struct nw_scan_scratch *)(uintptr_t)a->scratch;
	__u32 early = nw_scan_precheck(a, threads, nw_gate_open(a)), *order, i, j, t, b;
	struct nw_acc blk, th;

	if (early) {
		nw_acc_init(&blk);
		nw_flag_write(a, &blk);
		nw_out_write(out, &blk, 0, early, a->seq);
		return;
	}
	order = malloc(blocks * sizeof(*order));
	assert_non_null(order);
	for (i = 0; i < blocks; i++)
		order[i] = i;
	for (i = blocks; i > 1; i--) {
		j = rng() % i;
		t = order[i - 1], order[i - 1] = order[j], order[j] = t;
	}
	for (i = 0; i < blocks; i++) {
		b = order[i];
		nw_acc_init(&blk);
		for (t = 0; t < threads; t++) {
			nw_acc_init(&th);
			nw_scan_args_thread(&th, a, (__u64)b * threads + t,
					    (__u64)blocks * threads);
			nw_acc_merge(&blk, &th); /* the warp and block fold: merge in any order */
		}
		assert_int_equal(out->done, 0); /* nobody answers before the last block */
		if (nw_scratch_fold(s, &blk, blocks)) {
			assert_int_equal(i, blocks - 1);
			nw_flag_write(a, &blk);
			nw_out_write(out, &blk, a->numel, NW_GPU_R_SCANNED, a->seq);
		}
	}
	free(order);
}

static const struct nw_scan_scratch zero_scratch;

/* Scan data with one grid shape; the answer must equal the CPU scanner's, bit for bit. */
static void check_scan(const void *data, __u64 numel, __u32 dt, __u32 blocks, __u32 threads)
{
	struct nw_scan_scratch scratch = {0};
	struct nw_scan_out out = {0}, want;
	struct nw_scan_args a = {.data = (uintptr_t)data,
				 .numel = numel,
				 .out = (uintptr_t)&out,
				 .scratch = (uintptr_t)&scratch,
				 .seq = 1 + rng() % 1000000,
				 .dtype = dt};

	cpu_scan(data, numel, dt, &want);
	want.done = a.seq;
	run_grid(&a, blocks, threads);
	if (memcmp(&out, &want, sizeof(out))) {
		print_error("dtype %u numel %llu at %p, grid %ux%u: nan %llu/%llu +inf %llu/%llu "
			    "-inf %llu/%llu min %llx/%llx max %llx/%llx flags %u done %llu\n",
			    dt, (unsigned long long)numel, data, blocks, threads,
			    (unsigned long long)out.nan, (unsigned long long)want.nan,
			    (unsigned long long)out.posinf, (unsigned long long)want.posinf,
			    (unsigned long long)out.neginf, (unsigned long long)want.neginf,
			    (unsigned long long)out.min_key, (unsigned long long)want.min_key,
			    (unsigned long long)out.max_key, (unsigned long long)want.max_key,
			    out.flags, (unsigned long long)out.done);
		fail();
	}
	assert_memory_equal(&scratch, &zero_scratch, sizeof(scratch));
}

/* A buffer whose data starts `off` bytes past a 64-byte boundary. */
struct buf {
	void *mem;
	char *data;
};

static void buf_alloc(struct buf *b, size_t bytes, size_t off)
{
	assert_int_equal(posix_memalign(&b->mem, 64, bytes + off + 64), 0);
	memset(b->mem, 0xa5, bytes + off + 64); /* bytes around the data: never read */
	b->data = (char *)b->mem + off;
}

/* Every special value and its negative, in every position of a word, at every alignment. */
static void test_specials(void **state)
{
	__u64 sp[32], v;
	size_t n, i, k, numel, off;
	struct buf b;
	__u32 dt, size;
	unsigned d, g;

	(void)state;
	for (d = 0; d < NDTYPES; d++) {
		dt = all_dtypes[d];
		size = nw_dtype_size(dt);
		n = specials(dt, sp);
		numel = 2 * n * 8 + 5;
		for (off = 0; off < 32; off += size) {
			buf_alloc(&b, numel * size, off);
			for (i = 0; i < numel; i++) {
				v = sp[(i / 2 + i / (2 * n)) % n];
				put(b.data, dt, i, i % 2 ? v | sign_of(dt) : v);
			}
			for (k = 0; k <= numel; k += k < 40 ? 1 : 37)
				for (g = 0; g < NGRIDS; g++)
					check_scan(b.data, k, dt, grids[g][0], grids[g][1]);
			free(b.mem);
		}
	}
}

/* Each special value alone among finite values, at every index of a short tensor. */
static void test_special_alone(void **state)
{
	__u64 sp[32];
	size_t n, i, j, pos, numel = 37;
	struct buf b;
	__u32 dt, size;
	unsigned d;

	(void)state;
	for (d = 0; d < NDTYPES; d++) {
		dt = all_dtypes[d];
		size = nw_dtype_size(dt);
		n = specials(dt, sp);
		buf_alloc(&b, numel * size, size);
		for (j = 0; j < 2 * n; j++)
			for (pos = 0; pos < numel; pos++) {
				for (i = 0; i < numel; i++) /* ones and minus ones */
					put(b.data, dt, i, sp[5] | (i % 3 ? 0 : sign_of(dt)));
				put(b.data, dt, pos, sp[j % n] | (j < n ? 0 : sign_of(dt)));
				check_scan(b.data, numel, dt, 2, 32);
			}
		free(b.mem);
	}
}

/* Random bits, a fifth of the elements forced to an all-ones exponent, many sizes. */
static void test_random(void **state)
{
	static const __u64 sizes[] = {0,  1,  2,  3,  7,   8,	 9,    15,
				      16, 17, 31, 33, 100, 1000, 4099, 65537};
	__u64 exp, sign, bits;
	size_t s, i, off;
	__u32 dt, size, width;
	struct buf b;
	unsigned d, g, rep;

	(void)state;
	for (d = 0; d < NDTYPES; d++) {
		dt = all_dtypes[d];
		size = nw_dtype_size(dt);
		nw_dtype_bits(dt, &exp, &sign, &width);
		for (s = 0; s < sizeof(sizes) / sizeof(*sizes); s++)
			for (rep = 0; rep < 3; rep++) {
				off = (rng() % 8) * size;
				buf_alloc(&b, sizes[s] * size, off);
				for (i = 0; i < sizes[s]; i++) {
					bits = rng() & (sign | (sign - 1));
					if (rng() % 5 == 0)
						bits |= exp;
					put(b.data, dt, i, bits);
				}
				for (g = 0; g < NGRIDS; g++)
					check_scan(b.data, sizes[s], dt, grids[g][0], grids[g][1]);
				free(b.mem);
			}
	}
}

/* A large tensor at the library's launch shape, against the C library's own counts too. */
static void test_large_libc(void **state)
{
	__u64 numel = 1 << 20, i, nan = 0, pinf = 0, ninf = 0;
	struct nw_scan_scratch scratch = {0};
	struct nw_scan_out out = {0};
	struct nw_scan_args a = {0};
	struct buf b;
	float *f;

	(void)state;
	buf_alloc(&b, numel * 4, 4);
	f = (float *)b.data;
	for (i = 0; i < numel; i++) {
		__u32 bits = (__u32)rng();

		if (rng() % 64 == 0) /* NaN, or ±Inf one time in eight */
			bits = rng() % 8 ? bits | 0x7f800000u : (bits & 0x80000000u) | 0x7f800000u;
		memcpy(&f[i], &bits, 4);
		nan += isnan(f[i]) != 0;
		pinf += isinf(f[i]) && f[i] > 0;
		ninf += isinf(f[i]) && f[i] < 0;
	}
	a.data = (uintptr_t)f, a.numel = numel, a.dtype = NW_DT_F32, a.seq = 7;
	a.out = (uintptr_t)&out, a.scratch = (uintptr_t)&scratch;
	run_grid(&a, NW_SCAN_MAX_BLOCKS, NW_SCAN_THREADS);
	assert_int_equal(out.nan, nan);
	assert_int_equal(out.posinf, pinf);
	assert_int_equal(out.neginf, ninf);
	assert_true(nan > 0 && pinf > 0 && ninf > 0);
	check_scan(f, numel, NW_DT_F32, NW_SCAN_MAX_BLOCKS, NW_SCAN_THREADS);
	free(b.mem);
}

/* Only NaN: counted once each, and no finite extremes (~0, 0). Only ±max finite: their keys. */
static void test_no_finite_and_extremes(void **state)
{
	struct nw_scan_scratch scratch = {0};
	struct nw_scan_out out = {0};
	struct nw_scan_args a = {0};
	__u64 numel = 1001, i, max;
	struct nw_fmt f;
	struct buf b;
	unsigned d;
	__u32 dt;

	(void)state;
	for (d = 0; d < NDTYPES; d++) {
		dt = all_dtypes[d];
		nw_fmt_for(dt, &f);
		max = f.exp - 1; /* the largest finite value */
		buf_alloc(&b, numel * 8, 2 * nw_dtype_size(dt));
		for (i = 0; i < numel; i++)
			put(b.data, dt, i, f.all); /* all-ones: a negative NaN */
		memset(&out, 0, sizeof(out));
		a.data = (uintptr_t)b.data, a.numel = numel, a.dtype = dt, a.seq = 11;
		a.out = (uintptr_t)&out, a.scratch = (uintptr_t)&scratch;
		run_grid(&a, 5, 64);
		assert_int_equal(out.nan, numel);
		assert_int_equal(out.min_key, ~0ULL);
		assert_int_equal(out.max_key, 0);
		for (i = 0; i < numel; i++) /* the largest finite value, both signs */
			put(b.data, dt, i, i % 2 ? max | f.sign : max);
		memset(&out, 0, sizeof(out));
		run_grid(&a, 5, 64);
		assert_int_equal(out.nan + out.posinf + out.neginf, 0);
		assert_int_equal(nw_key_bits(out.max_key, dt), max);
		assert_int_equal(nw_key_bits(out.min_key, dt), max | f.sign);
		assert_memory_equal(&scratch, &zero_scratch, sizeof(scratch));
		free(b.mem);
	}
}

/* Misaligned data (not a multiple of the element size) is read byte by byte, right. */
static void test_bytewise(void **state)
{
	struct buf b;
	size_t i, numel = 301;
	unsigned d;
	__u32 dt;

	(void)state;
	for (d = 0; d < NDTYPES; d++) {
		dt = all_dtypes[d];
		if (nw_dtype_size(dt) == 1)
			continue;
		buf_alloc(&b, numel * 8, 1);
		for (i = 0; i < numel * nw_dtype_size(dt); i++)
			b.data[i] = (char)(i % 7 == 0 ? 0xff : rng());
		check_scan(b.data, numel, dt, 3, 64);
		free(b.mem);
	}
}

/* Every element is read by exactly one thread: head, vectors, tail cover the tensor. */
static void test_plan(void **state)
{
	struct nw_scan_plan p;
	__u64 numel, data;
	unsigned d;
	__u32 size;

	(void)state;
	for (d = 0; d < NDTYPES; d++) {
		size = nw_dtype_size(all_dtypes[d]);
		for (data = 0x1000; data < 0x1000 + 64; data++)
			for (numel = 0; numel < 100; numel++) {
				nw_scan_plan_for(&p, data, numel, size);
				assert_int_equal(p.head + p.vecs * (NW_VEC_BYTES / size) + p.tail,
						 numel);
				assert_int_equal(p.bytewise, data % size != 0);
				if (p.bytewise)
					continue;
				assert_true(p.tail < NW_VEC_BYTES / size);
				assert_true(p.head < NW_VEC_BYTES / size);
				if (p.vecs)
					assert_int_equal((data + p.head * size) % NW_VEC_BYTES, 0);
			}
	}
}

/* One scan after another through the same scratch: each answer its own. */
static void test_scratch_reused(void **state)
{
	struct nw_scan_scratch scratch = {0};
	struct nw_scan_out out, want;
	struct nw_scan_args a = {0};
	struct buf b;
	size_t i, numel = 5000;
	int round;

	(void)state;
	buf_alloc(&b, numel * 2, 0);
	for (round = 0; round < 6; round++) {
		for (i = 0; i < numel; i++)
			put(b.data, NW_DT_BF16, i, round % 2 ? rng() & 0x7f7f : rng() & 0xffff);
		memset(&out, 0, sizeof(out));
		a.data = (uintptr_t)b.data, a.numel = numel - round * 100, a.dtype = NW_DT_BF16;
		a.seq = 100 + round, a.out = (uintptr_t)&out, a.scratch = (uintptr_t)&scratch;
		run_grid(&a, NW_SCAN_MAX_BLOCKS, 32);
		cpu_scan(b.data, a.numel, NW_DT_BF16, &want);
		want.done = a.seq;
		assert_memory_equal(&out, &want, sizeof(out));
		assert_memory_equal(&scratch, &zero_scratch, sizeof(scratch));
	}
	free(b.mem);
}

/* An answer the kernel writes without reading the data: flags, done, the rest empty. */
static void check_unscanned(struct nw_scan_args *a, __u32 threads, __u32 flag)
{
	struct nw_scan_scratch scratch = {0};
	struct nw_scan_out out;

	memset(&out, 0x5a, sizeof(out));
	out.done = 0;
	a->out = (uintptr_t)&out;
	a->scratch = (uintptr_t)&scratch;
	a->seq = 4242;
	run_grid(a, 4, threads);
	assert_int_equal(out.flags, flag);
	assert_int_equal(out.done, 4242);
	assert_int_equal(out.scanned, 0);
	assert_int_equal(out.nan + out.posinf + out.neginf, 0);
	assert_int_equal(out.min_key, ~0ULL);
	assert_int_equal(out.max_key, 0);
	assert_memory_equal(&scratch, &zero_scratch, sizeof(scratch));
}

/*
 * The gate: a gating scan's verdict (a word in device memory, not its answer in mapped
 * host memory: every block reads it) of 0 means not scanned (GATED_OUT, the data never
 * read: the address is not mapped); 1 (NaN, +Inf or -Inf found) means scanned. Each scan
 * leaves its own verdict where its flag points, also when it did not scan.
 */
static void test_gate(void **state)
{
	struct nw_scan_args a = {.data = 16, .numel = 1 << 20, .dtype = NW_DT_F32};
	struct nw_scan_scratch scratch = {0};
	struct nw_scan_out out;
	__u32 gate = 0, verdict = 7;
	float x[64];
	int i, k;

	(void)state;
	a.gate = (uintptr_t)&gate;
	a.flag = (uintptr_t)&verdict;
	check_unscanned(&a, NW_SCAN_THREADS, NW_GPU_R_GATED_OUT);
	assert_int_equal(verdict, 0); /* gated out: nothing bad, for what it gates in turn */
	a.flag = 0;
	for (i = 0; i < 64; i++)
		x[i] = i % 5 ? (float)i : -INFINITY;
	for (k = 0; k < 2; k++) { /* gate bad: scanned; and the first's verdict opens the second */
		memset(&out, 0, sizeof(out));
		gate = k == 0 ? 1 : verdict;
		verdict = 0;
		a.data = (uintptr_t)x, a.numel = 64, a.flag = (uintptr_t)&verdict;
		a.out = (uintptr_t)&out, a.scratch = (uintptr_t)&scratch, a.seq = 9 + k;
		run_grid(&a, 2, 64);
		assert_int_equal(out.flags, NW_GPU_R_SCANNED);
		assert_int_equal(out.done, 9 + k);
		assert_int_equal(out.scanned, 64);
		assert_int_equal(out.neginf, 13);
		assert_int_equal(nw_key_bits(out.max_key, NW_DT_F32), 0x427c0000); /* 63.0f */
		assert_int_equal(verdict, 1);
		assert_memory_equal(&scratch, &zero_scratch, sizeof(scratch));
	}
	/* a finite scan's verdict is 0, and it gates out the next */
	for (i = 0; i < 64; i++)
		x[i] = (float)i;
	memset(&out, 0, sizeof(out));
	a.gate = 0, a.seq = 20;
	run_grid(&a, 2, 64);
	assert_int_equal(out.neginf, 0);
	assert_int_equal(verdict, 0);
	gate = verdict;
	a.gate = (uintptr_t)&gate, a.data = 16, a.numel = 1 << 20, a.flag = 0;
	check_unscanned(&a, NW_SCAN_THREADS, NW_GPU_R_GATED_OUT);
}

/* A dtype the kernel does not read, or a block that is not whole warps: said, nothing read. */
static void test_not_scanned(void **state)
{
	static const __u32 bad_threads[] = {0, 16, 48, 100, NW_SCAN_THREADS + 32, 1024};
	struct nw_scan_args a = {.data = 16, .numel = 1 << 20, .dtype = NW_DT_NONE};
	size_t i;

	(void)state;
	check_unscanned(&a, NW_SCAN_THREADS, NW_GPU_R_DTYPE);
	a.dtype = 9;
	check_unscanned(&a, 32, NW_GPU_R_DTYPE);
	a.dtype = NW_DT_F16;
	for (i = 0; i < sizeof(bad_threads) / sizeof(*bad_threads); i++)
		check_unscanned(&a, bad_threads[i], NW_GPU_R_LAUNCH_ERROR);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_plan),	      cmocka_unit_test(test_specials),
		cmocka_unit_test(test_special_alone), cmocka_unit_test(test_random),
		cmocka_unit_test(test_large_libc),    cmocka_unit_test(test_no_finite_and_extremes),
		cmocka_unit_test(test_bytewise),      cmocka_unit_test(test_scratch_reused),
		cmocka_unit_test(test_gate),	      cmocka_unit_test(test_not_scanned),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
