// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Mock libcudart: cudaLaunchKernel as a driver launch through this library's
 * own import of cuLaunchKernel. Loaded only as the mock application's
 * dependency, RTLD_LOCAL, as torch's libcudart is: not in the global scope.
 */
#include "mock.h"

int cudaLaunchKernel(const void *fn, nwc_dim3 grid, nwc_dim3 block, void **args, size_t shm,
		     CUstream s)
{
	return cuLaunchKernel((CUfunction)fn, grid.x, grid.y, grid.z, block.x, block.y, block.z,
			      (unsigned int)shm, s, args, NULL);
}
