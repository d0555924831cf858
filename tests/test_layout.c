// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Layout table loader: parsing, every refusal with its errno and message,
 * filling struct nw_layout, and the real tables shipped in config/layouts/.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include "layout.h"

#define MAX_FILES 16

struct tmp {
	char dir[64];
	char paths[MAX_FILES][PATH_MAX];
	int n;
	char err[256];
};

static int setup(void **state)
{
	struct tmp *t = calloc(1, sizeof(*t));

	if (!t)
		return -1;
	snprintf(t->dir, sizeof(t->dir), "/tmp/test_layout.XXXXXX");
	if (!mkdtemp(t->dir)) {
		free(t);
		return -1;
	}
	*state = t;
	return 0;
}

static int teardown(void **state)
{
	struct tmp *t = *state;
	int i;

	for (i = 0; i < t->n; i++)
		unlink(t->paths[i]);
	rmdir(t->dir);
	free(t);
	return 0;
}

/* Write len bytes of text to DIR/name and return its path. */
static const char *put_bytes(struct tmp *t, const char *name, const char *text, size_t len)
{
	char *path = t->paths[t->n], full[PATH_MAX];
	FILE *f;

	assert_true(t->n < MAX_FILES);
	/* via a local buffer: gcc cannot tell that paths[] and dir do not overlap */
	snprintf(full, sizeof(full), "%s/%s", t->dir, name);
	memcpy(path, full, sizeof(full));
	f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fwrite(text, 1, len, f), len);
	assert_int_equal(fclose(f), 0);
	t->n++;
	return path;
}

static const char *put(struct tmp *t, const char *name, const char *text)
{
	return put_bytes(t, name, text, strlen(text));
}

/* Load len bytes that must be refused; check errno and that err holds what. */
static void refused_bytes(struct tmp *t, const char *text, size_t len, int err,
			  const char *what)
{
	const char *path = put_bytes(t, "bad.yaml", text, len);
	struct layout *l;

	t->err[0] = 0;
	errno = 0;
	l = layout__load(path, t->err, sizeof(t->err));
	assert_null(l);
	assert_int_equal(errno, err);
	assert_non_null(strstr(t->err, path));
	if (!strstr(t->err, what))
		fail_msg("message '%s' lacks '%s'", t->err, what);
	t->n--;
	unlink(path);
}

static void refused(struct tmp *t, const char *text, int err, const char *what)
{
	refused_bytes(t, text, strlen(text), err, what);
}

#define PY_HEAD "kind: python\nversion: \"3.11\"\n"

/* A complete python table with one key's line replaced (NULL: the full table). */
static char *python_table(const char *key, const char *line)
{
	static const char *const keys[] = {
		"frame_code: 32",	 "frame_localsplus: 72", "frame_previous: 48",
		"tstate_frame: 56",	 "cframe_frame: 8",
		"code_name: 120",
		"code_filename: 112",	 "obj_type: 8",		 "var_size: 16",
		"tuple_items: 24",	 "list_items: 24",	 "type_name: 24",
		"type_base: 256",	 "unicode_length: 16",	 "unicode_state: 32",
		"unicode_ascii_data: 48", "ascii_bit: 6",	 "compact_bit: 5",
	};
	static char buf[2048];
	size_t i, n;

	n = snprintf(buf, sizeof(buf), PY_HEAD);
	for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		const char *s = keys[i];

		if (key && !strncmp(s, key, strlen(key)) && s[strlen(key)] == ':')
			s = line;
		if (s)
			n += snprintf(buf + n, sizeof(buf) - n, "%s\n", s);
	}
	return buf;
}

