/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Optimizer steps: which optimizer is tracked, and the step word (step_count)
 * from its own state['step'] when the daemon found it, else counted here.
 */
#ifndef __STEP_BPF_H
#define __STEP_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "state.bpf.h"
#include "pyobj.bpf.h"
#include "tensor.bpf.h"

/* The first optimizer seen stepping: the daemon (reading step_opt) looks for its step count. */
static __always_inline void note_optimizer(__u64 opt)
{
	if (opt && !step_opt)
		__sync_val_compare_and_swap(&step_opt, 0, opt);
}

/* The value of an integral float (bits of a float with mbits mantissa bits); -1 if not one. */
static __always_inline long float_count(__u64 bits, __u32 mbits, __u32 ebits)
{
	__u64 bias = (1ULL << (ebits - 1)) - 1, e, m;

	if (!bits)
		return 0;
	if (bits >> (mbits + ebits))
		return -1; /* negative */
	e = (bits >> mbits) & ((1ULL << ebits) - 1);
	if (e < bias || e - bias > 52)
		return -1; /* below 1, huge, Inf or NaN */
	e -= bias;
	m = (bits & ((1ULL << mbits) - 1)) | (1ULL << mbits);
	if (e >= mbits)
		return m << (e - mbits);
	if (m & ((1ULL << (mbits - e)) - 1))
		return -1; /* not an integer */
	return m >> (mbits - e);
}

/* Steps the tracked optimizer completed: its state['step'] tensor; -1 if not known. */
static __noinline long step_state(void)
{
	struct scratch *s = get_scratch();
	__u64 impl = step_impl, bits = 0;
	int r;

	if (!s || !impl)
		return -1;
	r = read_impl(impl);
	/* the step is a CPU tensor, read here even where a test takes CPU tensors for GPU ones */
	if (r < 0 && s->ti.gpu && gpu_device == L.device_cpu && s->ti.data)
		r = 0;
	if (r != 0 || s->ti.numel != 1)
		return -1;
	if (s->ti.dtype == NW_DT_F32) {
		if (bpf_probe_read_user(&bits, 4, (void *)s->ti.data))
			return -1;
		return float_count(bits, 23, 8);
	}
	if (s->ti.dtype == NW_DT_F64) {
		if (bpf_probe_read_user(&bits, 8, (void *)s->ti.data))
			return -1;
		return float_count(bits, 52, 11);
	}
	return -1;
}

/*
 * An optimizer step of opt (0: not known), counted as it starts (at_start 1: its
 * state does not include it yet) or as it returns. The tracked optimizer's state
 * sets the step; without it the step counts on from the attach, beginning with the
 * first whole forward pass watched, as iterations do (a step run before it, while
 * the probes were being attached, would put one count ahead of the other). Another
 * optimizer's step leaves it (a GAN's two optimizers), unless that one steps
 * twice in a row: it replaced the tracked one (a new run, a new fold), whose
 * state the daemon then looks up.
 */
static __noinline int step_taken(__u64 opt, __u32 at_start)
{
	long v = -1;

	if (!iter_started)
		return 0;
	count(NW_C_STEPS, 1);
	if (!opt_stepped) {
		/*
		 * Backward passes were counted as steps until now: they were micro-batches
		 * (gradient accumulation), and no optimizer step had completed since the attach.
		 */
		opt_stepped = 1;
		step_count = 0;
	}
	if (opt && opt != step_opt && step_opt) {
		if (opt != step_other) {
			step_other = opt;
			if (step_count >> NW_STEP_SHIFT == NW_STEP_OPTIMIZER)
				return 0;
		} else {
			step_opt = opt;
			step_impl = 0;
		}
	}
	if (opt && opt == step_opt) {
		step_other = 0;
		v = step_state();
	}
	if (v >= 0) {
		step_count = ((__u64)NW_STEP_OPTIMIZER << NW_STEP_SHIFT) |
			     ((v + at_start) & NW_STEP_MASK);
		return 0;
	}
	__sync_fetch_and_add(&step_count, 1);
	return 0;
}

/*
 * torch 2.x: the optimizer whose step opened the marker. Python 3.13 runs the
 * step wrapper inline, so it is found among the first locals of the thread's
 * current frames (the wrapper's self); 0 if not.
 */
static __noinline __u64 marker_optimizer(__u32 tid)
{
	__u64 *tstate = bpf_map_lookup_elem(&tstates, &tid);
	__u64 frame;
	int i, j;

	if (!tstate)
		return 0;
	frame = thread_frame(*tstate);
	for (i = 0; i < 8 && frame; i++) {
		for (j = 0; j < 4; j++) {
			__u64 obj = read_ref(frame + L.frame_localsplus + 8 * j);

			if (obj && is_optimizer(obj))
				return obj;
		}
		frame = read_u64(frame + L.frame_previous);
	}
	return 0;
}

#endif /* __STEP_BPF_H */
