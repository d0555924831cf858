/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The service's view of the node's processes, from the kernel (bpf/procs.bpf.c): one record
 * per process from a task iterator at each scan, and a wake-up record at each exec.
 *
 * Fork or exec is the kernel's own count: a task's self_exec_id goes up by one at each exec
 * and is copied at fork, where the child's parent_exec_id is set to it. So a process that
 * has not execed since its fork has self_exec_id == parent_exec_id (a DataLoader worker, a
 * fork-server child), and one that has (every launcher's rank: torchrun, mp.spawn, mpirun,
 * a script relaunching itself, setsid -f, systemd) differs, whatever its name or command
 * line, and whoever its parent is now.
 *
 * The count goes up inside the exec, before the new program's arguments and environment are
 * in place (/proc/PID/cmdline and environ read empty then): such a process is flagged
 * NW_PROC_IN_EXEC, and the service looks at it once its exec is through.
 */
#ifndef __NWPROCS_H
#define __NWPROCS_H

#define NW_PROC_EXECED 1  /* nw_proc.flags: execed since its fork */
#define NW_PROC_IN_EXEC 2 /* in an exec: its new program's arguments not set up yet */

struct nw_proc {
	__u64 start_ns; /* boot-time ns of its start: with tgid, names one process */
	__u64 exec_id;	/* self_exec_id: changes at each exec */
	__u32 tgid;
	__u32 ppid; /* its parent's tgid now */
	__u32 uid;  /* real uid */
	__u32 flags;
	char comm[16];
};

/* Records of the events ring. */
enum nw_proc_ev {
	NW_PROC_EV_EXEC = 1, /* tgid execed */
};

struct nw_proc_ev_rec {
	__u32 tgid;
	__u32 kind; /* enum nw_proc_ev */
};

#endif /* __NWPROCS_H */
