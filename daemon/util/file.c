// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The one whole-file reader: bounded, regular files only, never blocking on open; and the
 * opening of the target's files: by an O_PATH descriptor first (which opens nothing), then for
 * reading once it is known to be a regular file.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* O_PATH */
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <linux/openat2.h>

#include "util/file.h"

/* Read fd to its end into *bufp (room for cap + 1 bytes and a NUL), growing it up to max. */
static int file__slurp(int fd, char **bufp, size_t cap, size_t max, size_t *len)
{
	size_t n = 0;
	char *nb;
	ssize_t r;

	for (;;) {
		/* one byte past cap is read to learn whether the file goes on */
		if (n == cap + 1) {
			if (cap >= max)
				return -EFBIG;
			cap = cap * 2 > max ? max : cap * 2;
			nb = realloc(*bufp, cap + 2);
			if (!nb)
				return -ENOMEM;
			*bufp = nb;
		}
		r = read(fd, *bufp + n, cap + 1 - n);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			break;
		n += r;
	}
	(*bufp)[n] = 0;
	*len = n;
	return 0;
}

/* fd read whole (at most max bytes) into a malloc'd buffer; fd is closed. */
static char *file__read_fd(int fd, size_t max, size_t *len)
{
	size_t cap = max < 4096 ? max : 4096, n = 0;
	char *buf = NULL;
	struct stat st;
	int err;

	if (fstat(fd, &st))
		err = -errno;
	else if (!S_ISREG(st.st_mode))
		err = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
	else if (!(buf = malloc(cap + 2)))
		err = -ENOMEM;
	else
		err = file__slurp(fd, &buf, cap, max, &n);
	close(fd);
	if (err) {
		free(buf);
		errno = -err;
		return NULL;
	}
	if (len)
		*len = n;
	return buf;
}

char *file__read(const char *path, size_t max, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);

	return fd < 0 ? NULL : file__read_fd(fd, max, len);
}

int file__reopen(int pathfd, const struct stat *id)
{
	struct stat st, now;
	char self[32];
	int fd = -1, err = 0;

	if (fstat(pathfd, &st))
		err = -errno;
	else if (!S_ISREG(st.st_mode))
		err = S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
	else if (id && (st.st_dev != id->st_dev || st.st_ino != id->st_ino))
		err = -ESTALE;
	if (!err) {
		/* the magic link is the open file itself: nothing is looked up by name again */
		snprintf(self, sizeof(self), "/proc/self/fd/%d", pathfd);
		fd = open(self, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
		if (fd < 0)
			err = -errno;
		else if (fstat(fd, &now) || now.st_dev != st.st_dev || now.st_ino != st.st_ino)
			err = -ESTALE;
	}
	close(pathfd);
	if (err && fd >= 0)
		close(fd);
	return err ? err : fd;
}

char *file__read_in(int dirfd, const char *path, size_t max, size_t *len)
{
	struct open_how how = {
		.flags = O_PATH | O_NOFOLLOW | O_CLOEXEC,
		.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};
	int fd = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));

	if (fd < 0)
		return NULL;
	fd = file__reopen(fd, NULL);
	if (fd < 0) {
		errno = -fd;
		return NULL;
	}
	return file__read_fd(fd, max, len);
}
