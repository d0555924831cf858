// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Discovery for the service (bpf/nwprocs.h): every process as the kernel knows it, and a
 * wake-up at each exec so that a new program is looked at without waiting for the next scan.
 * A separate object from the watch's: loaded once per daemon, whatever it watches.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "nwprocs.h"

#define PF_KTHREAD 0x00200000

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} events SEC(".maps");

__u64 events_lost = 0; /* records not written (ring full): the next scan sees them anyway */

static void event(__u32 tgid, __u32 kind)
{
	struct nw_proc_ev_rec *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e) {
		__sync_fetch_and_add(&events_lost, 1);
		return;
	}
	e->tgid = tgid;
	e->kind = kind;
	bpf_ringbuf_submit(e, 0);
}

SEC("iter/task")
int dump_procs(struct bpf_iter__task *ctx)
{
	struct task_struct *t = ctx->task;
	struct nw_proc r = {};
	struct mm_struct *mm;

	/* a thread's record would repeat its process: the group leader alone */
	if (!t || t->pid != t->tgid || (t->flags & PF_KTHREAD))
		return 0;
	r.tgid = t->tgid;
	r.ppid = BPF_CORE_READ(t, real_parent, tgid);
	r.uid = BPF_CORE_READ(t, real_cred, uid.val);
	r.start_ns = t->start_boottime;
	r.exec_id = t->self_exec_id;
	if (t->self_exec_id != t->parent_exec_id)
		r.flags |= NW_PROC_EXECED;
	/* an exec past its point of no return has its new mm, and its exec count up, some time
	 * before the arguments and environment are set in it: cmdline and environ read empty */
	mm = t->mm;
	if (mm && (BPF_CORE_READ(mm, arg_end) == 0 || BPF_CORE_READ(mm, env_end) == 0))
		r.flags |= NW_PROC_IN_EXEC;
	BPF_CORE_READ_STR_INTO(&r.comm, t, comm);
	bpf_seq_write(ctx->meta->seq, &r, sizeof(r));
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_proc_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	event(BPF_CORE_READ(p, tgid), NW_PROC_EV_EXEC);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
