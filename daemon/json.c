// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * JSON writer for event lines and a bounded recursive-descent parser. Strings
 * written come partly from another process's memory, so bytes are untrusted:
 * invalid UTF-8 becomes U+FFFD and control characters are escaped.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

#define JSON_COMMA	0x01	/* a value was written at this depth */
#define JSON_OBJECT	0x02	/* the container at this depth is an object */

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

/* Second and later continuation bytes must be 80..BF. */
static int utf8__cont(unsigned char c)
{
	return (c & 0xc0) == 0x80;
}

int utf8__check(const unsigned char *s, size_t n)
{
	unsigned char c = s[0], lo = 0x80, hi = 0xbf;
	int want, i;

	if (c < 0x80)
		return 1;
	if (c < 0xc2 || c > 0xf4)
		return -1;	/* stray continuation, overlong lead, beyond U+10FFFF */
	want = c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
	/* second-byte ranges that exclude overlongs, surrogates and > U+10FFFF */
	if (c == 0xe0)
		lo = 0xa0;
	else if (c == 0xed)
		hi = 0x9f;
	else if (c == 0xf0)
		lo = 0x90;
	else if (c == 0xf4)
		hi = 0x8f;
	for (i = 1; i < want; i++) {
		if ((size_t)i >= n)
			return -i;
		if (i == 1 ? (s[i] < lo || s[i] > hi) : !utf8__cont(s[i]))
			return -i;
	}
	return want;
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
 * digits always suffice for a double, 9 for a float. Assumes the C locale for
 * the decimal point, which nanwatch never changes.
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

/* ---- parser ---- */

struct jp {
	const char *s;
	size_t len, pos;
	char *err;
	size_t errlen;
	int failed;
};

static void *jp__fail(struct jp *p, const char *what)
{
	if (!p->failed && p->err && p->errlen)
		snprintf(p->err, p->errlen, "offset %zu: %s", p->pos, what);
	p->failed = 1;
	return NULL;
}

static int jp__peek(struct jp *p)
{
	return p->pos < p->len ? (unsigned char)p->s[p->pos] : -1;
}

static void jp__ws(struct jp *p)
{
	int c;

	while ((c = jp__peek(p)) == ' ' || c == '\t' || c == '\r' || c == '\n')
		p->pos++;
}

static struct jv *jv__new(enum jv_type type)
{
	struct jv *v = calloc(1, sizeof(*v));

	if (v)
		v->type = type;
	return v;
}

void jv__free(struct jv *v)
{
	size_t i;

	if (!v)
		return;
	for (i = 0; i < v->n; i++) {
		jv__free(v->items[i]);
		if (v->keys)
			free(v->keys[i]);
	}
	free(v->items);
	free(v->keys);
	free(v->klens);
	free(v->str);
	free(v);
}

static struct jv *jp__value(struct jp *p, int depth);

static struct jv *jp__literal(struct jp *p, const char *word, enum jv_type type, int b)
{
	size_t n = strlen(word);
	struct jv *v;

	if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n))
		return jp__fail(p, "invalid literal");
	v = jv__new(type);
	if (!v)
		return jp__fail(p, "out of memory");
	v->b = b;
	p->pos += n;
	return v;
}

static size_t jp__digits(struct jp *p)
{
	size_t start = p->pos;

	while (jp__peek(p) >= '0' && jp__peek(p) <= '9')
		p->pos++;
	return p->pos - start;
}

