/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Module calls: which code objects are module calls (or optimizer steps), and
 * the per-thread stack of the module calls running, pushed at the evaluator's
 * entry and popped at its return (bpf/forward.bpf.c).
 */
#ifndef __CALLS_BPF_H
#define __CALLS_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "state.bpf.h"
#include "pyobj.bpf.h"

#define NW_ANCHOR_FRAMES 64 /* caller frames looked at for an older module call */

static int classify(__u64 code, __u64 frame)
{
	struct code_rec rec = {}, *r;
	__u64 name = read_u64(code + L.code_name);

	if (!name)
		return CODE_OTHER;
	r = bpf_map_lookup_elem(&codes, &code);
	if (r && r->name == name)
		return r->kind;
	rec.name = name;
	if (str_equals(name, 0) && file_matches(read_u64(code + L.code_filename)))
		rec.kind = CODE_MODULE;
	else if (!step_by_marker && str_equals(name, 1) &&
		 is_optimizer(read_ref(frame + L.frame_localsplus + 8 * L.self_slot)))
		rec.kind = CODE_STEP;
	bpf_map_update_elem(&codes, &code, &rec, BPF_ANY);
	return rec.kind;
}

/* Keep the *args tuple's items: the caller still holds them when the call returns. */
static __always_inline void capture_args(struct frame_rec *rec, __u64 frame)
{
	__u64 args = read_ref(frame + L.frame_localsplus + 8 * L.args_slot);
	__u64 n;

	if (!args || read_u64(args + L.obj_type) != A.tuple_type)
		return;
	n = read_u64(args + L.var_size);
	if (n > MAX_ITEMS) {
		rec->more |= MORE_ARGS;
		n = MAX_ITEMS;
	}
	if (n && !bpf_probe_read_user(rec->args, n * 8, (void *)(args + L.tuple_items)))
		rec->nargs = n;
	/*
	 * A list as the first argument may be emptied by the call (torch.compile's boxed
	 * calling convention clears its args list): its length now, to tell at the return
	 * that its items were not all there to check.
	 */
	if (rec->nargs && read_u64(rec->args[0] + L.obj_type) == A.list_type) {
		n = read_u64(rec->args[0] + L.var_size);
		rec->list0 = n < 0x7fffffff ? (__u32)n + 1 : 0;
	}
}

/*
 * Keep the **kwargs dict's first NW_MAX_KWARGS entries (key and value), as the
 * call was entered: key_padding_mask=, attention_mask=, any tensor passed by
 * keyword is an input like a positional one. Most calls pass none: an empty
 * dict costs two reads.
 */
static __always_inline void capture_kwargs(struct frame_rec *rec, __u64 frame)
{
	struct dict_walk w = {};
	__u64 kw, keys, k, v;
	__u32 n = 0;
	int i;

	if (!L.kwargs_slot || !D.on)
		return;
	kw = read_ref(frame + L.frame_localsplus + 8 * L.kwargs_slot);
	keys = kw ? read_u64(kw + D.dict_keys) : 0;
	if (!keys || !read_u64(keys + D.keys_nentries))
		return;
	if (!dict_walk(keys, read_u64(kw + D.dict_values), &w))
		return;
	for (i = 0; i < NW_MAX_KWARGS; i++) {
		if (i >= w.n)
			break;
		dict_entry(&w, i, &k, &v);
		if (!k || !v)
			continue; /* a deleted entry */
		rec->kwkeys[n & (NW_MAX_KWARGS - 1)] = k;
		rec->kwargs[n & (NW_MAX_KWARGS - 1)] = v;
		n++;
	}
	rec->nkwargs = n;
}

static __always_inline struct thread_state *get_thread(__u32 tid)
{
	struct thread_state *ts = bpf_map_lookup_elem(&threads, &tid);

	if (ts)
		return ts;
	bpf_map_update_elem(&threads, &tid, &zero_thread, BPF_NOEXIST);
	return bpf_map_lookup_elem(&threads, &tid);
}

/*
 * First call of this module under this root? Then its record's fields wait in the
 * scratch for note_module(), which the program calls once the entry is done: looking
 * for where the caller holds the module takes calls the entry's stack has no room for.
 */
static __always_inline int want_note(__u64 root, __u64 module, __u64 parent, __u32 depth)
{
	struct seen_key key = {.root = root, .module = module};
	struct scratch *s;

	if (bpf_map_lookup_elem(&seen, &key))
		return 0;
	s = get_scratch();
	if (!s)
		return 0;
	s->note.root = root;
	s->note.module = module;
	s->note.parent = parent;
	s->note.depth = depth;
	return 1;
}

/*
 * Tell the daemon of the module want_note() found, so it can name it and list its
 * parameters early; with where its caller holds it (held_key), which names it once
 * the model is gone. Marked seen only once the record is queued: a record the ring
 * had no room for is sent again at the module's next call. A model's first forward
 * sends one per module; they may fill only half the ring, so that anomalies, marks
 * and losses queued meanwhile still find room. Global: verified once.
 */
