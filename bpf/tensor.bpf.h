/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The tensor decoder: a torch tensor object (THPVariable) to its c10::TensorImpl,
 * and a TensorImpl to its scalar type, shape, strides, device and storage, with
 * the offsets of the torch layout table (L). Every reader of a tensor goes
 * through tensor_decode(): the output and input checks (read_impl), the capture's
 * metadata (cap_meta), the backward gradients, and the grad_fn of an output.
 */
#ifndef __TENSOR_BPF_H
#define __TENSOR_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "nwfloat.h"
#include "state.bpf.h"

static __always_inline __u32 map_dtype(__u16 st)
{
	if (st == L.dtype_f32)
		return NW_DT_F32;
	if (st == L.dtype_f64)
		return NW_DT_F64;
	if (st == L.dtype_f16)
		return NW_DT_F16;
	if (st == L.dtype_bf16)
		return NW_DT_BF16;
	return NW_DT_NONE;
}

/* The TensorImpl of a tensor object. */
static __always_inline __u64 tensor_impl(__u64 obj)
{
	__u64 impl;
	__u8 borrowed = 0;

	if (L.var_borrowed >= 0) /* -1: a plain at::Tensor, never borrowed */
		bpf_probe_read_user(&borrowed, 1, (void *)(obj + L.var_borrowed));
	impl = read_u64(obj + L.var_tensor);
	if (borrowed)
		impl = read_u64(impl); /* a borrowed at::Tensor: its first word is the TensorImpl */
	return impl;
}

/*
 * The autograd Node that made a TensorImpl (its grad_fn); 0 if none. The offsets
 * come from the caller's table (RS or BL: the same torch keys, each on its own switch).
 */
static __always_inline __u64 tensor_grad_fn(__u64 impl, __s64 autograd_meta, __s64 grad_fn)
{
	__u64 meta = impl ? read_u64(impl + autograd_meta) : 0;

	return meta ? read_u64(meta + grad_fn) : 0;
}

/*
 * Does the tensor cover one block of memory without holes or overlaps, in
 * some order of its dimensions? Then a flat scan of numel elements from its
 * first element sees exactly its elements: counts and min/max do not depend
 * on the order (contiguous, transposed, channels_last all qualify).
 */
static __always_inline int tensor_dense(struct scratch *s)
{
	__u32 ndim;
	int d, e;

	ndim = s->ti.ndim;
	/* sorted by stride, each stride must be the product of the smaller dims' sizes */
	for (d = 0; d < NW_MAX_DIMS; d++) {
		__u64 sd, prod = 1;

		if (d >= ndim)
			break;
		if (s->ti.shape[d] <= 1)
			continue;
		sd = s->ti.strides[d];
		for (e = 0; e < NW_MAX_DIMS; e++) {
			__u64 se, ze;

			if (e >= ndim)
				break;
			se = s->ti.strides[e];
			ze = s->ti.shape[e];
			if (e == d || ze <= 1)
				continue;
			if (se == sd)
				return 0; /* two dims on one stride: overlap */
			if (se < sd)
				prod *= ze;
		}
		if (sd != prod)
			return 0;
	}
	return 1;
}

#define VIEW_MAX_DIM (1ULL << 32)   /* a view's sizes and strides, at most */
#define VIEW_MAX_ELEMS (1ULL << 40) /* its span and its runs, at most */

/* A dim's share of the span (a bpf_loop callback, as the two below: a loop of few states). */
static long view_span_dim(__u32 d, void *ctx)
{
	struct scratch *s = get_scratch();
	struct view_walk *w;
	__u64 z, st;

	if (!s || d >= NW_MAX_DIMS)
		return 1;
	w = &s->vw;
	z = s->ti.shape[d];
	st = s->ti.strides[d];
	if (z <= 1 || !st)
		return 0;
	if (z > VIEW_MAX_DIM || st > VIEW_MAX_DIM) {
		w->bad = 1;
		return 1;
	}
	w->span += (z - 1) * st;
	if (w->span > VIEW_MAX_ELEMS)
		w->bad = 1;
	return w->bad ? 1 : 0;
}

