/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The scan kernel's work as functions both nvcc (device) and the host C
 * compiler build: one element's classification (bpf/nwfloat.h's, the CPU
 * scanner's own), which elements a thread of the grid reads and how, the
 * fold of partial answers, the scratch that blocks reduce through, and the
 * answer written to struct nw_scan_out. cupti/scan.cu is these functions plus
 * the parts only a GPU has (warp shuffles, shared memory, a fence to the
 * system); the unit test drives the same functions from a host loop that plays
 * the grid.
 */
#ifndef __NW_CLASSIFY_H
#define __NW_CLASSIFY_H

#include <linux/types.h>

#ifdef __CUDACC__
#define NW_HD static __host__ __device__ __forceinline__
#else
#define NW_HD static inline __attribute__((always_inline))
#endif

/* bpf/nwfloat.h's functions, compiled for the device too */
#ifndef NW_INLINE
#define NW_INLINE NW_HD
#endif
#include "nwfloat.h"
#include "nwgpu.h"
#include "scan.h"

#define NW_VEC_BYTES 16 /* one vector load */
#define NW_UNROLL 4	/* vector loads a thread has in flight */

#ifdef __CUDA_ARCH__
#define NW_PRAGMA_UNROLL _Pragma("unroll")
#else
#define NW_PRAGMA_UNROLL
#endif

/* One scan's answer so far: what a thread, a block and the grid fold. */
struct nw_acc {
	__u64 nan;
	__u64 posinf;
	__u64 neginf;
	__u64 min_key; /* nw_order_key of the finite min; ~0 if none */
	__u64 max_key; /* nw_order_key of the finite max; 0 if none */
};

NW_HD void nw_acc_init(struct nw_acc *a)
{
	a->nan = 0;
	a->posinf = 0;
	a->neginf = 0;
	a->min_key = ~0ULL;
	a->max_key = 0;
}

/* Fold b into a: sums and extremes, so any order of folding gives the same answer. */
NW_HD void nw_acc_merge(struct nw_acc *a, const struct nw_acc *b)
{
	a->nan += b->nan;
	a->posinf += b->posinf;
	a->neginf += b->neginf;
	if (b->min_key < a->min_key)
		a->min_key = b->min_key;
	if (b->max_key > a->max_key)
		a->max_key = b->max_key;
}

/* One element, as the BPF scanner's full pass takes it (bpf/scan.bpf.h). */
NW_HD void nw_acc_elem(struct nw_acc *a, __u64 bits, const struct nw_fmt *f)
{
	__u64 key;

	switch (nw_classify_f(bits, f)) {
	case NW_NAN:
		a->nan++;
		break;
	case NW_POSINF:
		a->posinf++;
		break;
	case NW_NEGINF:
		a->neginf++;
		break;
	default:
		key = nw_order_key_f(bits, f);
		if (key < a->min_key)
			a->min_key = key;
		if (key > a->max_key)
			a->max_key = key;
	}
}

/* The extremes of a word's lanes of 16 or 32 bits, all finite: keys fit 32-bit work. */
NW_HD void nw_acc_word_narrow(struct nw_acc *a, __u64 w, const struct nw_fmt *f, __u32 size)
{
	__u32 width = size * 8, sign = (__u32)f->sign, all = (__u32)f->all, lo = ~0u, hi = 0, k;

	NW_PRAGMA_UNROLL
	for (k = 0; k < 8 / size; k++) {
		__u32 bits = (__u32)(w >> (k * width)) & all;
		__u32 key = (bits & sign) ? (~bits & all) : (bits | sign); /* nw_order_key_f */

		lo = key < lo ? key : lo;
		hi = key > hi ? key : hi;
	}
	if (lo < a->min_key)
		a->min_key = lo;
	if (hi > a->max_key)
		a->max_key = hi;
}

/*
 * Every element of one little-endian 64-bit word (8 / size of them). A word with
 * no NaN/±Inf lane (the common case, three operations to tell) only updates the
 * extremes.
 */
