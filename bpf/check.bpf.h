/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Output checks: a returning module call's output (or the loss) scanned for
 * NaN/±Inf; at an anomaly the event is filled with the call's inputs and
 * parameters, scanned too, and sent (and the first origin captured). Finite
 * outputs and parameters are sampled for their magnitude.
 */
#ifndef __CHECK_BPF_H
#define __CHECK_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "nwfloat.h"
#include "state.bpf.h"
#include "pyobj.bpf.h"
#include "tensor.bpf.h"
#include "scan.bpf.h"
#include "capture.bpf.h"
#include "backward.bpf.h"
#include "gpu.bpf.h"

/* Check one input object (a tensor) into the event's input counts. */
__noinline int check_input(__u64 obj)
{
	struct scratch *s = get_scratch();
	int r;

	if (!s || !is_tensor_obj(obj))
		return 0;
	r = read_view(obj);
	if (r == 1)
		return 0;
	if (r == 0)
		r = scan_tensor(0);
	if (r < 0) {
		s->ev.inputs_skipped++;
		return 0;
	}
	s->ev.inputs_checked++;
	if (r > 0)
		s->ev.inputs_nonfinite++;
	return 0;
}

/*
 * Is obj an object that keeps its attributes in an instance dict, and neither a tensor nor a
 * dict (a dataclass, a torch.distributions object)? Its attribute table into w, and 1 into
 * *attrs.
 */
static __always_inline int attrs_of(__u64 obj, struct dict_walk *w, __u32 *attrs)
{
	__u64 keys, values;

	*attrs = D.on && obj && !is_tensor_obj(obj) && attr_table(obj, &keys, &values) &&
		 dict_walk(keys, values, w);
	return *attrs;
}

/*
 * The items of obj if it is a tuple or list (or of a subclass: a namedtuple), or the values
 * of a dict (or of a subclass: a ModelOutput) and their keys, or the values of another
 * object's attributes and their names (a dataclass), deleted entries and attributes not set
 * left out, into s->items[which]: how many, or -1 if obj is none of these. A tuple's, list's
 * or dict's items past MAX_ITEMS are counted: an output's in skipped.items, an argument's as
 * an input not known; an object's attributes past them in skipped.items for an output, and
 * not at all for an argument (a module or a config object passed along has many, and no
 * tensor among them). Global: verified once, one walk for the four kinds and for outputs and
 * arguments.
 */
__noinline int walk_items(__u64 obj, __u32 which)
{
	struct scratch *s = get_scratch();
	struct dict_walk w = {};
	struct item_list *l;
	__u64 items = 0, n = 0, k, v;
	int i, got = 0;

	if (!s || which > ITEMS_ARG)
		return -1;
	l = &s->items[which & 1];
	l->attrs = 0;
	if (seq_items_of(obj, &items, &n, 1)) {
		__builtin_memset(l->key, 0, sizeof(l->key));
		for (i = 0; i < MAX_ITEMS; i++) {
			if (i >= n)
				break;
			l->val[i] = read_u64(items + 8 * i);
			got++;
		}
	} else if (dict_items(obj, &w) || attrs_of(obj, &w, &l->attrs)) {
		n = w.n;
		for (i = 0; i < MAX_ITEMS; i++) {
			if (i >= n)
				break;
			dict_entry(&w, i, &k, &v);
			if (!k || !v)
				continue; /* a deleted entry, an attribute not set */
			l->key[got & (MAX_ITEMS - 1)] = k;
			l->val[got & (MAX_ITEMS - 1)] = v;
			got++;
		}
	} else {
		return -1;
	}
	if (n > MAX_ITEMS && which == ITEMS_RESULT)
		count(NW_C_SKIP_ITEMS, n - MAX_ITEMS);
	else if (n > MAX_ITEMS && !l->attrs)
		s->ev.inputs_skipped++;
	return got;
}

/*
 * An argument: a tensor, a tuple or list of them, or a dict of them (items past MAX_ITEMS:
 * not known).
 */
static __always_inline void check_arg(struct scratch *s, __u64 obj)
{
	int j, m = walk_items(obj, ITEMS_ARG);

	if (m < 0) {
		check_input(obj);
		return;
	}
	for (j = 0; j < MAX_ITEMS; j++) {
		if (j >= m)
			break;
		check_input(s->items[ITEMS_ARG].val[j]);
	}
}

