// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Bounded YAML documents on top of libyaml's event parser (see yamlmap.h). The tree is
 * built from events with every size checked as it grows: a hostile file costs at most the
 * limits the caller set.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>
#include "util/file.h"
#include "util/yamlmap.h"

#define WHY_LEN 256

struct yamlmap_node {
	const struct yamlmap *y;
	enum yamlmap_kind kind;
	int line;
	bool quoted;
	char *text;	     /* scalars */
	size_t first, count; /* children: y->kids[first..]; a mapping's are key, value pairs */
};

struct yamlmap {
	char *name;
	struct yamlmap_node *nodes;
	size_t n, cap;
	size_t *kids; /* node indices, each container's children together */
	size_t nkids, capkids;
};

/* A container being built: its children so far. */
struct open {
	size_t node;
	size_t *kids;
	size_t n, cap;
};

struct builder {
	struct yamlmap *y;
	const struct yamlmap_limits *lim;
	struct open *stack; /* lim->max_depth entries */
	int depth;
	int docs;
	bool root;
	char why[WHY_LEN];
};

void yamlmap__errorf(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	yamlmap__one_line(err);
}

void yamlmap__one_line(char *s)
{
	/* text from the file (a quoted value may hold line breaks) must not break the line */
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			*s = '?';
}

int yamlmap__parse_int(const char *s, long long *out)
{
	const char *p = s;
	const char *digits = "0123456789";
	int base = 10;
	long long v;
	char *end;

	if (*p == '-' || *p == '+')
		p++;
	if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X')) {
		base = 16;
		digits = "0123456789abcdefABCDEF";
		p += 2;
	}
	if (!*p || strspn(p, digits) != strlen(p))
		return -EINVAL;
	errno = 0;
	v = strtoll(s, &end, base);
	if (errno == ERANGE)
		return -ERANGE;
	if (*end)
		return -EINVAL;
	*out = v;
	return 0;
}

