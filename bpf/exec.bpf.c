/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The end of the watch: the target's exec. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "state.bpf.h"

/*
 * The target replaced its image: its interpreter and our probes' targets are gone.
 * A flag, not a ring record: the daemon reads it at every poll, and it cannot be lost.
 */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	if (BPF_CORE_READ(p, tgid) == targ_tgid)
		execed = 1;
	return 0;
}
