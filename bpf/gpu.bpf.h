/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * GPU check requests: a module output (or the loss) on gpu_device cannot be read
 * here, so it goes into gpu_ring for the library in the target, which scans it on
 * the device (bpf/nwgpu.h). The call's tensor inputs and parameters follow,
 * gated on the output: scanned only if it is bad, for the origin verdict. The
 * uprobe runs in the training thread, so the request is in place before the
 * thread's next launch.
 */
#ifndef __GPU_BPF_H
#define __GPU_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "nwgpu.h"
#include "state.bpf.h"
#include "pyobj.bpf.h"
#include "tensor.bpf.h"

_Static_assert(sizeof(struct nw_gpu_req) == NW_GPU_REQ_SIZE, "a request fills its slot");
_Static_assert(sizeof(struct nw_gpu_head) == NW_GPU_REQ_SIZE, "the header fills slot 0");
_Static_assert(sizeof(struct nw_gpu_ctx) == sizeof(((struct nw_gpu_req *)0)->ctx),
	       "the daemon's context fills the request's");

static __always_inline struct nw_gpu_req *gpu_slot(__u64 seq)
{
	__u32 slot = 1 + (__u32)((seq - 1) & (NW_GPU_SLOTS - 1));

	return bpf_map_lookup_elem(&gpu_ring, &slot);
}

/*
 * A request for s->ti (read_impl set ti.gpu, ti.data, ti.numel) with s->ev's
 * context; returns its seq, 0 when none was written (no library: the daemon
 * sets gpu_link only while one is connected).
 */
__noinline __u64 gpu_request(__u32 role, __u32 idx0, __u32 idx1, __u64 gate)
{
	struct scratch *s = get_scratch();
	struct nw_gpu_head *h;
	struct nw_gpu_req *r;
	struct nw_gpu_ctx *c;
	__u32 zero = 0;
	__u64 seq, old;
	__u64 type;
	int i;

	h = bpf_map_lookup_elem(&gpu_ring, &zero);
	if (!s || !h)
		return 0;
	if (!gpu_link) {
		__sync_fetch_and_add(&h->dropped, 1);
		return 0;
	}
	seq = __sync_fetch_and_add(&h->head, 1) + 1;
	r = gpu_slot(seq);
	if (!r)
		return 0;
	/* seq 0 while the slot is rewritten; the atomics keep the stores in order */
	old = r->seq;
	__sync_fetch_and_add(&r->seq, -old);
	r->data = s->ti.data;
	r->numel = s->ti.numel;
	r->gate = gate;
	r->tid = (__u32)bpf_get_current_pid_tgid();
	r->dtype = s->ti.dtype;
	r->role = role;
	r->device = s->ti.gpu_index;
	r->index0 = idx0;
	r->index1 = idx1;
	r->flags = s->ti.flags & ~NW_SKIP_DEVICE;
	c = (struct nw_gpu_ctx *)r->ctx;
	c->step = s->ev.step;
	c->iteration = s->ev.iteration;
	c->root = s->ev.modules[0];
	c->module = s->ev.module;
	for (i = 0; i < NW_MAX_DIMS; i++)
		c->shape[i] = s->ti.shape[i];
	c->depth = s->ev.depth;
	c->ndim = s->ti.ndim;
	c->flags = s->deeper;
	c->ngated = 0;
	c->inputs_unknown = 0;
	c->params_unknown = 0;
	c->phase = s->ev.phase;
	c->params_known = 0;
	c->gating = 0;
	c->class_name[0] = 0;
	if (role == NW_GPU_OUTPUT && s->ev.module) {
		type = read_u64(s->ev.module + L.obj_type);
		bpf_probe_read_user_str(c->class_name, NW_NAME_LEN,
					(void *)read_u64(type + L.type_name));
	}
	__sync_fetch_and_add(&r->seq, seq);
	return seq;
}

/* One positional input (index i, item j of a tuple/list one): a request gated on the output. */
__noinline int gpu_input(__u64 obj, __u32 i, __u32 j)
{
	struct scratch *s = get_scratch();
	struct nw_gpu_req *r;
	int ret;

	if (!s || !is_tensor_obj(obj))
		return 0;
	ret = read_tensor(obj);
	if (ret == 1)
		return 0;
	r = gpu_slot(s->gpu_gate);
	if (!r || r->seq != s->gpu_gate)
		return 0;
	if (ret < 0 && s->ti.gpu && gpu_request(NW_GPU_INPUT, i, j, s->gpu_gate))
		((struct nw_gpu_ctx *)r->ctx)->ngated++;
	else
		((struct nw_gpu_ctx *)r->ctx)->inputs_unknown++;
	return 0;
}

/* An argument: a tensor, or a tuple or list of them. */
static __always_inline void gpu_arg(__u64 obj, __u32 i)
{
	__u64 sub = 0, m = 0;
	int j;

	if (!seq_items(obj, &sub, &m)) {
		gpu_input(obj, i, NW_NO_INDEX);
		return;
	}
	for (j = 0; j < MAX_ITEMS; j++) {
		if (j >= m)
			break;
		gpu_input(read_u64(sub + 8 * j), i, j);
	}
}

/* The module's parameters as the daemon listed them. */
__noinline int gpu_params(__u64 module)
{
	struct scratch *s = get_scratch();
	struct nw_params *p = bpf_map_lookup_elem(&params, &module);
	struct nw_gpu_req *r;
	struct nw_gpu_ctx *c;
	int i, ret;

	if (!s)
		return 0;
	r = gpu_slot(s->gpu_gate);
	if (!r || !p || r->seq != s->gpu_gate)
		return 0;
	c = (struct nw_gpu_ctx *)r->ctx;
	c->params_known = 1;
	c->params_unknown += p->more;
	for (i = 0; i < NW_MAX_PARAMS; i++) {
		if (i >= p->n)
			break;
		if (!is_tensor_obj(p->tensors[i])) {
			c->params_unknown++;
			continue;
		}
		ret = read_tensor(p->tensors[i]);
		if (ret == 1)
			continue;
		if (ret < 0 && s->ti.gpu && gpu_request(NW_GPU_PARAM, i, NW_NO_INDEX, s->gpu_gate))
			c->ngated++;
		else
			c->params_unknown++;
	}
	return 0;
}

/*
 * A GPU tensor a module returned (or backward() starts from): its request, and
 * for the call's first one the requests of the call's inputs and parameters.
 */
__noinline int gpu_output(__u32 idx0, __u32 idx1)
{
	struct scratch *s = get_scratch();
	struct nw_gpu_req *r;
	__u64 seq;
	int i;

	if (!s)
		return 0;
	if (s->ev.phase == NW_PHASE_LOSS) {
		gpu_request(NW_GPU_LOSS, idx0, idx1, 0);
		return 0;
	}
	seq = gpu_request(NW_GPU_OUTPUT, idx0, idx1, 0);
	if (!seq || s->gpu_gate)
		return 0;
	s->gpu_gate = seq;
	for (i = 0; i < MAX_ITEMS; i++) {
		if (i >= s->nargs)
			break;
		gpu_arg(s->args[i], i);
	}
	/* keyword arguments gate the output as positional ones do, numbered after them */
	for (i = 0; i < NW_MAX_KWARGS; i++) {
		if (i >= s->nkwargs)
			break;
		gpu_arg(s->kwargs[i], MAX_ITEMS + i);
	}
	gpu_params(s->ev.module);
	r = gpu_slot(seq);
	if (r && r->seq == seq)
		((struct nw_gpu_ctx *)r->ctx)->gating = 1;
	return 0;
}

#endif /* __GPU_BPF_H */