static int push_kid(struct open *o, size_t node)
{
	size_t *grown;

	if (o->n == o->cap) {
		o->cap = o->cap ? 2 * o->cap : 16;
		grown = realloc(o->kids, o->cap * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		o->kids = grown;
	}
	o->kids[o->n++] = node;
	return 0;
}

/* A mapping's key: a bounded, new scalar. */
static int check_key(struct builder *b, struct open *o, const struct yamlmap_node *k)
{
	const struct yamlmap *y = b->y;
	size_t i;

	if (k->kind != YAMLMAP_SCALAR) {
		snprintf(b->why, WHY_LEN, "line %d: a key must be a plain string", k->line);
		return -EINVAL;
	}
	if (!k->text[0]) {
		snprintf(b->why, WHY_LEN, "line %d: empty key", k->line);
		return -EINVAL;
	}
	if (strlen(k->text) > b->lim->max_key) {
		snprintf(b->why, WHY_LEN, "line %d: key longer than %zu characters", k->line,
			 b->lim->max_key);
		return -ENAMETOOLONG;
	}
	for (i = 0; i + 1 < o->n; i += 2) {
		const struct yamlmap_node *old = &y->nodes[o->kids[i]];

		if (!strcmp(old->text, k->text)) {
			snprintf(b->why, WHY_LEN,
				 "line %d: duplicate key '%.64s' (first on line %d)", k->line,
				 k->text, old->line);
			return -EEXIST;
		}
	}
	return 0;
}

/* A new node, added to the container open at the top of the stack. */
static int add_node(struct builder *b, enum yamlmap_kind kind, const yaml_event_t *ev,
		    size_t *index)
{
	struct yamlmap *y = b->y;
	struct yamlmap_node *grown, *n;
	struct open *o = b->depth ? &b->stack[b->depth - 1] : NULL;
	int ret;

	if (y->n >= b->lim->max_nodes) {
		snprintf(b->why, WHY_LEN, "line %zu: more than %zu nodes", ev->start_mark.line + 1,
			 b->lim->max_nodes);
		return -E2BIG;
	}
	if (y->n == y->cap) {
		y->cap = y->cap ? 2 * y->cap : 64;
		if (y->cap > b->lim->max_nodes)
			y->cap = b->lim->max_nodes;
		grown = realloc(y->nodes, y->cap * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		y->nodes = grown;
	}
	n = &y->nodes[y->n];
	memset(n, 0, sizeof(*n));
	n->kind = kind;
	n->line = ev->start_mark.line + 1;
	if (kind == YAMLMAP_SCALAR) {
		n->quoted = ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
		n->text = malloc(ev->data.scalar.length + 1);
		if (!n->text)
			return -ENOMEM;
		memcpy(n->text, ev->data.scalar.value, ev->data.scalar.length);
		n->text[ev->data.scalar.length] = 0;
	}
	*index = y->n++;
	if (!o) {
		b->root = true;
		return 0;
	}
	if (y->nodes[o->node].kind == YAMLMAP_MAP && !(o->n % 2)) {
		ret = check_key(b, o, n);
		if (ret)
			return ret;
	}
	return push_kid(o, *index);
}

/* Move a finished container's children into the document. */
static int close_node(struct builder *b)
{
	struct open *o = &b->stack[--b->depth];
	struct yamlmap *y = b->y;
	size_t *grown;

	if (y->nkids + o->n > y->capkids) {
		y->capkids = 2 * (y->nkids + o->n);
		grown = realloc(y->kids, y->capkids * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		y->kids = grown;
	}
	if (o->n) /* an empty container may have no arrays at all */
		memcpy(y->kids + y->nkids, o->kids, o->n * sizeof(*o->kids));
	y->nodes[o->node].first = y->nkids;
	y->nodes[o->node].count = y->nodes[o->node].kind == YAMLMAP_MAP ? o->n / 2 : o->n;
	y->nkids += o->n;
	free(o->kids);
	memset(o, 0, sizeof(*o));
	return 0;
}

static int open_node(struct builder *b, enum yamlmap_kind kind, const yaml_event_t *ev)
{
	size_t index;
	int ret;

	if (b->depth >= b->lim->max_depth) {
		snprintf(b->why, WHY_LEN, "line %zu: nested deeper than %d levels",
			 ev->start_mark.line + 1, b->lim->max_depth);
		return -E2BIG;
	}
	ret = add_node(b, kind, ev, &index);
	if (ret)
		return ret;
	memset(&b->stack[b->depth], 0, sizeof(b->stack[0]));
	b->stack[b->depth++].node = index;
	return 0;
}

/* Anchors, tags and aliases: not needed by our files, and aliases multiply work. */
static int refuse_extras(struct builder *b, const yaml_event_t *ev)
{
	const yaml_char_t *anchor = NULL, *tag = NULL;
	size_t line = ev->start_mark.line + 1;

	if (ev->type == YAML_ALIAS_EVENT) {
		snprintf(b->why, WHY_LEN, "line %zu: aliases are not supported", line);
		return -EINVAL;
	}
	if (ev->type == YAML_SCALAR_EVENT) {
		anchor = ev->data.scalar.anchor;
		tag = ev->data.scalar.tag;
	} else if (ev->type == YAML_SEQUENCE_START_EVENT) {
		anchor = ev->data.sequence_start.anchor;
		tag = ev->data.sequence_start.tag;
	} else if (ev->type == YAML_MAPPING_START_EVENT) {
		anchor = ev->data.mapping_start.anchor;
		tag = ev->data.mapping_start.tag;
	}
	if (anchor || tag) {
		snprintf(b->why, WHY_LEN, "line %zu: %s are not supported", line,
			 anchor ? "anchors" : "tags");
		return -EINVAL;
	}
	return 0;
}

static int on_event(struct builder *b, const yaml_event_t *ev)
{
	size_t index;
	int ret = refuse_extras(b, ev);

	if (ret)
		return ret;
	switch (ev->type) {
	case YAML_DOCUMENT_START_EVENT:
		if (++b->docs > 1) {
			snprintf(b->why, WHY_LEN, "line %zu: more than one document",
				 ev->start_mark.line + 1);
			return -EINVAL;
		}
		return 0;
	case YAML_SCALAR_EVENT:
		if (ev->data.scalar.length > b->lim->max_scalar) {
			snprintf(b->why, WHY_LEN, "line %zu: value longer than %zu bytes",
				 ev->start_mark.line + 1, b->lim->max_scalar);
			return -E2BIG;
		}
		return add_node(b, YAMLMAP_SCALAR, ev, &index);
	case YAML_SEQUENCE_START_EVENT:
		return open_node(b, YAMLMAP_SEQ, ev);
	case YAML_MAPPING_START_EVENT:
		return open_node(b, YAMLMAP_MAP, ev);
	case YAML_SEQUENCE_END_EVENT:
	case YAML_MAPPING_END_EVENT:
		return b->depth ? close_node(b) : -EINVAL;
	default:
		return 0;
	}
}

static int parser_error(struct builder *b, const yaml_parser_t *p)
{
	/* the context's mark is where the bad construct began: the line a reader looks at */
	const yaml_mark_t *m = p->context ? &p->context_mark : &p->problem_mark;

	if (p->error == YAML_MEMORY_ERROR)
		return -ENOMEM;
	if (p->error == YAML_READER_ERROR)
		snprintf(b->why, WHY_LEN, "byte %zu: %s", p->problem_offset,
			 p->problem ? p->problem : "unreadable text");
	else
		snprintf(b->why, WHY_LEN, "line %zu: %s%s%s%s", m->line + 1,
			 p->problem ? p->problem : "syntax error", p->context ? " (" : "",
			 p->context ? p->context : "", p->context ? ")" : "");
	return -EINVAL;
}

/* An empty document (or one holding only an empty plain scalar) is an empty mapping. */
static int empty_root(struct yamlmap *y)
{
	struct yamlmap_node *n = y->n ? &y->nodes[0] : NULL;

	if (n && !(n->kind == YAMLMAP_SCALAR && !n->quoted && !n->text[0]))
		return 0;
	if (!n) {
		y->nodes = calloc(1, sizeof(*y->nodes));
		if (!y->nodes)
			return -ENOMEM;
		y->n = y->cap = 1;
		n = &y->nodes[0];
		n->line = 1;
	}
	free(n->text);
	n->text = NULL;
	n->kind = YAMLMAP_MAP;
	n->count = 0;
	return 0;
}

static int build(struct builder *b, const char *text, size_t len)
{
	yaml_parser_t p;
	yaml_event_t ev;
	bool done = false;
	size_t i;
	int ret = 0;

	if (!yaml_parser_initialize(&p))
		return -ENOMEM;
	yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
	while (!done && !ret) {
		if (!yaml_parser_parse(&p, &ev)) {
			ret = parser_error(b, &p);
			break;
		}
		done = ev.type == YAML_STREAM_END_EVENT;
		ret = on_event(b, &ev);
		yaml_event_delete(&ev);
	}
	yaml_parser_delete(&p);
	for (i = 0; i < (size_t)b->lim->max_depth; i++)
		free(b->stack[i].kids);
	if (!ret)
		ret = empty_root(b->y);
	for (i = 0; !ret && i < b->y->n; i++)
		b->y->nodes[i].y = b->y;
	return ret;
}

/* Read the whole file (file__read), refusing anything over max bytes; why says what failed. */
static int read_file(const char *path, size_t max, char **bufp, size_t *lenp, char *why)
{
	int ret;

	*bufp = file__read(path, max, lenp);
	if (*bufp)
		return 0;
	ret = -errno;
	if (ret == -EFBIG)
		snprintf(why, WHY_LEN, "larger than %zu bytes", max);
	else if (ret == -EISDIR || ret == -EINVAL)
		snprintf(why, WHY_LEN, "not a regular file");
	else
		snprintf(why, WHY_LEN, "%s", strerror(-ret));
	return ret;
}

static struct yamlmap *parse(const char *name, const char *text, size_t len, bool is_file,
			     const struct yamlmap_limits *lim, char *err, size_t errlen)
{
	struct builder b = {.lim = lim};
	char *buf = NULL;
	int ret = 0;

	if (!name || !lim || lim->max_depth < 1 || (!is_file && !text)) {
		yamlmap__errorf(err, errlen, "%s: no text or limits", name ? name : "(null)");
		errno = EINVAL;
		return NULL;
	}
	if (is_file) {
		ret = read_file(name, lim->max_bytes, &buf, &len, b.why);
		text = buf;
	} else if (len > lim->max_bytes) {
		ret = -EFBIG;
		snprintf(b.why, WHY_LEN, "larger than %zu bytes", lim->max_bytes);
	}
	if (!ret) {
		b.y = calloc(1, sizeof(*b.y));
		b.stack = calloc(lim->max_depth, sizeof(*b.stack));
		if (!b.y || !b.stack || !(b.y->name = strdup(name)))
			ret = -ENOMEM;
	}
	if (!ret)
		ret = build(&b, text, len);
	if (ret == -ENOMEM)
		snprintf(b.why, WHY_LEN, "%s", strerror(ENOMEM));
	free(b.stack);
	free(buf);
	if (!ret)
		return b.y;
	yamlmap__errorf(err, errlen, "%s: %s", name, b.why);
	yamlmap__free(b.y);
	errno = -ret;
	return NULL;
}

struct yamlmap *yamlmap__load(const char *path, const struct yamlmap_limits *lim, char *err,
			      size_t errlen)
{
	return parse(path, NULL, 0, true, lim, err, errlen);
}

struct yamlmap *yamlmap__parse(const char *name, const char *text, size_t len,
			       const struct yamlmap_limits *lim, char *err, size_t errlen)
{
	return parse(name, text, len, false, lim, err, errlen);
}

void yamlmap__free(struct yamlmap *y)
{
	size_t i;

	if (!y)
		return;
	for (i = 0; i < y->n; i++)
		free(y->nodes[i].text);
	free(y->nodes);
	free(y->kids);
	free(y->name);
	free(y);
}

const char *yamlmap__name(const struct yamlmap *y)
{
	return y ? y->name : NULL;
}

const struct yamlmap_node *yamlmap__root(const struct yamlmap *y)
{
	return y && y->n ? &y->nodes[0] : NULL;
}

enum yamlmap_kind yamlmap__kind(const struct yamlmap_node *n)
{
	return n->kind;
}

int yamlmap__line(const struct yamlmap_node *n)
{
	return n->line;
}

const char *yamlmap__text(const struct yamlmap_node *n)
{
	return n->kind == YAMLMAP_SCALAR ? n->text : NULL;
}

bool yamlmap__quoted(const struct yamlmap_node *n)
{
	return n->kind == YAMLMAP_SCALAR && n->quoted;
}

size_t yamlmap__count(const struct yamlmap_node *n)
{
	return n->kind == YAMLMAP_SCALAR ? 0 : n->count;
}

const struct yamlmap_node *yamlmap__item(const struct yamlmap_node *n, size_t i, const char **key)
{
	const struct yamlmap *y = n->y;

	if (key)
		*key = NULL;
	if (n->kind == YAMLMAP_SCALAR || i >= n->count)
		return NULL;
	if (n->kind == YAMLMAP_SEQ)
		return &y->nodes[y->kids[n->first + i]];
	if (key)
		*key = y->nodes[y->kids[n->first + 2 * i]].text;
	return &y->nodes[y->kids[n->first + 2 * i + 1]];
}

static const char *kind_name(const struct yamlmap_node *n)
{
	return n->kind == YAMLMAP_MAP ? "a mapping" : n->kind == YAMLMAP_SEQ ? "a list" : "a value";
}

/* Check one value against its field; why says what is wrong. */
static int check_value(const struct yamlmap_field *f, struct yamlmap_value *v, char *why)
{
	const struct yamlmap_node *n = v->node;
	size_t len;
	int ret;

	if (f->type == YAMLMAP_MAPPING || f->type == YAMLMAP_LIST) {
		if (n->kind != (f->type == YAMLMAP_MAPPING ? YAMLMAP_MAP : YAMLMAP_SEQ)) {
			snprintf(why, WHY_LEN, "'%s' is %s, not %s", v->key, kind_name(n),
				 f->type == YAMLMAP_MAPPING ? "a mapping" : "a list");
			return -EINVAL;
		}
		if (f->type == YAMLMAP_LIST &&
		    ((long long)n->count < f->min || (long long)n->count > f->max)) {
			snprintf(why, WHY_LEN, "'%s' has %zu items, not %lld..%lld", v->key,
				 n->count, f->min, f->max);
			return -ERANGE;
		}
		return 0;
	}
	if (n->kind != YAMLMAP_SCALAR) {
		snprintf(why, WHY_LEN, "'%s' is %s, not %s", v->key, kind_name(n),
			 f->type == YAMLMAP_INT ? "an integer" : "a string");
		return -EINVAL;
	}
	if (!n->quoted && !n->text[0]) {
		snprintf(why, WHY_LEN, "no value for '%s'", v->key);
		return -EINVAL;
	}
	if (f->type == YAMLMAP_STR) {
		len = strlen(n->text);
		if ((long long)len < f->min || (long long)len > f->max) {
			if (!len)
				snprintf(why, WHY_LEN, "'%s' is empty", v->key);
			else
				snprintf(why, WHY_LEN, "'%s' is %s than %lld characters", v->key,
					 (long long)len > f->max ? "longer" : "shorter",
					 (long long)len > f->max ? f->max : f->min);
			return len ? -ERANGE : -EINVAL;
		}
		v->s = n->text;
		return 0;
	}
	ret = n->quoted ? -EINVAL : yamlmap__parse_int(n->text, &v->i);
	if (ret == -ERANGE) {
		snprintf(why, WHY_LEN, "integer out of range: '%.40s'", n->text);
		return ret;
	}
	if (ret) {
		snprintf(why, WHY_LEN, "'%s' is not an integer: '%.40s'", v->key, n->text);
		return ret;
	}
	if (v->i < f->min || v->i > f->max) {
		snprintf(why, WHY_LEN, "'%s' is %lld, outside the plausible range %lld..%lld",
			 v->key, v->i, f->min, f->max);
		return -ERANGE;
	}
	return 0;
}

static const struct yamlmap_field *find_field(const struct yamlmap_schema *schema, void *ctx,
					      const char *key, char *why, size_t whylen)
{
	size_t i;

	if (!schema->fields)
		return schema->lookup ? schema->lookup(ctx, key, why, whylen) : NULL;
	for (i = 0; i < schema->n; i++)
		if (!strcmp(schema->fields[i].key, key))
			return &schema->fields[i];
	return NULL;
}

int yamlmap__read(const struct yamlmap *y, const struct yamlmap_node *map,
		  const struct yamlmap_schema *schema, yamlmap_value_fn cb, void *ctx, char *err,
		  size_t errlen)
{
	char why[WHY_LEN];
	size_t i;
	int ret;

	if (!y || !map || !schema || map->kind != YAMLMAP_MAP) {
		yamlmap__errorf(err, errlen, "%s: line %d: expected a mapping of keys to values",
				y ? y->name : "?", map ? map->line : 0);
		return -EINVAL;
	}
	for (i = 0; i < map->count; i++) {
		struct yamlmap_value v = {};
		const struct yamlmap_field *f;

		why[0] = 0;
		v.node = yamlmap__item(map, i, &v.key);
		v.line = y->nodes[y->kids[map->first + 2 * i]].line;
		f = find_field(schema, ctx, v.key, why, sizeof(why));
		if (!f) {
			yamlmap__errorf(err, errlen, "%s: line %d: unknown key '%s'%s%s%s", y->name,
					v.line, v.key, why[0] ? " (" : "", why, why[0] ? ")" : "");
			return -EINVAL;
		}
		v.field = f;
		ret = check_value(f, &v, why);
		if (!ret && cb)
			ret = cb(ctx, &v, why, sizeof(why));
		if (ret && !strncmp(why, y->name, strlen(y->name)) && why[strlen(y->name)] == ':') {
			/* from a nested yamlmap__read: it named the file and line already */
			yamlmap__errorf(err, errlen, "%s", why);
			return ret < 0 ? ret : -EINVAL;
		}
		if (ret) {
			yamlmap__errorf(err, errlen, "%s: line %d: %s", y->name, v.line, why);
			return ret < 0 ? ret : -EINVAL;
		}
	}
	return 0;
}
