// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * JSON writer for event lines. Strings written come partly from another
 * process's memory, so bytes are untrusted: invalid UTF-8 becomes U+FFFD and
 * control characters are escaped.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "output/json.h"
#include "util/dtype.h"
#include "nwfloat.h"
#include "util/fpconv.h"
#include "util/utf8.h"

#define JSON_COMMA 0x01	 /* a value was written at this depth */
#define JSON_OBJECT 0x02 /* the container at this depth is an object */

int json__init(struct json *j, size_t cap)
{
	memset(j, 0, sizeof(*j));
	if (cap < 64)
		cap = 64;
	if (cap > JSON_MAX_CAP)
		cap = JSON_MAX_CAP;
	j->buf = malloc(cap);
	if (!j->buf) {
		j->err = -ENOMEM;
		return -ENOMEM;
	}
	j->cap = cap;
	j->buf[0] = '\0';
	return 0;
}

void json__free(struct json *j)
{
	if (!j)
		return;
	free(j->buf);
	memset(j, 0, sizeof(*j));
}

void json__reset(struct json *j)
{
	j->len = 0;
	j->depth = 0;
	memset(j->comma, 0, sizeof(j->comma));
	/* a failed init stays failed: there is no buffer to write into */
	j->err = j->buf ? 0 : -ENOMEM;
	if (j->buf)
		j->buf[0] = '\0';
}

static void json__fail(struct json *j, int err)
{
	if (!j->err)
		j->err = err;
}

/* Make room for n more bytes plus the terminating NUL. */
static int json__reserve(struct json *j, size_t n)
{
	size_t need = j->len + n + 1, cap = j->cap;
	char *buf;

	if (j->err)
		return j->err;
	if (need <= cap)
		return 0;
	if (need > JSON_MAX_CAP) {
		json__fail(j, -E2BIG);
		return j->err;
	}
	while (cap < need)
		cap *= 2;
	if (cap > JSON_MAX_CAP)
		cap = JSON_MAX_CAP;
	buf = realloc(j->buf, cap);
	if (!buf) {
		json__fail(j, -ENOMEM);
		return j->err;
	}
	j->buf = buf;
	j->cap = cap;
	return 0;
}

static void json__put(struct json *j, const char *s, size_t n)
{
	if (json__reserve(j, n))
		return;
	memcpy(j->buf + j->len, s, n);
	j->len += n;
	j->buf[j->len] = '\0';
}

static void json__puts(struct json *j, const char *s)
{
	json__put(j, s, strlen(s));
}

static void json__escape_ctl(struct json *j, unsigned char c)
{
	static const char short_esc[] = "\bb\ff\nn\rr\tt";
	const char *p = memchr(short_esc, c, sizeof(short_esc) - 1);
	char tmp[8];

	/* pairs: a short escape exists when c sits at an even index */
	if (p && (p - short_esc) % 2 == 0) {
		tmp[0] = '\\';
		tmp[1] = p[1];
		json__put(j, tmp, 2);
		return;
	}
	snprintf(tmp, sizeof(tmp), "\\u%04x", c);
	json__put(j, tmp, 6);
}

/* ASCII that goes into a JSON string as it is. */
static int json__plain(unsigned char c)
{
	return c >= 0x20 && c < 0x80 && c != '"' && c != '\\';
}

static void json__quote(struct json *j, const char *val, size_t n)
{
	const unsigned char *s = (const unsigned char *)val;
	size_t i = 0, run;
	int k;

	json__put(j, "\"", 1);
	while (i < n && !j->err) {
		/* copy runs of plain bytes at once: names are mostly ASCII */
		for (run = i; run < n && json__plain(s[run]); run++)
			;
		json__put(j, val + i, run - i);
		i = run;
		if (i >= n)
			break;
		if (s[i] == '"' || s[i] == '\\') {
			json__put(j, s[i] == '"' ? "\\\"" : "\\\\", 2);
			i++;
		} else if (s[i] < 0x20) {
			json__escape_ctl(j, s[i++]);
		} else if ((k = utf8__check(s + i, n - i)) > 0) {
			json__put(j, val + i, k);
			i += k;
		} else {
			json__put(j, "\\ufffd", 6);
			i += -k;
		}
	}
	json__put(j, "\"", 1);
}

/* Separator and key before a value; a key is required inside objects only. */
static int json__prefixn(struct json *j, const char *key, size_t klen)
{
	unsigned char *c = &j->comma[j->depth];
	int in_object = *c & JSON_OBJECT;

	if (j->err)
		return j->err;
	if (!key != !in_object || (j->depth == 0 && (*c & JSON_COMMA))) {
		json__fail(j, -EINVAL);
		return j->err;
	}
	if (*c & JSON_COMMA)
		json__put(j, ",", 1);
	*c |= JSON_COMMA;
	if (key) {
		json__quote(j, key, klen);
		json__put(j, ":", 1);
	}
	return j->err;
}

static int json__prefix(struct json *j, const char *key)
{
	return json__prefixn(j, key, key ? strlen(key) : 0);
}

static void json__open(struct json *j, const char *key, size_t klen, int object)
{
	if (json__prefixn(j, key, klen))
		return;
	if (j->depth >= JSON_MAX_DEPTH) {
		json__fail(j, -EOVERFLOW);
		return;
	}
	json__put(j, object ? "{" : "[", 1);
	j->comma[++j->depth] = object ? JSON_OBJECT : 0;
}

static void json__close(struct json *j, int object)
{
	if (j->err)
		return;
	if (j->depth == 0 || !(j->comma[j->depth] & JSON_OBJECT) != !object) {
		json__fail(j, -EINVAL);
		return;
	}
	j->depth--;
	json__put(j, object ? "}" : "]", 1);
}

