/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * How a watch copies tensor bytes out of its target, chosen on this host: each way BPF can
 * copy user memory (bpf/nwreadcal.h), timed on the daemon's own freshly mapped memory.
 *
 * On most hosts bpf_probe_read_user is the fastest. Where the first kernel access to a
 * freshly mapped user page is dear (a hypervisor that builds its page tables in shadow, for
 * one: several microseconds a page), it copies a new tensor at under 1 GB/s, while
 * bpf_copy_from_user_task, which finds the pages itself and copies through the kernel's own
 * map of them, keeps its rate; it needs sleepable programs.
 */
#ifndef __READCAL_H
#define __READCAL_H

#include <stddef.h>
#include <stdint.h>
#include <linux/types.h>
#include "nwreadcal.h"

struct readcal;

/* Load and attach the copy-rate probe to this process; NULL with a message in err. */
struct readcal *readcal__open(char *err, size_t errlen);
void readcal__close(struct readcal *rc); /* accepts NULL */

/* The kernel runs sleepable uprobes: NW_RC_USER and NW_RC_TASK can be measured and used. */
int readcal__sleepable(const struct readcal *rc);

/*
 * The rate in GB/s of one copy by method (enum nw_rc_method), chunk bytes a call, of bytes
 * just mapped and written by this process, as a new tensor's pages are (warm: copied once
 * before, then written again, as a reused buffer is); a negative errno if it failed.
 */
double readcal__rate(struct readcal *rc, int method, uint32_t chunk, size_t bytes, int warm);

/* The choice for this host (enum nw_read_method), and what it rests on. */
struct readcal_choice {
	int method;		   /* enum nw_read_method */
	uint64_t task_ns_per_page; /* bpf_copy_from_user_task on new pages; 0: not offered */
	double probe_fresh_gbps;   /* bpf_probe_read_user on pages new to the kernel */
	double probe_warm_gbps;	   /* ... on pages it read before */
	double task_fresh_gbps;	   /* bpf_copy_from_user_task on new pages; 0: not offered */
	char why[160];
};

/*
 * Measure and choose: probe when it copies new pages at least as fast as the task method
 * (or that method is not offered), else adaptive. The result of the first call is kept for
 * the daemon's life (the host does not change); thread-safe. Where nothing can be measured
 * the choice is NW_READ_PROBE, and out->why says why.
 */
void readcal__choose(struct readcal_choice *out);

#endif /* __READCAL_H */
