// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Layout tables (see layout.h): per-version offsets of CPython and torch
 * objects, kept as data so that a new version needs a table, not a rebuild.
 * A root daemon parses these files, so every length is bounded.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "file.h"
#include "layout.h"

#define KEY_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-"
#define WHY_LEN	  192

_Static_assert(sizeof(((struct nw_layout *)0)->call_func) == NW_MATCH_LEN,
	       "match strings are NW_MATCH_LEN arrays");

struct entry {
	const char *key;	/* both point into layout.buf */
	const char *value;	/* quotes removed */
	long long ival;		/* valid when is_int */
	int line;
	bool is_int;
};

struct layout {
	char *path;
	char *buf;		/* the file, cut into NUL-terminated keys and values */
	struct entry *entries;
	size_t n;
	size_t cap;
	const char *kind;
	const char *version;
};

__attribute__((format(printf, 3, 4)))
static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

static const struct entry *find(const struct layout *l, const char *key)
{
	size_t i;

	for (i = 0; i < l->n; i++)
		if (!strcmp(l->entries[i].key, key))
			return &l->entries[i];
	return NULL;
}

/* A whole decimal or 0x integer with optional sign: 0, -EINVAL or -ERANGE. */
static int parse_int(const char *s, long long *out)
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

static int parse_quoted(char *p, struct entry *e, char *why)
{
	char *close = strchr(p + 1, '"');
	char *rest;

	if (!close) {
		snprintf(why, WHY_LEN, "line %d: unterminated string", e->line);
		return -EINVAL;
	}
	if (memchr(p + 1, '\\', close - p - 1)) {
		snprintf(why, WHY_LEN, "line %d: escapes are not supported", e->line);
		return -EINVAL;
	}
	*close = 0;
	rest = close + 1 + strspn(close + 1, " \t");
	if (*rest && *rest != '#') {
		snprintf(why, WHY_LEN, "line %d: text after the closing quote", e->line);
		return -EINVAL;
	}
	e->value = p + 1;
	return 0;
}

/* The value after "key:": quoted string, integer, or plain string up to a " #" comment. */
static int parse_value(char *p, struct entry *e, char *why)
{
	char *q;
	int ret;

	p += strspn(p, " \t");
	if (*p == '"')
		return parse_quoted(p, e, why);
	for (q = p; *q; q++)
		if (*q == '#' && (q == p || q[-1] == ' ' || q[-1] == '\t'))
			break;
	while (q > p && (q[-1] == ' ' || q[-1] == '\t'))
		q--;
	*q = 0;
	if (!*p) {
		snprintf(why, WHY_LEN, "line %d: no value for '%s'", e->line, e->key);
		return -EINVAL;
	}
	e->value = p;
	ret = parse_int(p, &e->ival);
	if (ret == -ERANGE) {
		snprintf(why, WHY_LEN, "line %d: integer out of range: '%.40s'", e->line, p);
		return ret;
	}
	e->is_int = !ret;
	return 0;
}

static int add_entry(struct layout *l, const struct entry *e, char *why)
{
	const struct entry *old = find(l, e->key);
	struct entry *grown;

	if (old) {
		snprintf(why, WHY_LEN, "line %d: duplicate key '%s' (first on line %d)", e->line,
			 e->key, old->line);
		return -EEXIST;
	}
	if (l->n == l->cap) {
		l->cap = l->cap ? 2 * l->cap : 64;
		grown = realloc(l->entries, l->cap * sizeof(*grown));
		if (!grown)
			return -ENOMEM;
		l->entries = grown;
	}
	l->entries[l->n++] = *e;
	return 0;
}

static int parse_line(struct layout *l, char *s, int line, char *why)
{
	struct entry e = {.line = line};
	char *p = s + strspn(s, " \t");
	size_t klen;
	int ret;

	if (!*p || *p == '#')
		return 0;
	if (p != s) {
		snprintf(why, WHY_LEN, "line %d: indented line (nesting is not supported)", line);
		return -EINVAL;
	}
	klen = strspn(s, KEY_CHARS);
	if (!klen || s[klen] != ':' || (s[klen + 1] && s[klen + 1] != ' ' && s[klen + 1] != '\t')) {
		snprintf(why, WHY_LEN, "line %d: expected 'key: value'", line);
		return -EINVAL;
	}
	if (klen > LAYOUT_MAX_KEY) {
		snprintf(why, WHY_LEN, "line %d: key longer than %d characters", line,
			 LAYOUT_MAX_KEY);
		return -ENAMETOOLONG;
	}
	s[klen] = 0;
	e.key = s;
	ret = parse_value(s + klen + 1, &e, why);
	return ret ? ret : add_entry(l, &e, why);
}

