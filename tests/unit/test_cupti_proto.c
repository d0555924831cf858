// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * libnanwatch_cupti.so's codecs (cupti/proto.c): request decoding from a ring
 * laid out like gpu_ring (unwritten, overwritten, torn and absurd entries),
 * HELLO checking, result encoding and batching into RESULT messages, and the
 * declarations of cupti/cuabi.h against CUDA's own headers where installed.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "nwcupti.h"
#include "nanwatch.h"

#if __has_include(<cupti.h>)
#include <cupti.h>
/* the library's own declarations (cuabi.h) match CUDA's */
_Static_assert(NWC_CBID_cuLaunchKernel == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, "cbid");
_Static_assert(NWC_CBID_cuLaunchKernel_ptsz == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz, "cbid");
_Static_assert(NWC_CBID_cuLaunchKernelEx == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, "cbid");
_Static_assert(NWC_CBID_cuLaunchKernelEx_ptsz == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
	       "cbid");
_Static_assert(NWC_CBID_cuLaunchCooperativeKernel ==
		       CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
	       "cbid");
_Static_assert(NWC_CBID_cuLaunchCooperativeKernel_ptsz ==
		       CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
	       "cbid");
_Static_assert(NWC_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED ==
		       CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED,
	       "result");
_Static_assert(NWC_CUPTI_API_ENTER == CUPTI_API_ENTER && NWC_CUPTI_API_EXIT == CUPTI_API_EXIT,
	       "site");
_Static_assert(NWC_CUPTI_CB_DOMAIN_DRIVER_API == CUPTI_CB_DOMAIN_DRIVER_API, "domain");
_Static_assert(NWC_CU_MEMHOSTALLOC_DEVICEMAP == CU_MEMHOSTALLOC_DEVICEMAP &&
		       NWC_CU_MEMHOSTALLOC_PORTABLE == CU_MEMHOSTALLOC_PORTABLE,
	       "flags");
_Static_assert(NWC_CU_STREAM_PER_THREAD == CU_STREAM_PER_THREAD, "stream");
_Static_assert(sizeof(nwc_callback_data) == sizeof(CUpti_CallbackData), "callback data");
_Static_assert(offsetof(nwc_callback_data, functionParams) ==
		       offsetof(CUpti_CallbackData, functionParams),
	       "callback data");
_Static_assert(offsetof(nwc_callback_data, context) == offsetof(CUpti_CallbackData, context),
	       "callback data");
_Static_assert(offsetof(nwc_launch_params, hStream) == offsetof(cuLaunchKernel_params, hStream),
	       "params");
_Static_assert(offsetof(nwc_launch_params, hStream) ==
		       offsetof(cuLaunchKernel_ptsz_params, hStream),
	       "params");
_Static_assert(offsetof(nwc_launch_params, hStream) ==
		       offsetof(cuLaunchCooperativeKernel_params, hStream),
	       "params");
_Static_assert(offsetof(nwc_launch_ex_params, config) == offsetof(cuLaunchKernelEx_params, config),
	       "params");
_Static_assert(offsetof(nwc_launch_config, hStream) == offsetof(CUlaunchConfig, hStream), "config");
#if __has_include(<driver_types.h>)
#include <driver_types.h>
/* cudaLaunchKernelExC's config, read by the interpose wrapper */
_Static_assert(offsetof(nwc_rt_launch_config, stream) == offsetof(cudaLaunchConfig_t, stream),
	       "runtime config");
_Static_assert(sizeof(nwc_dim3) == sizeof(dim3), "dim3");
#endif
#define HAVE_CUDA_HEADERS 1
#else
#define HAVE_CUDA_HEADERS 0
#endif

static struct nw_gpu_req ring[NW_GPU_SLOTS + 1];

static void put(__u64 pos, __u64 data, __u64 numel, __u64 gate)
{
	struct nw_gpu_req *e = &ring[1 + pos % NW_GPU_SLOTS];

	memset(e, 0, sizeof(*e));
	e->data = data;
	e->numel = numel;
	e->gate = gate;
	e->tid = 4242;
	e->dtype = NW_DT_BF16;
	e->role = NW_GPU_INPUT;
	e->device = 1;
	e->seq = pos + 1;
}

static void test_req_read(void **state)
{
	struct nwc_req r;

	(void)state;
	memset(ring, 0, sizeof(ring));
	put(5, 0x7f0000001000ULL, 1000, 3);
	assert_int_equal(nwc_req_read(ring, 5, &r), 0);
	assert_int_equal(r.seq, 6);
	assert_int_equal(r.data, 0x7f0000001000ULL);
	assert_int_equal(r.numel, 1000);
	assert_int_equal(r.gate, 3);
	assert_int_equal(r.tid, 4242);
	assert_int_equal(r.dtype, NW_DT_BF16);
	assert_int_equal(r.role, NW_GPU_INPUT);
	assert_int_equal(r.device, 1);
	/* never written; overwritten by the position NW_GPU_SLOTS later */
	assert_int_equal(nwc_req_read(ring, 6, &r), -ENOENT);
	put(7 + NW_GPU_SLOTS, 0x1000, 1, 0);
	assert_int_equal(nwc_req_read(ring, 7, &r), -ESTALE);
	assert_int_equal(nwc_req_read(ring, 7 + NW_GPU_SLOTS, &r), 0);
	/* meaningless: no address, no elements, more than anything could hold */
	put(8, 0, 10, 0);
	assert_int_equal(nwc_req_read(ring, 8, &r), -EINVAL);
	put(9, 0x1000, 0, 0);
	assert_int_equal(nwc_req_read(ring, 9, &r), -EINVAL);
	put(10, 0x1000, 1ULL << 41, 0);
	assert_int_equal(nwc_req_read(ring, 10, &r), -EINVAL);
	/* a gate is an earlier request, or none */
	put(11, 0x1000, 1, 12);
	assert_int_equal(nwc_req_read(ring, 11, &r), 0);
	assert_int_equal(r.gate, 0);
}

