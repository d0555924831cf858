// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * inject_probe: a CUDA_INJECTION64_PATH library for the device probe. The driver calls
 * InitializeInjection at CUDA initialisation; it subscribes to the kernel-launch driver
 * callbacks and counts, per callback id, the launches the process makes (PyTorch's kernels:
 * which entry points does it launch through?). At exit it writes one JSON object to the file
 * named by NW_INJECT_OUT. No CUDA call is made from here.
 */
#include <cuda.h>
#include <cupti.h>

#include <stdio.h>
#include <stdlib.h>

static const CUpti_CallbackId ids[] = {
	CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
	CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
	CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
	CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
	CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
	CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
};
#define NIDS (sizeof(ids) / sizeof(ids[0]))

static unsigned long counts[NIDS];
static unsigned long null_stream;
static int init_calls, subscribe_result = -1;

static void CUPTIAPI on_launch(void *ud, CUpti_CallbackDomain domain, CUpti_CallbackId cbid,
			       const void *data)
{
	const CUpti_CallbackData *cb = data;
	unsigned int i;

	(void)ud;
	if (domain != CUPTI_CB_DOMAIN_DRIVER_API || cb->callbackSite != CUPTI_API_ENTER)
		return;
	for (i = 0; i < NIDS; i++)
		if (ids[i] == cbid)
			__atomic_fetch_add(&counts[i], 1, __ATOMIC_RELAXED);
	if (cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel &&
	    !((const cuLaunchKernel_params *)cb->functionParams)->hStream)
		__atomic_fetch_add(&null_stream, 1, __ATOMIC_RELAXED);
}

static void report(void)
{
	const char *path = getenv("NW_INJECT_OUT");
	unsigned int i;
	FILE *f;

	if (!path || !(f = fopen(path, "w")))
		return;
	fprintf(f, "{\"initialize_calls\": %d, \"subscribe_result\": %d, \"launches\": {",
		init_calls, subscribe_result);
	for (i = 0; i < NIDS; i++)
		fprintf(f, "%s\"%u\": %lu", i ? ", " : "", ids[i], counts[i]);
	fprintf(f, "}, \"cuLaunchKernel_null_stream\": %lu}\n", null_stream);
	fclose(f);
}

int InitializeInjection(void)
{
	CUpti_SubscriberHandle sub;
	unsigned int i;

	init_calls++;
	atexit(report);
	subscribe_result = cuptiSubscribe(&sub, on_launch, NULL);
	if (subscribe_result != CUPTI_SUCCESS)
		return 0;
	for (i = 0; i < NIDS; i++)
		cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, ids[i]);
	return 1;
}