void json__object_begin(struct json *j, const char *key)
{
	json__open(j, key, key ? strlen(key) : 0, 1);
}

void json__object_end(struct json *j)
{
	json__close(j, 1);
}

void json__array_begin(struct json *j, const char *key)
{
	json__open(j, key, key ? strlen(key) : 0, 0);
}

void json__array_end(struct json *j)
{
	json__close(j, 0);
}

void json__stringn(struct json *j, const char *key, const char *val, size_t n)
{
	if (!val) {
		json__null(j, key);
		return;
	}
	if (!json__prefix(j, key))
		json__quote(j, val, n);
}

void json__string(struct json *j, const char *key, const char *val)
{
	json__stringn(j, key, val, val ? strlen(val) : 0);
}

static void json__literal(struct json *j, const char *key, const char *text)
{
	if (!json__prefix(j, key))
		json__puts(j, text);
}

void json__int(struct json *j, const char *key, long long v)
{
	char tmp[32];

	snprintf(tmp, sizeof(tmp), "%lld", v);
	json__literal(j, key, tmp);
}

void json__uint(struct json *j, const char *key, unsigned long long v)
{
	char tmp[32];

	snprintf(tmp, sizeof(tmp), "%llu", v);
	json__literal(j, key, tmp);
}

/* "1e+05" → "1e+5": the exponent's zero padding is noise. */
static void json__trim_exponent(char *tmp)
{
	char *e = strchr(tmp, 'e'), *digits;
	size_t zeros;

	if (!e)
		return;
	digits = e + 1 + (e[1] == '+' || e[1] == '-');
	zeros = strspn(digits, "0");
	if (zeros && digits[zeros])
		memmove(digits, digits + zeros, strlen(digits + zeros) + 1);
}

/*
 * "1.25e+08" → "125000000": the same decimal number, so it reads back the
 * same. Only for exponents below max, where the text stays short.
 */
static void json__expand_exponent(char *tmp, size_t size, int max)
{
	char *e = strchr(tmp, 'e'), out[40], *o = out;
	const char *c;
	long x, n = 0;

	if (!e || (x = strtol(e + 1, NULL, 10)) < 0 || x >= max || size < sizeof(out))
		return;
	for (c = tmp; c < e; c++) {
		if (*c != '.')
			*o++ = *c;
		n += *c >= '0' && *c <= '9';
	}
	/* %g uses an exponent only when x >= digits, so at least one zero follows */
	for (; n <= x; n++)
		*o++ = '0';
	*o = '\0';
	memcpy(tmp, out, o - out + 1);
}

/*
 * Shortest "%.*g" text that reads back to the same bits: 17 significant
 * digits always suffice for a double, 9 for a float. Always a JSON float
 * (a '.' or an exponent), so that readers that tell numbers apart by their
 * text (Python's json) read a float. Assumes the C locale for the decimal
 * point, which nanwatch never changes.
 */
static void json__shortest(char *tmp, size_t size, double v, int is_float)
{
	int p, max = is_float ? 9 : 17;

	for (p = 1; p < max; p++) {
		snprintf(tmp, size, "%.*g", p, v);
		if (is_float ? strtof(tmp, NULL) == (float)v : strtod(tmp, NULL) == v)
			break;
	}
	snprintf(tmp, size, "%.*g", p, v);
	json__expand_exponent(tmp, size, max);
	json__trim_exponent(tmp);
	/* a float reads back as one: "2.0", never the integer 2 (a 4.6e16 loss is no count) */
	if (!strpbrk(tmp, ".e") && strlen(tmp) + 3 <= size)
		strcat(tmp, ".0");
}

void json__double(struct json *j, const char *key, double v)
{
	char tmp[40];

	if (!isfinite(v)) {
		json__null(j, key);
		return;
	}
	json__shortest(tmp, sizeof(tmp), v, 0);
	json__literal(j, key, tmp);
}

void json__float(struct json *j, const char *key, float v)
{
	char tmp[40];

	if (!isfinite(v)) {
		json__null(j, key);
		return;
	}
	json__shortest(tmp, sizeof(tmp), v, 1);
	json__literal(j, key, tmp);
}

void json__bool(struct json *j, const char *key, int v)
{
	json__literal(j, key, v ? "true" : "false");
}

void json__null(struct json *j, const char *key)
{
	json__literal(j, key, "null");
}

const char *json__str(const struct json *j)
{
	return j->err ? NULL : j->buf;
}

size_t json__len(const struct json *j)
{
	return j->err ? 0 : j->len;
}

void json__begin_kn(struct json *j, const char *key, size_t klen, int object)
{
	json__open(j, key, klen, object);
}

void json__string_kn(struct json *j, const char *key, size_t klen, const char *val, size_t n)
{
	if (!json__prefixn(j, key, klen))
		json__quote(j, val, n);
}

void json__raw_kn(struct json *j, const char *key, size_t klen, const char *text)
{
	if (!json__prefixn(j, key, klen))
		json__puts(j, text);
}

void json__element(struct json *j, const char *key, __u64 bits, __u32 dtype)
{
	if (!dtype__size(dtype) || nw_classify(bits, dtype) != NW_FINITE) {
		json__null(j, key);
		return;
	}
	/*
	 * float16 and bfloat16 values are exactly floats: the shortest float text
	 * ("0.1") reads better than the double's ("0.10000000149011612").
	 */
	if (dtype == NW_DT_F64)
		json__double(j, key, nw_bits_to_double(bits, dtype));
	else
		json__float(j, key, (float)nw_bits_to_double(bits, dtype));
}
