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

/* The entry points as this library sees them (its GOT): 0 cuLaunchKernel, 1 the Ex, 2 runtime. */
void *app_entry(int which)
{
	return which == 0   ? (void *)cuLaunchKernel
	       : which == 1 ? (void *)cuLaunchKernelEx
			    : (void *)cudaLaunchKernel;
}