static int parse_lines(struct layout *l, size_t len, char *why)
{
	char *s = l->buf, *end = l->buf + len, *nl;
	size_t n;
	int line, ret;

	for (line = 1; s < end; line++, s = nl + 1) {
		nl = memchr(s, '\n', end - s);
		if (!nl)
			nl = end;	/* buf[len] is a NUL we own */
		n = nl - s;
		if (n && s[n - 1] == '\r')
			n--;
		if (n > LAYOUT_MAX_LINE) {
			snprintf(why, WHY_LEN, "line %d: longer than %d characters", line,
				 LAYOUT_MAX_LINE);
			return -E2BIG;
		}
		if (memchr(s, 0, n)) {
			snprintf(why, WHY_LEN, "line %d: NUL byte", line);
			return -EINVAL;
		}
		s[n] = 0;
		ret = parse_line(l, s, line, why);
		if (ret)
			return ret;
	}
	return 0;
}

/* kind and version are what layout__find matches on: require sane values. */
static int check_header(struct layout *l, char *why)
{
	const struct entry *kind = find(l, "kind"), *ver = find(l, "version");
	const char *v;

	if (!kind || !ver) {
		snprintf(why, WHY_LEN, "missing key '%s'", kind ? "version" : "kind");
		return -EINVAL;
	}
	if (strcmp(kind->value, "python") && strcmp(kind->value, "torch")) {
		snprintf(why, WHY_LEN, "line %d: kind '%.40s' is neither python nor torch",
			 kind->line, kind->value);
		return -EINVAL;
	}
	v = ver->value;
	if (!strspn(v, "0123456789") || v[strspn(v, "0123456789")] != '.')
		goto bad_version;
	v += strspn(v, "0123456789") + 1;
	if (!strspn(v, "0123456789") || v[strspn(v, "0123456789")])
		goto bad_version;
	l->kind = kind->value;
	l->version = ver->value;
	return 0;
bad_version:
	snprintf(why, WHY_LEN, "line %d: version '%.40s' is not MAJOR.MINOR", ver->line,
		 ver->value);
	return -EINVAL;
}

/*
 * Plausible values of the integer keys: a table with an absurd but well-formed number (an
 * offset of 2^40, a pointer at an odd offset) is refused, not handed to BPF and the readers.
 * Offsets inside CPython and torch objects are under 4096 bytes; words holding a pointer or a
 * 64-bit count are 8-byte aligned. Keys not listed are not read as integers by the daemon.
 */
struct range {
	const char *key;	/* a key, or a prefix ending in '_' matching keys that start so */
	long long min, max;
	int align;		/* the value is a multiple of this */
};

#define OBJ_MAX 4096
#define WORD(k) {k, 0, OBJ_MAX, 8}		/* a pointer or 64-bit word in an object */
#define FIELD(k) {k, 0, OBJ_MAX, 1}		/* any smaller field, or a byte array */
#define CODE(k) {k, 0, 255, 1}			/* an enum value, a slot or a bit number */

