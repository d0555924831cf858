/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The forward pass: learn nn.Module call boundaries from the CPython frame evaluator
 * and scan every module output for NaN/±Inf, with integer work only.
 *
 * A module call is a frame of the layout's call function (Module._call_impl)
 * entered from C: the call goes through the type's tp_call slot, so CPython
 * 3.11+ cannot inline it. Its return value is the module's output, and the
 * frame's locals (self, *args) are still alive when the evaluator returns:
 * the caller clears the frame only afterwards.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "state.bpf.h"
#include "pyobj.bpf.h"
#include "calls.bpf.h"
#include "check.bpf.h"
#include "step.bpf.h"

extern bool bpf_session_is_return(void) __ksym __weak;

#define ENTRY_FLUSH 2 /* eval_entry(): the thread's pending output is to be checked now */
#define ENTRY_NOTE 4  /* eval_entry(): the module's first call, note_module() to send */

/* An entry's result r, with ENTRY_FLUSH if the thread has a pending output it broke. */
static __always_inline int entry_done(struct thread_state *ts, int r)
{
	return ts->pend.obj && ts->pend.broken ? r | ENTRY_FLUSH : r;
}

/*
 * The evaluator's entry: a module call or an optimizer step is recorded for its return.
 * 0 when one was (its return is to be seen), 1 when not: a uprobe session then arms no
 * return for the call. ENTRY_FLUSH: then flush_pending(1).
 */
static __always_inline int eval_entry(struct pt_regs *ctx)
{
	void *tstate = (void *)PT_REGS_PARM1(ctx), *frame = (void *)PT_REGS_PARM2(ctx);
	int throwflag = (int)PT_REGS_PARM3(ctx);
	__u64 id = bpf_get_current_pid_tgid();
	struct frame_rec rec = {};
	struct frame_key key = {};
	struct thread_state *ts;
	__u64 code, self;
	__u32 depth;
	int kind, note;

	if ((id >> 32) != targ_tgid || throwflag || stopped)
		return 1;
	count(NW_C_PROBE_HITS, 1);
	code = read_ref((__u64)frame + L.frame_code);
	if (!code)
		return 1;
	kind = classify(code, (__u64)frame);
	if (kind == CODE_OTHER)
		return 1;
	ts = get_thread((__u32)id);
	if (!ts)
		return 1;
	rec.kind = kind;
	key.sp = PT_REGS_SP(ctx) + 8; /* the stack pointer once the return address is popped */
	key.tid = (__u32)id;
	if (kind == CODE_STEP) {
		ts->pend.broken = 1;
		/*
		 * A step runs below every step still running: one at or above the outermost's
		 * stack pointer means that one returned unseen (its session was closed and
		 * opened again meanwhile, see attach/probe.c), and steps count again.
		 */
		if (ts->step_depth && key.sp >= ts->step_sp)
			ts->step_depth = 0;
		rec.depth = ts->step_depth;
		/* the optimizer, for the return: its state has the step then */
		rec.args[0] = read_ref((__u64)frame + L.frame_localsplus + 8 * L.self_slot);
		if (!rec.depth)
			note_optimizer(rec.args[0]);
		if (rec.depth == 0)
			count(NW_C_STEP_STARTS, 1);
		if (arm_paused) { /* begun, but not counted as a step: its return is not armed */
			count(NW_C_UNARMED, 1);
			return entry_done(ts, 1);
		}
		if (!ts->step_depth)
			ts->step_sp = key.sp;
		ts->step_depth++;
		bpf_map_update_elem(&frames, &key, &rec, BPF_ANY);
		return entry_done(ts, 0);
	}
	self = read_ref((__u64)frame + L.frame_localsplus + 8 * L.self_slot);
	if (!push_call(ts, &rec, (__u64)tstate, key.sp, key.tid, self)) {
		ts->pend.broken = 1;
		return entry_done(ts, 1);
	}
	depth = rec.depth;
	if (depth < NW_MAX_DEPTH)
		ts->seq_in[depth & (NW_MAX_DEPTH - 1)] = backward_all ? seq_now() : 0;
	capture_args(&rec, (__u64)frame);
	capture_kwargs(&rec, (__u64)frame);
	count(NW_C_MODULE_CALLS, 1);
	/* the thread's pending output: only the norm it goes to, called next, may take it */
	if (ts->pend.obj) {
		if (depth == ts->pend.depth && rec.nargs == 1 && !rec.nkwargs &&
		    takes_pending(self, rec.args[0], (__u64)tstate))
			rec.pred = 1;
		else
			ts->pend.broken = 1;
	}
	if (keep_tensor && rec.nargs == 1 && !rec.nkwargs && depth > 0 && depth < NW_MAX_DEPTH) {
		struct scratch *s = get_scratch();

		if (s) {
			s->sib = ts->kid[(depth - 1) & (NW_MAX_DEPTH - 1)];
			rec.keep = keeps_finite(self, rec.args[0]);
		}
	}
	note = want_note(ts->stack[0], self,
			 depth > 0 && depth <= NW_MAX_DEPTH
				 ? ts->stack[(depth - 1) & (NW_MAX_DEPTH - 1)]
				 : 0,
			 depth)
		       ? ENTRY_NOTE
		       : 0;
	/*
	 * Another watch of this daemon has been removing its probes for long (arm_paused, see
	 * attach/probe.c): no return is armed, so that a return this task holds pending (a
	 * forward that never returns) lets the kernel's removal of any uprobe go (see
	 * session_eval_frame). The call stays on the stack unchecked until heal() or its
	 * caller's return drops it, and its caller is then not called an origin.
	 */
	if (arm_paused) {
		count(NW_C_UNARMED, 1);
		return entry_done(ts, 1) | note;
	}
	bpf_map_update_elem(&frames, &key, &rec, BPF_ANY);
	return entry_done(ts, 0) | note;
}

