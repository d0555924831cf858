// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * A bounded recursive-descent JSON parser for nanwatch-tail and the tests:
 * strict RFC 8259, nesting limited, strings checked as UTF-8.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonread.h"
#include "util/utf8.h"

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
	*n = utf8__encode(out, 4, hi);
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
			return jp__fail(p, c < 0 ? "unterminated string"
						 : "control character in string");
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
			jp__fail(p,
				 type == JV_OBJECT ? "',' or '}' expected" : "',' or ']' expected");
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
	struct jp p = {.s = text, .len = len, .err = err, .errlen = errlen};
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
		json__raw_kn(j, key, klen, v->b ? "true" : "false");
		break;
	case JV_NUMBER:
		json__raw_kn(j, key, klen, v->str);
		break;
	case JV_STRING:
		json__string_kn(j, key, klen, v->str, v->len);
		break;
	case JV_ARRAY:
	case JV_OBJECT:
		json__begin_kn(j, key, klen, obj);
		for (i = 0; i < v->n; i++)
			jv__writen(j, obj ? v->keys[i] : NULL, obj ? v->klens[i] : 0, v->items[i]);
		if (obj)
			json__object_end(j);
		else
			json__array_end(j);
		break;
	default:
		json__raw_kn(j, key, klen, "null");
		break;
	}
}

/* Write a parsed value back, compact. */
void jv__write(struct json *j, const char *key, const struct jv *v)
{
	jv__writen(j, key, key ? strlen(key) : 0, v);
}
