/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * JSON writer for the event stream (one object per line) and a small bounded
 * parser for the pretty-printer and the tests. No external JSON library.
 */
#ifndef __JSON_H
#define __JSON_H

#include <stddef.h>

#define JSON_MAX_CAP	(1u << 20)	/* a line never grows past 1 MiB */
#define JSON_MAX_DEPTH	31		/* open containers; comma[0] is the top level */

/*
 * Writer. Errors are sticky: after the first one every call is a no-op and
 * json__str() returns NULL, so callers check once at the end of a line.
 * comma[d] holds flags for the container open at depth d.
 */
struct json {
	char *buf;
	size_t len, cap;
	int depth;
	unsigned char comma[32];
	int err;
};

int json__init(struct json *j, size_t cap);
void json__free(struct json *j);
void json__reset(struct json *j);
void json__object_begin(struct json *j, const char *key);
void json__object_end(struct json *j);
void json__array_begin(struct json *j, const char *key);
void json__array_end(struct json *j);
void json__string(struct json *j, const char *key, const char *val);
void json__stringn(struct json *j, const char *key, const char *val, size_t n);
void json__int(struct json *j, const char *key, long long v);
void json__uint(struct json *j, const char *key, unsigned long long v);
void json__double(struct json *j, const char *key, double v);
void json__float(struct json *j, const char *key, float v);
void json__bool(struct json *j, const char *key, int v);
void json__null(struct json *j, const char *key);
const char *json__str(const struct json *j);
size_t json__len(const struct json *j);

/*
 * Length of the well-formed UTF-8 sequence at s (1..4), or the negated length
 * of its maximal invalid prefix (-1..-3), the unit replaced by one U+FFFD.
 */
int utf8__check(const unsigned char *s, size_t n);

/* Parser. */
enum jv_type {
	JV_NULL,
	JV_BOOL,
	JV_NUMBER,
	JV_STRING,
	JV_ARRAY,
	JV_OBJECT,
};

struct jv {
	enum jv_type type;
	int b;			/* JV_BOOL */
	double num;		/* JV_NUMBER */
	char *str;		/* JV_STRING: UTF-8, NUL-terminated; JV_NUMBER: its text */
	size_t len;		/* bytes in str (a string may hold \u0000) */
	struct jv **items;	/* JV_ARRAY elements, JV_OBJECT values */
	char **keys;		/* JV_OBJECT keys, parallel to items */
	size_t *klens;		/* their lengths in bytes */
	size_t n, cap;
};

#define JV_MAX_DEPTH	32

struct jv *jv__parse(const char *text, size_t len, char *err, size_t errlen);
void jv__free(struct jv *v);
enum jv_type jv__type(const struct jv *v);
const struct jv *jv__get(const struct jv *obj, const char *key);
const char *jv__string(const struct jv *v);
size_t jv__string_len(const struct jv *v);
int jv__number(const struct jv *v, double *out);
const char *jv__number_text(const struct jv *v);
int jv__is_null(const struct jv *v);
int jv__bool(const struct jv *v, int *out);
size_t jv__len(const struct jv *v);
const struct jv *jv__index(const struct jv *v, size_t i);
const char *jv__key(const struct jv *obj, size_t i);
void jv__write(struct json *j, const char *key, const struct jv *v);

#endif /* __JSON_H */
