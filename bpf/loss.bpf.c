/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The loss: the tensors backward() starts from, checked as a module output is. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "state.bpf.h"
#include "pyobj.bpf.h"
#include "check.bpf.h"

_Static_assert(1 + 2 * NW_LOSS_NODES <= NW_MAX_DEPTH, "a loss event's nodes fit in modules[]");

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
 * Edge j of the node being visited (a bpf_loop callback): its node joins the walk if it is
 * new and no parameter's AccumulateGrad, with how it was found (or, found before, that this
 * node uses it too).
 */
static long loss_edge(__u32 j, void *unused)
{
	struct scratch *s = get_scratch();
	struct loss_walk *lw;
	__u64 w, node;
	__u32 i, n;

	if (!s)
		return 1;
	lw = &s->lw;
	if (j >= lw->nedges)
		return 1;
	w = (j * (__u64)BL.edge_size) / 8; /* unsigned: BPF has no signed division */
	if (w >= BWD_EDGES * 4)
		return 1;
	node = lw->edges[w]; /* Edge.function: a shared_ptr<Node>, its pointer first */
	if (!node || (BL.acc_vptr && read_u64(node) == BL.acc_vptr))
		return 0;
	n = lw->n;
	for (i = 0; i < NW_LOSS_NODES; i++) {
		__u64 *word = &s->ev.modules[1 + NW_LOSS_NODES + i];

		if (i >= n || lw->nodes[i] != node)
			continue;
		/* found before: the first other node that uses it too */
		if (!(*word & NW_LOSS_ALSO) && i != lw->visiting)
			*word |= NW_LOSS_ALSO | (__u64)(lw->visiting & 0xff) << 32 |
				 (__u64)(j & 0xff) << 40;
		return 0;
	}
	if (n >= NW_LOSS_NODES)
		return 1;
	s->ev.modules[1 + NW_LOSS_NODES + n] = (lw->visiting & 0xff) | (j & 0xff) << 8;
	lw->nodes[n] = node;
	lw->n = n + 1;
	return 0;
}

/* Node idx of the walk (a bpf_loop callback): its vtable pointer, and its edges' nodes. */
static long loss_visit(__u32 idx, void *unused)
{
	struct scratch *s = get_scratch();
	struct loss_walk *lw;
	__u64 node, n, vptr, *word;
	__u32 k;

	if (!s)
		return 1;
	lw = &s->lw;
	if (idx >= lw->n || idx >= NW_LOSS_NODES)
		return 1;
	node = lw->nodes[idx];
	vptr = read_u64(node);
	s->ev.modules[1 + idx] = vptr;
	word = &s->ev.modules[1 + NW_LOSS_NODES + idx];
	lw->visiting = idx;
	/* a module's output (checked as it returned): not into the model behind it */
	for (k = 0; k < NW_LOSS_ENDS; k++)
		if (vptr && BL.end_vptr[k] == vptr)
			return 0;
	n = node_edges(node, lw->edges, sizeof(lw->edges));
	if (!n)
		return 0;
	/*
	 * One input that needs a gradient: of two edges, one to no node is a constant's, first
	 * or second (t * (t.log() - logp): the target comes first)
	 */
	if (n == 1 ||
	    (n == 2 &&
	     !lw->edges[0] != !lw->edges[((__u64)BL.edge_size / 8) & (BWD_EDGES * 4 - 1)]))
		*word |= NW_LOSS_SINGLE;
	lw->nedges = n;
	bpf_loop(BWD_EDGES, loss_edge, NULL, 0);
	return 0;
}

/*
 * The autograd nodes that made the loss, breadth first from its grad_fn along every edge but
 * a parameter's (the loss's own arithmetic, a masked mean by hand, an exp or a log the loss
 * takes, then the module outputs it read): their vtable pointers into the event's
 * modules[1..NW_LOSS_NODES] (a loss event has no module stack), and how each was found
 * after them, for the daemon to read which ops made the loss from what: for a non-finite
 * loss about to be reported, not each step. Global: verified once.
 */
__noinline int loss_nodes(__u64 obj)
{
	struct scratch *s = get_scratch();
	__u64 node;

	if (!s || BL.edge_size < 16 || BL.edge_size > 32 || BL.node_next_edges < 0)
		return 0;
	node = tensor_grad_fn(tensor_impl(obj), BL.impl_autograd_meta, BL.meta_grad_fn);
	if (!node)
		return 0;
	s->lw.nodes[0] = node;
	s->lw.n = 1;
	s->ev.modules[1 + NW_LOSS_NODES] = NW_LOSS_ROOT;
	bpf_loop(NW_LOSS_NODES, loss_visit, NULL, 0);
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
		/* a non-finite loss it reports: the nodes that made it, then the event */
		if (check_output(obj, n > 1 ? i : NW_NO_INDEX, NW_NO_INDEX, 0) == 2) {
			loss_nodes(obj);
			if (bpf_ringbuf_output(&events, &s->ev, sizeof(s->ev), 0))
				count_lost(NW_C_LOST_LOSS);
		}
		if (i == 0)
			send_loss(s);
	}
	return 0;
}
