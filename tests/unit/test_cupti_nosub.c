// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Another CUPTI subscriber holds the callbacks (torch.profiler, Nsight): the
 * library degrades, never breaks the process. InitializeInjection still
 * returns 1, a daemon is still served, READY says OTHER_SUB, one NOTICE says
 * why, and launches do nothing.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "mock.h"
#include "daemon.h"
#include "setup.h"
#include "nanwatch.h"

static struct tlib lib;
static struct tdaemon dmn;

static int setup(void **state)
{
	(void)state;
	setenv("NWMOCK_SUBSCRIBE_RESULT", "39", 1); /* CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_... */
	if (td_ring_open(&dmn) || tlib_load(&lib, 1))
		return -1;
	return tlib_initialize(&lib);
}

static int teardown(void **state)
{
	(void)state;
	td_close(&dmn);
	tlib_cleanup(&lib);
	return 0;
}

static void test_other_subscriber(void **state)
{
	static float data[4] = {0, 1, 2, 3};
	struct nw_gpu_ready rd;
	struct nw_gpu_result r;
	int i;

	(void)state;
	assert_false(mock_cupti_subscribed);
	assert_false(mock_cupti_enabled(307));
	assert_int_equal(td_connect(&dmn, lib.sock, &rd), 0);
	assert_true(rd.state & NW_GPU_ST_OTHER_SUB);
	assert_false(rd.state & NW_GPU_ST_SUBSCRIBED);
	mock_cuda_reset_log();
	td_put(&dmn, data, 4, NW_DT_F32, gettid(), 0);
	for (i = 0; i < 10; i++)
		assert_int_equal(
			cuLaunchKernel((CUfunction)0x77, 1, 1, 1, 1, 1, 1, 0, NULL, NULL, NULL), 0);
	assert_int_equal(mock_cuda_scans(), 0);
	/* the notice comes with the first STATS at the latest; no result ever */
	assert_int_equal(td_stats_until(&dmn, NW_GPU_S_LAUNCHES, 0), 0);
	assert_int_not_equal(td_result(&dmn, 1, &r), 0);
	assert_true(td_has_notice(&dmn, "another CUPTI subscriber"));
	assert_int_equal(dmn.stats[NW_GPU_S_LAUNCHES], 0);
	assert_int_equal(dmn.stats[NW_GPU_S_SCANS], 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_other_subscriber),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
