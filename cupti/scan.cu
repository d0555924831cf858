/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The scan kernel (cupti/scan.h): NaN, +Inf and -Inf counts and the finite
 * min/max (as nw_order_key) of one dense tensor, written to mapped pinned host
 * memory with no host sync. Each thread folds its share (cupti/classify.h), a
 * block folds its threads with warp shuffles, the blocks fold into the device
 * scratch with atomics, and the block that draws the last ticket writes the
 * verdict for the scans it gates (device memory), the answer, fences to the
 * system, then writes done = seq, and leaves the scratch zeroed. The mapped
 * host memory only sees plain stores from that one thread.
 * Everything but the block fold is in classify.h, which the unit test runs on
 * the host.
 */
#include "classify.h"

#define NW_WARP 32

/* The fold of a warp's 32 answers, in lane 0. */
static __device__ __forceinline__ void warp_fold(struct nw_acc *a)
{
	for (int off = NW_WARP / 2; off; off /= 2) {
		struct nw_acc b;

		b.nan = __shfl_down_sync(0xffffffffu, a->nan, off);
		b.posinf = __shfl_down_sync(0xffffffffu, a->posinf, off);
		b.neginf = __shfl_down_sync(0xffffffffu, a->neginf, off);
		b.min_key = __shfl_down_sync(0xffffffffu, a->min_key, off);
		b.max_key = __shfl_down_sync(0xffffffffu, a->max_key, off);
		nw_acc_merge(a, &b);
	}
}

/* The fold of a block's answers, in thread 0. blockDim.x: whole warps (precheck). */
static __device__ __forceinline__ void block_fold(struct nw_acc *a)
{
	__shared__ struct nw_acc warps[NW_SCAN_THREADS / NW_WARP];
	unsigned int lane = threadIdx.x % NW_WARP, warp = threadIdx.x / NW_WARP;

	warp_fold(a);
	if (lane == 0)
		warps[warp] = *a;
	__syncthreads();
	if (warp == 0) {
		if (lane < blockDim.x / NW_WARP)
			*a = warps[lane];
		else
			nw_acc_init(a);
		warp_fold(a);
	}
}

extern "C" __global__ void __launch_bounds__(NW_SCAN_THREADS) nw_scan(struct nw_scan_args a)
{
	volatile struct nw_scan_out *out = (volatile struct nw_scan_out *)a.out;
	struct nw_scan_scratch *s = (struct nw_scan_scratch *)a.scratch;
	__u64 g = (__u64)blockIdx.x * blockDim.x + threadIdx.x;
	__u64 n = (__u64)gridDim.x * blockDim.x;
	__shared__ int gate_open;
	struct nw_acc acc;
	__u32 early;

	if (!threadIdx.x)
		gate_open = nw_gate_open(&a);
	__syncthreads();
	early = nw_scan_precheck(&a, blockDim.x, gate_open);
	nw_acc_init(&acc);
	if (early) {
		/* not scanned: block 0's thread 0 answers, the scratch is not touched */
		if (!blockIdx.x && !threadIdx.x) {
			nw_flag_write(&a, &acc);
			nw_out_write(out, &acc, 0, early, a.seq);
		}
		return;
	}
	nw_scan_args_thread(&acc, &a, g, n);
	block_fold(&acc);
	if (!threadIdx.x && nw_scratch_fold(s, &acc, gridDim.x)) {
		nw_flag_write(&a, &acc);
		nw_out_write(out, &acc, a.numel, NW_GPU_R_SCANNED, a.seq);
	}
}
