// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Mock libcuda: the entry points libnanwatch_cupti.so looks up, one device
 * whose primary context is active, memory from the host heap (a device
 * pointer is the host pointer), and launches that fire the mock CUPTI
 * callbacks (API enter and exit), are logged, and for the scan kernel run the
 * scan on the host at once: gate first, then NaN/±Inf counts, the verdict
 * for the scans it gates, then done = seq.
 */
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mock.h"
#include "nanwatch.h"
#include "nwgpu.h"

struct mock_launch mock_launches[MOCK_LAUNCHES];
int mock_nlaunches;
int mock_nested_calls, mock_capture_calls, mock_module_loads, mock_host_allocs, mock_mem_allocs;
unsigned int mock_host_alloc_flags;
const void *mock_module_image;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static __thread int in_scan; /* inside the callbacks of a scan launch */
static __thread CUcontext stack[8] = {MOCK_PRIMARY};
static __thread int depth;
static struct {
	CUstream s;
	int on;
} capturing[16];

#define ENTER()                                                                      \
	do {                                                                         \
		if (in_scan)                                                         \
			__atomic_fetch_add(&mock_nested_calls, 1, __ATOMIC_RELAXED); \
	} while (0)

nwc_curesult cuDriverGetVersion(int *v)
{
	ENTER();
	*v = 13000;
	return 0;
}

nwc_curesult cuDeviceGetCount(int *n)
{
	ENTER();
	*n = 1;
	return 0;
}

nwc_curesult cuDeviceGet(CUdevice *d, int i)
{
	ENTER();
	*d = i;
	return i == 0 ? 0 : 101;
}

nwc_curesult cuDevicePrimaryCtxGetState(CUdevice d, unsigned int *flags, int *active)
{
	ENTER();
	*flags = 0;
	*active = d == 0;
	return 0;
}

nwc_curesult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
	ENTER();
	*c = MOCK_PRIMARY;
	return d == 0 ? 0 : 101;
}

nwc_curesult cuCtxPushCurrent_v2(CUcontext c)
{
	ENTER();
	if (depth >= 7)
		return 1;
	stack[++depth] = c;
	return 0;
}

nwc_curesult cuCtxPopCurrent_v2(CUcontext *c)
{
	ENTER();
	if (!depth)
		return 1;
	*c = stack[depth--];
	return 0;
}

nwc_curesult cuModuleLoadData(CUmodule *m, const void *image)
{
	ENTER();
	mock_module_image = image;
	__atomic_fetch_add(&mock_module_loads, 1, __ATOMIC_RELAXED);
	*m = (CUmodule)0x3d;
	return 0;
}

nwc_curesult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
	ENTER();
	if (m != (CUmodule)0x3d || strcmp(name, NW_SCAN_KERNEL))
		return 500; /* CUDA_ERROR_NOT_FOUND */
	*f = MOCK_SCAN_FN;
	return 0;
}

nwc_curesult cuMemHostAlloc(void **p, size_t size, unsigned int flags)
{
	ENTER();
	mock_host_alloc_flags = flags;
	__atomic_fetch_add(&mock_host_allocs, 1, __ATOMIC_RELAXED);
	*p = calloc(1, size);
	return *p ? 0 : 2;
}

nwc_curesult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p, unsigned int flags)
{
	ENTER();
	*d = (CUdeviceptr)(uintptr_t)p;
	return flags ? 1 : 0;
}

nwc_curesult cuMemAlloc_v2(CUdeviceptr *d, size_t size)
{
	ENTER();
	__atomic_fetch_add(&mock_mem_allocs, 1, __ATOMIC_RELAXED);
	*d = (CUdeviceptr)(uintptr_t)malloc(size);
	return *d ? 0 : 2;
}

nwc_curesult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n)
{
	ENTER();
	memset((void *)(uintptr_t)d, v, n);
	return 0;
}

void mock_cuda_set_capturing(CUstream s, int on)
{
	int i;

	for (i = 0; i < 16; i++)
		if (capturing[i].s == s || !capturing[i].s) {
			capturing[i].s = s;
			capturing[i].on = on;
			return;
		}
}

nwc_curesult cuStreamIsCapturing(CUstream s, int *status)
{
	int i;

	ENTER();
	__atomic_fetch_add(&mock_capture_calls, 1, __ATOMIC_RELAXED);
	*status = 0;
	for (i = 0; i < 16; i++)
		if (capturing[i].s == s && capturing[i].on)
			*status = 1; /* CU_STREAM_CAPTURE_STATUS_ACTIVE */
	return 0;
}

static int nonfinite(const void *data, __u64 i, __u32 dtype, int *sign)
{
	__u64 bits = 0, exp, man;

	switch (dtype) {
	case NW_DT_F32: {
		float v = ((const float *)data)[i];

		*sign = v < 0;
		return isnan(v) ? 1 : isinf(v) ? 2 : 0;
	}
	case NW_DT_F64: {
		double v = ((const double *)data)[i];

		*sign = v < 0;
		return isnan(v) ? 1 : isinf(v) ? 2 : 0;
	}
	}
	bits = ((const __u16 *)data)[i];
	*sign = bits >> 15;
	exp = dtype == NW_DT_F16 ? (bits >> 10) & 0x1f : (bits >> 7) & 0xff;
	man = dtype == NW_DT_F16 ? bits & 0x3ff : bits & 0x7f;
	if (exp != (dtype == NW_DT_F16 ? 0x1fu : 0xffu))
		return 0;
	return man ? 1 : 2;
}

