/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The loss: the tensors backward() starts from, checked as a module output is. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "state.bpf.h"
#include "pyobj.bpf.h"
#include "check.bpf.h"

#define NESTED_FRAMES 16 /* caller frames looked at for the backward pass a nested one runs in */

struct nested_walk {
	__u64 frame, code;
	int found;
};

static long nested_frame(__u32 i, void *data)
{
	struct nested_walk *w = data;

	w->frame = read_u64(w->frame + L.frame_previous);
	if (!w->frame)
		return 1;
	if (read_ref(w->frame + L.frame_code) == w->code) {
		w->found = 1;
		return 1;
	}
	return 0;
}

/*
 * Is this backward pass run inside another on this thread? A reentrant checkpoint
 * (torch.utils.checkpoint with use_reentrant) recomputes its block in the backward pass and
 * differentiates it from within the engine: the Python function that calls run_backward
 * (torch.autograd.backward, or _engine_run_backward) is then on the thread's stack twice, the
 * engine's caller below its C frames. Such a pass differentiates no loss, and is no
 * iteration or step of its own. The thread's state is known from its module calls (the
 * tstates map): not in mode loss, where this is not seen.
 */
static __always_inline int nested_backward(__u32 tid)
{
	__u64 *tstate = bpf_map_lookup_elem(&tstates, &tid);
	struct nested_walk w = {};

	if (!tstate)
		return 0;
	w.frame = thread_frame(*tstate);
	if (!w.frame)
		return 0;
	w.code = read_ref(w.frame + L.frame_code);
	if (!w.code)
		return 0;
	bpf_loop(NESTED_FRAMES, nested_frame, &w, 0);
	return w.found;
}

/*
 * The loss, however it was computed: backward() hands the engine's
 * run_backward(self, args, kwargs) a tuple whose first item is the tuple of
 * tensors to differentiate. A log(0) in a hand-written loss shows here, at
 * the step it happens, before the optimizer spreads it into the weights.
 */
/*
 * The autograd node that made the loss, and the next ones along its one input each where a
 * node has one that needs a gradient (a loss divided by the accumulation steps, a masked mean
 * by hand): their vtable pointers into the event's modules[1..NW_LOSS_NODES] (a loss event
 * has no module stack), for the daemon to name the op that made the loss under that
 * arithmetic. Global: verified once.
 */
__noinline int loss_nodes(__u64 obj)
{
	struct scratch *s = get_scratch();
	__u64 node, v[2] = {};
	int i;

	if (!s)
		return 0;
	node = tensor_grad_fn(tensor_impl(obj), BL.impl_autograd_meta, BL.meta_grad_fn);
	for (i = 0; i < NW_LOSS_NODES && node; i++) {
		s->ev.modules[1 + i] = read_u64(node);
		if (bpf_probe_read_user(v, sizeof(v), (void *)(node + BL.node_next_edges)))
			break;
		/* one input that needs a gradient: a second edge to no node is a constant's */
		if (v[1] - v[0] != (__u64)BL.edge_size &&
		    (v[1] - v[0] != 2 * (__u64)BL.edge_size || read_u64(v[0] + BL.edge_size)))
			break;
		node = read_u64(v[0]); /* Edge.function: a shared_ptr<Node>, its pointer first */
	}
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(uprobe_run_backward, void *engine, void *args)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u64 tensors, items = 0, n = 0, type, iteration = 0;
	struct scratch *s;
	int i;

	if ((id >> 32) != targ_tgid || stopped || !args)
		return 0;
	if (nested_backward((__u32)id)) {
		count(NW_C_BWD_NESTED, 1);
		return 0;
	}
	type = read_u64((__u64)args + L.obj_type);
	if (type != A.tuple_type)
		return 0;
	tensors = read_u64((__u64)args + L.tuple_items);
	if (!seq_items(tensors, &items, &n))
		return 0;
	s = get_scratch();
	if (!s)
		return 0;
	count(NW_C_PROBE_HITS, 1);
	if (iter_started)
		bwd_ran = 1; /* a step, if no optimizer steps: see iteration_started() */
	if (loss_only) {
		iteration = __sync_fetch_and_add(&iter_started, 1);
		if (!step_by_marker) {
			step_count = iteration + 1; /* what the stats call steps */
			count(NW_C_STEPS, 1);
		}
	}
	for (i = 0; i < 4; i++) {
		__u64 obj;

		if (i >= n)
			break;
		obj = read_u64(items + 8 * i);
		if (!is_tensor(read_u64(obj + L.obj_type)))
			continue;
		__builtin_memset(&s->ev, 0, sizeof(s->ev));
		s->ev.type = NW_EV_ANOMALY;
		s->ev.phase = NW_PHASE_LOSS;
		s->ev.tid = (__u32)id;
		s->ev.step = step_count;
		s->ev.iteration = cur_iteration();
		if (loss_only) {
			/* no module probes: each backward is an iteration, and without a step marker
			 * (torch 1.x) a step too */
			s->ev.iteration = iteration;
			if (!step_by_marker)
				s->ev.step = iteration;
		}
		s->nargs = 0;
		s->nkwargs = 0;
		s->more_args = 0;
		s->hold = 0; /* a module return's, should one have slept with the scratch */
		s->defer = 0;
		loss_nodes(obj);
		check_output(obj, n > 1 ? i : NW_NO_INDEX, NW_NO_INDEX, 0);
		if (i == 0)
			send_loss(s);
	}
	return 0;
}