static void test_load_good(void **state)
{
	struct tmp *t = *state;
	const char *path = put(t, "good.yaml",
			       "# a comment\n"
			       "\n"
			       "   # an indented comment\n"
			       "kind: python\n"
			       "version: \"3.11\"\n"
			       "generated_for: \"3.11.2\"\n"
			       "frame_code: 32\n"
			       "plain: some words here  # trailing comment\n"
			       "hash_inside: a#b\n"
			       "quoted_num: \"42\"\n"
			       "empty_str: \"\"\n"
			       "crlf: 7\r\n"
			       "spaced:\t  -3   \n"
			       "last_line_without_newline: end");
	struct layout *l = layout__load(path, t->err, sizeof(t->err));
	long long v = 0;

	assert_non_null(l);
	assert_string_equal(layout__kind(l), "python");
	assert_string_equal(layout__version(l), "3.11");
	assert_string_equal(layout__str(l, "generated_for"), "3.11.2");
	assert_int_equal(layout__int(l, "frame_code", &v), 0);
	assert_int_equal(v, 32);
	assert_string_equal(layout__str(l, "frame_code"), "32");
	assert_string_equal(layout__str(l, "plain"), "some words here");
	assert_string_equal(layout__str(l, "hash_inside"), "a#b");
	/* quoted: a string even when it looks like a number */
	assert_int_equal(layout__int(l, "quoted_num", &v), -EINVAL);
	assert_string_equal(layout__str(l, "quoted_num"), "42");
	assert_string_equal(layout__str(l, "empty_str"), "");
	assert_int_equal(layout__int(l, "crlf", &v), 0);
	assert_int_equal(v, 7);
	assert_int_equal(layout__int(l, "spaced", &v), 0);
	assert_int_equal(v, -3);
	assert_string_equal(layout__str(l, "last_line_without_newline"), "end");
	assert_null(layout__str(l, "nope"));
	assert_int_equal(layout__int(l, "nope", &v), -ENOENT);
	layout__free(l);
	layout__free(NULL);
}

static void test_numbers(void **state)
{
	struct tmp *t = *state;
	const char *path = put(t, "num.yaml",
			       PY_HEAD
			       "neg: -24\n"
			       "hex: 0x368\n"
			       "HEX: 0X1F\n"
			       "neghex: -0x20\n"
			       "plus: +5\n"
			       "zero: 0\n"
			       "max: 9223372036854775807\n"
			       "min: -9223372036854775808\n"
			       "notint: 12x\n"
			       "halfhex: 0x\n"
			       "float: 1.5\n");
	struct layout *l = layout__load(path, t->err, sizeof(t->err));
	long long v;

	assert_non_null(l);
	assert_int_equal(layout__int(l, "neg", &v), 0);
	assert_int_equal(v, -24);
	assert_int_equal(layout__int(l, "hex", &v), 0);
	assert_int_equal(v, 0x368);
	assert_int_equal(layout__int(l, "HEX", &v), 0);
	assert_int_equal(v, 31);
	assert_int_equal(layout__int(l, "neghex", &v), 0);
	assert_int_equal(v, -32);
	assert_int_equal(layout__int(l, "plus", &v), 0);
	assert_int_equal(v, 5);
	assert_int_equal(layout__int(l, "zero", &v), 0);
	assert_int_equal(v, 0);
	assert_int_equal(layout__int(l, "max", &v), 0);
	assert_true(v == LLONG_MAX);
	assert_int_equal(layout__int(l, "min", &v), 0);
	assert_true(v == LLONG_MIN);
	v = 99;
	assert_int_equal(layout__int(l, "notint", &v), -EINVAL);
	assert_int_equal(layout__int(l, "halfhex", &v), -EINVAL);
	assert_int_equal(layout__int(l, "float", &v), -EINVAL);
	assert_int_equal(v, 99);
	layout__free(l);

	refused(t, PY_HEAD "big: 9223372036854775808\n", ERANGE, "line 3: integer out of range");
	refused(t, PY_HEAD "big: -0x8000000000000001\n", ERANGE, "line 3: integer out of range");
}

static void test_missing_file(void **state)
{
	struct tmp *t = *state;
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/none.yaml", t->dir);
	errno = 0;
	assert_null(layout__load(path, t->err, sizeof(t->err)));
	assert_int_equal(errno, ENOENT);
	assert_non_null(strstr(t->err, path));
	assert_non_null(strstr(t->err, "No such file"));
	errno = 0;
	assert_null(layout__load(t->dir, t->err, sizeof(t->err)));
	assert_int_equal(errno, EISDIR);
	/* NULL err buffer is allowed */
	assert_null(layout__load(path, NULL, 0));
	assert_int_equal(errno, ENOENT);
}

