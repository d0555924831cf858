// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Output sinks for the NDJSON stream. Lines are written whole or not at all. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>
#include "sink.h"

struct sink {
	int fd;
	int owned;
};

static int open_unix(const char *path, char *err, size_t errlen)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd;

	if (strlen(path) >= sizeof(sa.sun_path)) {
		snprintf(err, errlen, "socket path too long: %s", path);
		errno = ENAMETOOLONG;
		return -1;
	}
	strcpy(sa.sun_path, path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
		int e = errno;

		snprintf(err, errlen, "failed to connect to collector at %s: %s", path,
			 strerror(e));
		if (fd >= 0)
			close(fd);
		errno = e;
		return -1;
	}
	return fd;
}

struct sink *sink__open(const char *spec, char *err, size_t errlen)
{
	struct sink *s = calloc(1, sizeof(*s));
	int e;

	if (!s) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (!strcmp(spec, "-")) {
		s->fd = STDOUT_FILENO;
		return s;
	}
	s->owned = 1;
	if (!strncmp(spec, "unix:", 5)) {
		s->fd = open_unix(spec + 5, err, errlen);
	} else {
		/* root writes here: no symlink following, not world-readable */
		s->fd = open(spec, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0640);
		if (s->fd < 0)
			snprintf(err, errlen, "failed to open output file %s: %s", spec,
				 strerror(errno));
	}
	if (s->fd < 0) {
		e = errno;
		free(s);
		errno = e;
		return NULL;
	}
	return s;
}

void sink__close(struct sink *s)
{
	if (!s)
		return;
	if (s->owned)
		close(s->fd);
	free(s);
}

int sink__write(struct sink *s, const char *line, size_t len)
{
	struct iovec iov[2] = {
		{.iov_base = (void *)line, .iov_len = len},
		{.iov_base = "\n", .iov_len = 1},
	};
	int i = 0;

	while (i < 2) {
		ssize_t n = writev(s->fd, iov + i, 2 - i);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		while (i < 2 && (size_t)n >= iov[i].iov_len)
			n -= iov[i++].iov_len;
		if (i < 2) {
			iov[i].iov_base = (char *)iov[i].iov_base + n;
			iov[i].iov_len -= n;
		}
	}
	return 0;
}