/*
 * The module's positional and keyword arguments, as taken when the call was entered; those
 * past what was taken are not known finite.
 */
static __always_inline int check_inputs(struct scratch *s)
{
	int i;

	if (s->more_args)
		s->ev.inputs_skipped++;
	for (i = 0; i < MAX_ITEMS; i++) {
		if (i >= s->nargs)
			break;
		check_arg(s, s->args[i]);
	}
	for (i = 0; i < NW_MAX_KWARGS; i++) {
		if (i >= s->nkwargs)
			break;
		check_arg(s, s->kwargs[i]);
	}
	return 0;
}

/*
 * The module's own parameters, scanned now: a moment later the optimizer may
 * have written NaN into them, or overwritten NaN with something else. Not
 * listed by the daemon yet: read from the module here (list_params); failing
 * that the daemon checks them when it gets the event, and the steps begun by
 * now (step_starts) tell it whether an update may have come in between.
 */
__noinline int check_params(__u64 module)
{
	struct scratch *s = get_scratch();
	struct nw_params *p = bpf_map_lookup_elem(&params, &module);
	int i, r;

	if (!s)
		return 0;
	s->ev.step_starts = (__u32)counters[NW_C_STEP_STARTS];
	if (!p && list_params(module, 0)) {
		/* kept for the next calls, and the capture of this one */
		bpf_map_update_elem(&params, &module, &s->np, BPF_NOEXIST);
		p = &s->np;
	}
	if (!p)
		return 0;
	s->ev.params_known = 1;
	s->ev.params_skipped = p->more;
	for (i = 0; i < NW_MAX_PARAMS; i++) {
		if (i >= p->n)
			break;
		if (!is_tensor_obj(p->tensors[i])) {
			s->ev.params_skipped++;
			continue;
		}
		r = read_view(p->tensors[i]);
		if (r == 1)
			continue;
		if (r == 0)
			r = scan_tensor(0);
		if (r < 0) {
			s->ev.params_skipped++;
			continue;
		}
		s->ev.params_checked++;
		if (r > 0)
			s->ev.params_nonfinite++;
	}
	return 0;
}

/*
 * Send a magnitude event for key (a module, or module | NW_PARAMS_KEY) if mark
 * is one it never reached. s->ev holds the call's stack; the caller set the
 * tensor fields. Returns 1 if sent.
 */
static __always_inline int send_mark(struct scratch *s, __u64 key, __u32 mark, __u64 bits)
{
	__u32 *old = bpf_map_lookup_elem(&marks, &key);
	__u64 type;

	if (old && *old >= mark)
		return 0;
	bpf_map_update_elem(&marks, &key, &mark, BPF_ANY);
	s->ev.type = NW_EV_MAGNITUDE;
	s->ev.max_key = bits;
	type = read_u64(s->ev.module + L.obj_type);
	bpf_probe_read_user_str(s->ev.class_name, NW_NAME_LEN,
				(void *)read_u64(type + L.type_name));
	s->ev.time_ns = bpf_ktime_get_ns();
	if (bpf_ringbuf_output(&events, &s->ev, sizeof(s->ev), 0))
		count_lost(NW_C_LOST_MARK);
	s->ev.type = NW_EV_ANOMALY;
	s->ev.max_key = 0;
	return 1;
}

/* The key of the dict output value reported (a str object, or 0) into the event; "" if none. */
static __always_inline void ev_key(struct scratch *s, __u64 key)
{
	long n;

	__builtin_memset(s->ev.key, 0, NW_KEY_LEN);
	n = key && is_str(key) ? ascii_len(key) : -1;
	if (n > 0 && n < NW_KEY_LEN)
		bpf_probe_read_user_str(s->ev.key, NW_KEY_LEN,
					(void *)(key + L.unicode_ascii_data));
}

/*
 * A finite output just scanned: sample its magnitude from the chunk still in
 * s->buf and report the module when it reaches a mark it never reached: the
 * run-up "large, huge, Inf" shows before the overflow, a healthy run is quiet.
 */