static const struct range ranges[] = {
	WORD("obj_type"), WORD("var_size"), WORD("tuple_items"), WORD("list_items"),
	WORD("code_name"), WORD("code_filename"), WORD("frame_code"), WORD("frame_localsplus"),
	WORD("frame_previous"), WORD("tstate_frame"),
	{"cframe_frame", -1, OBJ_MAX, 8},	/* -1: tstate_frame is the frame itself (3.13) */
	WORD("type_name"), WORD("type_base"), WORD("type_flags"), WORD("type_dictoffset"),
	WORD("type_cached_keys"), WORD("unicode_length"), WORD("dict_keys"), WORD("dict_values"),
	WORD("keys_nentries"), WORD("values_items"), WORD("inline_values_offset"),
	WORD("var_tensor"), WORD("impl_storage"), WORD("impl_storage_offset"), WORD("impl_numel"),
	WORD("impl_ndim"), WORD("impl_sizes"), WORD("storage_data"), WORD("impl_autograd_meta"),
	WORD("meta_grad_fn"), WORD("node_next_edges"), WORD("acc_variable"),
	WORD("inputbuf_items"), WORD("impl_version"),
	/* the managed dict and values words sit before the object (3.11: -24 and -32) */
	{"managed_dict", -64, OBJ_MAX, 8}, {"managed_values", -64, OBJ_MAX, 8},
	FIELD("unicode_state"), FIELD("unicode_ascii_data"), FIELD("unicode_compact_data"),
	FIELD("keys_log2_size"), FIELD("keys_log2_index_bytes"), FIELD("keys_kind"),
	FIELD("keys_indices"), FIELD("values_valid"), FIELD("impl_dtype"), FIELD("impl_device"),
	FIELD("edge_input_nr"), FIELD("version_value"),
	{"var_borrowed", -1, OBJ_MAX, 1},	/* -1: a plain at::Tensor, no MaybeOwned flag */
	/* sizes of array elements */
	{"entry_general", 8, 256, 8}, {"entry_unicode", 8, 256, 8}, {"edge_size", 8, 256, 8},
	{"ascii_bit", 0, 31, 1}, {"compact_bit", 0, 31, 1}, {"unicode_kind_shift", 0, 29, 1},
	/* Py_TPFLAGS_* values (a single bit each, checked below) */
	{"managed_dict_flag", 1, 1LL << 31, 1}, {"inline_values_flag", 1, 1LL << 31, 1},
	{"managed_dict_tagged", 0, 1, 1}, {"call_ex_inlined", 0, 1, 1},
	CODE("dtype_f16"), CODE("dtype_f32"), CODE("dtype_f64"), CODE("dtype_bf16"),
	CODE("device_cpu"), CODE("keys_kind_general"), CODE("self_slot"), CODE("args_slot"),
	{"sizes_inline", 1, 64, 1},
	/* a C++ vtable pointer points this far into its _ZTV symbol */
	{"vtable_offset", 0, 64, 8},
	/* words of _Py_DebugOffsets (pyoffsets.h reads 128; 0 and 1 are the cookie and version) */
	{"debug_", 2, 127, 1},
};

#undef WORD
#undef FIELD
#undef CODE

static const struct range *range_of(const char *key)
{
	size_t i, n;

	for (i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++) {
		n = strlen(ranges[i].key);
		if (ranges[i].key[n - 1] == '_' ? !strncmp(key, ranges[i].key, n) :
						  !strcmp(key, ranges[i].key))
			return &ranges[i];
	}
	return NULL;
}

static int check_range(const struct entry *e, char *why)
{
	const struct range *r = range_of(e->key);
	long long v = e->ival;

	if (!r)
		return 0;
	if (!e->is_int) {
		snprintf(why, WHY_LEN, "line %d: '%s' is not an integer: '%.40s'", e->line, e->key,
			 e->value);
		return -EINVAL;
	}
	if (v < r->min || v > r->max) {
		snprintf(why, WHY_LEN, "line %d: '%s' is %lld, outside the plausible range %lld..%lld",
			 e->line, e->key, v, r->min, r->max);
		return -ERANGE;
	}
	if (v % r->align && !(v == -1 && r->min == -1)) {
		snprintf(why, WHY_LEN, "line %d: '%s' is %lld, not a multiple of %d (it holds a "
			 "pointer or a 64-bit word)", e->line, e->key, v, r->align);
		return -ERANGE;
	}
	if (!strcmp(r->key + strlen(r->key) - 5, "_flag") && (v & (v - 1))) {
		snprintf(why, WHY_LEN, "line %d: '%s' is %lld, not a single bit", e->line, e->key,
			 v);
		return -ERANGE;
	}
	return 0;
}

static int check_ranges(const struct layout *l, char *why)
{
	size_t i;
	int ret;

	for (i = 0; i < l->n; i++) {
		ret = check_range(&l->entries[i], why);
		if (ret)
			return ret;
	}
	return 0;
}

int layout__has_range(const char *key)
{
	return key && range_of(key) != NULL;
}

/* Read the whole file into a NUL-terminated buffer, refusing anything over the limit. */
static int read_file(const char *path, char **bufp, size_t *lenp, char *why)
{
	int err;

	*bufp = file__read(path, LAYOUT_MAX_FILE, lenp);
	if (*bufp)
		return 0;
	err = errno;
	if (err == EFBIG)
		snprintf(why, WHY_LEN, "larger than %d bytes", LAYOUT_MAX_FILE);
	else if (err == EISDIR || err == EINVAL)
		snprintf(why, WHY_LEN, "not a regular file");
	else
		snprintf(why, WHY_LEN, "%s", strerror(err));
	return -err;
}

