/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * JSON writer for the event stream (one object per line), writer only: the
 * reader is nanwatch-tail's (tools/tail/jsonread.h). No external JSON library.
 */
#ifndef __JSON_H
#define __JSON_H

#include <stddef.h>
#include <linux/types.h>

#define JSON_MAX_CAP (1u << 20) /* a line never grows past 1 MiB */
#define JSON_MAX_DEPTH 31	/* open containers; comma[0] is the top level */

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
 * The same with a key of klen bytes (it may hold NUL), for writing parsed JSON
 * back; text is a JSON number or literal, written as it is.
 */
void json__begin_kn(struct json *j, const char *key, size_t klen, int object);
void json__string_kn(struct json *j, const char *key, size_t klen, const char *val, size_t n);
void json__raw_kn(struct json *j, const char *key, size_t klen, const char *text);

/* One element of one of our dtypes, given as its bits: a number at its own precision; null
 * when not finite. */
void json__element(struct json *j, const char *key, __u64 bits, __u32 dtype);

#endif /* __JSON_H */