static void test_syntax_errors(void **state)
{
	struct tmp *t = *state;

	refused(t, PY_HEAD "frame_code: \"32\n", EINVAL, "line 3: unterminated string");
	refused(t, PY_HEAD "s: \"a\\\"b\"\n", EINVAL, "line 3: escapes are not supported");
	refused(t, PY_HEAD "s: \"a\" b\n", EINVAL, "line 3: text after the closing quote");
	refused(t, PY_HEAD "frame_code:\n", EINVAL, "line 3: no value for 'frame_code'");
	refused(t, PY_HEAD "frame_code:   # nothing\n", EINVAL, "line 3: no value");
	refused(t, PY_HEAD "frame_code 32\n", EINVAL, "line 3: expected 'key: value'");
	refused(t, PY_HEAD "frame_code:32\n", EINVAL, "line 3: expected 'key: value'");
	refused(t, PY_HEAD "fr ame: 32\n", EINVAL, "line 3: expected 'key: value'");
	refused(t, PY_HEAD "  frame_code: 32\n", EINVAL, "line 3: indented line");
	refused(t, PY_HEAD "---\n", EINVAL, "line 3: expected 'key: value'");
	refused_bytes(t, PY_HEAD "x: 1\0y\n", sizeof(PY_HEAD "x: 1\0y\n") - 1, EINVAL,
		      "line 3: NUL byte");
}

static void test_duplicate_key(void **state)
{
	struct tmp *t = *state;

	refused(t, PY_HEAD "# c\nframe_code: 32\nframe_code: 40\n", EEXIST,
		"line 5: duplicate key 'frame_code' (first on line 4)");
	refused(t, PY_HEAD "kind: torch\n", EEXIST, "line 3: duplicate key 'kind'");
}

static void test_long_line_and_key(void **state)
{
	struct tmp *t = *state;
	char text[1024], key[80];
	struct layout *l;
	int n;

	/* exactly LAYOUT_MAX_LINE characters is fine, one more is not */
	n = snprintf(text, sizeof(text), PY_HEAD "s: ");
	memset(text + n, 'a', LAYOUT_MAX_LINE - 3);
	strcpy(text + n + LAYOUT_MAX_LINE - 3, "\n");
	l = layout__load(put(t, "max.yaml", text), t->err, sizeof(t->err));
	assert_non_null(l);
	assert_int_equal(strlen(layout__str(l, "s")), LAYOUT_MAX_LINE - 3);
	layout__free(l);
	strcpy(text + n + LAYOUT_MAX_LINE - 3, "a\n");
	refused(t, text, E2BIG, "line 3: longer than 512 characters");

	/* keys: 63 characters fine, 64 not */
	memset(key, 'k', LAYOUT_MAX_KEY);
	key[LAYOUT_MAX_KEY] = 0;
	snprintf(text, sizeof(text), PY_HEAD "%s: 1\n", key);
	l = layout__load(put(t, "key.yaml", text), t->err, sizeof(t->err));
	assert_non_null(l);
	layout__free(l);
	snprintf(text, sizeof(text), PY_HEAD "k%s: 1\n", key);
	refused(t, text, ENAMETOOLONG, "line 3: key longer than 63 characters");
}

static void test_file_too_large(void **state)
{
	struct tmp *t = *state;
	size_t i, len = LAYOUT_MAX_FILE;
	char *text = malloc(len + 2);
	struct layout *l;

	assert_non_null(text);
	/* the header, then comment lines up to exactly 64 KiB: accepted */
	for (i = 0; i < len; i++)
		text[i] = i % 64 == 63 ? '\n' : i % 64 == 0 ? '#' : 'x';
	memcpy(text, PY_HEAD, strlen(PY_HEAD));
	text[strlen(PY_HEAD)] = '#';
	text[len] = 0;
	l = layout__load(put(t, "64k.yaml", text), t->err, sizeof(t->err));
	if (!l)
		fail_msg("%s", t->err);
	layout__free(l);
	/* one byte more: refused */
	strcpy(text + len, "x");
	refused(t, text, EFBIG, "larger than 65536 bytes");
	free(text);
}

static void test_header_checks(void **state)
{
	struct tmp *t = *state;

	refused(t, "version: \"3.11\"\n", EINVAL, "missing key 'kind'");
	refused(t, "kind: python\n", EINVAL, "missing key 'version'");
	refused(t, "kind: numpy\nversion: \"1.2\"\n", EINVAL,
		"line 1: kind 'numpy' is neither python nor torch");
	refused(t, "kind: torch\nversion: \"1.13.1\"\n", EINVAL,
		"line 2: version '1.13.1' is not MAJOR.MINOR");
	refused(t, "kind: torch\nversion: 2\n", EINVAL, "is not MAJOR.MINOR");
	refused(t, "kind: torch\nversion: .1\n", EINVAL, "is not MAJOR.MINOR");
}

