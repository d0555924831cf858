/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Where event lines go: stdout, a file, or a collector's unix socket. */
#ifndef __SINK_H
#define __SINK_H

#include <stddef.h>

struct sink;

/*
 * spec: "-" (stdout), "unix:PATH" (connect to a listening stream socket), or
 * a file path (appended, created 0640, never through a symlink).
 */
struct sink *sink__open(const char *spec, char *err, size_t errlen);
void sink__close(struct sink *s);	/* accepts NULL */

/* Write one line (a newline is added); 0 or a negative errno. */
int sink__write(struct sink *s, const char *line, size_t len);

#endif /* __SINK_H */
