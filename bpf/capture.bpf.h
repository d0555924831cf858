/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Capture for offline reproduction.
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

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "nwfloat.h"
#include "state.bpf.h"
#include "pyobj.bpf.h"
#include "tensor.bpf.h"

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

/* Element size of a ScalarType code; 0 for those we do not copy. */
static __always_inline __u32 cap_elem_size(__u32 st)
{
	__u32 dt = map_dtype(st);

	if (dt != NW_DT_NONE)
		return nw_dtype_size(dt);
	if (!c10_codes)
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

/* Metadata of a tensor object into c->d (from s->ti), and where its dense block is. */
static __always_inline int cap_meta(__u64 obj)
{
	struct scratch *s = get_scratch();
	struct cap_state *c = get_cap();
	__u32 flags;
	int i;

	if (!s || !c)
		return -1;
	tensor_decode(tensor_impl(obj));
	flags = s->ti.flags;
	if (flags & NW_SKIP_UNREADABLE) {
		c->d.flags = NW_SKIP_UNREADABLE;
		return -1;
	}
	c->d.scalar_type = s->ti.scalar_type;
	c->d.elem_size = cap_elem_size(s->ti.scalar_type);
	c->d.numel = s->ti.numel;
	if (flags & NW_SKIP_DIMS) {
		c->d.flags = NW_SKIP_DIMS;
		return -1;
	}
	c->d.ndim = s->ti.ndim;
	for (i = 0; i < NW_MAX_DIMS; i++) {
		c->d.shape[i] = s->ti.shape[i];
		c->d.strides[i] = s->ti.strides[i];
	}
	if (flags) { /* not dense, or not on the CPU */
		c->d.flags = flags;
		return -1;
	}
	if (!c->d.elem_size) {
		c->d.flags = NW_CAP_UNSUPPORTED;
		return -1;
	}
	c->d.storage_offset = s->ti.storage_offset;
	c->d.bytes = c->d.numel * c->d.elem_size;
	if (!s->ti.storage && c->d.numel) {
		c->d.flags = NW_SKIP_NOSTORAGE;
		return -1;
	}
	/* dense with non-negative strides: the element at index 0 starts the block */
	c->addr = s->ti.storage + c->d.storage_offset * c->d.elem_size;
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

/* The op walk needs the backward keys (--backward norms or on): Node.next_edges_, Edge. */
static __always_inline int cap_ops_on(void)
{
	return BL.edge_size >= 16 && BL.edge_size <= 32 && BL.node_next_edges >= 0;
}

/* A tensor argument of the call: the walk of its ops stops at its grad_fn (made before). */
static __always_inline void cap_stop(struct cap_state *c, __u64 obj)
{
	__u64 node;

	if (!cap_ops_on() || c->nstops >= CAP_STOPS)
		return;
	node = tensor_grad_fn(tensor_impl(obj), BL.impl_autograd_meta, BL.meta_grad_fn);
	if (node)
		c->stops[c->nstops++ & (CAP_STOPS - 1)] = node;
}

/* A grad_fn of one of the call's tensor arguments: the walk does not go past it. */
static __always_inline int cap_is_stop(const struct cap_state *c, __u64 node)
{
	__u32 i;

	for (i = 0; i < CAP_STOPS; i++)
		if (i < c->nstops && c->stops[i] == node)
			return 1;
	return 0;
}

/* Edge j of the node being visited (in c->edges): its node joins the walk if it is new. */
static long cap_op_edge(__u32 j, void *unused)
{
	struct cap_state *c = get_cap();
	__u64 w, node;
	__u32 i;

	if (!c || j >= c->nedges)
		return 1;
	w = (j * (__u64)BL.edge_size) / 8; /* unsigned: BPF has no signed division */
	if (w >= BWD_EDGES * 4)
		return 1;
	node = c->edges[w];
	if (!node) {
		c->partial = 1;
		return 0;
	}
	if (read_u64(node) == BL.acc_vptr || cap_is_stop(c, node))
		return 0;
	for (i = 0; i < NW_CAP_OPS; i++)
		if (i < c->nnodes && c->nodes[i] == node)
			return 0;
	if (c->nnodes >= NW_CAP_OPS) {
		c->more = 1;
		return 1;
	}
	c->parent[c->nnodes & (NW_CAP_OPS - 1)] = (__u8)c->visiting;
	c->nodes[c->nnodes++ & (NW_CAP_OPS - 1)] = node;
	return 0;
}

/* Node idx of the walk: the nodes its edges lead to join it (breadth first). */
static long cap_op_visit(__u32 idx, void *unused)
{
	struct cap_state *c = get_cap();
	__u64 node, n;

	if (!c || idx >= c->nnodes || idx >= NW_CAP_OPS)
		return 1;
	node = c->nodes[idx & (NW_CAP_OPS - 1)];
	c->visiting = idx;
	n = node_edges(node, c->edges, sizeof(c->edges));
	if (!n)
		return 0;
	c->nedges = n;
	bpf_loop(BWD_EDGES, cap_op_edge, NULL, 0);
	return 0;
}

/*
 * The autograd nodes between the bad output and the call's arguments, into e->ops: which
 * operations the call ran (the diagnosis tests the mechanism, an exp, a log, a division,
 * a cast, rather than the values alone). The graph is alive: the output is being returned.
 */
static __always_inline void cap_ops(__u64 out, struct nw_cap_end *e)
{
	struct cap_state *c = get_cap();
	__u64 node;
	__u32 i;

	if (!c || !cap_ops_on())
		return;
	node = tensor_grad_fn(tensor_impl(out), BL.impl_autograd_meta, BL.meta_grad_fn);
	/* none, or returned as it came in: nothing of the call's own */
	if (!node || cap_is_stop(c, node))
		return;
	c->nodes[0] = node;
	c->parent[0] = 0xff;
	c->nnodes = 1;
	bpf_loop(NW_CAP_OPS, cap_op_visit, NULL, 0);
	for (i = 0; i < NW_CAP_OPS; i++)
		if (i < c->nnodes)
			e->ops[i] = read_u64(c->nodes[i]);
	/* two words: both arrays sit at 8-byte offsets (a byte-wise copy costs the verifier) */
	_Static_assert(NW_CAP_OPS == 16 &&
			       __builtin_offsetof(struct nw_cap_end, op_parent) % 8 == 0 &&
			       __builtin_offsetof(struct cap_state, parent) % 8 == 0,
		       "op_parent is copied as two words");
	((__u64 *)e->op_parent)[0] = ((const __u64 *)c->parent)[0];
	((__u64 *)e->op_parent)[1] = ((const __u64 *)c->parent)[1];
	e->nops = c->nnodes;
	e->ops_more = c->more;
	e->ops_partial = c->partial;
}

/*
 * Describe one object of the call (and copy its data when it is a tensor we can read);
 * key: a keyword argument's key (a str object), else 0.
 */
__noinline int cap_tensor(__u64 obj, __u32 role, __u32 pos0, __u32 pos1, __u64 key)
{
	struct cap_state *c = get_cap();
	struct nw_cap_tensor *d;
	long n;

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
	n = key ? ascii_len(key) : -1;
	if (n > 0 && n < NW_KEY_LEN)
		bpf_probe_read_user_str(c->d.key, NW_KEY_LEN, (void *)(key + L.unicode_ascii_data));
	c->bytes = 0;
	if (!obj || !is_tensor_obj(obj)) {
		c->d.flags = NW_CAP_NOT_TENSOR;
	} else {
		if (role == NW_CAP_INPUT || role == NW_CAP_KWARG)
			cap_stop(c, obj);
		if (!cap_meta(obj))
			c->bytes = c->d.bytes;
	}
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
		cap_tensor(p->tensors[i], role, i, NW_NO_INDEX, 0);
	}
}

/* An argument of the call: a tensor, or a tuple or list of them (each item described). */
static __always_inline void cap_arg(__u64 arg, __u32 role, __u32 pos, __u64 key)
{
	__u64 sub = 0, m = 0;
	int j;

	if (!seq_items(arg, &sub, &m)) {
		cap_tensor(arg, role, pos, NW_NO_INDEX, key);
		return;
	}
	for (j = 0; j < MAX_ITEMS; j++) {
		if (j >= m)
			break;
		cap_tensor(read_u64(sub + 8 * j), role, pos, j, key);
	}
}

/*
 * Capture the returning call whose output obj (output[idx0][idx1]; key: a dict output's
 * key, or 0) went bad;
 * s->ev holds the anomaly, s->args and s->kwargs the call's arguments.
 */
__noinline int capture_layer(__u64 obj, __u32 idx0, __u32 idx1, __u64 key)
{
	struct scratch *s = get_scratch();
	struct cap_state *c = get_cap();
	struct nw_cap_end *e;
	__u64 module, type;
	int i;

	if (!s || !c || __sync_val_compare_and_swap(&capture_taken, 0, 1) != 0)
		return 0;
	__builtin_memset(c, 0, offsetof(struct cap_state, nnodes));
	c->nnodes = c->nstops = c->more = c->partial = 0;
	module = s->ev.module;
	for (i = 0; i < MAX_ITEMS; i++) {
		if (i >= s->nargs)
			break;
		cap_arg(s->args[i], NW_CAP_INPUT, i, 0);
	}
	for (i = 0; i < NW_MAX_KWARGS; i++) {
		if (i >= s->nkwargs)
			break;
		cap_arg(s->kwargs[i], NW_CAP_KWARG, i, s->kwkeys[i]);
	}
	cap_list(module, &params, NW_CAP_PARAM);
	cap_list(module, &cap_buffers, NW_CAP_BUFFER);
	cap_tensor(obj, NW_CAP_OUTPUT, idx0, idx1, s->ev.key[0] ? key : 0);
	e = bpf_ringbuf_reserve(&captures, sizeof(*e), 0);
	if (!e)
		return 0; /* cannot happen: the ring is sized for the budget and every record */
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
	__builtin_memcpy(e->key, s->ev.key, NW_KEY_LEN);
	cap_ops(obj, e);
	type = read_u64(module + L.obj_type);
	bpf_probe_read_user_str(e->class_name, NW_NAME_LEN, (void *)read_u64(type + L.type_name));
	bpf_ringbuf_submit(e, 0);
	return 0;
}

#endif /* __CAPTURE_BPF_H */
