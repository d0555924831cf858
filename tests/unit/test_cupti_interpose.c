// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * NANWATCH_CUPTI_LAUNCH=interpose against the mocks: no launch callback is
 * enabled; a library loaded while a daemon is connected gets its imports of
 * cuLaunchKernel, cuLaunchKernelEx and cudaLaunchKernel (bound at load,
 * RELRO) pointed at the library's wrappers, which enqueue the scan on the
 * previous launch's stream before the launch; cuGetProcAddress hands out the
 * wrapper. A runtime launch (cudaLaunchKernel, nvcc's __cudaLaunchKernel,
 * cudaLaunchKernelExC, each with its _ptsz twin) is one launch, not two, and
 * is found in a libcudart that is not in the global scope (torch loads its
 * own RTLD_LOCAL).
 */
#include <math.h>
#include <setjmp.h>
#include <string.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "mock.h"
#include "daemon.h"
#include "setup.h"
#include "nanwatch.h"

#define S1 ((CUstream)0x71)
#define S2 ((CUstream)0x72)
#define S3 ((CUstream)0x73)

static struct tlib lib;
static struct tdaemon dmn;
static float nan2[8] = {0, NAN, 2, 3, NAN, 5, 6, 7};
static int (*launch)(CUstream), (*launch_ex)(CUstream), (*runtime_launch)(CUstream);

static int setup(void **state)
{
	(void)state;
	setenv("NANWATCH_CUPTI_LAUNCH", "interpose", 1);
	if (td_ring_open(&dmn) || tlib_load(&lib, 1))
		return -1;
	/* only the launches scan here, never the worker */
	setenv("NANWATCH_CUPTI_DRAIN_MS", "600000", 1);
	return tlib_initialize(&lib);
}

static int teardown(void **state)
{
	(void)state;
	td_close(&dmn);
	tlib_cleanup(&lib);
	return 0;
}

/* The scan of seq in the log: its index, or -1. */
static int scan_at(__u64 seq)
{
	int i;

	for (i = 0; i < mock_nlaunches; i++)
		if (mock_launches[i].f == MOCK_SCAN_FN && mock_launches[i].args.seq == seq)
			return i;
	return -1;
}

static void test_mode(void **state)
{
	struct nw_gpu_ready rd;

	(void)state;
	assert_false(mock_cupti_enabled(NWC_CBID_cuLaunchKernel));
	assert_false(mock_cupti_enabled(NWC_CBID_cuLaunchKernelEx));
	assert_true(mock_cupti_enabled(NWC_CBID_cuGetProcAddress_v2));
	assert_int_equal(td_connect(&dmn, lib.sock, &rd), 0);
	assert_int_equal(rd.mode, NW_GPU_MODE_INTERPOSE);
	assert_true(rd.state & NW_GPU_ST_SUBSCRIBED);
}

