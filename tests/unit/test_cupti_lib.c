// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * libnanwatch_cupti.so's host side against mock libcuda and libcupti
 * (tests/unit/cupti/): InitializeInjection, idle, the daemon handshake over the
 * library's unix socket with a memfd ring laid out like gpu_ring, launch
 * order per thread, re-entrancy, capture skipping, gating, dtype, the
 * worker's scan of requests whose thread stopped launching, disconnect.
 * The tests run in order in one process: the library starts once.
 */
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <sys/wait.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "mock.h"
#include "daemon.h"
#include "setup.h"
#include "nanwatch.h"

#define S1 ((CUstream)0x51)
#define S2 ((CUstream)0x52)
#define S3 ((CUstream)0x53)
#define S4 ((CUstream)0x54)
#define S5 ((CUstream)0x55)
#define USER_FN ((CUfunction)0x77)

static struct tlib lib;
static struct tdaemon dmn;
static float nan3[16], finite16[16];
static char planted[PATH_MAX]; /* where the socket used to be, taken before the library starts */

static void user_launch(CUstream s)
{
	assert_int_equal(cuLaunchKernel(USER_FN, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL), 0);
}

static int setup(void **state)
{
	int i;

	(void)state;
	for (i = 0; i < 16; i++)
		nan3[i] = finite16[i] = (float)i;
	nan3[2] = nan3[5] = nan3[9] = NAN;
	if (td_ring_open(&dmn) || tlib_load(&lib, 1))
		return -1;
	/* a name anyone could foresee, taken: the library must not need it, nor remove it */
	snprintf(planted, sizeof(planted), "%s/.nanwatch-cupti-%d.sock", lib.dir, (int)getpid());
	if (close(open(planted, O_CREAT | O_WRONLY | O_CLOEXEC, 0644)))
		return -1;
	return tlib_initialize(&lib);
}

static int teardown(void **state)
{
	(void)state;
	td_close(&dmn);
	unlink(planted);
	tlib_cleanup(&lib);
	return 0;
}