/*
 * Round i / NW_MAX_DIMS of the run's walk, at dim i % NW_MAX_DIMS: is it the run's next,
 * larger than 1, its stride the run so far, not in it yet? A round that found none ends it.
 */
static long view_next(__u32 i, void *ctx)
{
	struct scratch *s = get_scratch();
	struct view_walk *w;
	__u32 d = i % NW_MAX_DIMS;

	if (!s)
		return 1;
	w = &s->vw;
	if (d == 0) {
		if (i && !w->found)
			return 1;
		w->found = 0;
	}
	if (w->found || d >= w->ndim || s->ti.shape[d] <= 1 || s->ti.strides[d] != w->run ||
	    (w->inner & (1U << d)))
		return 0;
	w->inner |= 1U << d;
	w->run *= s->ti.shape[d];
	w->found = 1;
	return 0;
}

/* A dim that places runs: larger than 1, of a stride, not in the run. */
static long view_outer_dim(__u32 d, void *ctx)
{
	struct scratch *s = get_scratch();
	struct view_walk *w;
	__u64 z;

	if (!s || d >= NW_MAX_DIMS)
		return 1;
	w = &s->vw;
	z = s->ti.shape[d];
	if (z <= 1 || !s->ti.strides[d] || (w->inner & (1U << d)))
		return 0;
	w->outer |= 1U << d;
	w->runs *= z;
	if (w->runs > VIEW_MAX_ELEMS)
		w->bad = 1;
	return w->bad ? 1 : 0;
}

/*
 * A tensor that is not dense, described for a scan of its elements (s->ti.view_*): its
 * dims of stride 0 (expand) give the same elements again (view_rep times); of the others,
 * those whose strides chain from 1 (each the product of the sizes before it) make a run of
 * view_run elements at one place, and the rest (view_outer) place view_runs runs. Its span
 * (view_span) goes from its first element to its last. Returns 1 if described: sizes and
 * strides under 2^32, span, run and runs under 2^40, and numel all of them.
 */
static __always_inline int tensor_view(struct scratch *s)
{
	struct view_walk *w = &s->vw;

	if (s->ti.ndim > NW_MAX_DIMS)
		return 0;
	__builtin_memset(w, 0, sizeof(*w));
	w->run = 1;
	w->runs = 1;
	w->span = 1;
	w->ndim = s->ti.ndim;
	bpf_loop(w->ndim, view_span_dim, NULL, 0);
	bpf_loop(NW_MAX_DIMS * NW_MAX_DIMS, view_next, NULL, 0);
	bpf_loop(w->ndim, view_outer_dim, NULL, 0);
	/* runs * run no more than numel: no overflow */
	if (w->bad || w->run > VIEW_MAX_ELEMS || !s->ti.numel || w->runs > s->ti.numel / w->run ||
	    s->ti.numel % (w->runs * w->run))
		return 0;
	s->ti.view_run = w->run;
	s->ti.view_runs = w->runs;
	s->ti.view_rep = s->ti.numel / (w->runs * w->run);
	s->ti.view_span = w->span;
	s->ti.view_outer = w->outer;
	return 1;
}

/* The storage's data pointer and offset of the TensorImpl at impl into s->ti. */
static __always_inline void read_storage(struct scratch *s, __u64 impl)
{
	__u64 p = read_u64(impl + L.impl_storage);

	s->ti.storage = p ? read_u64(p + L.storage_data) : 0;
	s->ti.storage_offset = read_u64(impl + L.impl_storage_offset);
}

/*
 * Decode the TensorImpl at impl into s->ti, whatever its dtype: scalar type,
 * numel, shape and strides, storage data pointer and offset. Returns 0, or -1
 * with ti.flags saying what stopped it, checked in this order: unreadable, more
 * dimensions than we read, not dense, not on the CPU. A missing storage is left
 * to the caller (ti.storage 0): an empty tensor needs none.
 *
 * c10::SizesAndStrides keeps up to sizes_inline (5) sizes and as many strides
 * in the TensorImpl, the strides after sizes_inline sizes whatever ndim is; more
 * dimensions go to one allocation of 2 * ndim words, the strides after ndim sizes.
 */
