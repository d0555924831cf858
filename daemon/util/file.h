/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Whole small files read at once (/proc entries, the target's text files, layout tables), and
 * the target's files opened without following its links or opening what is not a file.
 */
#ifndef __FILE_H
#define __FILE_H

#include <stddef.h>

struct stat;

/*
 * The file at path in a malloc'd NUL-terminated buffer, *len (if not NULL) its
 * length. At most max bytes: EFBIG past that. Regular files only (EISDIR for a
 * directory, EINVAL for anything else), opened without blocking, so a FIFO put
 * where a file should be cannot hang the daemon. NULL with errno set on error.
 */
char *file__read(const char *path, size_t max, size_t *len);

/*
 * pathfd (an O_PATH descriptor, which this closes) opened again for reading: O_NONBLOCK,
 * O_NOCTTY, close-on-exec. Regular files only (-EISDIR, -EINVAL), judged before anything opens
 * it, so a FIFO or a device node never is. id, if not NULL: the device and inode it must have
 * (-ESTALE otherwise). The new descriptor or a negative errno.
 */
int file__reopen(int pathfd, const struct stat *id);

/*
 * As file__read, for path resolved below dirfd as if dirfd were "/" (RESOLVE_IN_ROOT), through
 * no symbolic link (ELOOP): a file of the target's, read through its root.
 */
char *file__read_in(int dirfd, const char *path, size_t max, size_t *len);

#endif /* __FILE_H */