static void test_fill_python(void **state)
{
	struct tmp *t = *state;
	struct nw_layout nwl;
	struct layout *l;

	memset(&nwl, 0, sizeof(nwl));
	nwl.var_tensor = 1234;		/* a torch field: python must leave it alone */
	strcpy(nwl.call_func, "keep");
	l = layout__load(put(t, "py.yaml", python_table(NULL, NULL)), t->err, sizeof(t->err));
	assert_non_null(l);
	assert_int_equal(layout__fill(l, &nwl, t->err, sizeof(t->err)), 0);
	assert_int_equal(nwl.frame_code, 32);
	assert_int_equal(nwl.frame_localsplus, 72);
	assert_int_equal(nwl.frame_previous, 48);
	assert_int_equal(nwl.type_base, 256);
	assert_int_equal(nwl.ascii_bit, 6);
	assert_int_equal(nwl.compact_bit, 5);
	assert_int_equal(nwl.var_tensor, 1234);
	assert_string_equal(nwl.call_func, "keep");
	assert_int_equal(nwl.tstate_frame, 56);
	assert_int_equal(nwl.cframe_frame, 8);
	layout__free(l);
}

/* Fill from text that must be refused; *out must stay as it was. */
static void fill_refused(struct tmp *t, const char *text, int ret, const char *what)
{
	const char *path = put(t, "fill.yaml", text);
	struct layout *l = layout__load(path, t->err, sizeof(t->err));
	struct nw_layout nwl, before;

	if (!l)
		fail_msg("load failed: %s", t->err);
	memset(&nwl, 0x5a, sizeof(nwl));
	before = nwl;
	t->err[0] = 0;
	assert_int_equal(layout__fill(l, &nwl, t->err, sizeof(t->err)), ret);
	assert_memory_equal(&nwl, &before, sizeof(nwl));
	assert_non_null(strstr(t->err, path));
	if (!strstr(t->err, what))
		fail_msg("message '%s' lacks '%s'", t->err, what);
	layout__free(l);
	t->n--;
	unlink(path);
}

static void test_fill_errors(void **state)
{
	struct tmp *t = *state;

	fill_refused(t, python_table("frame_localsplus", NULL), -ENOENT,
		     "missing key 'frame_localsplus'");
	/* a key read as an integer that is not one is refused when the table is loaded */
	refused(t, python_table("frame_code", "frame_code: 12x"), EINVAL,
		"line 3: 'frame_code' is not an integer: '12x'");
	refused(t, python_table("frame_code", "frame_code: \"32\""), EINVAL,
		"'frame_code' is not an integer");
	refused(t, python_table("ascii_bit", "ascii_bit: 32"), ERANGE,
		"'ascii_bit' is 32, outside the plausible range 0..31");
	refused(t, python_table("compact_bit", "compact_bit: -1"), ERANGE,
		"'compact_bit' is -1, outside the plausible range");
	refused(t, python_table("tstate_frame", "tstate_frame: x8"), EINVAL,
		"'tstate_frame' is not an integer");
}

/*
 * Absurd but well-formed values: refused at load with the file, the line, the key and the
 * range named, before anything reads through them.
 */