NW_HD void nw_acc_word(struct nw_acc *a, __u64 w, const struct nw_fmt *f, const struct nw_lanes *l,
		       __u32 size)
{
	__u32 width = size * 8, k;
	__u64 key;

	if (!nw_word_nonfinite(w, l)) {
		if (size < 8) {
			nw_acc_word_narrow(a, w, f, size);
			return;
		}
		key = nw_order_key_f(w, f);
		if (key < a->min_key)
			a->min_key = key;
		if (key > a->max_key)
			a->max_key = key;
		return;
	}
	NW_PRAGMA_UNROLL
	for (k = 0; k < 8 / size; k++)
		nw_acc_elem(a, width == 64 ? w : (w >> (k * width)) & f->all, f);
}

/*
 * How a tensor's elements are read: the elements before the first 16-byte
 * boundary one by one (head), then 16-byte vectors, then what is left (tail).
 * Data not aligned to its element size (no tensor torch makes, but the
 * address comes from the target) is read byte by byte, all of it as head.
 */
struct nw_scan_plan {
	__u64 data;
	__u64 head;	/* elements read one by one from data */
	__u64 vecs;	/* 16-byte vectors after them */
	__u64 tail;	/* elements read one by one after the vectors */
	__u32 size;	/* bytes per element */
	__u32 bytewise; /* elements read a byte at a time */
};

NW_HD void nw_scan_plan_for(struct nw_scan_plan *p, __u64 data, __u64 numel, __u32 size)
{
	__u64 per = NW_VEC_BYTES / size;

	p->data = data;
	p->size = size;
	p->bytewise = (data % size) != 0;
	p->head = numel;
	p->vecs = 0;
	p->tail = 0;
	if (p->bytewise)
		return;
	p->head = (NW_VEC_BYTES - data % NW_VEC_BYTES) % NW_VEC_BYTES / size;
	if (p->head > numel)
		p->head = numel;
	p->vecs = (numel - p->head) / per;
	p->tail = numel - p->head - p->vecs * per;
}

/* Element i (0-based from p->data) as bits, right-aligned. */
NW_HD __u64 nw_load_elem(const struct nw_scan_plan *p, __u64 i)
{
	__u64 addr = p->data + i * p->size, v = 0;
	__u32 b;

	if (p->bytewise) {
		for (b = 0; b < p->size; b++)
			v |= (__u64)((const __u8 *)addr)[b] << (8 * b);
		return v;
	}
	switch (p->size) {
	case 2:
		return *(const __u16 *)addr;
	case 4:
		return *(const __u32 *)addr;
	}
	return *(const __u64 *)addr;
}

/* Vector v: two words. __ldg: the data does not change while the scan runs. */
NW_HD void nw_load_vec(const struct nw_scan_plan *p, __u64 v, __u64 *lo, __u64 *hi)
{
	__u64 addr = p->data + p->head * p->size + v * NW_VEC_BYTES;
#ifdef __CUDA_ARCH__
	ulonglong2 x = __ldg((const ulonglong2 *)addr);

	*lo = x.x;
	*hi = x.y;
#else
	*lo = ((const __u64 *)addr)[0];
	*hi = ((const __u64 *)addr)[1];
#endif
}

/*
 * What thread g of n (the grid's threads, numbered across blocks) reads, folded
 * into a: head element g, vectors g, g + n, ... (NW_UNROLL loads issued before
 * any is used), tail element g. Every element belongs to exactly one thread.
 * Inlined with a constant dt the masks are constants.
 */