__noinline int note_module(void)
{
	struct scratch *s = get_scratch();
	struct seen_key key = {};
	__u8 one = 1;
	__u64 type;

	if (!s)
		return 0;
	key.root = s->note.root;
	key.module = s->note.module;
	if (bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) + sizeof(struct nw_event) >
	    bpf_ringbuf_query(&events, BPF_RB_RING_SIZE) / 2) {
		count_lost(NW_C_LOST_MODULE);
		return 0;
	}
	__builtin_memset(&s->ev, 0, sizeof(s->ev));
	s->ev.type = NW_EV_MODULE;
	s->ev.time_ns = bpf_ktime_get_ns();
	s->ev.module = key.module;
	s->ev.parent = s->note.parent;
	s->ev.modules[0] = key.root;
	s->ev.depth = s->note.depth;
	s->ev.tid = (__u32)bpf_get_current_pid_tgid();
	type = read_u64(key.module + L.obj_type);
	bpf_probe_read_user_str(s->ev.class_name, NW_NAME_LEN,
				(void *)read_u64(type + L.type_name));
	if (s->ev.parent)
		held_key(s, s->ev.parent, key.module, s->ev.held);
	if (bpf_ringbuf_output(&events, &s->ev, sizeof(s->ev), 0)) {
		count_lost(NW_C_LOST_MODULE);
		return 0;
	}
	bpf_map_update_elem(&seen, &key, &one, BPF_ANY);
	return 0;
}

/*
 * Drop the calls this thread's stack holds whose return was never seen (the kernel
 * stops reporting returns past its nesting limit for return probes). A new call runs
 * below every call still running, so a kept call whose sp is at or below the new
 * one's has returned. Returns the depth the new call is pushed at.
 */
static __always_inline __u32 heal(struct thread_state *ts, __u64 sp)
{
	__u32 depth = ts->depth;
	int i;

	for (i = 0; i < NW_MAX_DEPTH; i++) {
		if (i >= depth)
			break;
		if (ts->sp[i] <= sp) {
			count(NW_C_STACK_HEALED, depth - i);
			/* the dropped call returned unchecked: its caller cannot be its origin */
			if (i > 0)
				ts->unchecked[(i - 1) & (NW_MAX_DEPTH - 1)] = 1;
			return i;
		}
	}
	return depth;
}

struct walk_ctx {
	__u64 frame;
	int inside;
};

static long walk_frame(__u32 i, void *data)
{
	struct walk_ctx *w = data;
	__u64 code;

	if (!w->frame)
		return 1;
	code = read_ref(w->frame + L.frame_code);
	if (code && classify(code, w->frame) == CODE_MODULE) {
		w->inside = 1;
		return 1;
	}
	w->frame = read_u64(w->frame + L.frame_previous);
	return 0;
}

/*
 * Is this outermost-looking call made inside a module call this thread entered
 * before the probes were attached? Its callers' Python frames say so. The entered
 * frame's previous is set only inside the evaluator: the caller's frame is the
 * one the thread state holds as running.
 */
static __noinline int inside_old_call(__u64 tstate)
{
	struct walk_ctx w = {.frame = thread_frame(tstate)};

	bpf_loop(NW_ANCHOR_FRAMES, walk_frame, &w, 0);
	return w.inside;
}

/*
 * The outermost module of this call (stack[0]) calls a child: the first such module is
 * the model, whose calls count iterations. A model that was freed (sweeps, k-fold:
 * a new model each round) hands that role to the next one.
 */
static __always_inline void note_root(__u64 top)
{
	__u64 old = root_module;
	__u32 flat = root_flat;

	if (top == old || (old && !flat && alive(old, root_type)))
		return;
	if (__sync_val_compare_and_swap(&root_module, old, top) != old)
		return;
	root_flat = 0;
	/* a living flat module called first began this forward pass already */
	if (flat && alive(old, root_type)) {
		root_type = read_u64(top + L.obj_type);
		return;
	}
	root_type = read_u64(top + L.obj_type);
	/* this call is the new model's first forward pass */
	iteration_started();
}

/*
 * An outermost call returns (depth 0) and no module that calls a child is the model: a model
 * with no child modules (one Linear, a module holding its parameters and calling functions)
 * never becomes it by note_root(). Then the first outermost module returning with parameters
 * of its own is taken for the model, from this call on (a loss module has none). The first
 * outermost module that calls a child still replaces it (note_root()), in the same iteration.
 */
static __always_inline void note_flat_root(__u64 self)
{
	struct scratch *s = get_scratch();
	__u64 old = root_module;

	if (!s || self == old || (old && (!root_flat || alive(old, root_type))))
		return;
	if (!list_params(self, 0) || !s->np.n)
		return;
	if (__sync_val_compare_and_swap(&root_module, old, self) != old)
		return;
	root_flat = 1;
	root_type = read_u64(self + L.obj_type);
	iteration_started();
}

/* Push a module call on the thread's stack; 0 when it is not to be tracked. */
static __always_inline int push_call(struct thread_state *ts, struct frame_rec *rec, __u64 tstate,
				     __u64 sp, __u32 tid, __u64 self)
{
	__u32 depth = heal(ts, sp);

	if (depth == 0 && inside_old_call(tstate)) {
		count(NW_C_UNANCHORED, 1);
		ts->depth = 0;
		return 0;
	}
	rec->depth = depth;
	if (depth < NW_MAX_DEPTH) {
		ts->stack[depth] = self;
		ts->sp[depth] = sp;
		ts->kid[depth].impl = 0; /* no child of this call has returned yet */
		ts->unchecked[depth] = 0;
	} else {
		/* kept nowhere, so never checked: say so at the deepest kept call */
		count(NW_C_STACK_OVERFLOW, 1);
		ts->unchecked[NW_MAX_DEPTH - 1] = 1;
	}
	ts->depth = depth + 1;
	if (depth == 0 && self == root_module)
		iteration_started();
	else if (depth == 1)
		note_root(ts->stack[0]);
	/* the step marker's optimizer and the daemon's loop counter are found from it */
	if (depth == 0)
		bpf_map_update_elem(&tstates, &tid, &tstate, BPF_ANY);
	return 1;
}

#endif /* __CALLS_BPF_H */