/* The scan kernel's contract (cupti/scan.h), on the host. */
static void run_scan(const struct nw_scan_args *a)
{
	struct nw_scan_out *o = (struct nw_scan_out *)(uintptr_t)a->out;
	const __u32 *gate = (const __u32 *)(uintptr_t)a->gate;
	int sign, k;
	__u64 i;

	if (gate && !*gate) {
		o->flags = NW_GPU_R_GATED_OUT;
	} else {
		o->min_key = ~0ULL;
		for (i = 0; i < a->numel; i++) {
			k = nonfinite((const void *)(uintptr_t)a->data, i, a->dtype, &sign);
			o->nan += k == 1;
			o->posinf += k == 2 && !sign;
			o->neginf += k == 2 && sign;
		}
		o->scanned = a->numel;
		o->flags = NW_GPU_R_SCANNED;
	}
	if (a->flag)
		*(__u32 *)(uintptr_t)a->flag = o->nan || o->posinf || o->neginf;
	__atomic_store_n(&o->done, a->seq, __ATOMIC_RELEASE);
}

static nwc_curesult launch(CUpti_CallbackId cbid, const void *params, CUfunction f, CUstream s,
			   unsigned int grid, void **kp)
{
	nwc_callback_data d = {.callbackSite = NWC_CUPTI_API_ENTER,
			       .functionName = "cuLaunchKernel",
			       .functionParams = params,
			       .context = stack[depth]};
	struct mock_launch *l;
	int scan = f == MOCK_SCAN_FN;

	ENTER();
	if (scan)
		in_scan++;
	mock_cupti_fire(NWC_CUPTI_CB_DOMAIN_DRIVER_API, cbid, &d);
	pthread_mutex_lock(&lock);
	if (mock_nlaunches < MOCK_LAUNCHES) {
		l = &mock_launches[mock_nlaunches++];
		memset(l, 0, sizeof(*l));
		l->f = f;
		l->stream = s;
		l->ctx = stack[depth];
		l->tid = gettid();
		l->cbid = cbid;
		l->grid = grid;
		if (scan)
			memcpy(&l->args, kp[0], sizeof(l->args));
	}
	pthread_mutex_unlock(&lock);
	if (scan)
		run_scan(kp[0]);
	d.callbackSite = NWC_CUPTI_API_EXIT;
	mock_cupti_fire(NWC_CUPTI_CB_DOMAIN_DRIVER_API, cbid, &d);
	if (scan)
		in_scan--;
	return 0;
}

nwc_curesult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
			    unsigned int bx, unsigned int by, unsigned int bz, unsigned int shm,
			    CUstream s, void **params, void **extra)
{
	nwc_launch_params p = {f, gx, gy, gz, bx, by, bz, shm, s, params, extra};

	return launch(NWC_CBID_cuLaunchKernel, &p, f, s, gx, params);
}

nwc_curesult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
				 unsigned int bx, unsigned int by, unsigned int bz,
				 unsigned int shm, CUstream s, void **params, void **extra)
{
	nwc_launch_params p = {f, gx, gy, gz, bx, by, bz, shm, s, params, extra};

	return launch(NWC_CBID_cuLaunchKernel_ptsz, &p, f, s ? s : NWC_CU_STREAM_PER_THREAD, gx,
		      params);
}

nwc_curesult cuLaunchKernelEx(const nwc_launch_config *config, CUfunction f, void **params,
			      void **extra)
{
	nwc_launch_ex_params p = {config, f, params, extra};

	return launch(NWC_CBID_cuLaunchKernelEx, &p, f, config->hStream, config->gridDimX, params);
}

void mock_cuda_reset_log(void)
{
	pthread_mutex_lock(&lock);
	mock_nlaunches = 0;
	pthread_mutex_unlock(&lock);
	mock_nested_calls = 0;
	mock_capture_calls = 0;
}

int mock_cuda_scans(void)
{
	int i, n = 0;

	pthread_mutex_lock(&lock);
	for (i = 0; i < mock_nlaunches; i++)
		n += mock_launches[i].f == MOCK_SCAN_FN;
	pthread_mutex_unlock(&lock);
	return n;
}

nwc_curesult cuCtxGetCurrent(CUcontext *c)
{
	ENTER();
	*c = stack[depth];
	return 0;
}

/* Any entry point of this library by name; the exit callback may rewrite *pfn. */
nwc_curesult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
				 unsigned long long flags, void *status)
{
	struct {
		nwc_procaddr_params p;
		void *status;
	} params = {{symbol, pfn, version, flags}, status};
	nwc_callback_data d = {.callbackSite = NWC_CUPTI_API_ENTER,
			       .functionName = "cuGetProcAddress_v2",
			       .functionParams = &params,
			       .context = stack[depth]};

	mock_cupti_fire(NWC_CUPTI_CB_DOMAIN_DRIVER_API, NWC_CBID_cuGetProcAddress_v2, &d);
	*pfn = dlsym(RTLD_DEFAULT, symbol);
	d.callbackSite = NWC_CUPTI_API_EXIT;
	mock_cupti_fire(NWC_CUPTI_CB_DOMAIN_DRIVER_API, NWC_CBID_cuGetProcAddress_v2, &d);
	return *pfn ? 0 : 500;
}
