/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The link to libnanwatch_cupti.so in a target (bpf/nwgpu.h): its unix socket, found
 * through /proc/PID/root and connected again and again until the library listens; the
 * request ring handed over read-only; what comes back checked before anyone reads it.
 */
#ifndef __GPULINK_H
#define __GPULINK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <linux/types.h>
#include "nwgpu.h"

#define GPULINK_NOTICE_MAX 240 /* bytes of a notice kept */

/* One received message, checked: body holds len bytes after the header. */
struct gpulink_msg {
	uint32_t type; /* enum nw_gpu_msg_type; another: ignored by the reader */
	const void *body;
	size_t len;
};

/*
 * Check one message of n bytes as received: a header whose len is the rest, within
 * NW_GPU_MSG_MAX, and a body of the size its type needs (READY: at least struct
 * nw_gpu_ready; RESULT: whole results, at least one; STATS: whole counters; NOTICE: some
 * text). 0 with m filled, or -EBADMSG.
 */
int gpulink__check_msg(const void *buf, size_t n, struct gpulink_msg *m);

/* A notice as one printable ASCII line (at most GPULINK_NOTICE_MAX bytes) into out. */
void gpulink__notice_text(const void *body, size_t len, char *out, size_t outlen);

/*
 * The slot of request seq from a mapping of the ring (slots + 1 entries), copied only
 * if the ring still holds that request whole and sane: 0, -ESTALE (overwritten or never
 * written) or -EINVAL (a field out of range).
 */
int gpulink__copy_slot(const void *ring, uint64_t seq, struct nw_gpu_req *out);

/* A result against its request: counts within what was asked; 0 or -EINVAL. */
int gpulink__check_result(const struct nw_gpu_req *req, const struct nw_gpu_result *r);

struct gpulink;

struct gpulink_cb {
	void (*ready)(void *ctx, const struct nw_gpu_ready *r);
	/* req: the request as the ring held it; NULL when it was overwritten or bad */
	void (*result)(void *ctx, const struct nw_gpu_req *req, const struct nw_gpu_result *r);
	void (*notice)(void *ctx, const char *text);
	void *ctx;
};

/*
 * A link for process pid (as this daemon sees it) over the ring map ring_fd (kept open by
 * its owner). NULL with errno set and err written.
 */
struct gpulink *gpulink__new(pid_t pid, int ring_fd, const struct gpulink_cb *cb, char *err,
			     size_t errlen);

/* Connect if not connected and the last try is a second old; 1 if connected now. */
int gpulink__tick(struct gpulink *g, double now);

/* Read whatever messages wait; a broken or lying peer is disconnected. 0 always. */
int gpulink__poll(struct gpulink *g);

/* The socket (readable when messages wait), -1 when not connected. */
int gpulink__fd(const struct gpulink *g);

struct gpulink_state {
	int connected, ready;
	uint32_t mode, state, devices; /* READY's */
	int32_t cuda_driver;
	uint64_t stats[NW_GPU_S_MAX]; /* the library's last STATS */
	int have_stats;
	uint64_t written, dropped; /* BPF: requests written, not written */
	uint64_t lost;		   /* results whose request the ring no longer held */
	uint64_t invalid;	   /* results or messages refused */
	uint64_t connects;	   /* times a library accepted HELLO */
	char socket[128];	   /* the path tried, as the target sees it */
};

void gpulink__state(const struct gpulink *g, struct gpulink_state *out);

/* Request seq as the ring holds it now (gpulink__copy_slot on the link's mapping). */
int gpulink__slot(const struct gpulink *g, uint64_t seq, struct nw_gpu_req *out);

void gpulink__free(struct gpulink *g); /* accepts NULL; the library goes idle */

#endif /* __GPULINK_H */
