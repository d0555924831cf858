// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Mock libcudart: its launch entry points as driver launches through this
 * library's own imports of cuLaunchKernel and cuLaunchKernel_ptsz. Loaded
 * only as the mock application's dependency, RTLD_LOCAL, as torch's libcudart
 * is: not in the global scope. __cudaLaunchKernel is what nvcc 12.8 and later
 * compiles <<<>>> to (a kernel handle instead of a host stub; here both are
 * the CUfunction).
 */
#include "mock.h"

static int driver_launch(int ptsz, const void *fn, nwc_dim3 grid, nwc_dim3 block, void **args,
			 size_t shm, CUstream s)
{
	if (ptsz)
		return cuLaunchKernel_ptsz((CUfunction)fn, grid.x, grid.y, grid.z, block.x, block.y,
					   block.z, (unsigned int)shm, s, args, NULL);
	return cuLaunchKernel((CUfunction)fn, grid.x, grid.y, grid.z, block.x, block.y, block.z,
			      (unsigned int)shm, s, args, NULL);
}

int cudaLaunchKernel(const void *fn, nwc_dim3 grid, nwc_dim3 block, void **args, size_t shm,
		     CUstream s)
{
	return driver_launch(0, fn, grid, block, args, shm, s);
}

int cudaLaunchKernel_ptsz(const void *fn, nwc_dim3 grid, nwc_dim3 block, void **args, size_t shm,
			  CUstream s)
{
	return driver_launch(1, fn, grid, block, args, shm, s);
}

int __cudaLaunchKernel(const void *kernel, nwc_dim3 grid, nwc_dim3 block, void **args, size_t shm,
		       CUstream s)
{
	return driver_launch(0, kernel, grid, block, args, shm, s);
}

int __cudaLaunchKernel_ptsz(const void *kernel, nwc_dim3 grid, nwc_dim3 block, void **args,
			    size_t shm, CUstream s)
{
	return driver_launch(1, kernel, grid, block, args, shm, s);
}

int cudaLaunchKernelExC(const nwc_rt_launch_config *c, const void *fn, void **args)
{
	return driver_launch(0, fn, c->gridDim, c->blockDim, args, c->dynamicSmemBytes, c->stream);
}

int cudaLaunchKernelExC_ptsz(const nwc_rt_launch_config *c, const void *fn, void **args)
{
	return driver_launch(1, fn, c->gridDim, c->blockDim, args, c->dynamicSmemBytes, c->stream);
}
