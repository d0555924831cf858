/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Mock libcuda and libcupti for the library's unit tests: no GPU. The mock
 * driver records every launch (scan launches with their arguments), runs the
 * scan on the host at once (device pointers are host pointers here), and fires
 * the mock CUPTI callbacks around each launch as the real driver does, our own
 * scan launches included.
 */
#ifndef __NW_CUPTI_MOCK_H
#define __NW_CUPTI_MOCK_H

#include <linux/types.h>

#include "cuabi.h"
#include "scan.h"

#define MOCK_PRIMARY ((CUcontext)0x1000)
#define MOCK_SCAN_FN ((CUfunction)0x5ca9)
#define MOCK_LAUNCHES 4096

struct mock_launch {
	CUfunction f;
	CUstream stream;
	CUcontext ctx;
	int tid;
	CUpti_CallbackId cbid;
	unsigned int grid;
	struct nw_scan_args args;
};

/* mock libcuda */
extern struct mock_launch mock_launches[MOCK_LAUNCHES];
extern int mock_nlaunches;
extern int mock_nested_calls; /* driver calls from the callbacks of a scan launch */
extern int mock_capture_calls, mock_module_loads, mock_host_allocs, mock_mem_allocs;
extern unsigned int mock_host_alloc_flags;
extern const void *mock_module_image;
void mock_cuda_set_capturing(CUstream s, int on);
void mock_cuda_reset_log(void);
int mock_cuda_scans(void);
nwc_curesult cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
			    unsigned int bx, unsigned int by, unsigned int bz, unsigned int shm,
			    CUstream s, void **params, void **extra);
nwc_curesult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
				 unsigned int bx, unsigned int by, unsigned int bz,
				 unsigned int shm, CUstream s, void **params, void **extra);
nwc_curesult cuLaunchKernelEx(const nwc_launch_config *config, CUfunction f, void **params,
			      void **extra);

nwc_curesult cuGetProcAddress_v2(const char *symbol, void **pfn, int version,
				 unsigned long long flags, void *status);

/* mock libcudart (libcudart.so.13 beside the tests, loaded only by the mock application) */
int cudaLaunchKernel(const void *fn, nwc_dim3 grid, nwc_dim3 block, void **args, size_t shm,
		     CUstream s);
int cudaLaunchKernel_ptsz(const void *fn, nwc_dim3 grid, nwc_dim3 block, void **args, size_t shm,
			  CUstream s);
int __cudaLaunchKernel(const void *kernel, nwc_dim3 grid, nwc_dim3 block, void **args, size_t shm,
		       CUstream s);
int __cudaLaunchKernel_ptsz(const void *kernel, nwc_dim3 grid, nwc_dim3 block, void **args,
			    size_t shm, CUstream s);
int cudaLaunchKernelExC(const nwc_rt_launch_config *c, const void *fn, void **args);
int cudaLaunchKernelExC_ptsz(const nwc_rt_launch_config *c, const void *fn, void **args);

/* mock application library (libnwmock_app.so): launches through its own imports */
#define MOCK_APP_FN ((CUfunction)0xa99)
int app_launch(CUstream s);
int app_launch_ex(CUstream s);
int app_runtime_launch(CUstream s);
/* the runtime's other entry points, 0..MOCK_APP_RT_N-1 in the order of app_rt_name */
#define MOCK_APP_RT_N 5
int app_rt_launch(int which, CUstream s);
const char *app_rt_name(int which);
void *app_entry(int which);

/* mock libcupti */
extern int mock_cupti_subscribed;
int mock_cupti_enabled(CUpti_CallbackId cbid);
void mock_cupti_fire(nwc_cupti_domain domain, CUpti_CallbackId cbid, const nwc_callback_data *d);

#endif /* __NW_CUPTI_MOCK_H */
