// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The library dlopen'ed into a running process (nanwatchd --inject), not by
 * the driver: its constructor starts the worker, which subscribes late and
 * listens; READY says LATE and SUBSCRIBED; a launch after the connect scans.
 * Also: InitializeInjection after that starts nothing twice.
 */
#include <math.h>
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
	if (td_ring_open(&dmn) || tlib_load(&lib, 0))
		return -1;
	return tlib_wait_socket(&lib);
}

static int teardown(void **state)
{
	(void)state;
	td_close(&dmn);
	tlib_cleanup(&lib);
	return 0;
}

static void test_late_start(void **state)
{
	static float data[8] = {1, NAN, 3, INFINITY, 5, -INFINITY, 7, 8};
	int (*init)(void);
	struct nw_gpu_ready rd;
	struct nw_gpu_result r;
	__u64 seq;

	(void)state;
	assert_int_equal(td_connect(&dmn, lib.sock, &rd), 0);
	assert_int_equal(rd.state & (NW_GPU_ST_LATE | NW_GPU_ST_SUBSCRIBED | NW_GPU_ST_KERNEL),
			 NW_GPU_ST_LATE | NW_GPU_ST_SUBSCRIBED | NW_GPU_ST_KERNEL);
	assert_true(mock_cupti_subscribed);
	*(void **)&init = dlsym(lib.handle, "InitializeInjection");
	assert_non_null(init);
	assert_int_equal(init(), 1);
	assert_int_equal(mock_module_loads, 1);
	cuLaunchKernel((CUfunction)0x77, 1, 1, 1, 1, 1, 1, 0, (CUstream)0x61, NULL, NULL);
	mock_cuda_reset_log();
	seq = td_put(&dmn, data, 8, NW_DT_F32, gettid(), 0);
	cuLaunchKernel((CUfunction)0x77, 1, 1, 1, 1, 1, 1, 0, (CUstream)0x62, NULL, NULL);
	assert_int_equal(mock_cuda_scans(), 1);
	assert_ptr_equal(mock_launches[0].stream, (CUstream)0x61);
	assert_int_equal(td_result(&dmn, seq, &r), 0);
	assert_int_equal(r.nan, 1);
	assert_int_equal(r.posinf, 1);
	assert_int_equal(r.neginf, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_late_start),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