static void test_hello(void **state)
{
	struct {
		struct nw_gpu_msg m;
		struct nw_gpu_hello h;
	} h = {{NW_GPU_MSG_HELLO, sizeof(struct nw_gpu_hello)},
	       {NW_GPU_VERSION, NW_GPU_SLOTS, NW_GPU_REQ_SIZE, 0}};

	(void)state;
	assert_int_equal(nwc_hello_check(&h, sizeof(h)), 0);
	assert_int_equal(nwc_hello_check(&h, sizeof(h) - 1), -EPROTO);
	h.h.version = NW_GPU_VERSION + 1;
	assert_int_equal(nwc_hello_check(&h, sizeof(h)), -EPROTO);
	h.h.version = NW_GPU_VERSION;
	h.h.slots = NW_GPU_SLOTS / 2;
	assert_int_equal(nwc_hello_check(&h, sizeof(h)), -EPROTO);
	h.h.slots = NW_GPU_SLOTS;
	h.m.type = NW_GPU_MSG_READY;
	assert_int_equal(nwc_hello_check(&h, sizeof(h)), -EPROTO);
}

static void test_results(void **state)
{
	struct nw_scan_out o = {.scanned = 10,
				.nan = 2,
				.posinf = 1,
				.min_key = 5,
				.max_key = 9,
				.flags = NW_GPU_R_SCANNED,
				.done = 77};
	struct nw_gpu_result r, many[100], back[100];
	char buf[NW_GPU_MSG_MAX];
	struct nw_gpu_msg m;
	size_t len, used, i, got = 0;

	(void)state;
	nwc_result_from_out(&o, 77, &r);
	assert_int_equal(r.seq, 77);
	assert_int_equal(r.scanned, 10);
	assert_int_equal(r.nan, 2);
	assert_int_equal(r.posinf, 1);
	assert_int_equal(r.neginf, 0);
	assert_int_equal(r.min_key, 5);
	assert_int_equal(r.max_key, 9);
	assert_int_equal(r.flags, NW_GPU_R_SCANNED);
	assert_true(nwc_result_wanted(&r, 0, 0));
	r.nan = r.posinf = 0;
	assert_false(nwc_result_wanted(&r, 0, 0));
	assert_true(nwc_result_wanted(&r, 1, 0));
	assert_true(nwc_result_wanted(&r, 0, 1));
	/* 100 results: as many as fit in one message, then the rest */
	for (i = 0; i < 100; i++) {
		memset(&many[i], 0, sizeof(many[i]));
		many[i].seq = i + 1;
		many[i].nan = i;
	}
	while (got < 100) {
		len = nwc_msg_results(buf, sizeof(buf), many + got, 100 - got, &used);
		assert_true(len > 0 && len <= NW_GPU_MSG_MAX);
		memcpy(&m, buf, sizeof(m));
		assert_int_equal(m.type, NW_GPU_MSG_RESULT);
		assert_int_equal(m.len, used * sizeof(r));
		assert_int_equal(len, sizeof(m) + m.len);
		memcpy(back + got, buf + sizeof(m), m.len);
		got += used;
	}
	assert_int_equal(got, 100);
	assert_memory_equal(back, many, sizeof(many));
	assert_int_equal(nwc_msg_results(buf, sizeof(buf), many, 0, &used), 0);
	assert_int_equal(nwc_msg_put(buf, 16, NW_GPU_MSG_NOTICE, "longer than sixteen", 19), 0);
}

static void test_blocks_and_dtypes(void **state)
{
	(void)state;
	assert_int_equal(nwc_scan_blocks(1), 1);
	assert_int_equal(nwc_scan_blocks(NW_SCAN_THREADS), 1);
	assert_int_equal(nwc_scan_blocks(NW_SCAN_THREADS + 1), 2);
	assert_int_equal(nwc_scan_blocks(1ULL << 40), NW_SCAN_MAX_BLOCKS);
	assert_int_equal(nwc_dtype_size(NW_DT_F16), 2);
	assert_int_equal(nwc_dtype_size(NW_DT_BF16), 2);
	assert_int_equal(nwc_dtype_size(NW_DT_F32), 4);
	assert_int_equal(nwc_dtype_size(NW_DT_F64), 8);
	assert_int_equal(nwc_dtype_size(NW_DT_NONE), 0);
	assert_int_equal(nwc_dtype_size(99), 0);
}

static void test_cuda_headers(void **state)
{
	(void)state;
	if (!HAVE_CUDA_HEADERS)
		skip();
	/* the _Static_asserts above held at compile time */
	assert_int_equal(HAVE_CUDA_HEADERS, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_req_read),     cmocka_unit_test(test_hello),
		cmocka_unit_test(test_results),	     cmocka_unit_test(test_blocks_and_dtypes),
		cmocka_unit_test(test_cuda_headers),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
