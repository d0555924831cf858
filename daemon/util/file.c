// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The one whole-file reader: bounded, regular files only, never blocking on open. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

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

char *file__read(const char *path, size_t max, size_t *len)
{
	size_t cap = max < 4096 ? max : 4096, n = 0;
	char *buf = NULL;
	struct stat st;
	int fd, err;

	fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return NULL;
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
