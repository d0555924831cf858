/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Capture for offline reproduction, included by nanwatch.bpf.c.
 *
 * When the first anomaly reported is an origin (finite inputs, parameters not
 * known bad, output not finite: the layer the diagnosis names), the layer's positional
 * arguments, parameters, buffers and the bad output tensor are copied here,
 * synchronously, in the uretprobe of that very call: the output is the value
 * being returned, the arguments are still referenced by the caller (taken at
 * entry, as check_inputs uses them), parameters and buffers are owned by the
 * module, and the target thread does not run again until this program
 * returns. Nothing can free or change them meanwhile: the copy is exact.
 *
 * Data goes in NW_CAP_CHUNK records to the capture ring buffer, which the
 * daemon sizes to hold the whole byte budget (capture_max_bytes): the copy
 * happens in one program run, before the daemon can consume anything. A
 * tensor that would pass the budget is described but not copied.
 */
#ifndef __CAPTURE_BPF_H
#define __CAPTURE_BPF_H

const volatile __u64 capture_max_bytes = 0;	/* 0: captures off */
const volatile __u32 capture_int_codes = 0;	/* the target numbers ScalarType as c10 does */
__u32 capture_taken = 0;			/* one capture per watch */
__u32 capture_first_seen = 0;			/* the first anomaly was reported */

struct cap_state {
	struct nw_cap_tensor d;	/* the tensor being described */
	__u64 addr;		/* its dense block in the target */
	__u64 bytes;
	__u64 used;		/* data bytes copied in this capture */
	__u32 ntensors;
	__u32 lost;
	__u32 truncated;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 12);	/* resized by the daemon when captures are on */
} captures SEC(".maps");

/* module -> its buffers (_buffers), filled by the daemon when captures are on */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct nw_params);
} cap_buffers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cap_state);
} cap_state_map SEC(".maps");

/*
 * Called for every anomaly reported: only the first one may be captured, and
 * only if it is an origin. A later origin (the root model, whose own inputs
 * are the finite batch) would not be the layer the diagnosis is about.
 */
static __always_inline int capture_wanted(struct scratch *s)
{
	if (!capture_max_bytes || capture_first_seen ||
	    __sync_val_compare_and_swap(&capture_first_seen, 0, 1) != 0)
		return 0;
	return s->ev.phase == NW_PHASE_FORWARD && !s->ev.inputs_nonfinite &&
	       !s->ev.inputs_skipped && !s->ev.params_nonfinite;
}

static __always_inline struct cap_state *get_cap(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&cap_state_map, &zero);
}

/* Element size of a ScalarType code; 0 for those we do not copy. */
static __always_inline __u32 cap_elem_size(__u32 st)
{
	__u32 dt = map_dtype(st);

	if (dt != NW_DT_NONE)
		return nw_dtype_size(dt);
	if (!capture_int_codes)
		return 0;
	/* c10::ScalarType: Byte, Char, Short, Int, Long; Bool is 11 */
	switch (st) {
	case 0:
	case 1:
	case 11:
		return 1;
	case 2:
		return 2;
	case 3:
		return 4;
	case 4:
		return 8;
	}
	return 0;
}

