/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The node's processes as the kernel knows them (bpf/nwprocs.h): a task iterator read at each
 * scan, and a descriptor that turns readable when a process execs. Whether a process forked
 * without exec comes from the kernel's exec counts, never from names or command lines.
 */
#ifndef __PROCS_H
#define __PROCS_H

#include <stddef.h>
#include <linux/types.h>
#include "nwprocs.h"

struct procs;

/* Load and attach the discovery programs. NULL with errno set and err written. */
struct procs *procs__open(char *err, size_t errlen);
void procs__free(struct procs *p); /* accepts NULL */

/*
 * Every process now, in ascending tgid order (at most PROCS_MAX): a malloc'ed array in *out
 * (free it), the count returned; a negative errno.
 */
#define PROCS_MAX (1 << 22) /* the kernel's largest pid_max */
long procs__list(struct procs *p, struct nw_proc **out);

/* Readable after an exec anywhere on the node. */
int procs__fd(const struct procs *p);

/* Take the records waiting: the number of execs (0 if none), or a negative errno. */
int procs__consume(struct procs *p);

#endif /* __PROCS_H */