static void test_implausible_values(void **state)
{
	struct tmp *t = *state;
	struct layout *l;
	char text[2048];

	refused(t, python_table("frame_code", "frame_code: 0x10000000000"), ERANGE,
		"line 3: 'frame_code' is 1099511627776, outside the plausible range 0..4096");
	refused(t, python_table("type_base", "type_base: 4104"), ERANGE,
		"'type_base' is 4104, outside the plausible range 0..4096");
	refused(t, python_table("obj_type", "obj_type: -8"), ERANGE,
		"'obj_type' is -8, outside the plausible range 0..4096");
	refused(t, python_table("tuple_items", "tuple_items: 20"), ERANGE,
		"'tuple_items' is 20, not a multiple of 8");
	refused(t, python_table("unicode_length", "unicode_length: 17"), ERANGE,
		"'unicode_length' is 17, not a multiple of 8");
	refused(t, PY_HEAD "managed_dict: -72\n", ERANGE,
		"'managed_dict' is -72, outside the plausible range -64..4096");
	refused(t, PY_HEAD "managed_dict_flag: 24\n", ERANGE, "'managed_dict_flag' is 24, not a "
		"single bit");
	refused(t, PY_HEAD "entry_general: 0\n", ERANGE, "'entry_general' is 0, outside");
	refused(t, PY_HEAD "entry_unicode: 100000\n", ERANGE, "'entry_unicode' is 100000");
	refused(t, PY_HEAD "debug_frame_code: 128\n", ERANGE,
		"'debug_frame_code' is 128, outside the plausible range 2..127");
	refused(t, PY_HEAD "managed_dict_tagged: 2\n", ERANGE, "'managed_dict_tagged' is 2");
	snprintf(text, sizeof(text), "kind: torch\nversion: \"1.13\"\nimpl_numel: %lld\n",
		 1LL << 62);
	refused(t, text, ERANGE, "'impl_numel' is 4611686018427387904, outside the plausible range");
	refused(t, "kind: torch\nversion: \"1.13\"\nstorage_data: 12\n", ERANGE,
		"'storage_data' is 12, not a multiple of 8");
	refused(t, "kind: torch\nversion: \"1.13\"\ndtype_f32: 256\n", ERANGE,
		"'dtype_f32' is 256, outside the plausible range 0..255");
	refused(t, "kind: torch\nversion: \"1.13\"\nvtable_offset: 4\n", ERANGE,
		"'vtable_offset' is 4, not a multiple of 8");
	refused(t, PY_HEAD "cframe_frame: -2\n", ERANGE, "'cframe_frame' is -2, outside the plausible "
		"range -1..4096");
	refused(t, PY_HEAD "cframe_frame: 4\n", ERANGE, "'cframe_frame' is 4, not a multiple of 8");
	refused(t, "kind: torch\nversion: \"1.13\"\nedge_size: 4096\n", ERANGE,
		"'edge_size' is 4096, outside the plausible range 8..256");
	/* the edges of the ranges are accepted: 4096, a negative managed-dict word, bytes */
	l = layout__load(put(t, "edge.yaml", PY_HEAD "type_cached_keys: 4096\nmanaged_values: -64\n"
			     "keys_kind: 4095\nmanaged_dict_flag: 0x80000000\n"
			     "cframe_frame: -1\n"), t->err,
			 sizeof(t->err));
	if (!l)
		fail_msg("%s", t->err);
	layout__free(l);
}

/* Every integer key of the shipped tables has a plausible range: a new key must get one. */
static void test_real_tables_ranged(void **state)
{
	char path[PATH_MAX], line[LAYOUT_MAX_LINE + 2], err[512];
	struct layout *l;
	struct dirent *d;
	size_t k, tables = 0;
	DIR *dir;
	FILE *f;

	(void)state;
	dir = opendir("config/layouts");
	assert_non_null(dir);
	while ((d = readdir(dir))) {
		if (!strstr(d->d_name, ".yaml"))
			continue;
		snprintf(path, sizeof(path), "config/layouts/%s", d->d_name);
		f = fopen(path, "r");
		assert_non_null(f);
		tables++;
		while (fgets(line, sizeof(line), f)) {
			k = strcspn(line, ":");
			if (line[0] == '#' || !line[k] || strchr("\"", line[k + 2]) ||
			    !strcmp(line, "kind: torch\n") || !strcmp(line, "kind: python\n"))
				continue;
			line[k] = 0;
			if (!layout__has_range(line))
				fail_msg("%s: integer key '%s' has no plausible range", path, line);
		}
		fclose(f);
		/* and every value in it is in its range: the shipped table loads */
		l = layout__load(path, err, sizeof(err));
		if (!l)
			fail_msg("%s does not load: %s", path, err);
		layout__free(l);
	}
	closedir(dir);
	assert_true(tables >= 5);
}

#define TORCH_TABLE                                                                              \
	"kind: torch\nversion: \"1.13\"\n"                                                       \
	"var_borrowed: 16\nvar_tensor: 24\nimpl_storage: 24\nimpl_storage_offset: 160\n"         \
	"impl_numel: 168\nimpl_dtype: 176\nimpl_device: 179\nimpl_ndim: 72\nimpl_sizes: 80\n"    \
	"storage_data: 24\nsizes_inline: 5\nself_slot: 0\nargs_slot: 1\ndtype_f16: 5\n"          \
	"dtype_f32: 6\ndtype_f64: 7\ndtype_bf16: 0xf\ndevice_cpu: 0\n"                           \
	"call_func: _call_impl\ncall_file: \"torch/nn/modules/module.py\"\n"                    \
	"step_func: step\n"