__noinline int note_magnitude(__u32 idx0, __u32 idx1, __u64 key)
{
	struct scratch *s = get_scratch();
	__u32 mark, words;
	__u64 mx;

	/* a view's span holds more than its elements: not sampled */
	if (!s || s->ev.phase != NW_PHASE_FORWARD || !s->c.size || s->ti.view)
		return 0;
	mx = sample_max();
	mark = nw_mag_mark(mx, s->ti.dtype);
	if (!mark)
		return 0;
	words = s->c.words < NW_MAG_WORDS ? s->c.words : NW_MAG_WORDS;
	s->ev.index0 = idx0;
	s->ev.index1 = idx1;
	ev_key(s, key);
	ev_tensor(s);
	s->ev.scanned = (__u64)words * 8 / s->c.size;
	send_mark(s, s->ev.module, mark, mx);
	return 0;
}

/*
 * Sample one parameter's first NW_MAG_WORDS words: its magnitude mark (0: none,
 * or not a float tensor we can read), the bits of its largest |value| in s->c.mag
 * and the elements sampled in s->c.elem. Global: verified once, not once per
 * parameter of note_param_magnitude's loop with every mark it may have seen.
 */
__noinline __u32 param_mark(__u64 tensor)
{
	struct scratch *s = get_scratch();
	__u64 n;

	if (!s)
		return 0;
	s->c.elem = 0;
	if (!is_tensor_obj(tensor) || read_tensor(tensor))
		return 0;
	n = s->ti.bytes;
	if (n > NW_MAG_WORDS * 8)
		n = NW_MAG_WORDS * 8;
	n &= ~7ULL;
	if (n == 0 || n > NW_MAG_WORDS * 8 || bpf_probe_read_user(s->buf, n, (void *)s->ti.data))
		return 0;
	s->c.words = n / 8;
	s->c.size = nw_dtype_size(s->ti.dtype);
	if (s->c.size)
		s->c.elem = n / s->c.size;
	return nw_mag_mark(sample_max(), s->ti.dtype);
}

/*
 * The same for the module's parameters, listed by the daemon: the first 2 KiB
 * of each is sampled at every call, so a run of updates that blows the
 * weights up shows before they overflow. Marks keyed by module | NW_PARAMS_KEY.
 */
__noinline int note_param_magnitude(__u64 module)
{
	struct scratch *s = get_scratch();
	struct nw_params *p = bpf_map_lookup_elem(&params, &module);
	__u32 best = 0, dtype = 0, mark;
	__u64 best_bits = 0, sampled = 0;
	int i;

	if (!s || !p)
		return 0;
	for (i = 0; i < NW_MAX_PARAMS; i++) {
		if (i >= p->n)
			break;
		mark = param_mark(p->tensors[i]);
		sampled += s->c.elem;
		if (mark > best) {
			best = mark;
			best_bits = s->c.mag;
			dtype = s->ti.dtype;
		}
	}
	if (!best)
		return 0;
	s->ev.index0 = NW_PARAMS_INDEX;
	s->ev.index1 = NW_NO_INDEX;
	s->ev.dtype = dtype;
	s->ev.ndim = 0;
	s->ev.numel = 0;
	s->ev.scanned = sampled;
	send_mark(s, module | NW_PARAMS_KEY, best, best_bits);
	return 0;
}

static __always_inline int should_report(__u64 iter, __u32 phase)
{
	__u64 first = first_iter_p1, last;

	if (!first) {
		__sync_val_compare_and_swap(&first_iter_p1, 0, iter + 1);
		first = first_iter_p1;
		last_iter_p1 = first;
	}
	if (first == iter + 1)
		return 1;
	last = last_iter_p1;
	if (last != iter + 1 && __sync_val_compare_and_swap(&last_iter_p1, last, iter + 1) == last)
		return 1;
	count(NW_C_SUPPRESSED, 1);
	if (phase == NW_PHASE_LOSS)
		count(NW_C_LOSS_SUPPRESSED, 1);
	return 0;
}

/*
 * Fingerprint s->ti into s->fp. Returns 1 when it can identify the tensor: it
 * has a grad_fn (in a forward with autograd each op's output has its own node,
 * alive as long as the graph), so another tensor cannot take its place at the
 * same addresses; an in-place change moves the version (and the grad_fn).
 */
