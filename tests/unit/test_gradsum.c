// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * attach/gradsum.c: a gradient's chunks from the gradient data ring counted into the
 * histogram BPF would have counted (the same buckets, float32 and bfloat16), and every way
 * the chunks may fail to add up drops the gradient instead of sending a wrong norm.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "attach/gradsum.h"

#define DATA_MAX 4096

struct rec {
	struct nw_grad_data d;
	unsigned char data[DATA_MAX];
};

static struct nw_grad grad(uint32_t id, uint32_t chunks, uint64_t elems, uint32_t dtype)
{
	struct nw_grad g;

	memset(&g, 0, sizeof(g));
	g.type = NW_EV_GRAD;
	g.data_id = id;
	g.data_chunks = chunks;
	g.scanned = elems;
	g.dtype = dtype;
	g.hist[7] = 99; /* what BPF leaves there must not survive */
	return g;
}

/* Chunk index of id: n float32 values from vals. */
static void send_f32(struct gradsum *gs, uint32_t id, uint32_t index, const float *vals, int n)
{
	struct rec r;

	memset(&r, 0, sizeof(r));
	r.d = (struct nw_grad_data){.type = NW_EV_GRAD_DATA,
				    .tid = 7,
				    .id = id,
				    .bytes = (uint32_t)n * 4,
				    .dtype = NW_DT_F32,
				    .index = index};
	memcpy(r.data, vals, (size_t)n * 4);
	gradsum__chunk(gs, &r, sizeof(r.d) + r.d.bytes);
}

/* The bucket BPF's hist_f32 gives v. */
static uint32_t bucket_f32(float v)
{
	uint32_t bits;

	memcpy(&bits, &v, 4);
	return (bits >> 21) & (NW_HIST_BUCKETS - 1);
}

static void test_f32_two_chunks(void **state)
{
	struct gradsum *gs = gradsum__new();
	float a[3] = {1.0f, -1.0f, 0.0f}, b[2] = {3.0f, INFINITY};
	struct nw_grad g = grad(5, 2, 5, NW_DT_F32);
	uint32_t sum = 0;
	int i;

	(void)state;
	send_f32(gs, 5, 0, a, 3);
	send_f32(gs, 5, 1, b, 2);
	assert_int_equal(gradsum__finish(gs, &g), 0);
	assert_int_equal(g.hist[bucket_f32(1.0f)], 2); /* the sign is not counted */
	assert_int_equal(g.hist[0], 1);
	assert_int_equal(g.hist[bucket_f32(3.0f)], 1);
	assert_true(bucket_f32(INFINITY) >= NW_HIST_NONFINITE);
	assert_int_equal(g.hist[bucket_f32(INFINITY)], 1);
	assert_int_equal(g.hist[7], 0);
	for (i = 0; i < NW_HIST_BUCKETS; i++)
		sum += g.hist[i];
	assert_int_equal(sum, 5);
	assert_int_equal(gradsum__dropped(gs), 0);
	/* the slot is free again: the id's second nw_grad finds nothing */
	g = grad(5, 2, 5, NW_DT_F32);
	assert_int_equal(gradsum__finish(gs, &g), -1);
	assert_int_equal(gradsum__dropped(gs), 1);
	gradsum__free(gs);
}

static void test_bf16(void **state)
{
	struct gradsum *gs = gradsum__new();
	struct rec r;
	uint16_t h[2];
	float one = 1.0f, big = 1e30f;
	uint32_t bits;
	struct nw_grad g = grad(9, 1, 2, NW_DT_BF16);

	(void)state;
	memcpy(&bits, &one, 4);
	h[0] = (uint16_t)(bits >> 16);
	memcpy(&bits, &big, 4);
	h[1] = (uint16_t)(bits >> 16);
	memset(&r, 0, sizeof(r));
	r.d = (struct nw_grad_data){
		.type = NW_EV_GRAD_DATA, .id = 9, .bytes = 4, .dtype = NW_DT_BF16};
	memcpy(r.data, h, 4);
	gradsum__chunk(gs, &r, sizeof(r.d) + 4);
	assert_int_equal(gradsum__finish(gs, &g), 0);
	/* a bfloat16 is a float32's top half: the float32's bucket */
	assert_int_equal(g.hist[bucket_f32(1.0f)], 1);
	assert_int_equal(g.hist[bucket_f32(1e30f)], 1);
	gradsum__free(gs);
}

