// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Bounded reads of /proc/PID/{cmdline,exe,environ,cgroup,maps} for discovery. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem */
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "service/discover.h"

/* Up to max bytes of a /proc file into a malloc'd NUL-terminated buffer (cut, not refused). */
static char *read_head(pid_t pid, const char *name, size_t max, size_t *lenp)
{
	char path[64], *buf;
	size_t len = 0;
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/%s", pid, name);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	buf = malloc(max + 1);
	while (buf && len < max) {
		n = read(fd, buf + len, max - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += n;
	}
	close(fd);
	if (buf) {
		buf[len] = 0;
		if (lenp)
			*lenp = len;
	}
	return buf;
}

int discover__text(pid_t pid, struct proc_text *t, int env)
{
	char path[64];
	size_t n = 0, i;
	ssize_t len;

	memset(t, 0, sizeof(*t));
	t->cmdline = read_head(pid, "cmdline", DISCOVER_MAX_CMDLINE, &n);
	if (!t->cmdline)
		return errno == ENOENT ? -ENOENT : -errno;
	while (n && !t->cmdline[n - 1])
		n--; /* the arguments' terminators */
	for (i = 0; i < n; i++)
		if (!t->cmdline[i])
			t->cmdline[i] = ' ';
	t->cmdline[n] = 0;
	snprintf(path, sizeof(path), "/proc/%d/exe", pid);
	len = readlink(path, t->exe, sizeof(t->exe) - 1);
	t->exe[len > 0 ? len : 0] = 0;
	if (env)
		t->env = read_head(pid, "environ", DISCOVER_MAX_ENV, &t->env_len);
	t->cgroup = read_head(pid, "cgroup", DISCOVER_MAX_CGROUP, NULL);
	return 0;
}

void discover__text_free(struct proc_text *t)
{
	free(t->cmdline);
	free(t->env);
	free(t->cgroup);
	memset(t, 0, sizeof(*t));
}

int discover__has_torch(pid_t pid)
{
	static const char needle[] = "libtorch_python";
	char path[64], buf[65536];
	size_t keep = 0, total = 0, have;
	ssize_t n;
	int fd, found = 0;

	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	/* chunks, the last few bytes of one kept before the next: a name cut in two is found */
	while (!found && total < DISCOVER_MAX_MAPS) {
		n = read(fd, buf + keep, sizeof(buf) - 1 - keep);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		have = keep + n;
		total += n;
		found = memmem(buf, have, needle, sizeof(needle) - 1) != NULL;
		keep = have < sizeof(needle) - 1 ? have : sizeof(needle) - 1;
		memmove(buf, buf + have - keep, keep);
	}
	close(fd);
	return found;
}