/* Parse the table in l->buf (len bytes, NUL-terminated); why says what is wrong. */
static int parse(struct layout *l, size_t len, char *why)
{
	int ret = parse_lines(l, len, why);

	if (!ret)
		ret = check_header(l, why);
	if (!ret)
		ret = check_ranges(l, why);
	return ret;
}

static struct layout *load(const char *path, const char *text, size_t len, char *err,
			   size_t errlen)
{
	char why[WHY_LEN] = "";
	struct layout *l = NULL;
	size_t n = 0;
	int ret;

	if (!path) {
		set_err(err, errlen, "failed to load layout table: no path");
		errno = EINVAL;
		return NULL;
	}
	l = calloc(1, sizeof(*l));
	if (!l || !(l->path = strdup(path))) {
		ret = -ENOMEM;
		snprintf(why, sizeof(why), "%s", strerror(ENOMEM));
		goto cleanup;
	}
	if (!text) {
		ret = read_file(path, &l->buf, &n, why);
	} else if (len > LAYOUT_MAX_FILE) {
		ret = -EFBIG;
		snprintf(why, sizeof(why), "larger than %d bytes", LAYOUT_MAX_FILE);
	} else {
		ret = (l->buf = malloc(len + 1)) ? 0 : -ENOMEM;
		if (!ret) {
			memcpy(l->buf, text, len);
			l->buf[len] = 0;
			n = len;
		}
	}
	if (!ret)
		ret = parse(l, n, why);
	if (ret == -ENOMEM && !why[0])
		snprintf(why, sizeof(why), "%s", strerror(ENOMEM));
cleanup:
	if (!ret)
		return l;
	set_err(err, errlen, "failed to load layout table %s: %s", path, why);
	layout__free(l);
	errno = -ret;
	return NULL;
}

struct layout *layout__load(const char *path, char *err, size_t errlen)
{
	return load(path, NULL, 0, err, errlen);
}

struct layout *layout__parse(const char *name, const char *text, size_t len, char *err,
			     size_t errlen)
{
	if (!text) {
		set_err(err, errlen, "failed to load layout table: no text");
		errno = EINVAL;
		return NULL;
	}
	return load(name, text, len, err, errlen);
}

void layout__free(struct layout *l)
{
	if (!l)
		return;
	free(l->entries);
	free(l->buf);
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

int layout__int(const struct layout *l, const char *key, long long *out)
{
	const struct entry *e;

	if (!l || !key || !out)
		return -EINVAL;
	e = find(l, key);
	if (!e)
		return -ENOENT;
	if (!e->is_int)
		return -EINVAL;
	*out = e->ival;
	return 0;
}

const char *layout__str(const struct layout *l, const char *key)
{
	const struct entry *e = l && key ? find(l, key) : NULL;

	return e ? e->value : NULL;
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
		set_err(err, errlen, "failed to find layout table: bad kind or version");
		errno = EINVAL;
		return NULL;
	}
	n = snprintf(path, sizeof(path), "%s/%s-%s.yaml", dir, kind, version);
	if (n < 0 || (size_t)n >= sizeof(path)) {
		set_err(err, errlen, "failed to find layout table: path too long");
		errno = ENAMETOOLONG;
		return NULL;
	}
	l = layout__load(path, err, errlen);
	if (!l)
		return NULL;
	if (strcmp(l->kind, kind) || strcmp(l->version, version)) {
		set_err(err, errlen, "layout table %s is for %s %s, not %s %s", path, l->kind,
			l->version, kind, version);
		layout__free(l);
		errno = EINVAL;
		return NULL;
	}
	return l;
}

enum field_type {
	F_S64,		/* any offset, may be negative */
	F_U32,		/* index or code */
	F_BIT,		/* bit number in a 32-bit word */
	F_STR,		/* char[NW_MATCH_LEN] */
};

struct field {
	const char *key;
	size_t off;
	enum field_type type;
};

#define FIELD(f, t) {#f, offsetof(struct nw_layout, f), t}

static const struct field python_fields[] = {
	FIELD(frame_code, F_S64),	  FIELD(frame_localsplus, F_S64),
	FIELD(frame_previous, F_S64),	  FIELD(tstate_frame, F_S64),
	FIELD(cframe_frame, F_S64),
	FIELD(code_name, F_S64),	  FIELD(code_filename, F_S64),
	FIELD(obj_type, F_S64),		  FIELD(var_size, F_S64),
	FIELD(tuple_items, F_S64),	  FIELD(list_items, F_S64),
	FIELD(type_name, F_S64),	  FIELD(type_base, F_S64),
	FIELD(unicode_length, F_S64),	  FIELD(unicode_state, F_S64),
	FIELD(unicode_ascii_data, F_S64), FIELD(ascii_bit, F_BIT),
	FIELD(compact_bit, F_BIT),
};

