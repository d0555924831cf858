// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Symlink-free path resolution: openat2(RESOLVE_NO_SYMLINKS) where the kernel
 * has it (5.6), else a walk from / or . opening each component with
 * O_NOFOLLOW | O_DIRECTORY. Only the last component of a file is opened by
 * name, under the directory fd, with O_NOFOLLOW; the file is checked on its
 * fd after opening, so a swap between check and open changes nothing.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* O_PATH */
#endif
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>
#include "output/path.h"

const char *path__reason(int err)
{
	if (err == -ELOOP)
		return "a symlink in the path (give the real path)";
	return strerror(-err);
}

/* -ELOOP when name under dirfd is a symlink (O_DIRECTORY reports one as ENOTDIR). */
static int why_not_dir(int dirfd, const char *name, int err)
{
	struct stat st;

	if (err == -ENOTDIR && !fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) &&
	    S_ISLNK(st.st_mode))
		return -ELOOP;
	return err;
}

int path__open_dir_walk(const char *path)
{
	char buf[PATH_MAX], *part, *save = NULL;
	int fd, next;

	if (!path[0])
		return -ENOENT;
	if (strlen(path) >= sizeof(buf))
		return -ENAMETOOLONG;
	strcpy(buf, path);
	fd = open(path[0] == '/' ? "/" : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	for (part = strtok_r(buf, "/", &save); part; part = strtok_r(NULL, "/", &save)) {
		if (!strcmp(part, "."))
			continue;
		next = openat(fd, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (next < 0) {
			next = why_not_dir(fd, part, errno == ELOOP ? -ELOOP : -errno);
			close(fd);
			return next;
		}
		close(fd);
		fd = next;
	}
	return fd;
}

int path__open_dir(const char *path)
{
	struct open_how how = {
		.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC,
		.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS,
	};
	int fd;

	if (!path[0])
		return -ENOENT;
	fd = syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof(how));
	if (fd >= 0)
		return fd;
	if (errno == ENOSYS)
		return path__open_dir_walk(path);
	return why_not_dir(AT_FDCWD, path, -errno);
}

/* Split path into its directory (opened) and last component; -EISDIR when it ends in a slash. */
static int open_parent(const char *path, const char **base)
{
	char dir[PATH_MAX];
	const char *slash = strrchr(path, '/');
	size_t n;

	*base = slash ? slash + 1 : path;
	if (!**base || !strcmp(*base, ".") || !strcmp(*base, ".."))
		return -EISDIR;
	if (!slash)
		return path__open_dir(".");
	n = slash - path;
	if (n >= sizeof(dir))
		return -ENAMETOOLONG;
	memcpy(dir, path, n);
	dir[n] = 0;
	return path__open_dir(n ? dir : "/");
}

static const char *file_kind(mode_t m)
{
	if (S_ISDIR(m))
		return "a directory";
	if (S_ISFIFO(m))
		return "a FIFO";
	if (S_ISSOCK(m))
		return "a socket (use unix:PATH to send to a collector)";
	if (S_ISCHR(m) || S_ISBLK(m))
		return "a device";
	if (S_ISLNK(m))
		return "a symlink (give the real path)";
	return "not a regular file";
}

/* Only a regular file with no other name may be appended to by root. */
static int check_file(const struct stat *st, const char *path, char *err, size_t errlen)
{
	if (!S_ISREG(st->st_mode)) {
		snprintf(err, errlen, "failed to open output %.256s: %s, not a regular file", path,
			 file_kind(st->st_mode));
		return S_ISLNK(st->st_mode) ? -ELOOP : -EINVAL;
	}
	if (st->st_nlink != 1) {
		snprintf(err, errlen,
			 "failed to open output %.256s: the file has %lu hard links "
			 "(give a file with no other name)",
			 path, (unsigned long)st->st_nlink);
		return -EMLINK;
	}
	return 0;
}

int path__open_output(const char *path, char *err, size_t errlen)
{
	const char *base;
	struct stat st;
	int dfd, fd, ret;

	dfd = open_parent(path, &base);
	if (dfd < 0) {
		snprintf(err, errlen, "failed to open output %.256s: %s", path,
			 dfd == -EISDIR ? "names a directory, not a file" : path__reason(dfd));
		return dfd;
	}
	/* nothing that is not a plain file is opened at all (a FIFO would block, a device act) */
	if (!fstatat(dfd, base, &st, AT_SYMLINK_NOFOLLOW) &&
	    (ret = check_file(&st, path, err, errlen))) {
		close(dfd);
		return ret;
	}
	fd = openat(dfd, base,
		    O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC,
		    0640);
	ret = fd < 0 ? -errno : 0;
	close(dfd);
	if (ret) {
		snprintf(err, errlen, "failed to open output %.256s: %s", path, path__reason(ret));
		return ret;
	}
	if (fstat(fd, &st))
		ret = -errno;
	else
		ret = check_file(&st, path, err, errlen);
	if (ret) {
		close(fd);
		return ret;
	}
	return fd;
}

int path__connect_unix(const char *path, char *err, size_t errlen)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int dfd, pfd = -1, fd = -1, ret;
	const char *base;
	struct stat st;

	dfd = open_parent(path, &base);
	ret = dfd < 0 ? dfd : 0;
	if (!ret) {
		/* an O_PATH fd pins the socket inode; connect() reaches it through /proc */
		pfd = openat(dfd, base, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		ret = pfd < 0		      ? -errno
		      : fstat(pfd, &st)	      ? -errno
		      : S_ISLNK(st.st_mode)   ? -ELOOP
		      : !S_ISSOCK(st.st_mode) ? -ENOTSOCK
					      : 0;
	}
	if (!ret) {
		snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d", pfd);
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
			ret = -errno;
	}
	if (ret)
		snprintf(err, errlen, "failed to connect to collector at %.256s: %s", path,
			 ret == -ENOTSOCK ? "not a socket" : path__reason(ret));
	if (dfd >= 0)
		close(dfd);
	if (pfd >= 0)
		close(pfd);
	if (ret && fd >= 0)
		close(fd);
	return ret ? ret : fd;
}