/* noinline: its stack and a pending output's check (flush_pending) would not fit in one */
static __noinline int eval_entry_call(struct pt_regs *ctx)
{
	return eval_entry(ctx);
}

SEC("uprobe")
int uprobe_eval_frame(struct pt_regs *ctx)
{
	int r = eval_entry_call(ctx);

	if (r & ENTRY_NOTE)
		note_module();
	if (r & ENTRY_FLUSH)
		flush_pending(1);
	return 0;
}

/* The scratch set for a returning call's output check (its stack, what its children left). */
static __always_inline void ret_setup(struct scratch *s, struct thread_state *ts, __u32 depth,
				      __u32 keep, __u64 ret)
{
	fill_stack(s, ts, depth);
	s->deeper = ts->unchecked[depth & (NW_MAX_DEPTH - 1)] ? NW_FLAG_DEEPER : 0;
	s->kid = ts->kid[depth & (NW_MAX_DEPTH - 1)];
	if (depth > 0)
		s->sib = ts->kid[(depth - 1) & (NW_MAX_DEPTH - 1)];
	else
		s->sib.impl = 0;
	s->fp.impl = 0;
	s->single = is_tensor(read_u64(ret + L.obj_type));
	s->out_ok = 0;
	s->gpu_gate = 0;
	s->keep = keep;
}

/*
 * The norm a returning call's output may be left to (struct nw_defer): the call is the child
 * vouched for, of the Sequential vouched for, which called it from a frame running torch's
 * Sequential.forward (into s->defer_frame). 0: none.
 */
static __always_inline __u64 defer_next(struct scratch *s, struct thread_state *ts, __u32 depth,
					__u32 tid)
{
	__u64 self, parent, frame, *tstate;
	struct nw_defer *d;

	if (!keep_tensor || depth < 1 || depth >= NW_MAX_DEPTH)
		return 0;
	self = ts->stack[depth & (NW_MAX_DEPTH - 1)];
	d = bpf_map_lookup_elem(&defer_mods, &self);
	if (!d)
		return 0;
	parent = ts->stack[(depth - 1) & (NW_MAX_DEPTH - 1)];
	if (parent != d->parent || read_u64(parent + L.obj_type) != d->parent_type ||
	    read_u64(self + L.obj_type) != d->type)
		return 0;
	/* the frame the call returned to: the caller's, once the evaluator popped its own */
	tstate = bpf_map_lookup_elem(&tstates, &tid);
	frame = tstate ? thread_frame(*tstate) : 0;
	if (!frame || read_ref(frame + L.frame_code) != d->code)
		return 0;
	s->defer_frame = frame;
	return d->next;
}

/*
 * A norm that took the thread's pending output returned, its output checked (s->held): a
 * finite output proves the pending one finite; else the pending one is checked first, as its
 * own call's output, and then this call's reported. The call is at ts->depth, its one
 * argument the pending output.
 */
static __always_inline void norm_return(struct scratch *s, struct thread_state *ts, __u64 ret)
{
	__u64 arg = ts->pend.obj;

	s->hold = 0;
	if (s->held == HELD_FINITE && s->single) {
		count(NW_C_NORM_CHECKED, 1);
		count(NW_C_NORM_BYTES, ts->pend.fp.bytes);
		ts->pend.obj = 0;
		return;
	}
	flush_pending(0);
	if (s->held != HELD_NONFINITE)
		return;
	ret_setup(s, ts, ts->depth, 0, ret); /* a norm: never kept finite */
	s->args[0] = arg;
	s->nargs = 1;
	s->nkwargs = 0;
	s->more_args = 0;
	check_result(ret);
	s->deeper = 0;
}