/* Loaded after the connect: patched by the worker; its launches then scan first. */
static void test_imports(void **state)
{
	char path[PATH_MAX];
	struct nw_gpu_result r;
	int (*rt_launch)(int, CUstream);
	const char *(*rt_name)(int);
	void *(*entry)(int);
	CUstream prev;
	void *app;
	__u64 seq;
	int i, at;

	(void)state;
	snprintf(path, sizeof(path), "%.*s/libnwmock_app.so",
		 (int)(strrchr(lib.lib, '/') - lib.lib), lib.lib);
	app = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	assert_non_null(app);
	*(void **)&launch = dlsym(app, "app_launch");
	*(void **)&launch_ex = dlsym(app, "app_launch_ex");
	*(void **)&runtime_launch = dlsym(app, "app_runtime_launch");
	assert_true(launch && launch_ex && runtime_launch);
	/* the runtime came in with the application, not into the global scope */
	assert_null(dlsym(RTLD_DEFAULT, "cudaLaunchKernel"));
	/* until the worker has patched it, a launch is only a launch */
	mock_cuda_reset_log();
	seq = td_put(&dmn, nan2, 8, NW_DT_F32, gettid(), 0);
	for (i = 0; i < 20000 && scan_at(seq) < 0; i++) {
		assert_int_equal(launch(S1), 0);
		usleep(1000);
	}
	at = scan_at(seq);
	assert_true(at >= 0);
	/* its imports now lead to the library's wrappers, not to the entry points themselves */
	*(void **)&entry = dlsym(app, "app_entry");
	assert_non_null(entry);
	assert_ptr_not_equal(entry(0), dlsym(app, "cuLaunchKernel"));
	assert_ptr_not_equal(entry(1), dlsym(app, "cuLaunchKernelEx"));
	assert_ptr_not_equal(entry(2), dlsym(app, "cudaLaunchKernel"));
	assert_non_null(dlsym(app, "cudaLaunchKernel"));
	assert_ptr_equal(mock_launches[at].stream, S1);
	assert_ptr_equal(mock_launches[at + 1].f, MOCK_APP_FN);
	assert_int_equal(td_result(&dmn, seq, &r), 0);
	assert_int_equal(r.nan, 2);

	/* cuLaunchKernelEx: scanned on the previous launch's stream, before it */
	mock_cuda_reset_log();
	seq = td_put(&dmn, nan2, 8, NW_DT_F32, gettid(), 0);
	assert_int_equal(launch_ex(S2), 0);
	assert_int_equal(mock_nlaunches, 2);
	assert_int_equal(scan_at(seq), 0);
	assert_ptr_equal(mock_launches[0].stream, S1);
	assert_ptr_equal(mock_launches[1].stream, S2);

	/* cudaLaunchKernel: the same, and the driver launch under it is not a second one */
	mock_cuda_reset_log();
	seq = td_put(&dmn, nan2, 8, NW_DT_F32, gettid(), 0);
	assert_int_equal(runtime_launch(S3), 0);
	assert_int_equal(mock_nlaunches, 2);
	assert_int_equal(scan_at(seq), 0);
	assert_ptr_equal(mock_launches[0].stream, S2);
	assert_ptr_equal(mock_launches[1].stream, S3);
	assert_int_equal(mock_nested_calls, 0);

	/*
	 * The runtime's other entry points: nvcc 12.8 and later compile <<<>>> to
	 * __cudaLaunchKernel (on an H200, every torch 2.11 kernel came that way, and
	 * none was scanned before this test), and each has a _ptsz twin whose stream 0
	 * is the thread's own default stream.
	 */
	*(void **)&rt_launch = dlsym(app, "app_rt_launch");
	*(void **)&rt_name = dlsym(app, "app_rt_name");
	assert_true(rt_launch && rt_name);
	prev = S3;
	for (i = 0; i < MOCK_APP_RT_N; i++) {
		/* stream 0 to __cudaLaunchKernel_ptsz, cudaLaunchKernelExC and its _ptsz */
		CUstream s = i == 1 || i >= 3 ? NULL : S1;
		int ptsz = strstr(rt_name(i), "_ptsz") != NULL;

		assert_ptr_not_equal(entry(3 + i), dlsym(app, rt_name(i)));
		mock_cuda_reset_log();
		seq = td_put(&dmn, nan2, 8, NW_DT_F32, gettid(), 0);
		assert_int_equal(rt_launch(i, s), 0);
		/* one scan before one launch: the driver launch under it is not a second */
		assert_int_equal(mock_nlaunches, 2);
		assert_int_equal(scan_at(seq), 0);
		assert_ptr_equal(mock_launches[0].stream, prev);
		assert_ptr_equal(mock_launches[1].f, MOCK_APP_FN);
		assert_ptr_equal(mock_launches[1].stream,
				 ptsz && !s ? NWC_CU_STREAM_PER_THREAD : s);
		assert_int_equal(td_result(&dmn, seq, &r), 0);
		assert_int_equal(r.nan, 2);
		prev = mock_launches[1].stream;
	}
	assert_int_equal(mock_nested_calls, 0);
	assert_int_equal(runtime_launch(S3), 0); /* the stream the next test expects */
	dlclose(app);
}

/* cuGetProcAddress hands out the wrapper, which scans before launching. */
static void test_procaddr(void **state)
{
	nwc_curesult (*fn)(CUfunction, unsigned int, unsigned int, unsigned int, unsigned int,
			   unsigned int, unsigned int, unsigned int, CUstream, void **, void **);
	void *real = dlsym(RTLD_DEFAULT, "cuLaunchKernel"), *got = NULL;
	__u64 seq;

	(void)state;
	assert_int_equal(cuGetProcAddress_v2("cuLaunchKernel", &got, 13000, 0, NULL), 0);
	assert_non_null(got);
	assert_ptr_not_equal(got, real);
	*(void **)&fn = got;
	mock_cuda_reset_log();
	seq = td_put(&dmn, nan2, 8, NW_DT_F32, gettid(), 0);
	assert_int_equal(fn(MOCK_APP_FN, 1, 1, 1, 1, 1, 1, 0, S1, NULL, NULL), 0);
	assert_int_equal(mock_nlaunches, 2);
	assert_int_equal(scan_at(seq), 0);
	assert_ptr_equal(mock_launches[0].stream, S3);
	assert_ptr_equal(mock_launches[1].f, MOCK_APP_FN);
	/* other entry points are handed out as they are */
	assert_int_equal(cuGetProcAddress_v2("cuCtxGetCurrent", &got, 13000, 0, NULL), 0);
	assert_ptr_equal(got, dlsym(RTLD_DEFAULT, "cuCtxGetCurrent"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mode),
		cmocka_unit_test(test_imports),
		cmocka_unit_test(test_procaddr),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
