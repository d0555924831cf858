/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Whole small files read at once: /proc entries, the target's text files, layout tables. */
#ifndef __FILE_H
#define __FILE_H

#include <stddef.h>

/*
 * The file at path in a malloc'd NUL-terminated buffer, *len (if not NULL) its
 * length. At most max bytes: EFBIG past that. Regular files only (EISDIR for a
 * directory, EINVAL for anything else), opened without blocking, so a FIFO put
 * where a file should be cannot hang the daemon. NULL with errno set on error.
 */
char *file__read(const char *path, size_t max, size_t *len);

#endif /* __FILE_H */