/* The evaluator's return: the recorded call's output checked. */
static __always_inline int eval_return_body(struct pt_regs *ctx)
{
	void *ret = (void *)PT_REGS_RC(ctx);
	__u64 id = bpf_get_current_pid_tgid();
	struct frame_key key = {};
	struct thread_state *ts;
	struct frame_rec *r;
	struct scratch *s;
	__u32 kind, depth, keep, pred;
	__u64 self0;

	if ((id >> 32) != targ_tgid || stopped)
		return 0;
	key.sp = PT_REGS_SP(ctx);
	key.tid = (__u32)id;
	r = bpf_map_lookup_elem(&frames, &key);
	if (!r)
		return 0;
	ts = bpf_map_lookup_elem(&threads, &key.tid);
	/* any return but the norm's that took it: the thread's pending output is checked first */
	if (!r->pred && ts && ts->pend.obj)
		flush_pending(0);
	s = get_scratch();
	if (!s) {
		bpf_map_delete_elem(&frames, &key);
		return 0;
	}
	/* the call's arguments go straight to the scratch: the record is too big for the stack */
	kind = r->kind;
	depth = r->depth;
	self0 = r->args[0];
	__builtin_memcpy(s->args, r->args, sizeof(s->args));
	__builtin_memcpy(s->kwargs, r->kwargs, sizeof(s->kwargs));
	__builtin_memcpy(s->kwkeys, r->kwkeys, sizeof(s->kwkeys));
	s->nargs = r->nargs;
	s->nkwargs = r->nkwargs;
	s->more_args = r->more;
	if (r->list0 && r->nargs && read_u64(r->args[0] + L.var_size) + 1 < r->list0)
		s->more_args |= MORE_SHRUNK;
	keep = r->keep;
	pred = r->pred;
	bpf_map_delete_elem(&frames, &key);
	if (!ts)
		return 0;
	if (kind == CODE_STEP) {
		ts->step_depth = depth;
		if (depth == 0 && ret)
			step_taken(self0, 0);
		return 0;
	}
	/* a call the stack no longer holds (healed away, see heal()) is not ours to pop */
	if (depth < NW_MAX_DEPTH && (depth >= ts->depth || ts->sp[depth] != key.sp))
		return 0;
	/* a child still on the stack never returned as far as we saw: it went unchecked */
	if (depth < NW_MAX_DEPTH && ts->depth > depth + 1)
		ts->unchecked[depth] = 1;
	ts->depth = depth; /* pop, exactly to where this call was pushed */
	if (backward_all && depth < NW_MAX_DEPTH)
		note_span(ts->seq_in[depth & (NW_MAX_DEPTH - 1)], depth, ts->stack[0],
			  ts->stack[depth & (NW_MAX_DEPTH - 1)]);
	if (!ret || depth >= NW_MAX_DEPTH || (top_only && depth > 0)) {
		flush_pending(0);
		return 0;
	}
	if (depth == 0)
		note_flat_root(ts->stack[0]);
	ret_setup(s, ts, depth, keep, (__u64)ret);
	s->hold = pred; /* kept set till norm_return(): few registers live across the calls */
	s->held = 0;
	s->defer = pred ? 0 : defer_next(s, ts, depth, key.tid);
	check_result((__u64)ret);
	s->defer = 0;
	s->deeper = 0; /* ev_tensor() of other programs must not see it */
	s->keep = 0;
	if (depth > 0) {
		/* what this call hands its parent: remembered only while the parent runs */
		if (s->single && s->out_ok)
			ts->kid[(depth - 1) & (NW_MAX_DEPTH - 1)] = s->fp;
		else
			ts->kid[(depth - 1) & (NW_MAX_DEPTH - 1)].impl = 0;
	}
	note_param_magnitude(s->ev.module);
	if (s->hold)
		norm_return(s, ts, (__u64)ret);
	return 0;
}

/*
 * Returns are counted (and timed, with the run-time stats: a session's program runs both
 * ends, so its own run time does not tell them apart).
 */
static __always_inline int eval_return(struct pt_regs *ctx)
{
	__u64 t0;

	if ((bpf_get_current_pid_tgid() >> 32) != targ_tgid)
		return 0;
	count(NW_C_RETURN_HITS, 1);
	t0 = time_copies ? bpf_ktime_get_ns() : 0;
	eval_return_body(ctx);
	if (time_copies)
		count(NW_C_RETURN_NS, bpf_ktime_get_ns() - t0);
	return 0;
}

SEC("uretprobe")
int uretprobe_eval_frame(struct pt_regs *ctx)
{
	return eval_return(ctx);
}

/*
 * Both ends of the evaluator's calls as one uprobe session, where the kernel has them (6.13
 * on; probe.c loads either this or the two programs above). The entry arms a return only
 * for the calls it recorded: a frame that runs for long (a training loop entered after the
 * attach) holds no return instance, and none is armed once stopped or arm_paused is set.
 * On such kernels a return instance holds an SRCU read lock that the removal of any uprobe
 * waits for, and the kernel releases it only 100 ms after its task armed its last one: with
 * a return probe on every frame, a watched trainer's loop would hold up the detach (and
 * every other uprobe's attach or removal on the node) until the loop returned.
 */
static __noinline int session_entry(struct pt_regs *ctx)
{
	return eval_entry(ctx);
}

/* each end its own function: the two inline in one frame would pass the stack's 512 bytes */
SEC("uprobe")
int session_eval_frame(struct pt_regs *ctx)
{
	int r;

	if (bpf_session_is_return())
		return eval_return(ctx);
	r = session_entry(ctx);
	if (r & ENTRY_NOTE)
		note_module();
	if (r & ENTRY_FLUSH)
		flush_pending(1);
	return r & 1;
}
