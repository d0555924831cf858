/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The end of the watch: the target's exec; and the processes it forks. */
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

/*
 * The target forked a process (a DataLoader worker, os.fork): its copy of the pages keeps the
 * watch's breakpoints. A perf uprobe's is removed from it at its first hit, a uprobe_multi
 * link's stays, and the child would trap at each (the frame evaluator's: on every Python call
 * it makes from C): the daemon removes them (attach/probe.c, clean_forks, with fork_clean
 * below). A count the daemon reads at every tick; with links only (its autoload off
 * otherwise).
 */
SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child)
{
	if (BPF_CORE_READ(parent, tgid) == targ_tgid && BPF_CORE_READ(child, tgid) != targ_tgid)
		__sync_fetch_and_add(&counters[NW_C_FORKS], 1);
	return 0;
}

/*
 * Runs nowhere: attached at each of the watch's places for the target and detached at once,
 * as a uprobe_multi link (its expected attach type set by the daemon), so that the kernel's
 * removal of it takes the breakpoints out of the target's forked processes.
 */
SEC("uprobe")
int fork_clean(struct pt_regs *ctx)
{
	return 0;
}
