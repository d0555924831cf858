/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The link to libnanwatch_cupti.so in a target (bpf/nwgpu.h): its unix socket, found among
 * the target's own listening sockets and tried again every second until the library listens;
 * the peer proven to be the target (its pidfd, its uid) before the request ring, frozen, is
 * handed over; what comes back checked before anyone reads it.
 */
#ifndef __GPULINK_H
#define __GPULINK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/un.h>
#include <linux/types.h>
#include "nwgpu.h"

#define GPULINK_NOTICE_MAX 240	 /* bytes of a notice kept */
#define GPULINK_FDS_MAX 8192	 /* entries of a target's fd table looked at per try */
#define GPULINK_SOCKETS_MAX 1024 /* ... of them sockets looked into */
#define GPULINK_POLL_MSGS 256	 /* messages read per poll: one peer cannot hold the loop */

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
 * if the ring still holds that request whole and sane: 0, -ESTALE (overwritten: the slot
 * holds a later request, or is being rewritten), -ENOENT (not written yet: it holds an
 * earlier one, or none) or -EINVAL (a field out of range).
 */
int gpulink__copy_slot(const void *ring, uint64_t seq, struct nw_gpu_req *out);

/*
 * Whether a socket's name (as getsockname gave it, len bytes) is one the library binds: an
 * absolute path ending in NW_GPU_SOCK_DIR_PREFIX.../NW_GPU_SOCK_NAME. 0 with the path in
 * path, or -EINVAL.
 */
int gpulink__sock_name(const struct sockaddr_un *sa, socklen_t len, char *path, size_t pathlen);

/*
 * Whether the peer of a connected unix socket (for a listening one: the process that called
 * listen) is the process pidfd refers to, with effective uid uid. Compared by pidfs inode,
 * so a pid number used again by another process never passes. 0, -EPERM (another process or
 * user), -ENOTSUP (no SO_PEERPIDFD or pidfs: Linux 6.9 and later) or another -errno.
 */
int gpulink__peer_is(int sock, int pidfd, uid_t uid);

/*
 * The library's socket among the target's own: a listening SOCK_SEQPACKET in the fd table of
 * the process pidfd refers to (pid: its number here, for /proc), its name as
 * gpulink__sock_name wants, its listener that process with uid. At most GPULINK_FDS_MAX
 * entries and GPULINK_SOCKETS_MAX sockets looked at. 0 with its path (as the target sees it)
 * in path, -ENOENT when there is none, or another -errno.
 */
int gpulink__find(pid_t pid, int pidfd, uid_t uid, char *path, size_t pathlen);

/* The effective uid of the process pidfd refers to (pid: its number here); 0 or -errno. */
int gpulink__target_uid(pid_t pid, int pidfd, uid_t *uid);

/* A result against its request: counts within what was asked; 0 or -EINVAL. */
int gpulink__check_result(const struct nw_gpu_req *req, const struct nw_gpu_result *r);

struct gpulink;

struct gpulink_cb {
	void (*ready)(void *ctx, const struct nw_gpu_ready *r);
	/* a result checked against its request, as the ring held it; the first for its seq */
	void (*result)(void *ctx, const struct nw_gpu_req *req, const struct nw_gpu_result *r);
	void (*notice)(void *ctx, const char *text);
	/* BPF writes requests while on: from READY until the link goes (probe__gpu_link) */
	void (*link)(void *ctx, int on);
	/* a connection refused: its peer was not the target (why: one line) */
	void (*refused)(void *ctx, const char *why);
	void *ctx;
};

/*
 * A link for process pid (as this daemon sees it; pidfd: the caller's pidfd of it, kept open)
 * over the ring map ring_fd (kept open by its owner, frozen: a ring that can be mapped
 * writable is refused). NULL with errno set and err written.
 */
struct gpulink *gpulink__new(pid_t pid, int pidfd, int ring_fd, const struct gpulink_cb *cb,
			     char *err, size_t errlen);

/*
 * Connect if not connected and the last try is a second old: to the socket gpulink__find
 * names, once the target maps the library, and only to a peer gpulink__peer_is accepts.
 * 1 if connected now.
 */
int gpulink__tick(struct gpulink *g, double now);

/*
 * Read the messages that wait, GPULINK_POLL_MSGS at most; a broken or lying peer is
 * disconnected. 0 always.
 */
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
	/* results or messages refused: malformed, out of range, a replay, or for a request
	 * not written yet */
	uint64_t invalid;
	uint64_t connects; /* times a library accepted HELLO */
	uint64_t refused;  /* connections whose peer was not the target */
	char socket[128];  /* the library's socket, as the target sees it ("": none found) */
};

void gpulink__state(const struct gpulink *g, struct gpulink_state *out);

/* Request seq as the ring holds it now (gpulink__copy_slot on the link's mapping). */
int gpulink__slot(const struct gpulink *g, uint64_t seq, struct nw_gpu_req *out);

void gpulink__free(struct gpulink *g); /* accepts NULL; the library goes idle */

#endif /* __GPULINK_H */
