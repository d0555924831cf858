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
	p = read_u64(impl + L.impl_storage);
	s->ti.storage = p ? read_u64(p + L.storage_data) : 0;
	s->ti.storage_offset = read_u64(impl + L.impl_storage_offset);
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