static __always_inline int fingerprint(struct scratch *s)
{
	__u64 vc;
	__u32 version = 0;

	s->fp.version = 0;
	s->fp.impl = s->ti.impl;
	s->fp.data = s->ti.data;
	s->fp.bytes = s->ti.bytes;
	s->fp.grad_fn = tensor_grad_fn(s->ti.impl, RS.impl_autograd_meta, RS.meta_grad_fn);
	vc = read_u64(s->ti.impl + RS.impl_version);
	if (!s->fp.grad_fn || !vc ||
	    bpf_probe_read_user(&version, sizeof(version), (void *)(vc + RS.version_value)))
		return 0;
	s->fp.version = version;
	return 1;
}

static __always_inline int same_fp(const struct fingerprint *a, const struct fingerprint *b)
{
	return a->impl == b->impl && a->data == b->data && a->bytes == b->bytes &&
	       a->grad_fn == b->grad_fn && a->version == b->version;
}

/* The dict whose ma_used word is at addr is readable and empty. */
static __always_inline int dict_empty(__u64 addr)
{
	__u64 used = 1;

	return addr && !bpf_probe_read_user(&used, sizeof(used), (void *)addr) && !used;
}

/*
 * keep_mods' entry for self, of that kind, while self is still the object vouched for and
 * called on a plain torch.Tensor arg, with no forward hook of its own or torch's: the
 * instance still holds the hook dicts vouched for (not replaced), and all are empty.
 */
static __always_inline int vouched(__u64 self, __u64 arg, __u32 kind)
{
	struct nw_keep *k = bpf_map_lookup_elem(&keep_mods, &self);
	int i;

	if (!k || k->kind != kind || read_u64(self + L.obj_type) != k->type ||
	    read_u64(arg + L.obj_type) != keep_tensor)
		return 0;
	for (i = 0; i < NW_KEEP_HOOKS; i++)
		if (read_u64(k->slot[i]) != k->dict[i] || !dict_empty(k->used[i]) ||
		    !dict_empty(keep_global_used[i]))
			return 0;
	return 1;
}

/*
 * At a module call's entry (its one positional argument arg, its previous sibling's finite
 * output in s->sib): is its output sure to be finite? Yes for a module the daemon vouched
 * for in keep_mods (torch's own class and forward, whose result is finite for a finite
 * input: an element of it, max(x, 0), or the same data viewed) while neither it nor torch
 * has a forward hook, called on a plain torch.Tensor that is that sibling's output as it
 * was found finite (its fingerprint: not changed since). Global: verified once.
 */
__noinline int keeps_finite(__u64 self, __u64 arg)
{
	struct scratch *s = get_scratch();

	if (!s || !RS.on || !s->sib.impl || !keep_tensor || !vouched(self, arg, NW_KEEP_FINITE))
		return 0;
	if (read_tensor(arg) != 0 || !fingerprint(s))
		return 0;
	return same_fp(&s->sib, &s->fp);
}

static __always_inline struct thread_state *this_thread(void)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();

	return bpf_map_lookup_elem(&threads, &tid);
}

/*
 * At a module call's entry (its one positional argument arg, the thread's Python state
 * tstate): is it the norm the thread's pending output waits for, called by the frame that
 * called the output's call, on that output as it was returned (the same object, its
 * fingerprint unchanged), with no forward hook to change it first? Global: verified once.
 */
__noinline int takes_pending(__u64 self, __u64 arg, __u64 tstate)
{
	struct scratch *s = get_scratch();
	struct thread_state *ts = this_thread();

	if (!s || !ts || !ts->pend.obj || self != ts->pend.next || arg != ts->pend.obj ||
	    thread_frame(tstate) != ts->pend.frame || !vouched(self, arg, NW_KEEP_NORM))
		return 0;
	if (read_tensor(arg) != 0 || !fingerprint(s))
		return 0;
	return same_fp(&ts->pend.fp, &s->fp);
}