static void test_fill_torch_strings(void **state)
{
	struct tmp *t = *state;
	char text[2048];
	struct nw_layout nwl;
	struct layout *l;

	/* NW_MATCH_LEN - 1 characters fit with their NUL */
	snprintf(text, sizeof(text), TORCH_TABLE "step_class: \"%.*s\"\n", NW_MATCH_LEN - 1,
		 "Optimizer_with_a_long_name_abcdefghijklmnop");
	l = layout__load(put(t, "torch.yaml", text), t->err, sizeof(t->err));
	assert_non_null(l);
	memset(&nwl, 0x5a, sizeof(nwl));
	nwl.frame_code = 32;
	assert_int_equal(layout__fill(l, &nwl, t->err, sizeof(t->err)), 0);
	assert_int_equal(strlen(nwl.step_class), NW_MATCH_LEN - 1);
	assert_string_equal(nwl.call_func, "_call_impl");
	assert_int_equal(nwl.call_func[NW_MATCH_LEN - 1], 0);	/* rest zeroed, not 0x5a */
	assert_string_equal(nwl.call_file, "torch/nn/modules/module.py");
	assert_int_equal(nwl.impl_device, 179);
	assert_int_equal(nwl.dtype_bf16, 15);
	assert_int_equal(nwl.frame_code, 32);
	layout__free(l);

	snprintf(text, sizeof(text), TORCH_TABLE "step_class: \"%.*s\"\n", NW_MATCH_LEN,
		 "Optimizer_with_a_long_name_abcdefghijklmnop");
	fill_refused(t, text, -ENAMETOOLONG, "line 24: 'step_class' is longer than 31 characters");
	fill_refused(t, TORCH_TABLE "step_class: \"\"\n", -EINVAL, "'step_class' is empty");
	fill_refused(t, TORCH_TABLE, -ENOENT, "missing key 'step_class'");
}

static void test_find(void **state)
{
	struct tmp *t = *state;
	struct layout *l;

	put(t, "python-3.11.yaml", PY_HEAD);
	put(t, "python-3.12.yaml", "kind: python\nversion: \"3.11\"\n");
	put(t, "torch-2.1.yaml", "kind: python\nversion: \"2.1\"\n");
	l = layout__find(t->dir, "python", "3.11", t->err, sizeof(t->err));
	assert_non_null(l);
	assert_string_equal(layout__kind(l), "python");
	layout__free(l);

	errno = 0;
	assert_null(layout__find(t->dir, "python", "3.13", t->err, sizeof(t->err)));
	assert_int_equal(errno, ENOENT);
	assert_non_null(strstr(t->err, "python-3.13.yaml"));

	errno = 0;
	assert_null(layout__find(t->dir, "python", "3.12", t->err, sizeof(t->err)));
	assert_int_equal(errno, EINVAL);
	assert_non_null(strstr(t->err, "is for python 3.11, not python 3.12"));

	errno = 0;
	assert_null(layout__find(t->dir, "torch", "2.1", t->err, sizeof(t->err)));
	assert_int_equal(errno, EINVAL);
	assert_non_null(strstr(t->err, "is for python 2.1, not torch 2.1"));

	errno = 0;
	assert_null(layout__find(t->dir, "python", "../python-3.11", t->err, sizeof(t->err)));
	assert_int_equal(errno, EINVAL);
	assert_null(layout__find(t->dir, "", "3.11", t->err, sizeof(t->err)));
	assert_int_equal(errno, EINVAL);
}

