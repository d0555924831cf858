/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * A bounded YAML reader for files a root daemon trusts no more than their owner: libyaml
 * parses, this module keeps one document as a small tree (mappings, sequences, scalars,
 * each with its line) within set limits, and reads a mapping against a schema: every key
 * known, every value of the type and in the range its field says, errors naming the file,
 * the line and the key. Aliases, tags, complex keys, duplicate keys and second documents
 * are refused.
 *
 * Messages go into a caller-owned buffer, one line, "NAME: line N: what" (NAME: the path,
 * or the name given for text in memory); callers put their own "failed to ..." before it.
 */
#ifndef __YAMLMAP_H
#define __YAMLMAP_H

#include <stdbool.h>
#include <stddef.h>

struct yamlmap;	     /* a parsed document */
struct yamlmap_node; /* a node of it, valid as long as the document */

struct yamlmap_limits {
	size_t max_bytes;  /* of the file (EFBIG) */
	size_t max_nodes;  /* scalars, mappings and sequences together (E2BIG) */
	size_t max_scalar; /* bytes of one scalar value (E2BIG) */
	size_t max_key;	   /* bytes of one mapping key (ENAMETOOLONG) */
	int max_depth;	   /* nesting of mappings and sequences, the root being 1 (E2BIG) */
};

enum yamlmap_kind {
	YAMLMAP_SCALAR,
	YAMLMAP_MAP,
	YAMLMAP_SEQ,
};

/*
 * Parse a file or len bytes of text. NULL with errno set: ENOENT and the like (open),
 * EISDIR or EINVAL (not a regular file), EFBIG, E2BIG, ENAMETOOLONG (limits), EEXIST
 * (duplicate key), EINVAL (YAML syntax, or what is refused), ENOMEM. An empty document
 * reads as an empty mapping.
 */
struct yamlmap *yamlmap__load(const char *path, const struct yamlmap_limits *lim, char *err,
			      size_t errlen);
struct yamlmap *yamlmap__parse(const char *name, const char *text, size_t len,
			       const struct yamlmap_limits *lim, char *err, size_t errlen);
void yamlmap__free(struct yamlmap *y);

const char *yamlmap__name(const struct yamlmap *y);
const struct yamlmap_node *yamlmap__root(const struct yamlmap *y);

enum yamlmap_kind yamlmap__kind(const struct yamlmap_node *n);
int yamlmap__line(const struct yamlmap_node *n);
/* A scalar's text (NUL-terminated, "" for an empty one); NULL for a mapping or sequence. */
const char *yamlmap__text(const struct yamlmap_node *n);
/* Whether a scalar was written in quotes: then it is a string, never a number. */
bool yamlmap__quoted(const struct yamlmap_node *n);
/* Entries of a mapping, items of a sequence; 0 for a scalar. */
size_t yamlmap__count(const struct yamlmap_node *n);
/* The i-th item of a sequence, or the value of a mapping's i-th entry (key in *key). */
const struct yamlmap_node *yamlmap__item(const struct yamlmap_node *n, size_t i, const char **key);

/* What a mapping's key holds, and the plausible values. */
enum yamlmap_type {
	YAMLMAP_INT,	 /* a plain scalar: decimal or 0x integer, optional sign; min..max */
	YAMLMAP_STR,	 /* any scalar; its length min..max */
	YAMLMAP_MAPPING, /* a nested mapping: read it with yamlmap__read */
	YAMLMAP_LIST,	 /* a sequence: min..max items */
};

struct yamlmap_field {
	const char *key;
	enum yamlmap_type type;
	long long min, max;
	int id; /* the caller's, handed back */
};

/* One checked value: the field it was read as, and the value. */
struct yamlmap_value {
	const struct yamlmap_field *field;
	const char *key;
	int line;
	long long i;			 /* YAMLMAP_INT */
	const char *s;			 /* YAMLMAP_STR: the text */
	const struct yamlmap_node *node; /* any type: the value's node */
};

/*
 * The field for key, or NULL when key is unknown (then refused); why may say why it is not
 * known (a short phrase), or be left empty. ctx: yamlmap__read's.
 */
typedef const struct yamlmap_field *(*yamlmap_lookup_fn)(void *ctx, const char *key, char *why,
							 size_t whylen);
/* A value that passed its field's checks; non-zero (negative errno) with why set refuses it. */
typedef int (*yamlmap_value_fn)(void *ctx, const struct yamlmap_value *v, char *why, size_t whylen);

/* The keys a mapping may hold: a table of fields, or (fields NULL) a lookup function. */
struct yamlmap_schema {
	const struct yamlmap_field *fields;
	size_t n;
	yamlmap_lookup_fn lookup;
};

/*
 * Read mapping node of y: for each entry, in file order, find its key's field, check the
 * value against it (type, range) and hand it to cb with ctx. 0, or a negative errno with
 * err set ("NAME: line N: ..."): EINVAL (not a mapping, unknown key, wrong type), ERANGE
 * (outside the range), or what cb returned. A nested mapping or list is read by calling
 * yamlmap__read (or yamlmap__item) on v->node from cb, with cb's why as the error buffer.
 */
int yamlmap__read(const struct yamlmap *y, const struct yamlmap_node *map,
		  const struct yamlmap_schema *schema, yamlmap_value_fn cb, void *ctx, char *err,
		  size_t errlen);

/* Replace control characters (line breaks, tabs, escapes) in a message with '?'. */
void yamlmap__one_line(char *s);

/* printf into err (errlen bytes; nothing if err is NULL), made one line: messages that quote
 * a file's text. */
__attribute__((format(printf, 3, 4))) void yamlmap__errorf(char *err, size_t errlen,
							   const char *fmt, ...);

/* A whole decimal or 0x integer with optional sign: 0, -EINVAL or -ERANGE. */
int yamlmap__parse_int(const char *s, long long *out);

#endif /* __YAMLMAP_H */