/*
 * Is a returning call's one argument arg known finite, its output being out_bytes long? Yes
 * when it cannot be NaN (an integer tensor), when it is, unchanged, a tensor found finite that
 * a call of the thread's stack handed its parent (ts->kid: the previous sibling's output, or
 * for a first child the parent's own input, handed to the grandparent before), or else when it
 * is smaller than the output and a scan finds it finite. Its identity goes to ts->pend.in_fp.
 * Leaves s->ti and s->fp the argument's.
 */
static __always_inline int input_known(__u64 arg, __u64 out_bytes)
{
	struct scratch *s = get_scratch();
	struct thread_state *ts = this_thread();
	int r, j, known;

	if (!s || !ts)
		return 0;
	ts->pend.in_fp.impl = 0;
	r = read_tensor(arg);
	if (r == 1)
		return 1;
	if (r != 0)
		return 0;
	known = fingerprint(s); /* s->fp filled either way, version 0 where not known */
	ts->pend.in_fp = s->fp;
	for (j = 0; known && j < NW_MAX_DEPTH; j++) {
		if (j + 1 >= s->ev.depth)
			break;
		if (ts->kid[j].impl && same_fp(&ts->kid[j], &s->fp))
			return 1;
	}
	if (s->ti.flags || s->ti.bytes >= out_bytes)
		return 0;
	return scan_tensor(0) == 0;
}

/*
 * A Sequential child's output that goes to a norm next (s->defer): not scanned now, its check
 * waits for the norm's (struct pending), when its input is known finite (input_known()): a
 * late report has it for its input's verdict, the input itself may be gone by then. Its
 * magnitude is sampled from its first words, as a scan samples them. Returns 1 if deferred;
 * 0: s->ti and s->fp no longer the output's. Global: verified once.
 */
__noinline int defer_output(__u64 obj)
{
	struct scratch *s = get_scratch();
	struct thread_state *ts = this_thread();
	__u64 n, arg, data;
	__u32 dtype;

	if (!s || !ts || s->ev.depth < 1 || s->ev.depth > NW_MAX_DEPTH)
		return 0;
	arg = s->nargs == 1 && !s->nkwargs ? s->args[0] : 0;
	if (!arg || !is_tensor_obj(arg))
		return 0;
	ts->pend.fp = s->fp;
	data = s->ti.data;
	n = s->ti.bytes;
	dtype = s->ti.dtype;
	if (!input_known(arg, n))
		return 0;
	ts->pend.obj = obj;
	ts->pend.module = s->ev.module;
	ts->pend.next = s->defer;
	ts->pend.frame = s->defer_frame;
	ts->pend.arg = arg;
	ts->pend.depth = s->ev.depth - 1;
	ts->pend.deeper = s->deeper;
	ts->pend.broken = 0;
	if (n > NW_MAG_WORDS * 8)
		n = NW_MAG_WORDS * 8;
	n &= ~7ULL;
	barrier_var(n);
	s->c.size = nw_dtype_size(dtype);
	s->c.words = 0;
	if (n && n <= NW_MAG_WORDS * 8 && !bpf_probe_read_user(s->buf, n, (void *)data)) {
		s->c.words = n / 8;
		note_magnitude(NW_NO_INDEX, NW_NO_INDEX, 0);
	}
	return 1;
}

/*
 * Check one output tensor; on NaN/±Inf fill s->ev (the caller set the module
 * stack, and the call's arguments in s->args) and send it: 1. A loss's is not sent: 2, for
 * uprobe_run_backward to add the nodes that made it.
 */
