/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Offsets the interpreter publishes about itself (3.13+: _Py_DebugOffsets in _PyRuntime). */
#ifndef __PYOFFSETS_H
#define __PYOFFSETS_H

#include <stddef.h>
#include <stdint.h>
#include "nanwatch.h"

struct layout;
struct remote;
struct remote_layout;

#define PYOFFSETS_WORDS 128 /* uint64 words of _PyRuntime we read */

/*
 * For each `debug_KEY: N` in the python table, take KEY from word N of the
 * target's _PyRuntime instead of the table, once the cookie and the version
 * (major.minor of py_version) check out. Returns the number of offsets taken
 * (0 when the table names none), or a negative errno with err set.
 */
int pyoffsets__apply(const struct remote *r, uint64_t runtime, uint64_t py_version,
		     const struct layout *py, struct nw_layout *nl, struct remote_layout *rl,
		     char *err, size_t errlen);

/* The same from words already read (cookie at word 0): the part unit tests exercise. */
int pyoffsets__apply_words(const uint64_t *words, size_t n, uint64_t py_version,
			   const struct layout *py, struct nw_layout *nl, struct remote_layout *rl,
			   char *err, size_t errlen);

#endif /* __PYOFFSETS_H */