/* The tables shipped in config/layouts/ (tests run from the repository root). */
static void test_real_tables(void **state)
{
	/* user-space keys daemon/remote.c reads from the python table */
	static const char *const extra[] = {
		"type_flags",	    "type_dictoffset",	 "type_cached_keys",
		"managed_dict_flag", "managed_dict",	 "managed_values",
		"dict_keys",	    "dict_values",	 "keys_log2_size",
		"keys_log2_index_bytes", "keys_kind",	 "keys_nentries",
		"keys_indices",	    "unicode_compact_data", "unicode_kind_shift",
		"values_items",
	};
	struct tmp *t = *state;
	struct layout *py, *tl;
	struct nw_layout nwl;
	long long v;
	size_t i;

	py = layout__find("config/layouts", "python", "3.11", t->err, sizeof(t->err));
	if (!py)
		fail_msg("%s", t->err);
	tl = layout__find("config/layouts", "torch", "1.13", t->err, sizeof(t->err));
	if (!tl)
		fail_msg("%s", t->err);
	memset(&nwl, 0, sizeof(nwl));
	assert_int_equal(layout__fill(py, &nwl, t->err, sizeof(t->err)), 0);
	assert_int_equal(layout__fill(tl, &nwl, t->err, sizeof(t->err)), 0);

	/* CPython 3.11 (Include/internal/pycore_frame.h and friends), as measured */
	assert_int_equal(nwl.frame_code, 32);
	assert_int_equal(nwl.frame_localsplus, 72);
	assert_int_equal(nwl.code_filename, 112);
	assert_int_equal(nwl.code_name, 120);
	assert_int_equal(nwl.obj_type, 8);
	assert_int_equal(nwl.var_size, 16);
	assert_int_equal(nwl.tuple_items, 24);
	assert_int_equal(nwl.list_items, 24);
	assert_int_equal(nwl.type_name, 24);
	assert_int_equal(nwl.type_base, 256);
	assert_int_equal(nwl.unicode_length, 16);
	assert_int_equal(nwl.unicode_state, 32);
	assert_int_equal(nwl.unicode_ascii_data, 48);
	assert_int_equal(nwl.ascii_bit, 6);
	assert_int_equal(nwl.compact_bit, 5);
	for (i = 0; i < sizeof(extra) / sizeof(extra[0]); i++)
		if (layout__int(py, extra[i], &v))
			fail_msg("python-3.11.yaml has no integer '%s'", extra[i]);
	assert_int_equal(layout__int(py, "managed_dict", &v), 0);
	assert_int_equal(v, -24);
	assert_int_equal(layout__int(py, "managed_values", &v), 0);
	assert_int_equal(v, -32);
	assert_int_equal(layout__int(py, "managed_dict_flag", &v), 0);
	assert_int_equal(v, 1 << 4);
	assert_int_equal(layout__int(py, "unicode_compact_data", &v), 0);
	assert_int_equal(v, 72);

	/* torch 1.13: THPVariable { PyObject_HEAD; MaybeOwned<Tensor> cdata; ... } */
	assert_int_equal(nwl.var_borrowed, 16);
	assert_int_equal(nwl.var_tensor, 24);
	assert_int_equal(nwl.impl_sizes, nwl.impl_ndim + 8);
	assert_int_equal(nwl.sizes_inline, 5);
	assert_int_equal(nwl.dtype_f16, 5);
	assert_int_equal(nwl.dtype_f32, 6);
	assert_int_equal(nwl.dtype_f64, 7);
	assert_int_equal(nwl.dtype_bf16, 15);
	assert_int_equal(nwl.device_cpu, 0);
	assert_true(nwl.impl_device > nwl.impl_dtype);
	assert_int_equal(nwl.self_slot, 0);
	assert_int_equal(nwl.args_slot, 1);
	assert_string_equal(nwl.call_func, "_call_impl");
	assert_string_equal(nwl.call_file, "torch/nn/modules/module.py");
	assert_string_equal(nwl.step_func, "step");
	assert_string_equal(nwl.step_class, "Optimizer");
	assert_string_equal(layout__str(tl, "generated_for"), "1.13.0a0");
	layout__free(py);
	layout__free(tl);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_load_good, setup, teardown),
		cmocka_unit_test_setup_teardown(test_numbers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_missing_file, setup, teardown),
		cmocka_unit_test_setup_teardown(test_syntax_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_duplicate_key, setup, teardown),
		cmocka_unit_test_setup_teardown(test_long_line_and_key, setup, teardown),
		cmocka_unit_test_setup_teardown(test_file_too_large, setup, teardown),
		cmocka_unit_test_setup_teardown(test_header_checks, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fill_python, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fill_errors, setup, teardown),
		cmocka_unit_test_setup_teardown(test_implausible_values, setup, teardown),
		cmocka_unit_test_setup_teardown(test_real_tables_ranged, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fill_torch_strings, setup, teardown),
		cmocka_unit_test_setup_teardown(test_find, setup, teardown),
		cmocka_unit_test_setup_teardown(test_real_tables, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