/* Metadata of a tensor object into c->d, and where its dense block is. */
__noinline int cap_meta(__u64 obj)
{
	struct scratch *s = get_scratch();
	struct cap_state *c = get_cap();
	__u64 impl, storage, data, ndim, p;
	__u8 borrowed = 0, device = 0;
	__u16 st = 0;
	int i;

	if (!s || !c)
		return -1;
	if (L.var_borrowed >= 0)	/* -1: a plain at::Tensor, never borrowed */
		bpf_probe_read_user(&borrowed, 1, (void *)(obj + L.var_borrowed));
	impl = read_u64(obj + L.var_tensor);
	if (borrowed)
		impl = read_u64(impl);
	if (!impl || bpf_probe_read_user(&st, sizeof(st), (void *)(impl + L.impl_dtype))) {
		c->d.flags = NW_SKIP_UNREADABLE;
		return -1;
	}
	c->d.scalar_type = st;
	c->d.elem_size = cap_elem_size(st);
	c->d.numel = read_u64(impl + L.impl_numel);
	ndim = read_u64(impl + L.impl_ndim);
	if (ndim > NW_MAX_DIMS) {
		c->d.flags = NW_SKIP_DIMS;
		return -1;
	}
	c->d.ndim = ndim;
	p = impl + L.impl_sizes;
	if (ndim > L.sizes_inline)
		p = read_u64(p);
	bpf_probe_read_user(c->d.shape, sizeof(c->d.shape), (void *)p);
	bpf_probe_read_user(c->d.strides, sizeof(c->d.strides),
			    (void *)(p + 8 * (ndim > L.sizes_inline ? ndim : L.sizes_inline)));
	s->ti.ndim = ndim;
	for (i = 0; i < NW_MAX_DIMS; i++) {
		if (i >= ndim) {
			c->d.shape[i] = 0;
			c->d.strides[i] = 0;
		}
		s->ti.shape[i] = c->d.shape[i];
		s->ti.strides[i] = c->d.strides[i];
	}
	if (!tensor_dense()) {
		c->d.flags = NW_SKIP_NONCONTIG;
		return -1;
	}
	if (L.impl_device >= 0) {
		bpf_probe_read_user(&device, 1, (void *)(impl + L.impl_device));
		if (device != L.device_cpu) {
			c->d.flags = NW_SKIP_DEVICE;
			return -1;
		}
	}
	if (!c->d.elem_size) {
		c->d.flags = NW_CAP_UNSUPPORTED;
		return -1;
	}
	storage = read_u64(impl + L.impl_storage);
	data = storage ? read_u64(storage + L.storage_data) : 0;
	c->d.storage_offset = read_u64(impl + L.impl_storage_offset);
	c->d.bytes = c->d.numel * c->d.elem_size;
	if (!data && c->d.numel) {
		c->d.flags = NW_SKIP_NOSTORAGE;
		return -1;
	}
	/* dense with non-negative strides: the element at index 0 starts the block */
	c->addr = data + c->d.storage_offset * c->d.elem_size;
	if (c->d.bytes > capture_max_bytes || c->used + c->d.bytes > capture_max_bytes) {
		c->d.flags = NW_CAP_OVER_BUDGET;
		c->truncated = 1;
		return -1;
	}
	return 0;
}

static long cap_chunk(__u32 idx, void *unused)
{
	struct cap_state *c = get_cap();
	struct nw_cap_data *r;
	__u64 off, n;

	if (!c)
		return 1;
	off = (__u64)idx * NW_CAP_CHUNK;
	if (off >= c->bytes)
		return 1;
	n = c->bytes - off;
	if (n > NW_CAP_CHUNK)
		n = NW_CAP_CHUNK;
	r = bpf_ringbuf_reserve(&captures, sizeof(*r), 0);
	if (!r) {
		c->lost++;
		count(NW_C_LOST_CAPTURE, 1);
		return 1;
	}
	if (bpf_probe_read_user(r->data, n, (void *)(c->addr + off))) {
		bpf_ringbuf_discard(r, 0);
		c->truncated = 1;
		return 1;
	}
	r->type = NW_EV_CAP_DATA;
	r->capture = 1;
	r->index = c->d.index;
	r->len = n;
	r->offset = off;
	bpf_ringbuf_submit(r, 0);
	c->used += n;
	return 0;
}

