/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The copy-rate probe (bpf/readcal.bpf.c, daemon/attach/readcal.c): each way BPF can copy a
 * tensor's bytes out of a process, timed on the daemon's own memory, so that a watch uses the
 * fastest this host offers (enum nw_read_method) and make bench can sweep them.
 */
#ifndef __NWREADCAL_H
#define __NWREADCAL_H

#define NW_RC_MAX_CHUNK (64 * 1024) /* the largest chunk the sweep copies at once */

/* Methods of the probe, in the order of its programs (the first one is never sleepable). */
enum nw_rc_method {
	NW_RC_PROBE = 0, /* bpf_probe_read_user: through the process's own mapping, no faults */
	NW_RC_USER = 1,	 /* bpf_copy_from_user (sleepable): the same mapping, faults allowed */
	NW_RC_TASK = 2,	 /* bpf_copy_from_user_task (sleepable): its pages, found by the kernel's
			  * page walk and copied through the kernel's own map of them */
	NW_RC_METHODS,
};

/* One run's settings (set before the call) and results (read after it), in .bss. */
struct nw_rc_run {
	__u64 ns;     /* time in the copies */
	__u64 bytes;  /* bytes copied */
	__u64 copies; /* helper calls made */
	__u64 errors; /* helper calls that failed */
	__u32 method; /* enum nw_rc_method */
	__u32 chunk;  /* bytes a call, at most NW_RC_MAX_CHUNK */
	__u32 tid;    /* only this thread's call counts */
	__u32 done;   /* the program ran */
};

#endif /* __NWREADCAL_H */
