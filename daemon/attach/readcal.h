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

/* One timed copy of len bytes at buf, chunk bytes a call, by method. */
struct readcal_run {
	uint64_t ns, bytes, copies, errors;
};
int readcal__run(struct readcal *rc, int method, uint32_t chunk, const void *buf, size_t len,
		 struct readcal_run *out);

/* The choice for this host (enum nw_read_method), and what it rests on. */
struct readcal_choice {
	int method;		  /* enum nw_read_method */
	uint64_t task_ns_per_mib; /* bpf_copy_from_user_task on new pages */
	double probe_fresh_gbps;  /* bpf_probe_read_user on pages new to the kernel */
	double probe_warm_gbps;	  /* ... on pages it read before */
	double task_fresh_gbps;	  /* bpf_copy_from_user_task on new pages; 0: not offered */
	char why[160];
};

/*
 * Measure and choose: probe when it copies new pages at least as fast as the task method
 * (or that method is not offered), else adaptive. The result of the first call is kept for
 * the daemon's life (the host does not change); thread-safe. 0 or a negative errno, with
 * out->method NW_READ_PROBE and the reason in out->why on failure.
 */
int readcal__choose(struct readcal_choice *out);

#endif /* __READCAL_H */
