/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The scan kernel's interface, shared by the CUDA source (scan.cu) and the
 * library that launches it (C). The kernel is loaded from the fatbin embedded
 * in libnanwatch_cupti.so and found by name (NW_SCAN_KERNEL).
 */
#ifndef __NW_SCAN_H
#define __NW_SCAN_H

#include <linux/types.h>

#define NW_SCAN_KERNEL "nw_scan"
#define NW_SCAN_THREADS 256    /* threads per block */
#define NW_SCAN_MAX_BLOCKS 264 /* 2 per SM of an H200; more buys nothing for a reduction */

/*
 * Where one scan's answer goes: pinned host memory mapped into the device
 * (CU_MEMHOSTALLOC_DEVICEMAP; device pointer == host pointer). The last block
 * writes the counts, __threadfence_system(), then done = the request's seq:
 * a host thread that sees done == seq may read the rest.
 */
struct nw_scan_out {
	__u64 scanned;
	__u64 nan;
	__u64 posinf;
	__u64 neginf;
	__u64 min_key; /* nw_order_key of the finite min; ~0 if none */
	__u64 max_key; /* nw_order_key of the finite max; 0 if none */
	__u32 flags;   /* enum nw_gpu_rflag: SCANNED or GATED_OUT */
	__u32 pad;
	__u64 done; /* written last: the request's seq */
};

/*
 * Device memory a scan reduces through (per-block partials, then the last
 * block's ticket); left zeroed by the last block, so one scratch serves the
 * scans of one stream one after another.
 */
struct nw_scan_scratch {
	__u64 nan;
	__u64 posinf;
	__u64 neginf;
	__u64 min_key;
	__u64 max_key;
	__u32 ticket;
	__u32 pad;
};

/*
 * The kernel's one parameter, passed by value. A scan's verdict (1: NaN/±Inf found) also
 * goes to a __u32 in device memory (flag), where the scans it gates read it (gate): every
 * block of a gated scan reads its gate, and a read of mapped host memory crosses the bus
 * (on an H200 a 264-block gated scan that read its gate from the pinned answer took about
 * 0.6 ms doing nothing: a bfloat16 transformer's step went from 22 ms to 62 ms).
 */
struct nw_scan_args {
	__u64 data; /* device address of the first element */
	__u64 numel;
	__u64 out;  /* struct nw_scan_out * (mapped pinned) */
	__u64 gate; /* __u32 * verdict of the gating scan (device memory), 0: none. 0: GATED_OUT */
	__u64 scratch; /* struct nw_scan_scratch * (device memory) */
	__u64 seq;     /* the request's; written to out->done last */
	__u32 dtype;   /* enum nw_dtype */
	__u32 pad;
	__u64 flag; /* __u32 * this scan's verdict goes to (device memory), 0: none */
};

#endif /* __NW_SCAN_H */
