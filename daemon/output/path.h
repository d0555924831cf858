/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Opening the paths root writes to (outputs, capture directories) without
 * following a symbolic link anywhere in them: a user who owns a directory on
 * the way must not be able to point the daemon somewhere else.
 */
#ifndef __PATH_H
#define __PATH_H

#include <stddef.h>

/* A directory fd (O_RDONLY); no symlink followed in any component; -errno (-ELOOP: a symlink). */
int path__open_dir(const char *path);

/* The same, one component at a time with O_NOFOLLOW: what path__open_dir falls back to. */
int path__open_dir_walk(const char *path);

/*
 * An output file opened for appending (created 0640), never through a
 * symlink; refused unless a regular file with one link. fd or -errno, with
 * the message ("failed to open output PATH: why") in err.
 */
int path__open_output(const char *path, char *err, size_t errlen);

/*
 * A connected unix stream socket at path, reached without following a symlink;
 * as above. The socket is non-blocking: a listener whose backlog is full is
 * -EAGAIN, never a wait.
 */
int path__connect_unix(const char *path, char *err, size_t errlen);

/* Why an open failed, in words; -ELOOP says a symlink was in the way. */
const char *path__reason(int err);

#endif /* __PATH_H */
