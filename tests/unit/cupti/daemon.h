/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The daemon's side of the library socket, for the library's tests: a request
 * ring laid out like the gpu_ring map (a memfd), HELLO with its fd, and
 * message reading with a guard timeout (a hang fails the test, no timing is
 * asserted).
 */
#ifndef __NW_CUPTI_TEST_DAEMON_H
#define __NW_CUPTI_TEST_DAEMON_H

#include <linux/types.h>
#include <stddef.h>

#include "nwgpu.h"

#define TD_RESULTS 1024

struct tdaemon {
	int fd;
	int ring_fd;
	struct nw_gpu_req *ring; /* writable: the test plays BPF */
	size_t ring_len;
	char notices[8][NW_GPU_MSG_MAX];
	int nnotices;
	__u64 stats[NW_GPU_S_MAX];
	struct nw_gpu_result res[TD_RESULTS]; /* every result received */
	int nres;
	int nstats;
};

int td_ring_open(struct tdaemon *d);
__u64 td_put(struct tdaemon *d, const void *data, __u64 numel, __u32 dtype, __u32 tid, __u64 gate);
int td_connect(struct tdaemon *d, const char *path, struct nw_gpu_ready *rd);
/* the next message: its type, or -1; STATS and NOTICE are kept in d, others copied to body */
int td_recv(struct tdaemon *d, void *body, size_t cap, size_t *len);
/* the result for seq, received now or before; 0 or -1 */
int td_result(struct tdaemon *d, __u64 seq, struct nw_gpu_result *r);
/* until a STATS message with stats[which] >= min arrives; 0 or -1 */
int td_stats_until(struct tdaemon *d, int which, __u64 min);
int td_has_notice(const struct tdaemon *d, const char *part);
void td_close(struct tdaemon *d);
/* the socket of process pid's library in dir (NW_GPU_SOCK_DIR_FMT's directory): 0 or -1 */
int td_sock_find(const char *dir, int pid, char *buf, size_t len);

#endif /* __NW_CUPTI_TEST_DAEMON_H */