/* RFC 8259 grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static struct jv *jp__number(struct jp *p)
{
	size_t start = p->pos;
	struct jv *v;

	if (jp__peek(p) == '-')
		p->pos++;
	if (jp__peek(p) == '0')
		p->pos++;
	else if (!jp__digits(p))
		return jp__fail(p, "invalid number");
	if (jp__peek(p) == '.') {
		p->pos++;
		if (!jp__digits(p))
			return jp__fail(p, "digit expected after '.'");
	}
	if (jp__peek(p) == 'e' || jp__peek(p) == 'E') {
		p->pos++;
		if (jp__peek(p) == '+' || jp__peek(p) == '-')
			p->pos++;
		if (!jp__digits(p))
			return jp__fail(p, "digit expected in exponent");
	}
	v = jv__new(JV_NUMBER);
	if (!v || !(v->str = strndup(p->s + start, p->pos - start))) {
		free(v);
		return jp__fail(p, "out of memory");
	}
	v->len = p->pos - start;
	v->num = strtod(v->str, NULL);
	return v;
}

static int jp__hex4(struct jp *p, unsigned *out)
{
	unsigned u = 0;
	int i, c;

	for (i = 0; i < 4; i++) {
		c = jp__peek(p);
		if (c >= '0' && c <= '9')
			u = u * 16 + (c - '0');
		else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
			u = u * 16 + ((c | 0x20) - 'a' + 10);
		else
			return -EINVAL;
		p->pos++;
	}
	*out = u;
	return 0;
}

static size_t utf8__encode(char *out, unsigned cp)
{
	if (cp < 0x80) {
		out[0] = cp;
		return 1;
	}
	if (cp < 0x800) {
		out[0] = 0xc0 | (cp >> 6);
		out[1] = 0x80 | (cp & 0x3f);
		return 2;
	}
	if (cp < 0x10000) {
		out[0] = 0xe0 | (cp >> 12);
		out[1] = 0x80 | ((cp >> 6) & 0x3f);
		out[2] = 0x80 | (cp & 0x3f);
		return 3;
	}
	out[0] = 0xf0 | (cp >> 18);
	out[1] = 0x80 | ((cp >> 12) & 0x3f);
	out[2] = 0x80 | ((cp >> 6) & 0x3f);
	out[3] = 0x80 | (cp & 0x3f);
	return 4;
}

/* \uXXXX after the backslash-u, joining a surrogate pair; lone halves are errors. */
static int jp__unicode(struct jp *p, char *out, size_t *n)
{
	unsigned hi, lo;

	if (jp__hex4(p, &hi))
		return -EINVAL;
	if (hi >= 0xdc00 && hi <= 0xdfff)
		return -EINVAL;
	if (hi >= 0xd800 && hi <= 0xdbff) {
		if (p->len - p->pos < 2 || memcmp(p->s + p->pos, "\\u", 2))
			return -EINVAL;
		p->pos += 2;
		if (jp__hex4(p, &lo) || lo < 0xdc00 || lo > 0xdfff)
			return -EINVAL;
		hi = 0x10000 + ((hi - 0xd800) << 10) + (lo - 0xdc00);
	}
	*n = utf8__encode(out, hi);
	return 0;
}

/* One escape after the backslash into out (up to 4 bytes). */
static int jp__escape(struct jp *p, char *out, size_t *n)
{
	static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
	int c = jp__peek(p);
	const char *q;

	if (c == 'u') {
		p->pos++;
		return jp__unicode(p, out, n);
	}
	q = c > 0 ? strchr(from, c) : NULL;
	if (!q)
		return -EINVAL;
	p->pos++;
	out[0] = to[q - from];
	*n = 1;
	return 0;
}

/* Bytes up to the closing quote, escapes included: an upper bound on the output. */
static size_t jp__string_span(const struct jp *p)
{
	size_t i = p->pos;

	while (i < p->len && p->s[i] != '"')
		i += p->s[i] == '\\' ? 2 : 1;
	return i - p->pos;
}

/*
 * Body of a string after the opening quote. The output is never longer than
 * the input (escapes shrink or stay the same size), so one allocation does.
 */
static char *jp__string_raw(struct jp *p, size_t *outlen)
{
	char *out = malloc(jp__string_span(p) + 1);
	size_t n = 0, k;
	int c, u;

	if (!out)
		return jp__fail(p, "out of memory");
	while ((c = jp__peek(p)) != '"') {
		if (c < 0x20) {
			free(out);
			return jp__fail(p, c < 0 ? "unterminated string" :
						   "control character in string");
		}
		if (c == '\\') {
			p->pos++;
			if (jp__escape(p, out + n, &k)) {
				free(out);
				return jp__fail(p, "invalid escape");
			}
			n += k;
			continue;
		}
		u = utf8__check((const unsigned char *)p->s + p->pos, p->len - p->pos);
		if (u < 0) {
			free(out);
			return jp__fail(p, "invalid UTF-8 in string");
		}
		memcpy(out + n, p->s + p->pos, u);
		n += u;
		p->pos += u;
	}
	p->pos++;
	out[n] = '\0';
	*outlen = n;
	return out;
}

