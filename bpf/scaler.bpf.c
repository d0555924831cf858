// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * A gradient scaler's update (torch.amp.GradScaler.update): mixed precision's scaler
 * skips the optimizer step whose scaled gradients overflowed, and backs off. Each
 * update is one record (NW_EV_SCALER), so that the daemon can tell a skipped step's
 * non-finite gradients, which are healthy, from a fault.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "state.bpf.h"
#include "tensor.bpf.h"
#include "step.bpf.h"

__u64 scaler_starts = 0; /* NW_C_STEP_STARTS at the last update */

/* A one-element float32 CPU tensor's bits (at::Tensor& at ref); -1 if not readable. */
static __always_inline long scalar_f32(void *ref)
{
	struct scratch *s = get_scratch();
	__u64 impl = 0;
	__u32 bits = 0;

	if (!s || !ref || bpf_probe_read_user(&impl, 8, ref) || !impl)
		return -1;
	if (read_impl(impl) != 0 || s->ti.numel != 1 || s->ti.dtype != NW_DT_F32 ||
	    bpf_probe_read_user(&bits, 4, (void *)s->ti.data))
		return -1;
	return bits;
}

/*
 * at::_ops::_amp_update_scale_::call(Tensor& scale, Tensor& growth_tracker,
 * const Tensor& found_inf, double growth, double backoff, int64_t interval), called
 * once a step, after the optimizer step it let run or skipped. found_inf (1.0: the
 * step was skipped) is read where it is a CPU tensor; elsewhere the step was
 * skipped if no optimizer step began since the last update.
 */
SEC("uprobe")
int BPF_KPROBE(uprobe_scaler_update, void *scale, void *tracker, void *found_inf)
{
	__u64 id = bpf_get_current_pid_tgid(), starts = counters[NW_C_STEP_STARTS];
	struct scratch *s;
	long scale_bits, found;
	__u32 skipped;

	if ((id >> 32) != targ_tgid || stopped || !iter_started)
		return 0;
	count(NW_C_PROBE_HITS, 1);
	found = scalar_f32(found_inf);
	skipped = found >= 0 ? found != 0 : starts == scaler_starts;
	scaler_starts = starts;
	scale_bits = scalar_f32(scale);
	s = get_scratch();
	if (!s)
		return 0;
	__builtin_memset(&s->ev, 0, sizeof(s->ev));
	s->ev.type = NW_EV_SCALER;
	s->ev.tid = (__u32)id;
	s->ev.step = step_count;
	s->ev.iteration = cur_iteration();
	s->ev.dtype = scale_bits >= 0 ? NW_DT_F32 : NW_DT_NONE;
	s->ev.min_key = scale_bits >= 0 ? scale_bits : 0;
	s->ev.flags = skipped;
	s->ev.time_ns = bpf_ktime_get_ns();
	if (skipped) {
		count(NW_C_SCALER_SKIPS, 1);
		/* the loop's step went by without an optimizer step: counted as one, unless the
		 * optimizer's own count gives the step (it does not count skipped steps) */
		if (step_count >> NW_STEP_SHIFT != NW_STEP_OPTIMIZER)
			step_taken(0, 0);
	}
	if (bpf_ringbuf_output(&events, &s->ev, sizeof(s->ev), 0))
		count_lost(NW_C_LOST_SCALER);
	return 0;
}
