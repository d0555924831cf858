// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Emulated libcuda for end-to-end tests without a GPU (libnwemu_cuda.so): one
 * device whose memory is the process's own (a device pointer is a host
 * pointer, so a CPU tensor's data pointer is a valid "device" address),
 * pinned memory from the heap, and launches that fire the mock CUPTI's
 * callbacks (API enter and exit) around them as the driver does. A launch of
 * the scan kernel runs the kernel itself on the host, at once: the functions
 * of cupti/classify.h that scan.cu is made of, the grid played block by block
 * through the scratch and its ticket, the answer and done = seq written to
 * the out struct in "pinned" memory. Any other function is a kernel that does
 * nothing. cuInit does what the driver does with CUDA_INJECTION64_PATH: it
 * loads that library and calls its InitializeInjection, once.
 *
 * emu_stats() says what the driver saw (the application's launches, scans,
 * module loads), for a trainer to print.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "mock.h"
#include "nanwatch.h"
#include "classify.h"

#define EMU_PRIMARY ((CUcontext)0x1000)
#define EMU_MODULE ((CUmodule)0x3d)
#define EMU_SCAN_FN ((CUfunction)0x5ca9)
#define EMU_FATBIN_MAGIC 0xba55ed50u /* a fatbin's first word */

static __thread CUcontext stack[8] = {EMU_PRIMARY};
static __thread int depth;
static unsigned long long launches, scans, module_loads, injected;
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int init_result;

static void inject(void)
{
	const char *path = getenv("CUDA_INJECTION64_PATH");
	int (*init)(void);
	void *h;

	if (!path || !*path)
		return;
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!h || !(*(void **)&init = dlsym(h, "InitializeInjection"))) {
		init_result = 999; /* CUDA_ERROR_UNKNOWN */
		return;
	}
	injected = 1;
	init();
}

nwc_curesult cuInit(unsigned int flags)
{
	if (flags)
		return 1; /* CUDA_ERROR_INVALID_VALUE */
	pthread_once(&init_once, inject);
	return init_result;
}

nwc_curesult cuDriverGetVersion(int *v)
{
	*v = 13000;
	return 0;
}

nwc_curesult cuDeviceGetCount(int *n)
{
	*n = 1;
	return 0;
}

nwc_curesult cuDeviceGet(CUdevice *d, int i)
{
	*d = i;
	return i == 0 ? 0 : 101; /* CUDA_ERROR_INVALID_DEVICE */
}

nwc_curesult cuDevicePrimaryCtxGetState(CUdevice d, unsigned int *flags, int *active)
{
	*flags = 0;
	*active = d == 0;
	return 0;
}

nwc_curesult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
	*c = EMU_PRIMARY;
	return d == 0 ? 0 : 101;
}

nwc_curesult cuCtxPushCurrent_v2(CUcontext c)
{
	if (depth >= 7)
		return 1;
	stack[++depth] = c;
	return 0;
}

nwc_curesult cuCtxPopCurrent_v2(CUcontext *c)
{
	if (!depth)
		return 1;
	*c = stack[depth--];
	return 0;
}

nwc_curesult cuCtxGetCurrent(CUcontext *c)
{
	*c = stack[depth];
	return 0;
}

nwc_curesult cuModuleLoadData(CUmodule *m, const void *image)
{
	__u32 magic;

	memcpy(&magic, image, sizeof(magic));
	if (magic != EMU_FATBIN_MAGIC)
		return 200; /* CUDA_ERROR_INVALID_IMAGE */
	__atomic_fetch_add(&module_loads, 1, __ATOMIC_RELAXED);
	*m = EMU_MODULE;
	return 0;
}

nwc_curesult cuModuleGetFunction(CUfunction *f, CUmodule m, const char *name)
{
	if (m != EMU_MODULE || strcmp(name, NW_SCAN_KERNEL))
		return 500; /* CUDA_ERROR_NOT_FOUND */
	*f = EMU_SCAN_FN;
	return 0;
}

nwc_curesult cuMemHostAlloc(void **p, size_t size, unsigned int flags)
{
	(void)flags;
	if (posix_memalign(p, 4096, size))
		return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
	memset(*p, 0, size);
	return 0;
}

nwc_curesult cuMemHostGetDevicePointer_v2(CUdeviceptr *d, void *p, unsigned int flags)
{
	*d = (CUdeviceptr)(uintptr_t)p;
	return flags ? 1 : 0;
}

nwc_curesult cuMemAlloc_v2(CUdeviceptr *d, size_t size)
{
	void *p;

	if (posix_memalign(&p, 256, size))
		return 2;
	*d = (CUdeviceptr)(uintptr_t)p;
	return 0;
}

