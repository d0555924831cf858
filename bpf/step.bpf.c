/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Optimizer steps as torch 2.x's profiler marks them (step_by_marker). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "state.bpf.h"
#include "pyobj.bpf.h"
#include "step.bpf.h"

/*
 * torch 2.x: Optimizer.step runs inside record_function("Optimizer.step#<class>.step"),
 * whose C++ entry gets the name as a std::string (pointer, length first). It returns an
 * intrusive_ptr, a class returned through a hidden first argument: the name is the second.
 */
SEC("uprobe")
int BPF_KPROBE(uprobe_step_marker, void *ret_slot, void *name)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct {
		__u64 ptr;
		__u64 len;
	} str = {};
	char buf[NW_MATCH_LEN] = {};
	__u32 plen = pat_len(L.step_marker);
	__u64 opt;
	int i;

	if ((id >> 32) != targ_tgid || stopped || !plen || plen >= NW_MATCH_LEN)
		return 0;
	if (bpf_probe_read_user(&str, sizeof(str), name) || str.len < plen)
		return 0;
	if (bpf_probe_read_user(buf, plen & (NW_MATCH_LEN - 1), (void *)str.ptr))
		return 0;
	for (i = 0; i < NW_MATCH_LEN; i++) {
		if (i >= plen)
			break;
		if (buf[i] != L.step_marker[i])
			return 0;
	}
	/* counted as the step starts: no module runs inside a step but an LBFGS closure */
	count(NW_C_STEP_STARTS, 1);
	opt = marker_optimizer((__u32)id);
	note_optimizer(opt);
	step_taken(opt, 1);
	return 0;
}