NW_HD void nw_scan_thread(struct nw_acc *a, __u64 data, __u64 numel, __u32 dt, __u64 g, __u64 n)
{
	struct nw_scan_plan p;
	struct nw_lanes l;
	struct nw_fmt f;
	__u64 v, w[2 * NW_UNROLL];
	__u32 u;

	nw_fmt_for(dt, &f);
	nw_lanes_for(dt, &l);
	nw_scan_plan_for(&p, data, numel, nw_dtype_size(dt));
	for (v = g; v < p.head; v += n)
		nw_acc_elem(a, nw_load_elem(&p, v), &f);
	for (v = g; v + (NW_UNROLL - 1) * n < p.vecs; v += NW_UNROLL * n) {
		NW_PRAGMA_UNROLL
		for (u = 0; u < NW_UNROLL; u++)
			nw_load_vec(&p, v + u * n, &w[2 * u], &w[2 * u + 1]);
		NW_PRAGMA_UNROLL
		for (u = 0; u < 2 * NW_UNROLL; u++)
			nw_acc_word(a, w[u], &f, &l, p.size);
	}
	for (; v < p.vecs; v += n) {
		nw_load_vec(&p, v, &w[0], &w[1]);
		nw_acc_word(a, w[0], &f, &l, p.size);
		nw_acc_word(a, w[1], &f, &l, p.size);
	}
	for (v = g; v < p.tail; v += n)
		nw_acc_elem(a, nw_load_elem(&p, p.head + p.vecs * (NW_VEC_BYTES / p.size) + v), &f);
}

/* nw_scan_thread with the dtype a constant: one specialised loop per dtype. */
NW_HD void nw_scan_args_thread(struct nw_acc *acc, const struct nw_scan_args *a, __u64 g, __u64 n)
{
	switch (a->dtype) {
	case NW_DT_F16:
		nw_scan_thread(acc, a->data, a->numel, NW_DT_F16, g, n);
		break;
	case NW_DT_BF16:
		nw_scan_thread(acc, a->data, a->numel, NW_DT_BF16, g, n);
		break;
	case NW_DT_F32:
		nw_scan_thread(acc, a->data, a->numel, NW_DT_F32, g, n);
		break;
	default:
		nw_scan_thread(acc, a->data, a->numel, NW_DT_F64, g, n);
		break;
	}
}

/* Whether a gate's answer holds NaN/±Inf (then the gated scan runs). */
NW_HD int nw_gate_bad(__u64 nan, __u64 posinf, __u64 neginf)
{
	return (nan | posinf | neginf) != 0;
}

/*
 * Whether the gate lets the scan run: no gate, or a gate whose verdict is NaN/±Inf. The
 * verdict was written by an earlier kernel on the same stream, so it is complete here and
 * every block reads the same; on the device one thread a block reads it (device memory).
 */
NW_HD int nw_gate_open(const struct nw_scan_args *a)
{
	return !a->gate || *(const volatile __u32 *)(unsigned long)a->gate != 0;
}

/* The scan's verdict, where the scans it gates will read it (one thread, once). */
NW_HD void nw_flag_write(const struct nw_scan_args *a, const struct nw_acc *acc)
{
	if (a->flag)
		*(volatile __u32 *)(unsigned long)a->flag =
			nw_gate_bad(acc->nan, acc->posinf, acc->neginf);
}

/* What the kernel decides before it reads any data: 0 to scan, else the one flag it answers. */
NW_HD __u32 nw_scan_precheck(const struct nw_scan_args *a, __u32 block_threads, int gate_open)
{
	if (!block_threads || block_threads % 32 || block_threads > NW_SCAN_THREADS)
		return NW_GPU_R_LAUNCH_ERROR; /* the block fold needs whole warps */
	if (!nw_dtype_size(a->dtype))
		return NW_GPU_R_DTYPE;
	if (!gate_open)
		return NW_GPU_R_GATED_OUT;
	return 0;
}

/*
 * The scratch blocks reduce through (struct nw_scan_scratch, device memory):
 * zero is the identity of every field, so the scratch needs no setting up
 * between scans. min_key holds the complement of the minimum (a maximum of
 * complements), the others what they say. On the device each fold is an atomic
 * (device scope: the scratch is device memory, never the mapped host memory).
 */