__noinline int tensor_decode(__u64 impl)
{
	struct scratch *s = get_scratch();
	__u64 ndim, p, strides;
	__u8 device = 0;
	__u16 st = 0;
	int i;

	if (!s)
		return -1;
	__builtin_memset(&s->ti, 0, sizeof(s->ti));
	s->ti.impl = impl;
	if (!impl || bpf_probe_read_user(&st, sizeof(st), (void *)(impl + L.impl_dtype))) {
		s->ti.flags = NW_SKIP_UNREADABLE;
		return -1;
	}
	s->ti.scalar_type = st;
	s->ti.dtype = map_dtype(st);
	/* a numel read as 0 would pass for an empty tensor, finite */
	if (bpf_probe_read_user(&s->ti.numel, sizeof(s->ti.numel), (void *)(impl + L.impl_numel))) {
		s->ti.flags = NW_SKIP_UNREADABLE;
		return -1;
	}
	ndim = read_u64(impl + L.impl_ndim);
	if (ndim > NW_MAX_DIMS) {
		s->ti.flags = NW_SKIP_DIMS;
		s->ti.ndim = NW_MAX_DIMS;
		return -1;
	}
	s->ti.ndim = ndim;
	p = impl + L.impl_sizes;
	strides = p + 8 * L.sizes_inline;
	if (ndim > L.sizes_inline) {
		p = read_u64(p);
		strides = p + 8 * ndim;
	}
	bpf_probe_read_user(s->ti.shape, sizeof(s->ti.shape), (void *)p);
	bpf_probe_read_user(s->ti.strides, sizeof(s->ti.strides), (void *)strides);
	for (i = 0; i < NW_MAX_DIMS; i++) {
		if (i >= ndim) {
			s->ti.shape[i] = 0;
			s->ti.strides[i] = 0;
		}
	}
	if (!tensor_dense(s)) {
		s->ti.flags = NW_SKIP_NONCONTIG;
		return -1;
	}
	if (L.impl_device >= 0) {
		bpf_probe_read_user(&device, 1, (void *)(impl + L.impl_device));
		/* gpu_device first: a test may name the CPU's (its tensors then go to the library) */
		if (gpu_on && device == gpu_device) {
			s->ti.flags = NW_SKIP_DEVICE;
			/* a GPU tensor: its storage says where the library is to scan */
			s->ti.gpu = 1;
			s->ti.gpu_index = -1;
			if (gpu_index_off >= 0)
				bpf_probe_read_user(&s->ti.gpu_index, 1,
						    (void *)(impl + gpu_index_off));
			s->ti.gpu_index = (__s8)s->ti.gpu_index;
		} else if (device != L.device_cpu) {
			s->ti.flags = NW_SKIP_DEVICE;
			return -1;
		}
	}
	read_storage(s, impl);
	return s->ti.gpu ? -1 : 0;
}

/*
 * Read a float tensor's metadata into s->ti from a c10::TensorImpl* (an
 * at::Tensor's only word). Returns 0 for a scannable float tensor (ti.data,
 * ti.bytes set), 1 for a tensor that cannot be NaN (integers, bool, empty),
 * -1 otherwise (ti.flags says why, NW_SKIP_DTYPE for a type that may hold NaN
 * and that we do not read, such as complex; ti.gpu: a tensor on gpu_device,
 * ti.data and ti.bytes set for a request).
 */
