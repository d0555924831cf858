/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* A small bounded JSON parser: nanwatch-tail reads the event stream with it. */
#ifndef __JSONREAD_H
#define __JSONREAD_H

#include <stddef.h>

#include "output/json.h"

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
	int b;		   /* JV_BOOL */
	double num;	   /* JV_NUMBER */
	char *str;	   /* JV_STRING: UTF-8, NUL-terminated; JV_NUMBER: its text */
	size_t len;	   /* bytes in str (a string may hold \u0000) */
	struct jv **items; /* JV_ARRAY elements, JV_OBJECT values */
	char **keys;	   /* JV_OBJECT keys, parallel to items */
	size_t *klens;	   /* their lengths in bytes */
	size_t n, cap;
};

#define JV_MAX_DEPTH 32

/*
 * One JSON value in text (len bytes, no NUL needed), whitespace around it
 * allowed; NULL with errno EINVAL and err saying where it went wrong.
 */
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
/* Write a parsed value back into j, compact; numbers keep their text. */
void jv__write(struct json *j, const char *key, const struct jv *v);

#endif /* __JSONREAD_H */