NW_HD void nw_scratch_add(struct nw_scan_scratch *s, const struct nw_acc *a)
{
#ifdef __CUDA_ARCH__
	atomicAdd((unsigned long long *)&s->nan, (unsigned long long)a->nan);
	atomicAdd((unsigned long long *)&s->posinf, (unsigned long long)a->posinf);
	atomicAdd((unsigned long long *)&s->neginf, (unsigned long long)a->neginf);
	atomicMax((unsigned long long *)&s->min_key, (unsigned long long)~a->min_key);
	atomicMax((unsigned long long *)&s->max_key, (unsigned long long)a->max_key);
#else
	s->nan += a->nan;
	s->posinf += a->posinf;
	s->neginf += a->neginf;
	if (~a->min_key > s->min_key)
		s->min_key = ~a->min_key;
	if (a->max_key > s->max_key)
		s->max_key = a->max_key;
#endif
}

/* A block's ticket after its fold: the block that draws blocks - 1 is the last. */
NW_HD __u32 nw_scratch_ticket(struct nw_scan_scratch *s)
{
#ifdef __CUDA_ARCH__
	return atomicAdd((unsigned int *)&s->ticket, 1u);
#else
	return s->ticket++;
#endif
}

/* The last block: take the grid's answer and leave the scratch zeroed for the next scan. */
NW_HD void nw_scratch_take(struct nw_scan_scratch *s, struct nw_acc *a)
{
#ifdef __CUDA_ARCH__
	a->nan = atomicExch((unsigned long long *)&s->nan, 0ULL);
	a->posinf = atomicExch((unsigned long long *)&s->posinf, 0ULL);
	a->neginf = atomicExch((unsigned long long *)&s->neginf, 0ULL);
	a->min_key = ~(__u64)atomicExch((unsigned long long *)&s->min_key, 0ULL);
	a->max_key = atomicExch((unsigned long long *)&s->max_key, 0ULL);
	atomicExch((unsigned int *)&s->ticket, 0u);
#else
	a->nan = s->nan;
	a->posinf = s->posinf;
	a->neginf = s->neginf;
	a->min_key = ~s->min_key;
	a->max_key = s->max_key;
	s->nan = s->posinf = s->neginf = s->min_key = s->max_key = 0;
	s->ticket = 0;
#endif
}

#ifdef __CUDA_ARCH__
#define NW_FENCE() __threadfence()
#define NW_FENCE_SYSTEM() __threadfence_system()
#else
#define NW_FENCE() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#define NW_FENCE_SYSTEM() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#endif

/*
 * A block's folded answer into the scratch, then its ticket. Returns 1 in the
 * block that drew the last ticket, with a set to the grid's answer and the
 * scratch zeroed again; 0 in every other block.
 */
NW_HD int nw_scratch_fold(struct nw_scan_scratch *s, struct nw_acc *a, __u32 blocks)
{
	nw_scratch_add(s, a);
	NW_FENCE(); /* this block's fold is visible before its ticket */
	if (nw_scratch_ticket(s) != blocks - 1)
		return 0;
	NW_FENCE(); /* every other block's fold is visible to the last */
	nw_scratch_take(s, a);
	return 1;
}

/*
 * The answer, then done = seq after a fence to the system: a host thread that sees
 * done == seq may read the rest. Plain stores of whole words from one thread: no
 * atomics on mapped host memory.
 */
NW_HD void nw_out_write(volatile struct nw_scan_out *o, const struct nw_acc *a, __u64 scanned,
			__u32 flags, __u64 seq)
{
	o->scanned = scanned;
	o->nan = a->nan;
	o->posinf = a->posinf;
	o->neginf = a->neginf;
	o->min_key = a->min_key;
	o->max_key = a->max_key;
	o->flags = flags;
	o->pad = 0;
	NW_FENCE_SYSTEM();
	o->done = seq;
}

#endif /* __NW_CLASSIFY_H */
