/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Inside a capture: shared by its record assembly (capture.c) and its directory,
 * .npy and manifest writing (files.c).
 */
#ifndef __CAPTURE_PRIV_H
#define __CAPTURE_PRIV_H

#include <limits.h>
#include <sys/types.h>
#include "capture/capture.h"
#include "explain/evidence.h"

struct ring_buffer;

struct pending {
	struct nw_cap_tensor d;
	unsigned char *buf; /* d.bytes, when data follows */
	uint64_t received;
	int have;
};

/* Every byte of p's data arrived (an empty tensor, a dimension of 0, waits for none). */
static inline int pending_whole(const struct pending *p)
{
	return (p->buf || !p->d.bytes) && p->received == p->d.bytes;
}

struct capture {
	struct capture_opts o;
	char dir[PATH_MAX];
	int dirfd;
	uid_t uid;
	gid_t gid;
	struct ring_buffer *rb;
	struct pending t[NW_CAP_MAX_TENSORS];
	uint64_t allocated; /* bytes of t[].buf, at most the budget */
	int done;
	char path[PATH_MAX + 256];
	char error[512];
	int error_pending;
	struct evidence_facts facts; /* of the last capture */
	int have_facts;
};

/* Open c->o.dir safely and learn the target's owner; 0 or a negative errno, err written. */
int capture_output__open_dir(struct capture *c, char *err, size_t errlen);

/* Write the capture the records in c->t make, ended by e; sets c->path. */
int capture_output__write(struct capture *c, const struct nw_cap_end *e);

#endif /* __CAPTURE_PRIV_H */