/* InitializeInjection subscribes and enables the launch callbacks; no CUDA work yet. */
static void test_initialize(void **state)
{
	struct stat st;

	(void)state;
	assert_true(mock_cupti_subscribed);
	assert_true(mock_cupti_enabled(307));
	assert_true(mock_cupti_enabled(442));
	assert_true(mock_cupti_enabled(652));
	assert_true(mock_cupti_enabled(653));
	assert_true(mock_cupti_enabled(477));
	assert_int_equal(mock_module_loads + mock_host_allocs + mock_mem_allocs, 0);
	assert_int_equal(stat(lib.sock, &st), 0);
	assert_true(S_ISSOCK(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0600);
}

/*
 * The socket is NW_GPU_SOCK_NAME in a directory of its own, made by mkdtemp in
 * NANWATCH_CUPTI_DIR: mode 0700, ours, a name nobody could take first. The path a planted
 * file took is left as it was.
 */
static void test_private_dir(void **state)
{
	char dir[PATH_MAX], want[64], *slash;
	struct stat st;

	(void)state;
	snprintf(dir, sizeof(dir), "%s", lib.sock);
	slash = strrchr(dir, '/');
	assert_string_equal(slash + 1, NW_GPU_SOCK_NAME);
	*slash = 0;
	slash = strrchr(dir, '/');
	*slash = 0;
	assert_string_equal(dir, lib.dir);
	snprintf(want, sizeof(want), NW_GPU_SOCK_DIR_PREFIX "%d.", (int)getpid());
	assert_int_equal(strncmp(slash + 1, want, strlen(want)), 0);
	assert_int_equal(strlen(slash + 1), strlen(want) + 6); /* mkdtemp's XXXXXX */
	*slash = '/';
	assert_int_equal(lstat(dir, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0700);
	assert_int_equal(st.st_uid, getuid());
	assert_int_equal(lstat(planted, &st), 0);
	assert_true(S_ISREG(st.st_mode));
}

/* No daemon: launches do nothing but launch, whatever the ring holds. */
static void test_idle(void **state)
{
	int i;

	(void)state;
	mock_cuda_reset_log();
	td_put(&dmn, nan3, 16, NW_DT_F32, gettid(), 0);
	for (i = 0; i < 100; i++)
		user_launch(i & 1 ? S1 : S2);
	assert_int_equal(mock_nlaunches, 100);
	assert_int_equal(mock_cuda_scans(), 0);
	assert_int_equal(mock_capture_calls, 0);
	assert_int_equal(mock_module_loads, 0);
}

/* HELLO with the ring's fd, READY back; the kernel and memory are set up on connect. */
static void test_handshake(void **state)
{
	struct nw_gpu_ready rd;

	(void)state;
	assert_int_equal(td_connect(&dmn, lib.sock, &rd), 0);
	assert_int_equal(rd.version, NW_GPU_VERSION);
	assert_int_equal(rd.mode, NW_GPU_MODE_CALLBACK);
	assert_int_equal(rd.state & (NW_GPU_ST_SUBSCRIBED | NW_GPU_ST_KERNEL | NW_GPU_ST_PINNED),
			 NW_GPU_ST_SUBSCRIBED | NW_GPU_ST_KERNEL | NW_GPU_ST_PINNED);
	assert_false(rd.state & (NW_GPU_ST_OTHER_SUB | NW_GPU_ST_LATE));
	assert_int_equal(rd.devices, 1);
	assert_int_equal(rd.cuda_driver, 13000);
	assert_int_equal(mock_module_loads, 1);
	/* the library's embedded fatbin (tests/unit/cupti/fatbin_standin.c) */
	assert_non_null(mock_module_image);
	assert_string_equal(mock_module_image, "nw_scan stand-in");
	assert_int_equal(mock_host_alloc_flags,
			 NWC_CU_MEMHOSTALLOC_DEVICEMAP | NWC_CU_MEMHOSTALLOC_PORTABLE);
}

/* A request is scanned on the stream of the thread's previous launch, before the new one. */
static void test_launch_order(void **state)
{
	struct nw_gpu_result r;
	__u64 seq;

	(void)state;
	user_launch(S1);
	mock_cuda_reset_log();
	seq = td_put(&dmn, nan3, 16, NW_DT_F32, gettid(), 0);
	user_launch(S2);
	assert_int_equal(mock_nlaunches, 2);
	assert_ptr_equal(mock_launches[0].f, MOCK_SCAN_FN);
	assert_ptr_equal(mock_launches[0].stream, S1);
	assert_int_equal(mock_launches[0].args.seq, seq);
	assert_int_equal(mock_launches[0].args.data, (__u64)(uintptr_t)nan3);
	assert_int_equal(mock_launches[0].args.numel, 16);
	assert_int_equal(mock_launches[0].args.dtype, NW_DT_F32);
	assert_int_equal(mock_launches[0].args.gate, 0);
	assert_int_not_equal(mock_launches[0].args.scratch, 0);
	assert_ptr_equal(mock_launches[1].f, USER_FN);
	assert_ptr_equal(mock_launches[1].stream, S2);
	assert_int_equal(td_result(&dmn, seq, &r), 0);
	assert_int_equal(r.nan, 3);
	assert_int_equal(r.scanned, 16);
	assert_int_equal(r.flags, NW_GPU_R_SCANNED);
	/* taken once: the next launch scans nothing */
	mock_cuda_reset_log();
	user_launch(S2);
	assert_int_equal(mock_cuda_scans(), 0);
}

/* Our own scan launch fires the callback too: it makes no CUDA call and scans nothing. */
static void test_reentry(void **state)
{
	(void)state;
	user_launch(S1);
	mock_cuda_reset_log();
	td_put(&dmn, finite16, 16, NW_DT_F32, gettid(), 0);
	td_put(&dmn, finite16, 16, NW_DT_F32, gettid(), 0);
	user_launch(S1);
	assert_int_equal(mock_cuda_scans(), 2);
	assert_int_equal(mock_nlaunches, 3);
	assert_int_equal(mock_nested_calls, 0);
}

struct other {
	pthread_barrier_t b;
	__u64 seq;
	int tid;
};

/* Another thread: launches on S3, makes a request, waits, launches on S4. */
static void *other_thread(void *arg)
{
	struct other *o = arg;

	user_launch(S3);
	o->tid = gettid();
	o->seq = td_put(&dmn, nan3, 16, NW_DT_F32, gettid(), 0);
	pthread_barrier_wait(&o->b);
	pthread_barrier_wait(&o->b);
	user_launch(S4);
	return NULL;
}

/* A thread's requests are scanned by its own next launch, on its own previous stream. */
static void test_per_thread(void **state)
{
	struct nw_gpu_result r;
	struct other o = {0};
	pthread_t t;
	int i, found = 0;

	(void)state;
	mock_cuda_reset_log();
	pthread_barrier_init(&o.b, NULL, 2);
	assert_int_equal(pthread_create(&t, NULL, other_thread, &o), 0);
	pthread_barrier_wait(&o.b);
	user_launch(S1);
	/* this thread's launch leaves the other's request alone (the worker may take it: S3) */
	for (i = 0; i < mock_nlaunches; i++)
		if (mock_launches[i].f == MOCK_SCAN_FN && mock_launches[i].args.seq == o.seq)
			assert_ptr_not_equal(mock_launches[i].stream, S1);
	pthread_barrier_wait(&o.b);
	pthread_join(t, NULL);
	pthread_barrier_destroy(&o.b);
	assert_int_equal(td_result(&dmn, o.seq, &r), 0);
	assert_int_equal(r.nan, 3);
	for (i = 0; i < mock_nlaunches; i++)
		if (mock_launches[i].f == MOCK_SCAN_FN && mock_launches[i].args.seq == o.seq) {
			assert_ptr_equal(mock_launches[i].stream, S3);
			found = 1;
		}
	assert_true(found);
}

/* Capturing stream: nothing enqueued; counted, said once, and a gated request says so. */
static void test_capture(void **state)
{
	struct nw_gpu_result r;
	__u64 gate, seq;

	(void)state;
	user_launch(S5);
	mock_cuda_set_capturing(S5, 1);
	mock_cuda_reset_log();
	gate = td_put(&dmn, nan3, 16, NW_DT_F32, gettid(), 0);
	seq = td_put(&dmn, nan3, 16, NW_DT_F32, gettid(), gate);
	user_launch(S5);
	mock_cuda_set_capturing(S5, 0);
	assert_int_equal(mock_cuda_scans(), 0);
	assert_int_equal(td_result(&dmn, seq, &r), 0);
	assert_int_equal(r.flags, NW_GPU_R_CAPTURING);
	assert_int_equal(td_stats_until(&dmn, NW_GPU_S_CAPTURING, 2), 0);
	assert_true(td_has_notice(&dmn, "capturing a CUDA graph"));
}

/*
 * A gated request runs right after its gate's scan, on its stream, reading the verdict
 * that scan leaves in device memory (the context's allocation), not its mapped answer.
 */
static void test_gating(void **state)
{
	struct nw_gpu_result r;
	__u64 bad, in_bad, good, in_good;

	(void)state;
	user_launch(S2);
	mock_cuda_reset_log();
	bad = td_put(&dmn, nan3, 16, NW_DT_F32, gettid(), 0);
	in_bad = td_put(&dmn, finite16, 16, NW_DT_F32, gettid(), bad);
	good = td_put(&dmn, finite16, 16, NW_DT_F32, gettid(), 0);
	in_good = td_put(&dmn, nan3, 16, NW_DT_F32, gettid(), good);
	user_launch(S1);
	assert_true(mock_nlaunches >= 3);
	assert_int_equal(mock_launches[0].args.seq, bad);
	assert_int_equal(mock_launches[1].args.seq, in_bad);
	assert_ptr_equal(mock_launches[1].stream, S2);
	assert_int_not_equal(mock_launches[0].args.flag, 0);
	assert_int_equal(mock_launches[1].args.gate, mock_launches[0].args.flag);
	assert_int_not_equal(mock_launches[1].args.gate, mock_launches[0].args.out);
	assert_int_equal(*(const __u32 *)(uintptr_t)mock_launches[0].args.flag, 1);
	assert_int_equal(td_result(&dmn, bad, &r), 0);
	assert_int_equal(r.nan, 3);
	assert_int_equal(td_result(&dmn, in_bad, &r), 0);
	assert_int_equal(r.flags, NW_GPU_R_SCANNED);
	assert_int_equal(r.nan, 0);
	assert_int_equal(r.scanned, 16);
	/* the finite output's input: not scanned, and the daemon is told so */
	assert_int_equal(td_result(&dmn, in_good, &r), 0);
	assert_int_equal(r.flags, NW_GPU_R_GATED_OUT);
	assert_int_equal(r.nan, 0);
}

/* A dtype the kernel does not read: not launched; a gated one is answered DTYPE. */
static void test_dtype(void **state)
{
	struct nw_gpu_result r;
	__u64 gate, seq;

	(void)state;
	user_launch(S1);
	mock_cuda_reset_log();
	gate = td_put(&dmn, nan3, 16, 99, gettid(), 0);
	seq = td_put(&dmn, nan3, 16, 99, gettid(), gate);
	user_launch(S1);
	assert_int_equal(mock_cuda_scans(), 0);
	assert_int_equal(td_result(&dmn, seq, &r), 0);
	assert_int_equal(r.flags, NW_GPU_R_DTYPE);
	assert_int_equal(td_stats_until(&dmn, NW_GPU_S_DTYPE, 2), 0);
	assert_true(td_has_notice(&dmn, "dtype"));
}

static void *quiet_thread(void *arg)
{
	struct other *o = arg;

	cuLaunchKernel_ptsz(USER_FN, 1, 1, 1, 32, 1, 1, 0, S4, NULL, NULL);
	o->tid = gettid();
	o->seq = td_put(&dmn, nan3, 16, NW_DT_F32, gettid(), 0);
	return NULL;
}

/* A thread that never launches again: the worker scans its request on its last stream. */
static void test_drain(void **state)
{
	struct nw_gpu_result r;
	struct other o = {0};
	pthread_t t;
	int i, found = 0;

	(void)state;
	mock_cuda_reset_log();
	assert_int_equal(pthread_create(&t, NULL, quiet_thread, &o), 0);
	pthread_join(t, NULL);
	assert_int_equal(td_result(&dmn, o.seq, &r), 0);
	assert_int_equal(r.nan, 3);
	for (i = 0; i < mock_nlaunches; i++)
		if (mock_launches[i].f == MOCK_SCAN_FN && mock_launches[i].args.seq == o.seq) {
			assert_ptr_equal(mock_launches[i].stream, S4);
			assert_int_not_equal(mock_launches[i].tid, o.tid);
			found = 1;
		}
	assert_true(found);
}

#define NTHREADS 8
#define PER_THREAD 100

struct worker_arg {
	int k;
	__u64 seqs[PER_THREAD];
};

/* Launch on its own stream, request, launch again: PER_THREAD times. */
static void *busy_thread(void *arg)
{
	struct worker_arg *w = arg;
	CUstream s = (CUstream)(uintptr_t)(0x100 + w->k);
	int i;

	for (i = 0; i < PER_THREAD; i++) {
		cuLaunchKernel(USER_FN, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL);
		w->seqs[i] = td_put(&dmn, nan3, 16, NW_DT_F32, gettid(), 0);
	}
	cuLaunchKernel(USER_FN, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL);
	return NULL;
}

/* Threads at once: every request scanned exactly once, on its own thread's stream. */
static void test_threads(void **state)
{
	static struct worker_arg w[NTHREADS];
	struct nw_gpu_result r;
	pthread_t t[NTHREADS];
	int k, i, j, n;

	(void)state;
	mock_cuda_reset_log();
	for (k = 0; k < NTHREADS; k++) {
		w[k].k = k;
		assert_int_equal(pthread_create(&t[k], NULL, busy_thread, &w[k]), 0);
	}
	for (k = 0; k < NTHREADS; k++)
		pthread_join(t[k], NULL);
	assert_int_equal(mock_cuda_scans(), NTHREADS * PER_THREAD);
	for (k = 0; k < NTHREADS; k++)
		for (i = 0; i < PER_THREAD; i++) {
			for (j = 0, n = 0; j < mock_nlaunches; j++) {
				if (mock_launches[j].f != MOCK_SCAN_FN ||
				    mock_launches[j].args.seq != w[k].seqs[i])
					continue;
				assert_ptr_equal(mock_launches[j].stream,
						 (CUstream)(uintptr_t)(0x100 + k));
				n++;
			}
			assert_int_equal(n, 1);
			assert_int_equal(td_result(&dmn, w[k].seqs[i], &r), 0);
			assert_int_equal(r.nan, 3);
		}
}

/* A forked child is not connected (its CUDA is not the parent's) and leaves the socket be. */
static void test_fork(void **state)
{
	struct stat st;
	int status;
	pid_t pid;

	(void)state;
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		mock_cuda_reset_log();
		td_put(&dmn, nan3, 16, NW_DT_F32, gettid(), 0);
		cuLaunchKernel(USER_FN, 1, 1, 1, 32, 1, 1, 0, S1, NULL, NULL);
		cuLaunchKernel(USER_FN, 1, 1, 1, 32, 1, 1, 0, S1, NULL, NULL);
		exit(mock_cuda_scans() || mock_capture_calls ? 1 : 0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	assert_int_equal(stat(lib.sock, &st), 0);
}

/* The daemon goes: idle again (no CUDA call from a launch); a new daemon is served. */
static void test_disconnect(void **state)
{
	struct nw_gpu_ready rd;
	struct nw_gpu_result r;
	__u64 seq;
	int i;

	(void)state;
	td_close(&dmn);
	/* the worker notices the close; until then launches may still scan */
	for (i = 0; i < 20000; i++) {
		mock_cuda_reset_log();
		td_put(&dmn, nan3, 16, NW_DT_F32, gettid(), 0);
		user_launch(S1);
		if (!mock_capture_calls && !mock_cuda_scans())
			break;
		usleep(1000);
	}
	mock_cuda_reset_log();
	for (i = 0; i < 50; i++)
		user_launch(S1);
	assert_int_equal(mock_capture_calls, 0);
	assert_int_equal(mock_cuda_scans(), 0);
	assert_int_equal(td_connect(&dmn, lib.sock, &rd), 0);
	assert_int_equal(rd.version, NW_GPU_VERSION);
	user_launch(S1);
	seq = td_put(&dmn, nan3, 16, NW_DT_F32, gettid(), 0);
	user_launch(S1);
	assert_int_equal(td_result(&dmn, seq, &r), 0);
	assert_int_equal(r.nan, 3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_initialize),   cmocka_unit_test(test_private_dir),
		cmocka_unit_test(test_idle),	     cmocka_unit_test(test_handshake),
		cmocka_unit_test(test_launch_order), cmocka_unit_test(test_reentry),
		cmocka_unit_test(test_per_thread),   cmocka_unit_test(test_capture),
		cmocka_unit_test(test_gating),	     cmocka_unit_test(test_dtype),
		cmocka_unit_test(test_drain),	     cmocka_unit_test(test_threads),
		cmocka_unit_test(test_fork),	     cmocka_unit_test(test_disconnect),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
