/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Layout tables: the memory offsets of one CPython or torch version, read from
 * config/layouts/KIND-X.Y.yaml (written by tools/nanwatch-layout).
 *
 * The format is a flat YAML subset: "# comment" lines and "key: value" lines,
 * a value being a decimal or 0x integer (optionally signed) or a string
 * (optionally in double quotes, no escapes). "kind" and "version" are required.
 *
 * Every function that takes err, errlen writes a one-line message into that
 * caller-owned buffer on failure (always NUL-terminated when errlen > 0).
 */
#ifndef __LAYOUT_H
#define __LAYOUT_H

#include <stddef.h>
#include <linux/types.h>
#include "nanwatch.h"

#define LAYOUT_MAX_FILE (64 * 1024)	/* bytes in a table file */
#define LAYOUT_MAX_LINE 512		/* characters in a line, without the newline */
#define LAYOUT_MAX_KEY	63		/* characters in a key */

struct layout;

/*
 * Parse one table file. NULL with errno set on error: ENOENT (no file), EFBIG
 * (file too large), E2BIG (line too long), ENAMETOOLONG (key too long), EEXIST
 * (duplicate key), ERANGE (integer out of range, or outside the plausible range
 * of its key: an offset beyond 4096, a pointer's offset not 8-byte aligned),
 * EINVAL (syntax, bad kind or version, a known integer key that is not one);
 * err then reads "failed to load layout table PATH: line N: ...".
 */
struct layout *layout__load(const char *path, char *err, size_t errlen);
void layout__free(struct layout *l);

/* The same, from len bytes of text in memory (name stands for the path in messages). */
struct layout *layout__parse(const char *name, const char *text, size_t len, char *err,
			     size_t errlen);

/* Whether layout__load checks key's value against a plausible range (1) or not (0). */
int layout__has_range(const char *key);

const char *layout__kind(const struct layout *l);	/* "python" or "torch" */
const char *layout__version(const struct layout *l);	/* "3.11" */

/* -ENOENT if key is missing, -EINVAL if its value is not an integer. */
int layout__int(const struct layout *l, const char *key, long long *out);

/* The value as written (quotes removed); NULL if key is missing. */
const char *layout__str(const struct layout *l, const char *key);

/*
 * Load DIR/KIND-VERSION.yaml and check that the kind and version inside match.
 * NULL with errno ENOENT when there is no such file, EINVAL on a mismatch, or
 * any errno of layout__load.
 */
struct layout *layout__find(const char *dir, const char *kind, const char *version, char *err,
			    size_t errlen);

/*
 * Fill the fields of *out that this table provides: the CPython ones from a
 * python table, the torch ones (offsets, codes, match strings) from a torch
 * table; other fields are left alone and *out is unchanged on error. Returns
 * -ENOENT (missing key), -EINVAL (not an integer, empty string), -ERANGE
 * (integer does not fit) or -ENAMETOOLONG (string does not fit NW_MATCH_LEN).
 */
int layout__fill(const struct layout *l, struct nw_layout *out, char *err, size_t errlen);

#endif /* __LAYOUT_H */