__noinline int read_impl(__u64 impl)
{
	struct scratch *s = get_scratch();
	__u32 size;
	int r;

	if (!s)
		return -1;
	r = tensor_decode(impl);
	if (s->ti.flags & NW_SKIP_UNREADABLE)
		return -1;
	if (s->ti.dtype == NW_DT_NONE) {
		s->ti.gpu = 0;
		/* integers, bool, an empty tensor: finite; complex, float8, ...: not known */
		if ((c10_codes && nw_exact_dtype(s->ti.scalar_type)) || !s->ti.numel) {
			s->ti.flags = 0;
			return 1;
		}
		s->ti.flags = NW_SKIP_DTYPE;
		return -1;
	}
	if (r && !s->ti.gpu)
		return -1;
	if (!s->ti.numel || (!s->ti.storage && !s->ti.gpu)) {
		s->ti.flags = s->ti.numel ? NW_SKIP_NOSTORAGE : 0;
		return s->ti.numel ? -1 : 1;
	}
	size = nw_dtype_size(s->ti.dtype);
	s->ti.data = s->ti.storage ? s->ti.storage + s->ti.storage_offset * size : 0;
	s->ti.bytes = s->ti.numel * size;
	if (s->ti.gpu)
		return -1; /* flags NW_SKIP_DEVICE: the caller may request a GPU scan */
	if (s->ti.bytes > max_scan_bytes) {
		s->ti.bytes = max_scan_bytes - max_scan_bytes % 8;
		s->ti.flags |= NW_SKIP_TRUNCATED;
	}
	return 0;
}

/* The same from a tensor object. */
static __always_inline int read_tensor(__u64 obj)
{
	return read_impl(tensor_impl(obj));
}

/*
 * read_tensor(), and a CPU float view with holes or overlaps (a strided slice, expand,
 * unfold) taken too: ti.data and ti.bytes its span, ti.view set, for scan_tensor() to scan
 * the span and, where it holds NaN/±Inf, the view's own elements run by run (at once where
 * the runs take no more copies than the span). A view whose span passes max_scan_bytes,
 * or whose runs would take more than VIEW_MAX_CHUNKS copies, stays skipped
 * (NW_SKIP_NONCONTIG). For the module checks alone: captures, gradients and the
 * fingerprints of inputs read dense tensors only. Global: verified once.
 */
__noinline int read_view(__u64 obj)
{
	struct scratch *s = get_scratch();
	__u64 run_chunks;
	__u32 size;
	__u8 device = 0;
	int r;

	if (!s)
		return -1;
	r = read_tensor(obj);
	if (r >= 0 || s->ti.flags != NW_SKIP_NONCONTIG) /* a float tensor's: read_impl() */
		return r;
	/* on the CPU, not gpu_device's (a test may name the CPU's) */
	if (L.impl_device >= 0) {
		bpf_probe_read_user(&device, 1, (void *)(s->ti.impl + L.impl_device));
		if (device != L.device_cpu || (gpu_on && device == gpu_device))
			return r;
	}
	if (!tensor_view(s))
		return r;
	read_storage(s, s->ti.impl);
	size = nw_dtype_size(s->ti.dtype);
	run_chunks = (s->ti.view_run * size + CHUNK_BYTES - 1) / CHUNK_BYTES;
	if (!size || !s->ti.storage || s->ti.view_span * size > max_scan_bytes ||
	    s->ti.view_runs > VIEW_MAX_CHUNKS || run_chunks > VIEW_MAX_CHUNKS)
		return r;
	s->ti.view_chunks = s->ti.view_runs * run_chunks;
	if (s->ti.view_chunks > VIEW_MAX_CHUNKS)
		return r;
	s->ti.data = s->ti.storage + s->ti.storage_offset * size;
	s->ti.bytes = s->ti.view_span * size;
	s->ti.flags = 0;
	s->ti.view = 1;
	return 0;
}

/* The event's tensor fields from s->ti. */
static __always_inline void ev_tensor(struct scratch *s)
{
	int i;

	s->ev.dtype = s->ti.dtype;
	s->ev.ndim = s->ti.ndim;
	s->ev.numel = s->ti.numel;
	s->ev.flags = s->ti.flags | s->deeper;
	for (i = 0; i < NW_MAX_DIMS; i++)
		s->ev.shape[i] = s->ti.shape[i];
}

#endif /* __TENSOR_BPF_H */