__noinline int check_output(__u64 obj, __u32 idx0, __u32 idx1, __u64 key)
{
	struct scratch *s = get_scratch();
	__u64 iter, type;
	int r, known;

	if (!s)
		return 0;
	r = read_view(obj);
	if (r < 0 && gpu_on && s->ti.gpu) {
		gpu_output(idx0, idx1);
		return 0;
	}
	if (r < 0)
		count_skip(s->ti.flags);
	if (r != 0)
		return 0;
	known = RS.on && s->ev.phase == NW_PHASE_FORWARD && fingerprint(s);
	if (known && ((s->kid.impl && same_fp(&s->kid, &s->fp)) ||
		      (s->sib.impl && same_fp(&s->sib, &s->fp)))) {
		/*
		 * The last child returned this very tensor, finite, and nothing changed it; or
		 * the previous sibling did, and this call returns it as it got it (an Identity,
		 * a dropout in eval mode): the caller still holds it, so it is the same tensor.
		 */
		count(NW_C_RESCAN_SKIPPED, 1);
		count(NW_C_RESCAN_BYTES, s->ti.bytes);
		s->out_ok = 1;
		return 0;
	}
	if (known && s->keep) { /* finite from a finite input: keeps_finite() */
		count(NW_C_KEPT_FINITE, 1);
		count(NW_C_KEPT_BYTES, s->ti.bytes);
		s->out_ok = 1;
		return 0;
	}
	if (known && s->defer && s->single && !s->ti.view) { /* its check may wait for the norm's */
		if (defer_output(obj))
			return 0;
		if (read_tensor(obj) != 0) /* s->ti was its input's: read again */
			return 0;
		known = fingerprint(s);
	}
	r = scan_tensor(0);
	if (r == 0) {
		note_magnitude(idx0, idx1, key);
		s->out_ok = known;
		/* a norm's output, all of it finite: so was the pending output it took */
		if (s->hold && !(s->ti.flags & NW_SKIP_TRUNCATED))
			s->held = HELD_FINITE;
	}
	if (r > 0 && s->hold) { /* the pending output it took is reported first, if it was */
		s->held = HELD_NONFINITE;
		return 0;
	}
	if (r <= 0)
		return 0;
	count(NW_C_ANOMALIES, 1);
	if (s->ev.phase == NW_PHASE_LOSS)
		count(NW_C_LOSS_FOUND, 1);
	iter = s->ev.iteration;
	fwd_bad_iter_p1 = iter + 1; /* its backward pass only propagates this */
	if (!should_report(iter, s->ev.phase))
		return 0;
	s->ev.first_iteration = first_iter_p1 == iter + 1;
	s->ev.index0 = idx0;
	s->ev.index1 = idx1;
	ev_key(s, key);
	ev_tensor(s);
	scan_tensor(1);
	s->ev.inputs_checked = 0;
	s->ev.inputs_nonfinite = 0;
	s->ev.inputs_skipped = 0;
	check_inputs(s);
	if (s->late_in) /* found finite when the call returned (input_known()) */
		s->ev.inputs_checked++;
	check_params(s->ev.module);
	/* the first anomaly, when it is an origin: copy the call while it is on the stack */
	if (capture_wanted(s) && !s->late_in)
		capture_layer(obj, idx0, idx1, key);
	type = read_u64(s->ev.module + L.obj_type);
	bpf_probe_read_user_str(s->ev.class_name, NW_NAME_LEN,
				(void *)read_u64(type + L.type_name));
	s->ev.time_ns = bpf_ktime_get_ns();
	if (s->ev.phase == NW_PHASE_LOSS)
		return 2; /* its autograd nodes go in first: uprobe_run_backward sends it */
	if (bpf_ringbuf_output(&events, &s->ev, sizeof(s->ev), 0))
		count_lost(NW_C_LOST_FORWARD);
	return 1;
}

/*
 * Walk a module's return value: a tensor, a tuple/list of them nested one level, or a dict
 * (or of a dict subclass: a ModelOutput) of them, its values as output[place] with their
 * key in the event, or another object's attributes (a dataclass), as output[place] with
 * NW_ATTR_INDEX and their names. Entries past MAX_ITEMS: skipped.items.
 */
__noinline int check_result(__u64 ret)
{
	struct scratch *s = get_scratch();
	__u32 attr;
	int i, j, n;

	if (!s)
		return 0;
	if (is_tensor_obj(ret)) {
		note_grad_fn(ret);
		check_output(ret, NW_NO_INDEX, NW_NO_INDEX, 0);
		return 0;
	}
	n = walk_items(ret, ITEMS_RESULT);
	attr = s->items[ITEMS_RESULT].attrs ? NW_ATTR_INDEX : 0;
	for (i = 0; i < MAX_ITEMS; i++) {
		__u64 obj, key, sub = 0, m = 0;

		if (i >= n)
			break;
		obj = s->items[ITEMS_RESULT].val[i];
		key = s->items[ITEMS_RESULT].key[i];
		if (is_tensor_obj(obj)) {
			note_grad_fn(obj);
			check_output(obj, i | attr, NW_NO_INDEX, key);
		} else if (seq_items_of(obj, &sub, &m, 1)) {
			if (m > MAX_ITEMS)
				count(NW_C_SKIP_ITEMS, m - MAX_ITEMS);
			for (j = 0; j < MAX_ITEMS; j++) {
				__u64 o;

				if (j >= m)
					break;
				o = read_u64(sub + 8 * j);
				if (is_tensor_obj(o))
					check_output(o, i | attr, j, key);
			}
		}
	}
	return 0;
}