static const struct field torch_fields[] = {
	FIELD(var_borrowed, F_S64),	   FIELD(var_tensor, F_S64),
	FIELD(impl_storage, F_S64),	   FIELD(impl_storage_offset, F_S64),
	FIELD(impl_numel, F_S64),	   FIELD(impl_dtype, F_S64),
	FIELD(impl_device, F_S64),	   FIELD(impl_ndim, F_S64),
	FIELD(impl_sizes, F_S64),	   FIELD(storage_data, F_S64),
	FIELD(sizes_inline, F_U32),	   FIELD(self_slot, F_U32),
	FIELD(args_slot, F_U32),	   FIELD(dtype_f16, F_U32),
	FIELD(dtype_f32, F_U32),	   FIELD(dtype_f64, F_U32),
	FIELD(dtype_bf16, F_U32),	   FIELD(device_cpu, F_U32),
	FIELD(call_func, F_STR),	   FIELD(call_file, F_STR),
	FIELD(step_func, F_STR),	   FIELD(step_class, F_STR),
};

static int fill_str(const struct layout *l, const struct entry *e, char *dst, char *err,
		    size_t errlen)
{
	size_t len = strlen(e->value);

	if (!len) {
		set_err(err, errlen, "layout table %s: line %d: '%s' is empty", l->path, e->line,
			e->key);
		return -EINVAL;
	}
	if (len >= NW_MATCH_LEN) {
		set_err(err, errlen, "layout table %s: line %d: '%s' is longer than %d characters",
			l->path, e->line, e->key, NW_MATCH_LEN - 1);
		return -ENAMETOOLONG;
	}
	memset(dst, 0, NW_MATCH_LEN);
	memcpy(dst, e->value, len);
	return 0;
}

static int fill_one(const struct layout *l, const struct field *f, struct nw_layout *out,
		    char *err, size_t errlen)
{
	const struct entry *e = find(l, f->key);
	char *dst = (char *)out + f->off;
	long long max = f->type == F_BIT ? 31 : UINT32_MAX;
	__s64 s64;
	__u32 u32;

	if (!e) {
		set_err(err, errlen, "layout table %s: missing key '%s'", l->path, f->key);
		return -ENOENT;
	}
	if (f->type == F_STR)
		return fill_str(l, e, dst, err, errlen);
	if (!e->is_int) {
		set_err(err, errlen, "layout table %s: line %d: '%s' is not an integer: '%.40s'",
			l->path, e->line, f->key, e->value);
		return -EINVAL;
	}
	if (f->type == F_S64) {
		s64 = e->ival;
		memcpy(dst, &s64, sizeof(s64));
		return 0;
	}
	if (e->ival < 0 || e->ival > max) {
		set_err(err, errlen, "layout table %s: line %d: '%s' is out of range 0..%lld",
			l->path, e->line, f->key, max);
		return -ERANGE;
	}
	u32 = e->ival;
	memcpy(dst, &u32, sizeof(u32));
	return 0;
}

int layout__fill(const struct layout *l, struct nw_layout *out, char *err, size_t errlen)
{
	const struct field *fields = python_fields;
	size_t i, n = sizeof(python_fields) / sizeof(python_fields[0]);
	struct nw_layout tmp;
	int ret;

	if (!l || !out) {
		set_err(err, errlen, "failed to fill layout: no table");
		return -EINVAL;
	}
	if (!strcmp(l->kind, "torch")) {
		fields = torch_fields;
		n = sizeof(torch_fields) / sizeof(torch_fields[0]);
	}
	/* Work on a copy so that a bad table leaves *out as it was. */
	tmp = *out;
	for (i = 0; i < n; i++) {
		ret = fill_one(l, &fields[i], &tmp, err, errlen);
		if (ret)
			return ret;
	}
	/* optional: torch 2.x counts optimizer steps at its profiler marker */
	if (!strcmp(l->kind, "torch") && find(l, "step_marker")) {
		ret = fill_str(l, find(l, "step_marker"), tmp.step_marker, err, errlen);
		if (ret)
			return ret;
	}
	*out = tmp;
	return 0;
}
