/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The few CUDA driver and CUPTI declarations libnanwatch_cupti.so uses, written
 * out here so that the library builds without the toolkit and links to neither
 * (both are found at run time with dlopen/dlsym). Values and layouts are those
 * of CUDA 13.0's cuda.h, cupti_callbacks.h, cupti_driver_cbid.h and
 * generated_cuda_meta.h; tests/unit/test_cupti_proto.c checks them against those
 * headers where the toolkit is installed.
 */
#ifndef __NW_CUABI_H
#define __NW_CUABI_H

#include <stddef.h>
#include <stdint.h>

typedef int nwc_curesult; /* CUDA_SUCCESS 0 */
typedef int CUdevice;
typedef struct CUctx_st *CUcontext;
typedef struct CUmod_st *CUmodule;
typedef struct CUfunc_st *CUfunction;
typedef struct CUstream_st *CUstream;
typedef unsigned long long CUdeviceptr;

#define NWC_CU_STREAM_PER_THREAD ((CUstream)0x2)
#define NWC_CU_MEMHOSTALLOC_PORTABLE 0x01
#define NWC_CU_MEMHOSTALLOC_DEVICEMAP 0x02
#define NWC_CU_STREAM_CAPTURE_STATUS_NONE 0

typedef struct {
	unsigned int gridDimX, gridDimY, gridDimZ;
	unsigned int blockDimX, blockDimY, blockDimZ;
	unsigned int sharedMemBytes;
	CUstream hStream;
	void *attrs;
	unsigned int numAttrs;
} nwc_launch_config;

/* generated_cuda_meta.h: cuLaunchKernel_params (the _ptsz and cooperative ones
 * share the members the library reads: f ... hStream, kernelParams) */
typedef struct {
	CUfunction f;
	unsigned int gridDimX, gridDimY, gridDimZ;
	unsigned int blockDimX, blockDimY, blockDimZ;
	unsigned int sharedMemBytes;
	CUstream hStream;
	void **kernelParams;
	void **extra;
} nwc_launch_params;

/* cuLaunchKernelEx_params (and _ptsz) */
typedef struct {
	const nwc_launch_config *config;
	CUfunction f;
	void **kernelParams;
	void **extra;
} nwc_launch_ex_params;

/* CUPTI */
typedef int nwc_cuptiresult;
#define NWC_CUPTI_SUCCESS 0
#define NWC_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED 39
#define NWC_CUPTI_API_ENTER 0
#define NWC_CUPTI_API_EXIT 1
#define NWC_CUPTI_CB_DOMAIN_DRIVER_API 1

/* cupti_driver_cbid.h */
#define NWC_CBID_cuLaunchKernel 307
#define NWC_CBID_cuLaunchKernel_ptsz 442
#define NWC_CBID_cuLaunchCooperativeKernel 477
#define NWC_CBID_cuLaunchCooperativeKernel_ptsz 478
#define NWC_CBID_cuLaunchKernelEx 652
#define NWC_CBID_cuLaunchKernelEx_ptsz 653
#define NWC_CBID_cuGetProcAddress 626
#define NWC_CBID_cuGetProcAddress_v2 677

/* cuGetProcAddress_params (the _v2 one adds a last member) */
typedef struct {
	const char *symbol;
	void **pfn;
	int cudaVersion;
	unsigned long long flags;
} nwc_procaddr_params;

/* the runtime's dim3, passed by value */
typedef struct {
	unsigned int x, y, z;
} nwc_dim3;

/* the runtime's cudaLaunchConfig_t (driver_types.h), cudaLaunchKernelExC's first argument */
typedef struct {
	nwc_dim3 gridDim;
	nwc_dim3 blockDim;
	size_t dynamicSmemBytes;
	CUstream stream;
	void *attrs;
	unsigned int numAttrs;
} nwc_rt_launch_config;

typedef uint32_t CUpti_CallbackId;
typedef int nwc_cupti_domain;
typedef struct CUpti_Subscriber_st *CUpti_SubscriberHandle;

typedef struct {
	int callbackSite; /* CUpti_ApiCallbackSite */
	const char *functionName;
	const void *functionParams;
	void *functionReturnValue;
	const char *symbolName;
	CUcontext context;
	uint32_t contextUid;
	uint64_t *correlationData;
	uint32_t correlationId;
} nwc_callback_data;

typedef void (*nwc_callback_fn)(void *userdata, nwc_cupti_domain domain, CUpti_CallbackId cbid,
				const void *cbdata);

#endif /* __NW_CUABI_H */
