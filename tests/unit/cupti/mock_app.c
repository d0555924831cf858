// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * A mock application library: it launches through the driver and runtime
 * entry points it imports (PLT/GOT, bound at load: -z now, RELRO), as
 * libtorch_cuda.so does; interpose mode must patch those imports.
 */
#include "mock.h"

int app_launch(CUstream s)
{
	return cuLaunchKernel(MOCK_APP_FN, 1, 1, 1, 32, 1, 1, 0, s, NULL, NULL);
}

int app_launch_ex(CUstream s)
{
	nwc_launch_config c = {.gridDimX = 1,
			       .gridDimY = 1,
			       .gridDimZ = 1,
			       .blockDimX = 32,
			       .blockDimY = 1,
			       .blockDimZ = 1,
			       .hStream = s};

	return cuLaunchKernelEx(&c, MOCK_APP_FN, NULL, NULL);
}

int app_runtime_launch(CUstream s)
{
	nwc_dim3 one = {1, 1, 1};

	return cudaLaunchKernel((const void *)MOCK_APP_FN, one, one, NULL, 0, s);
}

static const char *const rt_names[MOCK_APP_RT_N] = {
	"__cudaLaunchKernel",  "__cudaLaunchKernel_ptsz",  "cudaLaunchKernel_ptsz",
	"cudaLaunchKernelExC", "cudaLaunchKernelExC_ptsz",
};

const char *app_rt_name(int which)
{
	return rt_names[which];
}

/* The runtime's other entry points, as nvcc's <<<>>> (__cudaLaunchKernel) and torch call them. */
int app_rt_launch(int which, CUstream s)
{
	nwc_rt_launch_config c = {.gridDim = {1, 1, 1}, .blockDim = {32, 1, 1}, .stream = s};
	const void *fn = (const void *)MOCK_APP_FN;
	nwc_dim3 one = {1, 1, 1};

	switch (which) {
	case 0:
		return __cudaLaunchKernel(fn, one, one, NULL, 0, s);
	case 1:
		return __cudaLaunchKernel_ptsz(fn, one, one, NULL, 0, s);
	case 2:
		return cudaLaunchKernel_ptsz(fn, one, one, NULL, 0, s);
	case 3:
		return cudaLaunchKernelExC(&c, fn, NULL);
	}
	return cudaLaunchKernelExC_ptsz(&c, fn, NULL);
}

/*
 * The entry points as this library sees them (its GOT): 0 cuLaunchKernel, 1 the Ex, 2 the
 * runtime's cudaLaunchKernel, 3 + k app_rt_launch's entry point k. Addresses taken in code
 * (GLOB_DAT), never in a table (that would be a data relocation no GOT patching sees).
 */
void *app_entry(int which)
{
	switch (which) {
	case 0:
		return (void *)cuLaunchKernel;
	case 1:
		return (void *)cuLaunchKernelEx;
	case 2:
		return (void *)cudaLaunchKernel;
	case 3:
		return (void *)__cudaLaunchKernel;
	case 4:
		return (void *)__cudaLaunchKernel_ptsz;
	case 5:
		return (void *)cudaLaunchKernel_ptsz;
	case 6:
		return (void *)cudaLaunchKernelExC;
	}
	return (void *)cudaLaunchKernelExC_ptsz;
}
