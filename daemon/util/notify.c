// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* systemd's notify protocol by hand: one datagram to $NOTIFY_SOCKET, no library. */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include "util/notify.h"

int notify__send(const char *state)
{
	const char *name = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	size_t n;
	socklen_t len;
	ssize_t sent;
	int fd, ret = 0;

	if (!name || !name[0])
		return 0;
	n = strlen(name);
	if ((name[0] != '/' && name[0] != '@') || n < 2 || n >= sizeof(sa.sun_path))
		return -EINVAL;
	memcpy(sa.sun_path, name, n);
	if (name[0] == '@')
		sa.sun_path[0] = 0; /* abstract: no terminating NUL is part of the name */
	len = offsetof(struct sockaddr_un, sun_path) + n + (name[0] == '/');
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	sent = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa, len);
	if (sent < 0)
		ret = -errno;
	else if ((size_t)sent != strlen(state))
		ret = -EMSGSIZE;
	close(fd);
	return ret;
}