static struct jv *jp__string(struct jp *p)
{
	struct jv *v;
	size_t n;
	char *s;

	p->pos++;
	s = jp__string_raw(p, &n);
	if (!s)
		return NULL;
	v = jv__new(JV_STRING);
	if (!v) {
		free(s);
		return jp__fail(p, "out of memory");
	}
	v->str = s;
	v->len = n;
	return v;
}

static int jv__grow(struct jv *v)
{
	size_t cap = v->cap ? v->cap * 2 : 4;
	struct jv **items;
	size_t *klens;
	char **keys;

	items = realloc(v->items, cap * sizeof(*items));
	if (!items)
		return -ENOMEM;
	v->items = items;
	if (v->type == JV_OBJECT) {
		keys = realloc(v->keys, cap * sizeof(*keys));
		if (keys)
			v->keys = keys;
		klens = keys ? realloc(v->klens, cap * sizeof(*klens)) : NULL;
		if (!klens)
			return -ENOMEM;
		v->klens = klens;
	}
	v->cap = cap;
	return 0;
}

static int jv__push(struct jv *v, char *key, size_t klen, struct jv *item)
{
	if (v->n == v->cap && jv__grow(v))
		return -ENOMEM;
	v->items[v->n] = item;
	if (v->type == JV_OBJECT) {
		v->keys[v->n] = key;
		v->klens[v->n] = klen;
	}
	v->n++;
	return 0;
}

/* "key": of an object member, up to and including the colon. */
static char *jp__key(struct jp *p, size_t *klen)
{
	char *key;

	jp__ws(p);
	if (jp__peek(p) != '"')
		return jp__fail(p, "string key expected");
	p->pos++;
	key = jp__string_raw(p, klen);
	if (!key)
		return NULL;
	jp__ws(p);
	if (jp__peek(p) != ':') {
		free(key);
		return jp__fail(p, "':' expected");
	}
	p->pos++;
	return key;
}

/* One member (object) or element (array). */
static int jp__member(struct jp *p, struct jv *v, int depth)
{
	struct jv *item;
	char *key = NULL;
	size_t klen = 0;

	if (v->type == JV_OBJECT && !(key = jp__key(p, &klen)))
		return -EINVAL;
	item = jp__value(p, depth);
	if (!item) {
		free(key);
		return -EINVAL;
	}
	if (jv__push(v, key, klen, item)) {
		free(key);
		jv__free(item);
		jp__fail(p, "out of memory");
		return -ENOMEM;
	}
	return 0;
}

static struct jv *jp__container(struct jp *p, int depth, enum jv_type type)
{
	char close = type == JV_OBJECT ? '}' : ']';
	struct jv *v;

	if (depth > JV_MAX_DEPTH)
		return jp__fail(p, "nesting too deep");
	p->pos++;
	v = jv__new(type);
	if (!v)
		return jp__fail(p, "out of memory");
	jp__ws(p);
	if (jp__peek(p) == close) {
		p->pos++;
		return v;
	}
	for (;;) {
		if (jp__member(p, v, depth))
			break;
		jp__ws(p);
		if (jp__peek(p) == close) {
			p->pos++;
			return v;
		}
		if (jp__peek(p) != ',') {
			jp__fail(p, type == JV_OBJECT ? "',' or '}' expected" :
							"',' or ']' expected");
			break;
		}
		p->pos++;
	}
	jv__free(v);
	return NULL;
}