nwc_curesult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n)
{
	memset((void *)(uintptr_t)d, v, n);
	return 0;
}

nwc_curesult cuStreamIsCapturing(CUstream s, int *status)
{
	(void)s;
	*status = NWC_CU_STREAM_CAPTURE_STATUS_NONE;
	return 0;
}

/* The scan kernel (cupti/scan.cu) on the host: each block's threads, then its fold. */
static void run_scan(const struct nw_scan_args *a, unsigned int blocks, unsigned int threads)
{
	volatile struct nw_scan_out *out = (volatile struct nw_scan_out *)(uintptr_t)a->out;
	struct nw_scan_scratch *s = (struct nw_scan_scratch *)(uintptr_t)a->scratch;
	__u32 early = nw_scan_precheck(a, threads, nw_gate_open(a));
	struct nw_acc blk, th;
	unsigned int b, t;

	if (early) {
		nw_acc_init(&blk);
		nw_flag_write(a, &blk);
		nw_out_write(out, &blk, 0, early, a->seq);
		return;
	}
	for (b = 0; b < blocks; b++) {
		nw_acc_init(&blk);
		for (t = 0; t < threads; t++) {
			nw_acc_init(&th);
			nw_scan_args_thread(&th, a, (__u64)b * threads + t,
					    (__u64)blocks * threads);
			nw_acc_merge(&blk, &th);
		}
		if (nw_scratch_fold(s, &blk, blocks)) {
			nw_flag_write(a, &blk);
			nw_out_write(out, &blk, a->numel, NW_GPU_R_SCANNED, a->seq);
		}
	}
}

static nwc_curesult launch(CUpti_CallbackId cbid, const void *params, CUfunction f,
			   unsigned int grid, unsigned int block, void **kp)
{
	nwc_callback_data d = {.callbackSite = NWC_CUPTI_API_ENTER,
			       .functionName = "cuLaunchKernel",
			       .functionParams = params,
			       .context = stack[depth]};

	if (!grid || !block)
		return 1;
	mock_cupti_fire(NWC_CUPTI_CB_DOMAIN_DRIVER_API, cbid, &d);
	if (f == EMU_SCAN_FN) {
		__atomic_fetch_add(&scans, 1, __ATOMIC_RELAXED);
		run_scan(kp[0], grid, block);
	} else {
		__atomic_fetch_add(&launches, 1, __ATOMIC_RELAXED);
	}
	d.callbackSite = NWC_CUPTI_API_EXIT;
	mock_cupti_fire(NWC_CUPTI_CB_DOMAIN_DRIVER_API, cbid, &d);
	return 0;
}

nwc_curesult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
			    unsigned int bx, unsigned int by, unsigned int bz, unsigned int shm,
			    CUstream s, void **params, void **extra)
{
	nwc_launch_params p = {f, gx, gy, gz, bx, by, bz, shm, s, params, extra};

	return launch(NWC_CBID_cuLaunchKernel, &p, f, gx, bx, params);
}

nwc_curesult cuLaunchKernelEx(const nwc_launch_config *config, CUfunction f, void **params,
			      void **extra)
{
	nwc_launch_ex_params p = {config, f, params, extra};

	return launch(NWC_CBID_cuLaunchKernelEx, &p, f, config->gridDimX, config->blockDimX,
		      params);
}

/* Any entry point of this library by name, as the runtime finds them; the exit callback may
 * rewrite *pfn. */
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
	static void *self;
	Dl_info info;

	if (!self && dladdr((void *)cuInit, &info))
		self = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
	mock_cupti_fire(NWC_CUPTI_CB_DOMAIN_DRIVER_API, NWC_CBID_cuGetProcAddress_v2, &d);
	*pfn = self ? dlsym(self, symbol) : NULL;
	d.callbackSite = NWC_CUPTI_API_EXIT;
	mock_cupti_fire(NWC_CUPTI_CB_DOMAIN_DRIVER_API, NWC_CBID_cuGetProcAddress_v2, &d);
	return *pfn ? 0 : 500;
}

/* What the driver saw: the application's launches, scans, module loads, injection. */
void emu_stats(unsigned long long out[4])
{
	out[0] = __atomic_load_n(&launches, __ATOMIC_RELAXED);
	out[1] = __atomic_load_n(&scans, __ATOMIC_RELAXED);
	out[2] = __atomic_load_n(&module_loads, __ATOMIC_RELAXED);
	out[3] = injected;
}