static __always_inline void fill_stack(struct scratch *s, struct thread_state *ts, __u32 depth)
{
	int i;

	__builtin_memset(&s->ev, 0, sizeof(s->ev));
	s->ev.type = NW_EV_ANOMALY;
	s->ev.tid = (__u32)bpf_get_current_pid_tgid();
	s->ev.step = step_count;
	s->ev.iteration = cur_iteration();
	s->ev.depth = depth + 1 > NW_MAX_DEPTH ? NW_MAX_DEPTH : depth + 1;
	for (i = 0; i < NW_MAX_DEPTH; i++)
		s->ev.modules[i] = i <= depth ? ts->stack[i] : 0;
	s->ev.module = ts->stack[depth < NW_MAX_DEPTH ? depth : NW_MAX_DEPTH - 1];
}

/*
 * The thread's pending output checked now, as the output of the call that returned it (its
 * stack, its argument while that still reads as it did), and reported if non-finite: the
 * norm it went to made a non-finite output or was not the next thing the thread did. With
 * broken set, only when the evaluator's entry found another call entered first (called
 * after the entry's own work: the two would not fit in one stack). Global: verified once.
 */
__noinline int flush_pending(__u32 broken)
{
	struct scratch *s = get_scratch();
	struct thread_state *ts = this_thread();
	__u64 obj, arg;
	__u32 d;

	if (!s || !ts || !ts->pend.obj || (broken && !ts->pend.broken))
		return 0;
	obj = ts->pend.obj;
	ts->pend.obj = 0;
	d = ts->pend.depth;
	if (d >= NW_MAX_DEPTH)
		return 0;
	fill_stack(s, ts, d);
	s->ev.modules[d] = ts->pend.module;
	s->ev.module = ts->pend.module;
	s->nargs = 0;
	s->nkwargs = 0;
	s->more_args = 0;
	/* its argument, if it is still the tensor it was: scanned, and captured if an origin */
	arg = ts->pend.arg;
	if (arg && ts->pend.in_fp.impl && is_tensor_obj(arg) && read_tensor(arg) == 0) {
		fingerprint(s);
		if (same_fp(&s->fp, &ts->pend.in_fp)) {
			s->args[0] = arg;
			s->nargs = 1;
		}
	}
	s->late_in = !s->nargs;
	s->deeper = ts->pend.deeper;
	s->kid.impl = 0;
	s->sib.impl = 0;
	s->fp.impl = 0;
	s->single = 1;
	s->out_ok = 0;
	s->gpu_gate = 0;
	s->keep = 0;
	s->hold = 0;
	s->defer = 0;
	check_output(obj, NW_NO_INDEX, NW_NO_INDEX, 0);
	s->deeper = 0;
	s->late_in = 0;
	return 0;
}

/* The value of a scalar loss (s->ti, as check_output read it), for the loss trend. */
static __always_inline void send_loss(struct scratch *s)
{
	__u64 bits = 0;
	__u32 size = nw_dtype_size(s->ti.dtype);
	void *p = (void *)s->ti.data;

	if (s->ti.numel != 1 || s->ti.flags || !size || size > sizeof(bits) ||
	    bpf_probe_read_user(&bits, size, p))
		return;
	s->ev.type = NW_EV_LOSS;
	s->ev.dtype = s->ti.dtype;
	s->ev.min_key = bits;
	s->ev.time_ns = bpf_ktime_get_ns();
	if (bpf_ringbuf_output(&events, &s->ev, sizeof(s->ev), 0))
		count_lost(NW_C_LOST_LOSS_VALUE);
}

#endif /* __CHECK_BPF_H */