static struct jv *jp__value(struct jp *p, int depth)
{
	jp__ws(p);
	switch (jp__peek(p)) {
	case '{':
		return jp__container(p, depth + 1, JV_OBJECT);
	case '[':
		return jp__container(p, depth + 1, JV_ARRAY);
	case '"':
		return jp__string(p);
	case 't':
		return jp__literal(p, "true", JV_BOOL, 1);
	case 'f':
		return jp__literal(p, "false", JV_BOOL, 0);
	case 'n':
		return jp__literal(p, "null", JV_NULL, 0);
	case -1:
		return jp__fail(p, "value expected, end of input");
	default:
		if (jp__peek(p) == '-' || (jp__peek(p) >= '0' && jp__peek(p) <= '9'))
			return jp__number(p);
		return jp__fail(p, "value expected");
	}
}

struct jv *jv__parse(const char *text, size_t len, char *err, size_t errlen)
{
	struct jp p = { .s = text, .len = len, .err = err, .errlen = errlen };
	struct jv *v;

	if (err && errlen)
		err[0] = '\0';
	v = jp__value(&p, 0);
	if (!v) {
		errno = EINVAL;
		return NULL;
	}
	jp__ws(&p);
	if (p.pos != p.len) {
		jv__free(v);
		jp__fail(&p, "trailing characters after value");
		errno = EINVAL;
		return NULL;
	}
	return v;
}

enum jv_type jv__type(const struct jv *v)
{
	return v ? v->type : JV_NULL;
}

const struct jv *jv__get(const struct jv *obj, const char *key)
{
	size_t i, n = strlen(key);

	if (!obj || obj->type != JV_OBJECT)
		return NULL;
	for (i = 0; i < obj->n; i++) {
		/* lengths compared first: a key holding \u0000 never matches a C string */
		if (obj->klens[i] == n && !memcmp(obj->keys[i], key, n))
			return obj->items[i];
	}
	return NULL;
}

const char *jv__string(const struct jv *v)
{
	return v && v->type == JV_STRING ? v->str : NULL;
}

size_t jv__string_len(const struct jv *v)
{
	return v && v->type == JV_STRING ? v->len : 0;
}

int jv__number(const struct jv *v, double *out)
{
	if (!v || v->type != JV_NUMBER)
		return -EINVAL;
	*out = v->num;
	return 0;
}

const char *jv__number_text(const struct jv *v)
{
	return v && v->type == JV_NUMBER ? v->str : NULL;
}

int jv__is_null(const struct jv *v)
{
	return v && v->type == JV_NULL;
}

int jv__bool(const struct jv *v, int *out)
{
	if (!v || v->type != JV_BOOL)
		return -EINVAL;
	*out = v->b;
	return 0;
}

size_t jv__len(const struct jv *v)
{
	return v && (v->type == JV_ARRAY || v->type == JV_OBJECT) ? v->n : 0;
}

const struct jv *jv__index(const struct jv *v, size_t i)
{
	return i < jv__len(v) ? v->items[i] : NULL;
}

const char *jv__key(const struct jv *obj, size_t i)
{
	return obj && obj->type == JV_OBJECT && i < obj->n ? obj->keys[i] : NULL;
}

/* A parsed value as a member of j (key of klen bytes, or NULL); numbers keep their text. */
static void jv__writen(struct json *j, const char *key, size_t klen, const struct jv *v)
{
	int obj = jv__type(v) == JV_OBJECT;
	size_t i;

	switch (jv__type(v)) {
	case JV_BOOL:
	case JV_NUMBER:
	case JV_STRING:
		if (json__prefixn(j, key, klen))
			return;
		if (v->type == JV_STRING)
			json__quote(j, v->str, v->len);
		else
			json__puts(j, v->type == JV_NUMBER ? v->str : v->b ? "true" : "false");
		break;
	case JV_ARRAY:
	case JV_OBJECT:
		json__open(j, key, klen, obj);
		for (i = 0; i < v->n; i++)
			jv__writen(j, obj ? v->keys[i] : NULL, obj ? v->klens[i] : 0, v->items[i]);
		json__close(j, obj);
		break;
	default:
		if (!json__prefixn(j, key, klen))
			json__puts(j, "null");
		break;
	}
}

/* Write a parsed value back, compact. */
void jv__write(struct json *j, const char *key, const struct jv *v)
{
	jv__writen(j, key, key ? strlen(key) : 0, v);
}
