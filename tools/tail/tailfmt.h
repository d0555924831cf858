/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* One readable line per nanwatch/1 event, for nanwatch-tail and its tests. */
#ifndef __TAILFMT_H
#define __TAILFMT_H

#include <stddef.h>
#include <stdio.h>

struct tailfmt {
	int color; /* ANSI colours: only for a terminal */
};

/*
 * Format one input line (without its newline) to out. Lines that are not a
 * JSON object with a string "event" are copied as utf8__write_safe writes them.
 * Returns 0, or a negative errno when out fails.
 */
int tailfmt__line(const struct tailfmt *t, const char *line, size_t len, FILE *out);

#endif /* __TAILFMT_H */
