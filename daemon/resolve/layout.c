// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Layout tables (see layout.h): per-version offsets of CPython and torch objects, kept as
 * data so that a new version needs a table, not a rebuild. The file is YAML read through
 * yamlmap (bounded), every key checked against layout_keys.def.
 */
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "resolve/layout.h"
#include "util/yamlmap.h"

#define WHY_LEN 256
#define DEBUG_PREFIX "debug_"
#define PUBLISHED_FROM 313 /* CPython 3.13 publishes _Py_DebugOffsets */
#define DEBUG_WORDS \
	127	      /* the words of _PyRuntime pyoffsets.h reads, 0 and 1 the cookie
				 * and version */
#define MAX_KEYS 1024 /* entries of a table (it holds about 100) */

#define NEED_REQ true
#define NEED_OPT false
#define B_Y true
#define B_N false
#define IS_STR_WORD 0
#define IS_STR_FIELD 0
#define IS_STR_SIZE 0
#define IS_STR_CODE 0
#define IS_STR_FLAG 0
#define IS_STR_BOOL 0
#define IS_STR_MATCH 1
#define IS_STR_SYMBOL 1
#define IS_STR_TEXT 1

const struct layout_key_def layout_keys[LK__COUNT] = {
#define LAYOUT_KEY(name, table, type, min, max, since, until, need, nwl, rl, bwd, rs, pub, note) \
	{#name,	      LAYOUT_##table, LAYOUT_##type, min,     max,    since,  until,             \
	 NEED_##need, B_##nwl,	      B_##rl,	     B_##bwd, B_##rs, B_##pub},
#include "resolve/layout_keys.def"
};

/* The readers' view of each key, as yamlmap checks it. */
static const struct yamlmap_field fields[LK__COUNT] = {
#define LAYOUT_KEY(name, table, type, min, max, since, until, need, nwl, rl, bwd, rs, pub, note) \
	{#name, IS_STR_##type ? YAMLMAP_STR : YAMLMAP_INT, min, max, LK_##name},
#include "resolve/layout_keys.def"
};

static const struct yamlmap_field debug_field = {DEBUG_PREFIX, YAMLMAP_INT, 2, DEBUG_WORDS, -1};

/* Where a key's value goes in a BPF rodata struct: size 0 where it has no field there. */
struct slot {
	unsigned short off, size;
};

#define SLOT_Y(s, n)                                              \
	{                                                         \
		offsetof(struct s, n), sizeof(((struct s *)0)->n) \
	}
#define SLOT_N(s, n) \
	{            \
		0, 0 \
	}

static const struct slot nwl_slots[LK__COUNT] = {
#define LAYOUT_KEY(name, table, type, min, max, since, until, need, nwl, rl, bwd, rs, pub, note) \
	SLOT_##nwl(nw_layout, name),
#include "resolve/layout_keys.def"
};

static const struct slot bwd_slots[LK__COUNT] = {
#define LAYOUT_KEY(name, table, type, min, max, since, until, need, nwl, rl, bwd, rs, pub, note) \
	SLOT_##bwd(nw_bwd_layout, name),
#include "resolve/layout_keys.def"
};

static const struct slot rs_slots[LK__COUNT] = {
#define LAYOUT_KEY(name, table, type, min, max, since, until, need, nwl, rl, bwd, rs, pub, note) \
	SLOT_##rs(nw_rescan, name),
#include "resolve/layout_keys.def"
};

/*
 * The schema and the structs agree: a string goes to a char[NW_MATCH_LEN] and fits it, an
 * integer to a 64-bit field, or to a 32-bit one its range fits.
 */
#define FITS(s, n, type, min, max)                                                              \
	(IS_STR_##type ? sizeof(((struct s *)0)->n) == NW_MATCH_LEN && (max) < NW_MATCH_LEN     \
		       : sizeof(((struct s *)0)->n) == 8 ||                                     \
				 (sizeof(((struct s *)0)->n) == 4 && (long long)(min) >= 0LL && \
				  (long long)(max) <= 0xffffffffLL))
#define CHECK_Y(s, n, type, min, max) _Static_assert(FITS(s, n, type, min, max), #n " fits " #s);
#define CHECK_N(s, n, type, min, max)
#define LAYOUT_KEY(name, table, type, min, max, since, until, need, nwl, rl, bwd, rs, pub, note)  \
	CHECK_##nwl(nw_layout, name, type, min, max) CHECK_##bwd(nw_bwd_layout, name, WORD, 0, 0) \
		CHECK_##rs(nw_rescan, name, WORD, 0, 0)
#include "resolve/layout_keys.def"

struct value {
	const char *s; /* the text as written: into the yamlmap document */
	long long i;   /* integer keys */
	int line;
	bool has;
};

struct layout {
	char *path;
	struct yamlmap *doc;
	const char *kind;
	const char *version;
	enum layout_table table;
	int ver; /* MAJOR * 100 + MINOR */
	struct value v[LK__COUNT];
	struct value debug[LK__COUNT]; /* debug_KEY: the word holding KEY */
};

bool layout__is_str(enum layout_type type)
{
	return type == LAYOUT_MATCH || type == LAYOUT_SYMBOL || type == LAYOUT_TEXT;
}

int layout__key(const char *name)
{
	int k;

	for (k = 0; name && k < LK__COUNT; k++)
		if (!strcmp(layout_keys[k].name, name))
			return k;
	return -ENOENT;
}

static const char *table_name(enum layout_table t)
{
	return t == LAYOUT_PY ? "python" : t == LAYOUT_TORCH ? "torch" : "any";
}

/* "3.12", "3.13+", "3.11 to 3.12": the versions whose tables have a key. */
static void versions(const struct layout_key_def *d, char *buf, size_t len)
{
	if (!d->until)
		snprintf(buf, len, "%d.%d+", d->since / 100, d->since % 100);
	else if (d->until == d->since + 1)
		snprintf(buf, len, "%d.%d", d->since / 100, d->since % 100);
	else
		snprintf(buf, len, "%d.%d to before %d.%d", d->since / 100, d->since % 100,
			 d->until / 100, d->until % 100);
}

static bool in_version(const struct layout_key_def *d, int ver)
{
	return ver >= d->since && (!d->until || ver < d->until);
}

/* kind and version come first: they say which keys the table may and must have. */
static const struct yamlmap_node *header_value(const struct yamlmap_node *root, const char *key)
{
	size_t i, n = yamlmap__kind(root) == YAMLMAP_MAP ? yamlmap__count(root) : 0;
	const struct yamlmap_node *v;
	const char *k;

	for (i = 0; i < n; i++) {
		v = yamlmap__item(root, i, &k);
		if (!strcmp(k, key))
			return v;
	}
	return NULL;
}

static int parse_version(const char *v)
{
	size_t major = strspn(v, "0123456789"), minor;

	if (!major || major > 2 || v[major] != '.')
		return -EINVAL;
	minor = strspn(v + major + 1, "0123456789");
	if (!minor || minor > 2 || v[major + 1 + minor])
		return -EINVAL;
	return atoi(v) * 100 + atoi(v + major + 1);
}

static int check_header(struct layout *l, char *err, size_t errlen)
{
	const struct yamlmap_node *root = yamlmap__root(l->doc);
	const struct yamlmap_node *kind = header_value(root, "kind");
	const struct yamlmap_node *ver = header_value(root, "version");
	const char *k = kind ? yamlmap__text(kind) : NULL, *v = ver ? yamlmap__text(ver) : NULL;

	if (yamlmap__kind(root) != YAMLMAP_MAP)
		return 0; /* yamlmap__read says it */
	if (!kind || !ver) {
		yamlmap__errorf(err, errlen, "%s: missing key '%s'", l->path,
				kind ? "version" : "kind");
		return -EINVAL;
	}
	if (!k || (strcmp(k, "python") && strcmp(k, "torch"))) {
		yamlmap__errorf(err, errlen,
				"%s: line %d: kind '%.40s' is neither python nor torch", l->path,
				yamlmap__line(kind), k ? k : "(not a string)");
		return -EINVAL;
	}
	if (!v || (l->ver = parse_version(v)) < 0) {
		yamlmap__errorf(err, errlen, "%s: line %d: version '%.40s' is not MAJOR.MINOR",
				l->path, yamlmap__line(ver), v ? v : "(not a string)");
		return -EINVAL;
	}
	l->kind = k;
	l->version = v;
	l->table = strcmp(k, "python") ? LAYOUT_TORCH : LAYOUT_PY;
	return 0;
}

static const struct yamlmap_field *lookup(void *ctx, const char *key, char *why, size_t whylen)
{
	int k;

	(void)ctx;
	(void)why;
	(void)whylen;
	if (!strncmp(key, DEBUG_PREFIX, strlen(DEBUG_PREFIX)))
		return &debug_field;
	k = layout__key(key);
	return k < 0 ? NULL : &fields[k];
}

/* A published key's debug_KEY word: python 3.13+ only. */
static int take_debug(struct layout *l, const struct yamlmap_value *v, char *why, size_t whylen)
{
	int k = layout__key(v->key + strlen(DEBUG_PREFIX));

	if (k < 0 || !layout_keys[k].published) {
		snprintf(why, whylen,
			 "unknown key '%s' (%s is not an offset the interpreter "
			 "publishes)",
			 v->key, v->key + strlen(DEBUG_PREFIX));
		return -EINVAL;
	}
	if (l->table != LAYOUT_PY || l->ver < PUBLISHED_FROM) {
		snprintf(why, whylen, "'%s' is not a key of %s %s tables (python %d.%d+ only)",
			 v->key, l->kind, l->version, PUBLISHED_FROM / 100, PUBLISHED_FROM % 100);
		return -EINVAL;
	}
	l->debug[k] = (struct value){
		.s = yamlmap__text(v->node), .i = v->i, .line = v->line, .has = true};
	return 0;
}

/* Checks beyond the range: the key's table and versions, alignment, single bits. */
static int check_value(const struct layout *l, const struct layout_key_def *d,
		       const struct yamlmap_value *v, char *why, size_t whylen)
{
	char vers[48];

	if (d->table != LAYOUT_ANY && d->table != l->table) {
		snprintf(why, whylen, "'%s' is not a key of %s tables (a %s key)", v->key, l->kind,
			 table_name(d->table));
		return -EINVAL;
	}
	if (!in_version(d, l->ver)) {
		versions(d, vers, sizeof(vers));
		snprintf(why, whylen, "'%s' is not a key of %s %s tables (%s %s only)", v->key,
			 l->kind, l->version, l->kind, vers);
		return -EINVAL;
	}
	if ((d->type == LAYOUT_WORD || d->type == LAYOUT_SIZE) && v->i % 8 &&
	    !(v->i == -1 && d->min == -1)) {
		snprintf(why, whylen, "'%s' is %lld, not a multiple of 8 (%s)", v->key, v->i,
			 d->type == LAYOUT_SIZE ? "an element of pointers and 64-bit words"
						: "it holds a pointer or a 64-bit word");
		return -ERANGE;
	}
	if (d->type == LAYOUT_FLAG && (v->i & (v->i - 1))) {
		snprintf(why, whylen, "'%s' is %lld, not a single bit", v->key, v->i);
		return -ERANGE;
	}
	return 0;
}

static int take(void *ctx, const struct yamlmap_value *v, char *why, size_t whylen)
{
	struct layout *l = ctx;
	const struct layout_key_def *d;
	int ret;

	if (v->field == &debug_field)
		return take_debug(l, v, why, whylen);
	d = &layout_keys[v->field->id];
	ret = check_value(l, d, v, why, whylen);
	if (ret)
		return ret;
	l->v[v->field->id] = (struct value){
		.s = yamlmap__text(v->node), .i = v->i, .line = v->line, .has = true};
	return 0;
}

static int check_required(const struct layout *l, char *err, size_t errlen)
{
	const struct layout_key_def *d;
	int k;

	for (k = 0; k < LK__COUNT; k++) {
		d = &layout_keys[k];
		if (!d->required || l->v[k].has || !in_version(d, l->ver) ||
		    (d->table != LAYOUT_ANY && d->table != l->table))
			continue;
		yamlmap__errorf(err, errlen, "%s: missing key '%s' (%s %s tables need it)", l->path,
				d->name, l->kind, l->version);
		return -EINVAL;
	}
	return 0;
}

static const struct yamlmap_schema schema = {.lookup = lookup};

static const struct yamlmap_limits limits = {
	.max_bytes = LAYOUT_MAX_FILE,
	.max_nodes = 2 * MAX_KEYS + 1,
	.max_scalar = LAYOUT_MAX_SCALAR,
	.max_key = LAYOUT_MAX_KEY,
	.max_depth = 2, /* a nested value is read, then refused by its type */
};

static struct layout *load(const char *path, const char *text, size_t len, char *err, size_t errlen)
{
	char why[WHY_LEN + 64] = "";
	struct layout *l;
	int ret;

	l = calloc(1, sizeof(*l));
	if (!l || !(l->path = strdup(path))) {
		free(l);
		yamlmap__errorf(err, errlen, "failed to load layout table %s: %s", path,
				strerror(ENOMEM));
		errno = ENOMEM;
		return NULL;
	}
	l->doc = text ? yamlmap__parse(path, text, len, &limits, why, sizeof(why))
		      : yamlmap__load(path, &limits, why, sizeof(why));
	ret = l->doc ? 0 : -errno;
	if (!ret)
		ret = check_header(l, why, sizeof(why));
	if (!ret)
		ret = yamlmap__read(l->doc, yamlmap__root(l->doc), &schema, take, l, why,
				    sizeof(why));
	if (!ret)
		ret = check_required(l, why, sizeof(why));
	if (!ret)
		return l;
	yamlmap__errorf(err, errlen, "failed to load layout table %s", why);
	layout__free(l);
	errno = -ret;
	return NULL;
}

struct layout *layout__load(const char *path, char *err, size_t errlen)
{
	if (!path) {
		yamlmap__errorf(err, errlen, "failed to load layout table: no path");
		errno = EINVAL;
		return NULL;
	}
	return load(path, NULL, 0, err, errlen);
}

struct layout *layout__parse(const char *name, const char *text, size_t len, char *err,
			     size_t errlen)
{
	if (!name || !text) {
		yamlmap__errorf(err, errlen, "failed to load layout table: no %s",
				name ? "text" : "name");
		errno = EINVAL;
		return NULL;
	}
	return load(name, text, len, err, errlen);
}

void layout__free(struct layout *l)
{
	if (!l)
		return;
	yamlmap__free(l->doc);
	free(l->path);
	free(l);
}

const char *layout__kind(const struct layout *l)
{
	return l ? l->kind : NULL;
}

const char *layout__version(const struct layout *l)
{
	return l ? l->version : NULL;
}

int layout__int(const struct layout *l, enum layout_key key, long long *out)
{
	if (!l || !out || (unsigned)key >= LK__COUNT)
		return -EINVAL;
	if (!l->v[key].has)
		return -ENOENT;
	if (layout__is_str(layout_keys[key].type))
		return -EINVAL;
	*out = l->v[key].i;
	return 0;
}

const char *layout__str(const struct layout *l, enum layout_key key)
{
	return l && (unsigned)key < LK__COUNT && l->v[key].has ? l->v[key].s : NULL;
}

int layout__debug_word(const struct layout *l, enum layout_key key, long long *word)
{
	if (!l || !word || (unsigned)key >= LK__COUNT)
		return -EINVAL;
	if (!l->debug[key].has)
		return -ENOENT;
	*word = l->debug[key].i;
	return 0;
}

struct layout *layout__find(const char *dir, const char *kind, const char *version, char *err,
			    size_t errlen)
{
	char path[PATH_MAX];
	struct layout *l;
	int n;

	/* kind and version come from the target (its version strings): no paths in them. */
	if (!dir || !kind || !version || !*kind || !*version || strchr(kind, '/') ||
	    strchr(version, '/') || kind[0] == '.' || version[0] == '.') {
		yamlmap__errorf(err, errlen, "failed to find layout table: bad kind or version");
		errno = EINVAL;
		return NULL;
	}
	n = snprintf(path, sizeof(path), "%s/%s-%s.yaml", dir, kind, version);
	if (n < 0 || (size_t)n >= sizeof(path)) {
		yamlmap__errorf(err, errlen, "failed to find layout table: path too long");
		errno = ENAMETOOLONG;
		return NULL;
	}
	l = layout__load(path, err, errlen);
	if (!l)
		return NULL;
	if (strcmp(l->kind, kind) || strcmp(l->version, version)) {
		yamlmap__errorf(err, errlen, "layout table %s is for %s %s, not %s %s", path,
				l->kind, l->version, kind, version);
		layout__free(l);
		errno = EINVAL;
		return NULL;
	}
	return l;
}

/* Store an integer or a string into a struct field the schema maps the key to. */
static void store(char *base, const struct slot *s, const struct value *v, bool is_str)
{
	__s64 s64 = v->i;
	__u32 u32 = v->i;

	if (is_str) {
		memset(base + s->off, 0, s->size);
		memcpy(base + s->off, v->s, strnlen(v->s, s->size - 1));
	} else if (s->size == sizeof(s64)) {
		memcpy(base + s->off, &s64, sizeof(s64));
	} else {
		memcpy(base + s->off, &u32, sizeof(u32));
	}
}

int layout__fill(const struct layout *l, struct nw_layout *out, char *err, size_t errlen)
{
	int k;

	if (!l || !out) {
		yamlmap__errorf(err, errlen, "failed to fill layout: no table");
		return -EINVAL;
	}
	for (k = 0; k < LK__COUNT; k++)
		if (nwl_slots[k].size && l->v[k].has)
			store((char *)out, &nwl_slots[k], &l->v[k],
			      layout__is_str(layout_keys[k].type));
	return 0;
}

int layout__set(struct nw_layout *out, enum layout_key key, long long v)
{
	struct value val = {.i = v, .has = true};

	if ((unsigned)key >= LK__COUNT || !nwl_slots[key].size)
		return -ENOENT;
	if (layout__is_str(layout_keys[key].type))
		return -EINVAL;
	store((char *)out, &nwl_slots[key], &val, false);
	return 0;
}

/* Every key with a slot in slots, into out (all 64-bit fields); -ENOENT if one is missing. */
static int fill_slots(const struct layout *l, const struct slot *slots, void *out, char *err,
		      size_t errlen)
{
	int k;

	for (k = 0; k < LK__COUNT; k++) {
		if (!slots[k].size)
			continue;
		if (!l->v[k].has) {
			yamlmap__errorf(err, errlen, "key %s: missing", layout_keys[k].name);
			return -ENOENT;
		}
		store(out, &slots[k], &l->v[k], false);
	}
	return 0;
}

int layout__fill_bwd(const struct layout *l, struct nw_bwd_layout *out, char *err, size_t errlen)
{
	struct nw_bwd_layout tmp = *out;
	int ret = fill_slots(l, bwd_slots, &tmp, err, errlen);

	if (!ret)
		*out = tmp;
	return ret;
}

int layout__fill_rescan(const struct layout *l, struct nw_rescan *out, char *err, size_t errlen)
{
	struct nw_rescan tmp = {};
	int ret = fill_slots(l, rs_slots, &tmp, err, errlen);

	if (ret)
		return ret;
	tmp.on = 1;
	*out = tmp;
	return 0;
}