/* A chunk missing, one out of order, a count or dtype that does not match: dropped. */
static void test_mismatch_drops(void **state)
{
	struct gradsum *gs = gradsum__new();
	float a[2] = {1.0f, 2.0f};
	struct nw_grad g;

	(void)state;
	send_f32(gs, 1, 0, a, 2);
	g = grad(1, 2, 4, NW_DT_F32); /* BPF sent two chunks: one never came */
	assert_int_equal(gradsum__finish(gs, &g), -1);
	send_f32(gs, 2, 1, a, 2); /* index 1 first */
	send_f32(gs, 2, 0, a, 2);
	g = grad(2, 2, 4, NW_DT_F32);
	assert_int_equal(gradsum__finish(gs, &g), -1);
	send_f32(gs, 3, 0, a, 2);
	g = grad(3, 1, 3, NW_DT_F32); /* elements */
	assert_int_equal(gradsum__finish(gs, &g), -1);
	send_f32(gs, 4, 0, a, 2);
	g = grad(4, 1, 2, NW_DT_BF16); /* dtype */
	assert_int_equal(gradsum__finish(gs, &g), -1);
	assert_int_equal(gradsum__dropped(gs), 4);
	gradsum__free(gs);
}

/* Records that lie about their size, or are not chunks, change nothing. */
static void test_bad_records(void **state)
{
	struct gradsum *gs = gradsum__new();
	struct rec r;
	struct nw_grad g = grad(6, 0, 0, NW_DT_F32);

	(void)state;
	memset(&r, 0, sizeof(r));
	r.d = (struct nw_grad_data){
		.type = NW_EV_GRAD_DATA, .id = 6, .bytes = 64, .dtype = NW_DT_F32};
	gradsum__chunk(gs, &r, sizeof(r.d) + 8); /* says 64 bytes, holds 8 */
	r.d.bytes = NW_SCAN_CHUNK + 4;
	gradsum__chunk(gs, &r, sizeof(r)); /* more than a chunk */
	r.d.bytes = 8;
	r.d.type = NW_EV_GRAD;
	gradsum__chunk(gs, &r, sizeof(r.d) + 8);
	gradsum__chunk(gs, &r, 3);
	gradsum__chunk(NULL, &r, sizeof(r));
	/* none was counted: a gradient of no bytes and no chunk adds up */
	assert_int_equal(gradsum__finish(gs, &g), 0);
	assert_int_equal(gradsum__dropped(gs), 0);
	gradsum__free(gs);
}

/* More gradients at once than slots: the one unused longest loses its slot, no other. */
static void test_eviction(void **state)
{
	struct gradsum *gs = gradsum__new();
	float a[1] = {1.0f};
	struct nw_grad g;
	uint32_t id;

	(void)state;
	for (id = 1; id <= GRADSUM_SLOTS + 1; id++)
		send_f32(gs, id, 0, a, 1);
	g = grad(1, 1, 1, NW_DT_F32);
	assert_int_equal(gradsum__finish(gs, &g), -1);
	for (id = 2; id <= GRADSUM_SLOTS + 1; id++) {
		g = grad(id, 1, 1, NW_DT_F32);
		assert_int_equal(gradsum__finish(gs, &g), 0);
	}
	assert_int_equal(gradsum__dropped(gs), 1);
	gradsum__free(gs);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_f32_two_chunks), cmocka_unit_test(test_bf16),
		cmocka_unit_test(test_mismatch_drops), cmocka_unit_test(test_bad_records),
		cmocka_unit_test(test_eviction),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