/* Describe one object of the call (and copy its data when it is a tensor we can read). */
__noinline int cap_tensor(__u64 obj, __u32 role, __u32 pos0, __u32 pos1)
{
	struct cap_state *c = get_cap();
	struct nw_cap_tensor *d;

	if (!c || c->ntensors >= NW_CAP_MAX_TENSORS)
		return 0;
	__builtin_memset(&c->d, 0, sizeof(c->d));
	c->d.type = NW_EV_CAP_TENSOR;
	c->d.capture = 1;
	c->d.index = c->ntensors++;
	c->d.role = role;
	c->d.pos0 = pos0;
	c->d.pos1 = pos1;
	c->d.obj = obj;
	c->d.scalar_type = NW_NO_SCALAR;
	c->bytes = 0;
	if (!obj || !is_tensor(read_u64(obj + L.obj_type)))
		c->d.flags = NW_CAP_NOT_TENSOR;
	else if (!cap_meta(obj))
		c->bytes = c->d.bytes;
	d = bpf_ringbuf_reserve(&captures, sizeof(*d), 0);
	if (!d) {
		c->lost++;
		count(NW_C_LOST_CAPTURE, 1);
		return 0;
	}
	__builtin_memcpy(d, &c->d, sizeof(*d));
	bpf_ringbuf_submit(d, 0);
	if (c->bytes)
		bpf_loop((c->bytes + NW_CAP_CHUNK - 1) / NW_CAP_CHUNK, cap_chunk, NULL, 0);
	return 0;
}

/* The module's parameters or buffers: the daemon's list, else read from the module now. */
static __always_inline void cap_list(__u64 module, void *map, __u32 role)
{
	struct nw_params *p = bpf_map_lookup_elem(map, &module);
	struct scratch *s = get_scratch();
	int i;

	if (!p && s && list_params(module, role == NW_CAP_BUFFER)) {
		bpf_map_update_elem(map, &module, &s->np, BPF_NOEXIST);
		p = &s->np;
	}
	if (!p)
		return;
	for (i = 0; i < NW_MAX_PARAMS; i++) {
		if (i >= p->n)
			break;
		cap_tensor(p->tensors[i], role, i, NW_NO_INDEX);
	}
}

/*
 * Capture the returning call whose output obj (output[idx0][idx1]) went bad;
 * s->ev holds the anomaly, s->args the call's positional arguments.
 */
__noinline int capture_layer(__u64 obj, __u32 idx0, __u32 idx1)
{
	struct scratch *s = get_scratch();
	struct cap_state *c = get_cap();
	struct nw_cap_end *e;
	__u64 module, type;
	int i, j;

	if (!s || !c || __sync_val_compare_and_swap(&capture_taken, 0, 1) != 0)
		return 0;
	__builtin_memset(c, 0, sizeof(*c));
	module = s->ev.module;
	for (i = 0; i < MAX_ITEMS; i++) {
		__u64 arg, sub = 0, m = 0;

		if (i >= s->nargs)
			break;
		arg = s->args[i];
		if (!seq_items(arg, &sub, &m)) {
			cap_tensor(arg, NW_CAP_INPUT, i, NW_NO_INDEX);
			continue;
		}
		for (j = 0; j < MAX_ITEMS; j++) {
			if (j >= m)
				break;
			cap_tensor(read_u64(sub + 8 * j), NW_CAP_INPUT, i, j);
		}
	}
	cap_list(module, &params, NW_CAP_PARAM);
	cap_list(module, &cap_buffers, NW_CAP_BUFFER);
	cap_tensor(obj, NW_CAP_OUTPUT, idx0, idx1);
	e = bpf_ringbuf_reserve(&captures, sizeof(*e), 0);
	if (!e)
		return 0;	/* cannot happen: the ring is sized for the budget and every record */
	__builtin_memset(e, 0, sizeof(*e));
	e->type = NW_EV_CAP_END;
	e->capture = 1;
	e->time_ns = bpf_ktime_get_ns();
	e->step = s->ev.step;
	e->iteration = s->ev.iteration;
	e->module = module;
	e->root = s->ev.modules[0];
	e->bytes = c->used;
	e->budget = capture_max_bytes;
	e->ntensors = c->ntensors;
	e->nargs = s->nargs;
	e->lost = c->lost;
	e->truncated = c->truncated || c->lost;
	e->index0 = idx0;
	e->index1 = idx1;
	type = read_u64(module + L.obj_type);
	bpf_probe_read_user_str(e->class_name, NW_NAME_LEN, (void *)read_u64(type + L.type_name));
	bpf_ringbuf_submit(e, 0);
	return 0;
}

#endif /* __CAPTURE_BPF_H */
