// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * cupti_probe: device facts the GPU checking path is designed on (issue 12).
 *
 *   cupti_probe baseline   launch timing with no CUPTI at all
 *   cupti_probe            everything else, one JSON object per phase on stdout:
 *     subscribe   what cuptiSubscribe returns
 *     init        driver callbacks during the runtime's initialisation, cuGetProcAddress
 *                 symbols asked for (does the runtime resolve driver entry points that way?)
 *     launch_*    which driver/runtime callback ids one <<<>>>, cudaLaunchKernel and
 *                 cuLaunchKernel fire
 *     timing_*    10,000 launches round-robin over 4 streams: callbacks off, a callback that
 *                 does nothing, a callback that enqueues a check kernel on the launch's
 *                 stream (a CUDA call inside a CUPTI callback: outside CUPTI's contract)
 *     threads     the same check from 4 threads, each with its own stream
 *     graph       a stream capture: the callback sees cuStreamIsCapturing and skips
 *   Each check kernel reads the first word of the buffer the launch is about to write and
 *   stores it with a sequence number in mapped pinned memory; the host counts finished
 *   checks without synchronising, and afterwards compares each value with the one the
 *   previous kernel on that stream wrote (stream order).
 *   A watchdog (alarm) ends a hung phase: {"phase": ..., "hung": true} and exit status 3.
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>

#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define LAUNCHES	10000
#define NSTREAMS	4
#define NSLOTS		65536
#define WATCHDOG_S	30
#define MAX_CBIDS	64
#define MAX_SYMS	16

struct slot {
	volatile unsigned int value;
	volatile unsigned int seq;
};

enum mode { MODE_OFF, MODE_RECORD, MODE_NOOP, MODE_CHECK };

struct record {
	int n;
	int domain[MAX_CBIDS];
	int cbid[MAX_CBIDS];
	const char *name[MAX_CBIDS];
	int count[MAX_CBIDS];
	int procaddr;			/* cuGetProcAddress(_v2) calls */
	int procaddr_launch;		/* of which for cuLaunchKernel* */
	int nsyms;
	const char *syms[MAX_SYMS];
};

static volatile enum mode mode = MODE_OFF;
static struct record rec;
static pthread_mutex_t rec_lock = PTHREAD_MUTEX_INITIALIZER;
static CUfunction work_fn, check_fn;
static struct slot *slots;		/* mapped pinned, device pointer == host pointer */
static unsigned int *expected;		/* host: the value check i must read */
static unsigned int next_idx;		/* checks enqueued */
static unsigned long cb_calls, cb_skipped_capture, cb_skipped_noparams, cb_errors;
static int first_error;
static const char *volatile phase = "start";
static unsigned long cb_fn_match;	/* launches whose handle is cudaGetFuncBySymbol's */
static __thread int in_cb;

/* The value each stream's last work launch writes, for the next check on that stream. */
static struct {
	CUstream s;
	unsigned int last;
	int used;
} last_tab[NSTREAMS + 4];
static pthread_mutex_t last_lock = PTHREAD_MUTEX_INITIALIZER;

__global__ void nw_work(unsigned int *buf, unsigned int v)
{
	buf[threadIdx.x] = v;
}

__global__ void nw_check(const unsigned int *buf, struct slot *res, unsigned int idx)
{
	if (threadIdx.x == 0 && blockIdx.x == 0) {
		res[idx].value = buf[0];
		__threadfence_system();
		res[idx].seq = idx + 1;
	}
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void on_alarm(int sig)
{
	char msg[160];
	int n;

	(void)sig;
	n = snprintf(msg, sizeof(msg), "{\"phase\": \"%s\", \"hung\": true}\n", phase);
	if (n > 0)
		(void)!write(1, msg, n);
	_exit(3);
}

static void phase_begin(const char *name)
{
	phase = name;
	alarm(WATCHDOG_S);
}

static void die_cuda(const char *what, int code)
{
	printf("{\"phase\": \"%s\", \"error\": \"failed to %s: %d\"}\n", phase, what, code);
	exit(2);
}

#define CK(call) do { int _e = (int)(call); if (_e) die_cuda(#call, _e); } while (0)

static void record_cb(CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
		      const CUpti_CallbackData *cb)
{
	int i;

	pthread_mutex_lock(&rec_lock);
	if (domain == CUPTI_CB_DOMAIN_DRIVER_API &&
	    (cbid == CUPTI_DRIVER_TRACE_CBID_cuGetProcAddress_v2 ||
	     cbid == CUPTI_DRIVER_TRACE_CBID_cuGetProcAddress)) {
		const char *sym = cbid == CUPTI_DRIVER_TRACE_CBID_cuGetProcAddress_v2 ?
			((const cuGetProcAddress_v2_params *)cb->functionParams)->symbol :
			((const cuGetProcAddress_params *)cb->functionParams)->symbol;
		rec.procaddr++;
		if (sym && !strncmp(sym, "cuLaunchKernel", 14))
			rec.procaddr_launch++;
		if (sym && rec.nsyms < MAX_SYMS)
			rec.syms[rec.nsyms++] = strdup(sym);
	}
	for (i = 0; i < rec.n; i++)
		if (rec.domain[i] == (int)domain && rec.cbid[i] == (int)cbid)
			break;
	if (i == rec.n && rec.n < MAX_CBIDS) {
		rec.domain[i] = domain;
		rec.cbid[i] = cbid;
		rec.name[i] = cb->functionName;
		rec.count[i] = 0;
		rec.n++;
	}
	if (i < rec.n)
		rec.count[i]++;
	pthread_mutex_unlock(&rec_lock);
}

/* The stream, function and arguments of a launch callback's parameters. */
static CUstream launch_args(CUpti_CallbackId cbid, const void *p, CUfunction *f, void ***params)
{
	switch (cbid) {
	case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel: {
		const cuLaunchKernel_params *a = (const cuLaunchKernel_params *)p;
		*f = a->f;
		*params = a->kernelParams;
		return a->hStream;
	}
	case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz: {
		const cuLaunchKernel_ptsz_params *a = (const cuLaunchKernel_ptsz_params *)p;
		*f = a->f;
		*params = a->kernelParams;
		return a->hStream;
	}
	case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
	case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz: {
		/* the _ptsz struct has the same members */
		const cuLaunchKernelEx_params *a = (const cuLaunchKernelEx_params *)p;
		*f = a->f;
		*params = a->kernelParams;
		return a->config ? a->config->hStream : NULL;
	}
	}
	*f = NULL;
	*params = NULL;
	return NULL;
}

static void check_error(int e)
{
	if (!e)
		return;
	__atomic_fetch_add(&cb_errors, 1, __ATOMIC_RELAXED);
	if (!first_error)
		first_error = e;
}

/* The value the previous work launch on s wrote (~0u: none seen), and remember v. */
static unsigned int swap_last(CUstream s, unsigned int v)
{
	unsigned int prev = ~0u, i;

	pthread_mutex_lock(&last_lock);
	for (i = 0; i < sizeof(last_tab) / sizeof(last_tab[0]); i++) {
		if (last_tab[i].used && last_tab[i].s != s)
			continue;
		if (last_tab[i].used)
			prev = last_tab[i].last;
		last_tab[i].used = 1;
		last_tab[i].s = s;
		last_tab[i].last = v;
		break;
	}
	pthread_mutex_unlock(&last_lock);
	return prev;
}

/* On a work launch's API enter: enqueue a check of its output buffer before it. */
static void check_cb(CUpti_CallbackId cbid, const CUpti_CallbackData *cb)
{
	CUstreamCaptureStatus cap = CU_STREAM_CAPTURE_STATUS_NONE;
	CUfunction f;
	void **params, *args[3];
	unsigned int *buf, idx;
	CUstream s;
	int e;

	s = launch_args(cbid, cb->functionParams, &f, &params);
	if (f == work_fn)
		__atomic_fetch_add(&cb_fn_match, 1, __ATOMIC_RELAXED);
	if (!params) {
		__atomic_fetch_add(&cb_skipped_noparams, 1, __ATOMIC_RELAXED);
		return;
	}
	e = cuStreamIsCapturing(s, &cap);
	check_error(e);
	if (e || cap != CU_STREAM_CAPTURE_STATUS_NONE) {
		__atomic_fetch_add(&cb_skipped_capture, 1, __ATOMIC_RELAXED);
		return;
	}
	buf = *(unsigned int **)params[0];
	idx = __atomic_fetch_add(&next_idx, 1, __ATOMIC_RELAXED);
	if (idx >= NSLOTS)
		return;
	expected[idx] = swap_last(s, *(unsigned int *)params[1]);
	args[0] = &buf;
	args[1] = &slots;
	args[2] = &idx;
	check_error(cuLaunchKernel(check_fn, 1, 1, 1, 32, 1, 1, 0, s, args, NULL));
}

static void CUPTIAPI callback(void *ud, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
			      const void *data)
{
	const CUpti_CallbackData *cb = (const CUpti_CallbackData *)data;

	(void)ud;
	if (in_cb)
		return;
	in_cb = 1;
	switch (mode) {
	case MODE_RECORD:
		if (cb->callbackSite == CUPTI_API_ENTER)
			record_cb(domain, cbid, cb);
		break;
	case MODE_NOOP:
		if (cb->callbackSite == CUPTI_API_ENTER)
			__atomic_fetch_add(&cb_calls, 1, __ATOMIC_RELAXED);
		break;
	case MODE_CHECK:
		if (cb->callbackSite == CUPTI_API_ENTER && domain == CUPTI_CB_DOMAIN_DRIVER_API) {
			__atomic_fetch_add(&cb_calls, 1, __ATOMIC_RELAXED);
			check_cb(cbid, cb);
		}
		break;
	default:
		break;
	}
	in_cb = 0;
}

static void print_record(const char *name)
{
	int i;

	printf("{\"phase\": \"%s\", \"callbacks\": [", name);
	for (i = 0; i < rec.n; i++)
		printf("%s{\"domain\": \"%s\", \"cbid\": %d, \"name\": \"%s\", \"count\": %d}",
		       i ? ", " : "", rec.domain[i] == CUPTI_CB_DOMAIN_DRIVER_API ? "driver" :
		       "runtime", rec.cbid[i], rec.name[i] ? rec.name[i] : "", rec.count[i]);
	printf("], \"distinct\": %d, \"get_proc_address\": %d, \"get_proc_address_launch\": %d, "
	       "\"symbols\": [", rec.n, rec.procaddr, rec.procaddr_launch);
	for (i = 0; i < rec.nsyms; i++)
		printf("%s\"%s\"", i ? ", " : "", rec.syms[i]);
	printf("]}\n");
	fflush(stdout);
	for (i = 0; i < rec.nsyms; i++)
		free((void *)rec.syms[i]);
	memset(&rec, 0, sizeof(rec));
}

static void launch_work(CUstream s, unsigned int *buf, unsigned int v, int how)
{
	void *args[2] = { &buf, &v };

	if (how == 0)
		nw_work<<<1, 32, 0, (cudaStream_t)s>>>(buf, v);
	else if (how == 1)
		CK(cudaLaunchKernel((const void *)nw_work, dim3(1), dim3(32), args, 0,
				    (cudaStream_t)s));
	else
		CK(cuLaunchKernel(work_fn, 1, 1, 1, 32, 1, 1, 0, s, args, NULL));
}

struct setup {
	CUstream stream[NSTREAMS];
	unsigned int *buf[NSTREAMS];
};

static void setup_device(struct setup *st)
{
	cudaFunction_t f;
	CUdeviceptr dp;
	int i;

	for (i = 0; i < NSTREAMS; i++) {
		CK(cudaStreamCreateWithFlags((cudaStream_t *)&st->stream[i],
					     cudaStreamNonBlocking));
		CK(cudaMalloc((void **)&st->buf[i], 32 * sizeof(unsigned int)));
		CK(cudaMemset(st->buf[i], 0, 32 * sizeof(unsigned int)));
	}
	CK(cudaGetFuncBySymbol(&f, (const void *)nw_work));
	work_fn = (CUfunction)f;
	CK(cudaGetFuncBySymbol(&f, (const void *)nw_check));
	check_fn = (CUfunction)f;
	CK(cuMemHostAlloc((void **)&slots, NSLOTS * sizeof(*slots),
			  CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
	memset((void *)slots, 0, NSLOTS * sizeof(*slots));
	CK(cuMemHostGetDevicePointer(&dp, slots, 0));
	printf("{\"phase\": \"setup\", \"mapped_device_ptr_equals_host\": %s}\n",
	       (void *)dp == (void *)slots ? "true" : "false");
	expected = (unsigned int *)calloc(NSLOTS, sizeof(*expected));
	CK(cudaDeviceSynchronize());
}

static unsigned int done_checks(unsigned int n)
{
	unsigned int i, done = 0;

	for (i = 0; i < n && i < NSLOTS; i++)
		done += slots[i].seq == i + 1;
	return done;
}

/* 10,000 launches round-robin over the streams (runtime <<<>>> and driver alternating). */
static void timing_phase(const char *name, struct setup *st, enum mode m, unsigned int *v)
{
	unsigned int first = next_idx, n, at_end, done = 0, ok = 0, i;
	double t0, t1, t2, t3 = 0;

	phase_begin(name);
	cb_calls = 0;
	mode = m;
	t0 = now_s();
	for (i = 0; i < LAUNCHES; i++) {
		int k = i % NSTREAMS;

		launch_work(st->stream[k], st->buf[k], ++*v, i & 1 ? 2 : 0);
	}
	t1 = now_s();
	mode = MODE_OFF;
	n = next_idx - first;
	at_end = done_checks(next_idx) - first;
	if (m == MODE_CHECK) {
		/* poll the mapped memory, no CUDA call */
		while ((done = done_checks(next_idx) - first) < n && now_s() - t1 < 10)
			;
		t3 = now_s();
	}
	CK(cudaDeviceSynchronize());
	t2 = now_s();
	for (i = first; i < next_idx && i < NSLOTS; i++)
		ok += expected[i] != ~0u && slots[i].value == expected[i];
	printf("{\"phase\": \"%s\", \"hung\": false, \"launches\": %d, \"callbacks\": %lu, "
	       "\"checks\": %u, \"checks_done_at_enqueue_end\": %u, "
	       "\"checks_done_without_sync\": %u, \"poll_ms\": %.3f, \"checks_stream_ordered\": %u, "
	       "\"enqueue_ns_per_launch\": %.1f, \"total_ns_per_launch\": %.1f}\n",
	       name, LAUNCHES, cb_calls, n, at_end, done, m == MODE_CHECK ? (t3 - t1) * 1e3 : 0.0,
	       ok, (t1 - t0) * 1e9 / LAUNCHES, (t2 - t0) * 1e9 / LAUNCHES);
	fflush(stdout);
	alarm(0);
}

struct thread_arg {
	struct setup *st;
	int k;
};

static void *thread_main(void *p)
{
	struct thread_arg *a = (struct thread_arg *)p;
	unsigned int v = 1000000u * (a->k + 1), i;

	for (i = 0; i < LAUNCHES / NSTREAMS; i++)
		launch_work(a->st->stream[a->k], a->st->buf[a->k], ++v, i % 3);
	return NULL;
}

static void threads_phase(struct setup *st)
{
	struct thread_arg a[NSTREAMS];
	pthread_t t[NSTREAMS];
	unsigned int first = next_idx, ok = 0, unknown = 0, i;
	double t0, t1;

	phase_begin("threads");
	cb_calls = 0;
	mode = MODE_CHECK;
	t0 = now_s();
	for (i = 0; i < NSTREAMS; i++) {
		a[i].st = st;
		a[i].k = i;
		pthread_create(&t[i], NULL, thread_main, &a[i]);
	}
	for (i = 0; i < NSTREAMS; i++)
		pthread_join(t[i], NULL);
	mode = MODE_OFF;
	CK(cudaDeviceSynchronize());
	t1 = now_s();
	for (i = first; i < next_idx && i < NSLOTS; i++) {
		unknown += expected[i] == ~0u;
		ok += expected[i] != ~0u && slots[i].value == expected[i];
	}
	printf("{\"phase\": \"threads\", \"hung\": false, \"threads\": %d, \"launches\": %d, "
	       "\"callbacks\": %lu, \"checks\": %u, \"checks_done\": %u, "
	       "\"checks_stream_ordered\": %u, \"checks_first_on_stream\": %u, "
	       "\"total_ns_per_launch\": %.1f}\n",
	       NSTREAMS, LAUNCHES, cb_calls, next_idx - first, done_checks(next_idx) - first, ok,
	       unknown, (t1 - t0) * 1e9 / LAUNCHES);
	fflush(stdout);
	alarm(0);
}

static void graph_phase(struct setup *st)
{
	unsigned int first = next_idx, v = 7000000u, i;
	unsigned long skipped0 = cb_skipped_capture;
	cudaStream_t s = (cudaStream_t)st->stream[0];
	cudaGraphExec_t exec;
	cudaGraph_t graph;
	unsigned int host[32];

	phase_begin("graph");
	cb_calls = 0;
	mode = MODE_CHECK;
	CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
	for (i = 0; i < 200; i++)
		launch_work((CUstream)s, st->buf[0], ++v, i % 3);
	CK(cudaStreamEndCapture(s, &graph));
	CK(cudaGraphInstantiate(&exec, graph, 0));
	for (i = 0; i < 20; i++)
		CK(cudaGraphLaunch(exec, s));
	/* an ordinary launch after the replays: its check must see the graph's last value */
	launch_work((CUstream)s, st->buf[0], ++v, 0);
	mode = MODE_OFF;
	CK(cudaStreamSynchronize(s));
	CK(cudaMemcpy(host, st->buf[0], sizeof(host), cudaMemcpyDeviceToHost));
	printf("{\"phase\": \"graph\", \"hung\": false, \"captured_launches\": 200, "
	       "\"replays\": 20, \"callbacks\": %lu, \"skipped_capturing\": %lu, "
	       "\"checks\": %u, \"checks_done\": %u, \"check_after_replay_read\": %u, "
	       "\"graph_last_value\": %u, \"buffer_final\": %u, \"callback_errors\": %lu}\n",
	       cb_calls, cb_skipped_capture - skipped0, next_idx - first,
	       done_checks(next_idx) - first, next_idx > first ? slots[next_idx - 1].value : 0,
	       v - 1, host[0], cb_errors);
	fflush(stdout);
	CK(cudaGraphExecDestroy(exec));
	CK(cudaGraphDestroy(graph));
	alarm(0);
}

static void launch_record(const char *name, struct setup *st, int how)
{
	mode = MODE_RECORD;
	launch_work(st->stream[0], st->buf[0], 1, how);
	mode = MODE_OFF;
	print_record(name);
	CK(cudaDeviceSynchronize());
}

static int subscribe(CUpti_SubscriberHandle *sub)
{
	CUptiResult r = cuptiSubscribe(sub, (CUpti_CallbackFunc)callback, NULL);
	const char *msg = "";

	cuptiGetResultString(r, &msg);
	printf("{\"phase\": \"subscribe\", \"result\": %d, \"message\": \"%s\"}\n", (int)r, msg);
	fflush(stdout);
	return r == CUPTI_SUCCESS ? 0 : -1;
}

static void disable_all(CUpti_SubscriberHandle sub)
{
	CK(cuptiEnableDomain(0, sub, CUPTI_CB_DOMAIN_DRIVER_API));
	CK(cuptiEnableDomain(0, sub, CUPTI_CB_DOMAIN_RUNTIME_API));
}

static void enable_launch_cbids(CUpti_SubscriberHandle sub)
{
	static const CUpti_CallbackId ids[] = {
		CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
		CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
		CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
		CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
	};
	unsigned int i;

	for (i = 0; i < sizeof(ids) / sizeof(ids[0]); i++)
		CK(cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, ids[i]));
}

int main(int argc, char **argv)
{
	int baseline = argc > 1 && !strcmp(argv[1], "baseline");
	CUpti_SubscriberHandle sub;
	struct setup st;
	unsigned int v = 0;

	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGALRM, on_alarm);
	phase_begin("init");
	if (!baseline) {
		if (subscribe(&sub))
			baseline = 1;
		else {
			CK(cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_DRIVER_API));
			CK(cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API));
			mode = MODE_RECORD;
		}
	}
	CK(cudaFree(0));
	mode = MODE_OFF;
	if (!baseline)
		print_record("init");
	setup_device(&st);
	launch_work(st.stream[0], st.buf[0], 1, 0);	/* loads the module */
	CK(cudaDeviceSynchronize());
	if (baseline) {
		timing_phase("timing_baseline", &st, MODE_OFF, &v);
		return 0;
	}
	launch_record("launch_triple_chevron", &st, 0);
	launch_record("launch_cudaLaunchKernel", &st, 1);
	launch_record("launch_cuLaunchKernel", &st, 2);
	disable_all(sub);
	timing_phase("timing_subscribed_no_callbacks", &st, MODE_OFF, &v);
	enable_launch_cbids(sub);
	timing_phase("timing_callback_noop", &st, MODE_NOOP, &v);
	timing_phase("timing_callback_check", &st, MODE_CHECK, &v);
	threads_phase(&st);
	graph_phase(&st);
	printf("{\"phase\": \"end\", \"callback_errors\": %lu, \"first_error\": %d, "
	       "\"skipped_no_params\": %lu, \"launch_handle_is_func_by_symbol\": %lu}\n",
	       cb_errors, first_error, cb_skipped_noparams, cb_fn_match);
	CK(cuptiUnsubscribe(sub));
	return 0;
}
