/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Layout tables: the memory offsets of one CPython or torch version, read from
 * config/layouts/KIND-X.Y.yaml (written by tools/nanwatch-layout).
 *
 * A table is a YAML mapping of the keys listed in layout_keys.def, the one schema of them:
 * each key's type, plausible range, the versions that have it and whether they must, and
 * where its value goes. The loader refuses unknown keys, values of the wrong type or out of
 * their range, and tables missing a key their version needs, naming the file and line.
 * Readers name keys by their enum (LK_frame_code), so a misspelt key does not compile.
 *
 * Every function that takes err, errlen writes a one-line message into that
 * caller-owned buffer on failure (always NUL-terminated when errlen > 0).
 */
#ifndef __LAYOUT_H
#define __LAYOUT_H

#include <stdbool.h>
#include <stddef.h>
#include <linux/types.h>
#include "nanwatch.h"

#define LAYOUT_MAX_FILE (64 * 1024) /* bytes in a table file */
#define LAYOUT_MAX_SCALAR 511	    /* bytes in a value */
#define LAYOUT_MAX_KEY 63	    /* characters in a key */

enum layout_key {
#define LAYOUT_KEY(name, ...) LK_##name,
#include "resolve/layout_keys.def"
	LK__COUNT
};

enum layout_table {
	LAYOUT_ANY,
	LAYOUT_PY,
	LAYOUT_TORCH
};

enum layout_type {
	LAYOUT_WORD,   /* offset of a pointer or 64-bit word: a multiple of 8 */
	LAYOUT_FIELD,  /* offset of a smaller field */
	LAYOUT_SIZE,   /* size of an array element: a multiple of 8 */
	LAYOUT_CODE,   /* enum value, slot or bit number */
	LAYOUT_FLAG,   /* a single-bit flag value */
	LAYOUT_BOOL,   /* 0 or 1 */
	LAYOUT_MATCH,  /* a string BPF matches (NW_MATCH_LEN with its NUL) */
	LAYOUT_SYMBOL, /* an ELF symbol name or prefix */
	LAYOUT_TEXT,   /* any string */
};

/* One row of layout_keys.def. */
struct layout_key_def {
	const char *name;
	enum layout_table table;
	enum layout_type type;
	long long min, max; /* integers: the value; strings: the length */
	int since, until;   /* MAJOR * 100 + MINOR; until 0: every later version */
	bool required;	    /* in the versions that have it */
	bool nwl, rl, bwd,
		rs;	/* goes to struct nw_layout, remote_layout, nw_bwd_layout, nw_rescan */
	bool published; /* may come from _Py_DebugOffsets (debug_NAME) */
};

extern const struct layout_key_def layout_keys[LK__COUNT];

/* Whether a key of this type holds a string (else an integer). */
bool layout__is_str(enum layout_type type);

/* The key named name (a row of layout_keys.def), or -ENOENT. */
int layout__key(const char *name);

struct layout;

/*
 * Parse one table file. NULL with errno set on error: ENOENT (no file), EFBIG (file too
 * large), E2BIG (too many keys, a value too long), ENAMETOOLONG (key too long), EEXIST
 * (duplicate key), ERANGE (a value outside the plausible range of its key: an offset
 * beyond 4096, a pointer's offset not 8-byte aligned, a string too long), EINVAL (YAML
 * syntax, unknown key, a key of another version, wrong type, bad kind or version, a
 * required key missing); err then reads "failed to load layout table PATH: line N: ...".
 */
struct layout *layout__load(const char *path, char *err, size_t errlen);
void layout__free(struct layout *l);

/* The same, from len bytes of text in memory (name stands for the path in messages). */
struct layout *layout__parse(const char *name, const char *text, size_t len, char *err,
			     size_t errlen);

const char *layout__kind(const struct layout *l);    /* "python" or "torch" */
const char *layout__version(const struct layout *l); /* "3.11" */

/* -ENOENT if the table has no such key, -EINVAL if key holds a string. */
int layout__int(const struct layout *l, enum layout_key key, long long *out);

/* The value as written (a string key's text, or an integer's digits); NULL if missing. */
const char *layout__str(const struct layout *l, enum layout_key key);

/* debug_KEY of a published key: the _Py_DebugOffsets word holding it; -ENOENT if absent. */
int layout__debug_word(const struct layout *l, enum layout_key key, long long *word);

/*
 * Load DIR/KIND-VERSION.yaml and check that the kind and version inside match.
 * NULL with errno ENOENT when there is no such file, EINVAL on a mismatch, or
 * any errno of layout__load.
 */
struct layout *layout__find(const char *dir, const char *kind, const char *version, char *err,
			    size_t errlen);

/*
 * Fill the fields of *out that this table provides (the keys marked nwl in the schema:
 * the CPython ones from a python table, the torch ones from a torch table); other fields
 * are left alone. -EINVAL when l or out is NULL.
 */
int layout__fill(const struct layout *l, struct nw_layout *out, char *err, size_t errlen);

/* Store v into the struct nw_layout field of key: -ENOENT if key has none. */
int layout__set(struct nw_layout *out, enum layout_key key, long long v);

/*
 * The torch table's backward keys (bwd) and rescan keys (rs) into *out; -ENOENT with err
 * naming the first missing key (a table may lack them: then that part is off).
 */
int layout__fill_bwd(const struct layout *l, struct nw_bwd_layout *out, char *err, size_t errlen);
int layout__fill_rescan(const struct layout *l, struct nw_rescan *out, char *err, size_t errlen);

#endif /* __LAYOUT_H */
