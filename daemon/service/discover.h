/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * What the service reads of a process to decide whether to watch it, from /proc, each read
 * bounded: a process with a huge command line or environment costs no more than a small one.
 */
#ifndef __DISCOVER_H
#define __DISCOVER_H

#include <limits.h>
#include <stddef.h>
#include <sys/types.h>

#define DISCOVER_MAX_CMDLINE (64u << 10)
#define DISCOVER_MAX_ENV (256u << 10)
#define DISCOVER_MAX_CGROUP (4u << 10)
#define DISCOVER_MAX_MAPS (16u << 20)

/* What rules match against: cmdline with NULs as spaces, exe, NUL-separated env, cgroup. */
struct proc_text {
	char *cmdline; /* "" for a kernel thread or a zombie */
	char exe[PATH_MAX];
	char *env;
	size_t env_len;
	char *cgroup;
};

/*
 * Fill t (free with discover__text_free even on failure), the environment only if env (no
 * rule matches on it otherwise); 0 or a negative errno.
 */
int discover__text(pid_t pid, struct proc_text *t, int env);
void discover__text_free(struct proc_text *t);

/* Whether the process has mapped libtorch_python (torch imported): 1, 0, or a negative errno. */
int discover__has_torch(pid_t pid);

#endif /* __DISCOVER_H */
