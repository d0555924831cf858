// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Layout table loader: YAML through yamlmap, every refusal with its errno and message
 * (file, line, key), the schema's checks (unknown keys, ranges, versions, required keys),
 * filling the BPF structs, and the real tables shipped in config/layouts/.
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
#include "resolve/layout.h"

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
static void refused_bytes(struct tmp *t, const char *text, size_t len, int err, const char *what)
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
	assert_null(strchr(t->err, '\n')); /* one line */
	t->n--;
	unlink(path);
}

static void refused(struct tmp *t, const char *text, int err, const char *what)
{
	refused_bytes(t, text, strlen(text), err, what);
}

#define PY_HEAD "kind: python\nversion: \"3.11\"\n"

/*
 * A complete table of kind and version: the shipped one of that kind (python 3.11 or
 * torch 1.13) without its header, with line (if not NULL) on line 3 in place of key's own
 * (key NULL: nothing left out), and extra at the end.
 */
static char *table_of(const char *kind, const char *version, const char *key, const char *line,
		      const char *extra)
{
	static char buf[16384];
	char path[128], l[1024];
	size_t n, klen = key ? strlen(key) : 0;
	FILE *f;

	snprintf(path, sizeof(path), "config/layouts/%s-%s.yaml", kind,
		 strcmp(kind, "python") ? "1.13" : "3.11");
	f = fopen(path, "r");
	assert_non_null(f);
	n = snprintf(buf, sizeof(buf), "kind: %s\nversion: \"%s\"\n%s%s", kind, version,
		     line ? line : "", line ? "\n" : "");
	while (fgets(l, sizeof(l), f)) {
		if (!strncmp(l, "kind:", 5) || !strncmp(l, "version:", 8) ||
		    (key && !strncmp(l, key, klen) && l[klen] == ':'))
			continue;
		n += snprintf(buf + n, sizeof(buf) - n, "%s", l);
	}
	fclose(f);
	snprintf(buf + n, sizeof(buf) - n, "%s", extra ? extra : "");
	return buf;
}

static char *python_table(const char *key, const char *line)
{
	return table_of("python", "3.11", key, line, NULL);
}

static char *torch_table(const char *key, const char *line)
{
	return table_of("torch", "1.13", key, line, NULL);
}

/* The torch keys every table needs, no more: line 3 onwards. */
#define TORCH_TABLE                                                                           \
	"kind: torch\nversion: \"1.13\"\n"                                                    \
	"var_borrowed: 16\nvar_tensor: 24\nimpl_storage: 24\nimpl_storage_offset: 160\n"      \
	"impl_numel: 168\nimpl_dtype: 176\nimpl_device: 179\nimpl_ndim: 72\nimpl_sizes: 80\n" \
	"storage_data: 24\nsizes_inline: 5\nself_slot: 0\nargs_slot: 1\ndtype_f16: 5\n"       \
	"dtype_f32: 6\ndtype_f64: 7\ndtype_bf16: 0xf\ndevice_cpu: 0\n"                        \
	"call_func: _call_impl\ncall_file: \"torch/nn/modules/module.py\"\n"                  \
	"step_func: step\n"

/* Real YAML: comments, quoting styles, escapes, CRLF, integers in hex or with a sign. */
static void test_load_good(void **state)
{
	struct tmp *t = *state;
	const char *path = put(t, "good.yaml",
			       "# a comment\n"
			       "\n"
			       "   # an indented comment\n"
			       "kind: torch\n"
			       "version: '1.13'\n"
			       "generated_for: \"1.13.0a0\"   # trailing comment\n"
			       "var_borrowed: -1\n"
			       "var_tensor: 0x18\n"
			       "impl_storage: +24\r\n"
			       "impl_storage_offset:   160   \n"
			       "impl_numel: 168\nimpl_dtype: 176\nimpl_device: 179\n"
			       "impl_ndim: 72\nimpl_sizes: 80\nstorage_data: 24\nsizes_inline: 5\n"
			       "self_slot: 0\nargs_slot: 1\ndtype_f16: 5\ndtype_f32: 6\n"
			       "dtype_f64: 7\ndtype_bf16: 0XF\ndevice_cpu: 0\n"
			       "call_func: _call_impl\n"
			       "call_file: torch/nn/modules/module.py#x\n"
			       "step_func: \"st\\x65p\"\n"
			       "step_class: 'Opti''mizer'\n"
			       "backward_symbol: >-\n  _Z22THPEngine_run_backwardP7_objectS0_S0_\n"
			       "node_symbol: \"a#b\"");
	struct layout *l = layout__load(path, t->err, sizeof(t->err));
	struct nw_layout nwl = {};
	long long v = 0;

	if (!l)
		fail_msg("%s", t->err);
	assert_string_equal(layout__kind(l), "torch");
	assert_string_equal(layout__version(l), "1.13");
	assert_string_equal(layout__str(l, LK_generated_for), "1.13.0a0");
	assert_int_equal(layout__int(l, LK_var_borrowed, &v), 0);
	assert_int_equal(v, -1);
	assert_int_equal(layout__int(l, LK_var_tensor, &v), 0);
	assert_int_equal(v, 24);
	assert_string_equal(layout__str(l, LK_var_tensor), "0x18"); /* as written */
	assert_int_equal(layout__int(l, LK_impl_storage, &v), 0);
	assert_int_equal(v, 24);
	assert_int_equal(layout__int(l, LK_impl_storage_offset, &v), 0);
	assert_int_equal(v, 160);
	assert_int_equal(layout__int(l, LK_dtype_bf16, &v), 0);
	assert_int_equal(v, 15);
	/* strings: not integers, in any quoting */
	assert_int_equal(layout__int(l, LK_call_func, &v), -EINVAL);
	assert_string_equal(layout__str(l, LK_call_file), "torch/nn/modules/module.py#x");
	assert_string_equal(layout__str(l, LK_step_func), "step");
	assert_string_equal(layout__str(l, LK_step_class), "Opti'mizer");
	assert_string_equal(layout__str(l, LK_backward_symbol),
			    "_Z22THPEngine_run_backwardP7_objectS0_S0_");
	assert_string_equal(layout__str(l, LK_node_symbol), "a#b");
	assert_null(layout__str(l, LK_step_marker));
	assert_int_equal(layout__int(l, LK_impl_version, &v), -ENOENT);
	assert_int_equal(layout__int(l, LK_frame_code, &v), -ENOENT); /* a python key */
	assert_int_equal(layout__debug_word(l, LK_frame_code, &v), -ENOENT);
	assert_int_equal(layout__fill(l, &nwl, t->err, sizeof(t->err)), 0);
	assert_string_equal(nwl.step_class, "Opti'mizer");
	assert_int_equal(nwl.var_borrowed, -1);
	layout__free(l);
	layout__free(NULL);
}

static void test_numbers(void **state)
{
	struct tmp *t = *state;
	struct layout *l;
	long long v;

	l = layout__load(put(t, "num.yaml", python_table("managed_dict", "managed_dict: -0x20")),
			 t->err, sizeof(t->err));
	if (!l)
		fail_msg("%s", t->err);
	assert_int_equal(layout__int(l, LK_managed_dict, &v), 0);
	assert_int_equal(v, -32);
	layout__free(l);

	refused(t, python_table("frame_code", "frame_code: 9223372036854775808"), ERANGE,
		"line 3: integer out of range");
	refused(t, python_table("frame_code", "frame_code: -0x8000000000000001"), ERANGE,
		"line 3: integer out of range");
	refused(t, python_table("frame_code", "frame_code: 12x"), EINVAL,
		"line 3: 'frame_code' is not an integer: '12x'");
	refused(t, python_table("frame_code", "frame_code: \"32\""), EINVAL,
		"line 3: 'frame_code' is not an integer: '32'");
	refused(t, python_table("frame_code", "frame_code: 0x"), EINVAL, "is not an integer");
	refused(t, python_table("frame_code", "frame_code: 1.5"), EINVAL, "is not an integer");
	refused(t, python_table("frame_code", "frame_code: 0o40"), EINVAL, "is not an integer");
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

/* YAML errors and what the tables refuse of YAML: the file and the line named, one line. */
static void test_syntax_errors(void **state)
{
	struct tmp *t = *state;

	refused(t, PY_HEAD "frame_code: \"32\n", EINVAL, "line 3: found unexpected end of stream");
	refused(t, PY_HEAD "frame_code 32\nobj_type: 8\n", EINVAL,
		"line 3: could not find "
		"expected ':'");
	refused(t, PY_HEAD "frame_code:\n", EINVAL, "line 3: no value for 'frame_code'");
	refused(t, PY_HEAD "frame_code:   # nothing\n", EINVAL, "line 3: no value");
	refused(t, PY_HEAD "frame_code:\n  a: 1\n", EINVAL,
		"line 3: 'frame_code' is a mapping, not an integer");
	refused(t, PY_HEAD "frame_code: [32]\n", EINVAL,
		"line 3: 'frame_code' is a list, not an integer");
	refused(t, PY_HEAD "---\nframe_code: 32\n", EINVAL, "line 3: more than one document");
	refused(t, PY_HEAD "frame_code: &a 32\nobj_type: *a\n", EINVAL,
		"line 3: anchors are not supported");
	refused(t, PY_HEAD "obj_type: *a\n", EINVAL, "line 3: ");
	refused(t, PY_HEAD "frame_code: !!int 32\n", EINVAL, "line 3: tags are not supported");
	refused(t, PY_HEAD "? [a]\n: 1\n", EINVAL, "line 3: a key must be a plain string");
	refused(t, "- kind\n- python\n", EINVAL, "line 1: expected a mapping");
	refused(t, "just words\n", EINVAL, "line 1: expected a mapping");
	refused(t, "[]", EINVAL, "line 1: expected a mapping");
	refused_bytes(t, PY_HEAD "x: 1\0y\n", sizeof(PY_HEAD "x: 1\0y\n") - 1, EINVAL,
		      "control characters are not allowed");
	refused(t, PY_HEAD "s: \"\xff\"\n", EINVAL, "invalid");
	refused(t, "", EINVAL, "missing key 'kind'");
}

static void test_duplicate_key(void **state)
{
	struct tmp *t = *state;

	refused(t, PY_HEAD "# c\nframe_code: 32\nframe_code: 40\n", EEXIST,
		"line 5: duplicate key 'frame_code' (first on line 4)");
	refused(t, PY_HEAD "kind: torch\n", EEXIST, "line 3: duplicate key 'kind'");
}

/* A root daemon reads these: every size is bounded. */
static void test_limits(void **state)
{
	struct tmp *t = *state;
	char text[2048], key[80], *big;
	size_t i, n;

	/* a value of LAYOUT_MAX_SCALAR bytes is read (then refused as too long for its key) */
	n = snprintf(text, sizeof(text), PY_HEAD "generated_for: ");
	memset(text + n, 'a', LAYOUT_MAX_SCALAR);
	strcpy(text + n + LAYOUT_MAX_SCALAR, "\n");
	refused(t, text, ERANGE, "line 3: 'generated_for' is longer than 63 characters");
	strcpy(text + n + LAYOUT_MAX_SCALAR, "a\n");
	refused(t, text, E2BIG, "line 3: value longer than 511 bytes");

	/* keys: 63 characters are read (and refused as unknown), 64 not */
	memset(key, 'k', LAYOUT_MAX_KEY);
	key[LAYOUT_MAX_KEY] = 0;
	snprintf(text, sizeof(text), PY_HEAD "%s: 1\n", key);
	refused(t, text, EINVAL, "line 3: unknown key 'kkkk");
	snprintf(text, sizeof(text), PY_HEAD "k%s: 1\n", key);
	refused(t, text, ENAMETOOLONG, "line 3: key longer than 63 characters");

	/* nesting beyond a value of the root mapping */
	refused(t, PY_HEAD "frame_code: [[1]]\n", E2BIG, "line 3: nested deeper than 2 levels");

	/* entries: at most 1024 */
	big = malloc(LAYOUT_MAX_FILE);
	assert_non_null(big);
	n = snprintf(big, LAYOUT_MAX_FILE, PY_HEAD);
	for (i = 0; i < 1100; i++)
		n += snprintf(big + n, LAYOUT_MAX_FILE - n, "k%zu: 1\n", i);
	refused(t, big, E2BIG, "more than 2049 nodes");
	free(big);
}

static void test_file_too_large(void **state)
{
	struct tmp *t = *state;
	const char *base = python_table(NULL, NULL);
	size_t i, len = LAYOUT_MAX_FILE, head = strlen(base);
	char *text = malloc(len + 2);
	struct layout *l;

	assert_non_null(text);
	/* a real table, then comment lines up to exactly 64 KiB: accepted */
	for (i = 0; i < len; i++)
		text[i] = i % 64 == 63 ? '\n' : i % 64 == 0 ? '#' : 'x';
	memcpy(text, base, head);
	text[head] = '#';
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
	refused(t, "kind: torch\nversion: [2]\n", EINVAL, "is not MAJOR.MINOR");
	/* a quoted value's line breaks do not break the message (found by fuzz_layout) */
	refused(t, "kind: python\nversion: \"4\n\n.13\"\n", EINVAL,
		"line 2: version '4?.13' is not MAJOR.MINOR");
}

/* Only the keys of layout_keys.def, each in the tables of its kind and versions. */
static void test_unknown_keys(void **state)
{
	struct tmp *t = *state;

	refused(t, python_table("frame_code", "frame_cod: 32"), EINVAL,
		"line 3: unknown key 'frame_cod'");
	refused(t, python_table(NULL, "impl_numel: 168"), EINVAL,
		"line 3: 'impl_numel' is not a key of python tables (a torch key)");
	refused(t, torch_table(NULL, "frame_code: 32"), EINVAL,
		"line 3: 'frame_code' is not a key of torch tables (a python key)");
	refused(t, python_table(NULL, "inline_values_flag: 4"), EINVAL,
		"line 3: 'inline_values_flag' is not a key of python 3.11 tables (python 3.13+ "
		"only)");
	refused(t, python_table(NULL, "long_tagged: 0"), EINVAL,
		"line 3: 'long_tagged' is not a key of python 3.11 tables (python 3.12+ only)");
	refused(t, table_of("python", "3.13", NULL, "managed_dict_tagged: 1", NULL), EINVAL,
		"line 3: 'managed_dict_tagged' is not a key of python 3.13 tables (python 3.12 "
		"only)");
	refused(t, python_table(NULL, "debug_frame_code: 30"), EINVAL,
		"line 3: 'debug_frame_code' is not a key of python 3.11 tables (python 3.13+ "
		"only)");
	refused(t, table_of("python", "3.13", NULL, "debug_type_base: 30", NULL), EINVAL,
		"line 3: unknown key 'debug_type_base' (type_base is not an offset the interpreter "
		"publishes)");
}

/* Each version's tables have the keys it needs. */
static void test_required_keys(void **state)
{
	static const char *const v313 = "inline_values_flag: 4\ninline_values_offset: 16\n"
					"values_valid: 3\ncall_ex_inlined: 1\nlong_tagged: 1\n";
	struct tmp *t = *state;
	struct layout *l;

	refused(t, python_table("frame_localsplus", NULL), EINVAL,
		"missing key 'frame_localsplus' (python 3.11 tables need it)");
	refused(t, table_of("python", "3.12", NULL, NULL, NULL), EINVAL,
		"missing key 'long_tagged' (python 3.12 tables need it)");
	refused(t, table_of("python", "3.12", NULL, NULL, "long_tagged: 1\n"), EINVAL,
		"missing key 'managed_dict_tagged' (python 3.12 tables need it)");
	refused(t, python_table("long_digits", NULL), EINVAL,
		"missing key 'long_digits' (python 3.11 tables need it)");
	refused(t, table_of("python", "3.13", NULL, NULL, "long_tagged: 1\nvalues_valid: 3\n"),
		EINVAL, "missing key 'inline_values_flag' (python 3.13 tables need it)");
	refused(t, TORCH_TABLE, EINVAL, "missing key 'step_class' (torch 1.13 tables need it)");
	l = layout__load(put(t, "313.yaml", table_of("python", "3.13", NULL, NULL, v313)), t->err,
			 sizeof(t->err));
	if (!l)
		fail_msg("%s", t->err);
	layout__free(l);
	/* optional keys may be missing: no backward, no rescan, no step marker */
	l = layout__load(put(t, "min.yaml", TORCH_TABLE "step_class: Optimizer\n"), t->err,
			 sizeof(t->err));
	if (!l)
		fail_msg("%s", t->err);
	layout__free(l);
}

static void test_fill_python(void **state)
{
	struct tmp *t = *state;
	struct nw_layout nwl;
	struct layout *l;

	memset(&nwl, 0, sizeof(nwl));
	nwl.var_tensor = 1234; /* a torch field: python must leave it alone */
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
	assert_int_equal(layout__fill(NULL, &nwl, t->err, sizeof(t->err)), -EINVAL);
	/* what the published offsets use */
	assert_int_equal(layout__set(&nwl, LK_frame_code, 40), 0);
	assert_int_equal(nwl.frame_code, 40);
	assert_int_equal(layout__set(&nwl, LK_type_flags, 1), -ENOENT); /* user space only */
	layout__free(l);
}

static void test_bad_values(void **state)
{
	struct tmp *t = *state;

	refused(t, python_table("ascii_bit", "ascii_bit: 32"), ERANGE,
		"line 3: 'ascii_bit' is 32, outside the plausible range 0..31");
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
	char text[64];

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
	refused(t, python_table("long_digit_bits", "long_digit_bits: 15"), ERANGE,
		"'long_digit_bits' is 15, outside the plausible range 30..30");
	refused(t, python_table("managed_dict", "managed_dict: -72"), ERANGE,
		"'managed_dict' is -72, outside the plausible range -64..4096");
	refused(t, python_table("managed_dict_flag", "managed_dict_flag: 24"), ERANGE,
		"line 3: 'managed_dict_flag' is 24, not a single bit");
	refused(t, python_table("entry_general", "entry_general: 0"), ERANGE,
		"'entry_general' is 0, outside");
	refused(t, python_table("entry_unicode", "entry_unicode: 100000"), ERANGE,
		"'entry_unicode' is 100000");
	refused(t, table_of("python", "3.13", NULL, "debug_frame_code: 128", NULL), ERANGE,
		"line 3: 'debug_frame_code' is 128, outside the plausible range 2..127");
	refused(t, table_of("python", "3.12", NULL, "managed_dict_tagged: 2", NULL), ERANGE,
		"'managed_dict_tagged' is 2");
	snprintf(text, sizeof(text), "impl_numel: %lld", 1LL << 62);
	refused(t, torch_table("impl_numel", text), ERANGE,
		"line 3: 'impl_numel' is 4611686018427387904, outside the plausible range");
	refused(t, torch_table("storage_data", "storage_data: 12"), ERANGE,
		"'storage_data' is 12, not a multiple of 8");
	refused(t, torch_table("dtype_f32", "dtype_f32: 256"), ERANGE,
		"'dtype_f32' is 256, outside the plausible range 0..255");
	refused(t, torch_table("vtable_offset", "vtable_offset: 4"), ERANGE,
		"'vtable_offset' is 4, not a multiple of 8");
	refused(t, python_table("cframe_frame", "cframe_frame: -2"), ERANGE,
		"'cframe_frame' is -2, outside the plausible range -1..4096");
	refused(t, python_table("cframe_frame", "cframe_frame: 4"), ERANGE,
		"'cframe_frame' is 4, not a multiple of 8");
	refused(t, torch_table("edge_size", "edge_size: 4096"), ERANGE,
		"'edge_size' is 4096, outside the plausible range 8..256");
	/* the edges of the ranges are accepted: 4096, a negative managed-dict word, bytes */
	l = layout__load(
		put(t, "edge.yaml",
		    table_of("python", "3.11", "type_cached_keys", "type_cached_keys: 4096", NULL)),
		t->err, sizeof(t->err));
	if (!l)
		fail_msg("%s", t->err);
	layout__free(l);
	l = layout__load(
		put(t, "edge2.yaml", python_table("managed_values", "managed_values: -64")), t->err,
		sizeof(t->err));
	if (!l)
		fail_msg("%s", t->err);
	layout__free(l);
	l = layout__load(put(t, "edge3.yaml",
			     python_table("managed_dict_flag", "managed_dict_flag: 0x80000000")),
			 t->err, sizeof(t->err));
	if (!l)
		fail_msg("%s", t->err);
	layout__free(l);
	l = layout__load(put(t, "edge4.yaml", python_table("cframe_frame", "cframe_frame: -1")),
			 t->err, sizeof(t->err));
	if (!l)
		fail_msg("%s", t->err);
	layout__free(l);
}

/* The schema itself: names unique and found, ranges sane, strings that fit their fields. */
static void test_schema(void **state)
{
	int k;

	(void)state;
	for (k = 0; k < LK__COUNT; k++) {
		const struct layout_key_def *d = &layout_keys[k];

		assert_int_equal(layout__key(d->name), k);
		assert_true(d->min <= d->max);
		assert_true(strlen(d->name) + strlen("debug_") <= LAYOUT_MAX_KEY);
		if (d->type == LAYOUT_MATCH)
			assert_int_equal(d->max, NW_MATCH_LEN - 1);
		if (layout__is_str(d->type))
			assert_true(d->max <= LAYOUT_MAX_SCALAR);
		if (d->published)
			assert_int_equal(d->table, LAYOUT_PY);
		assert_true(!d->until || d->until > d->since);
	}
	assert_int_equal(layout__key("nope"), -ENOENT);
	assert_int_equal(layout__key(NULL), -ENOENT);
}

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
	if (!l)
		fail_msg("%s", t->err);
	memset(&nwl, 0x5a, sizeof(nwl));
	nwl.frame_code = 32;
	assert_int_equal(layout__fill(l, &nwl, t->err, sizeof(t->err)), 0);
	assert_int_equal(strlen(nwl.step_class), NW_MATCH_LEN - 1);
	assert_string_equal(nwl.call_func, "_call_impl");
	assert_int_equal(nwl.call_func[NW_MATCH_LEN - 1], 0); /* rest zeroed, not 0x5a */
	assert_string_equal(nwl.call_file, "torch/nn/modules/module.py");
	assert_int_equal(nwl.impl_device, 179);
	assert_int_equal(nwl.dtype_bf16, 15);
	assert_int_equal(nwl.frame_code, 32);
	layout__free(l);

	/* one more does not fit: refused when the table is loaded */
	snprintf(text, sizeof(text), TORCH_TABLE "step_class: \"%.*s\"\n", NW_MATCH_LEN,
		 "Optimizer_with_a_long_name_abcdefghijklmnop");
	refused(t, text, ERANGE, "line 24: 'step_class' is longer than 31 characters");
	refused(t, TORCH_TABLE "step_class: \"\"\n", EINVAL, "line 24: 'step_class' is empty");
	refused(t, TORCH_TABLE "step_class:\n", EINVAL, "line 24: no value for 'step_class'");
}

/* The backward and rescan structs: from a table that has their keys, or -ENOENT. */
static void test_fill_bwd_rescan(void **state)
{
	struct tmp *t = *state;
	struct nw_bwd_layout bl = {.acc_vptr = 77};
	struct nw_rescan rs = {};
	struct layout *l;

	l = layout__find("config/layouts", "torch", "1.13", t->err, sizeof(t->err));
	if (!l)
		fail_msg("%s", t->err);
	assert_int_equal(layout__fill_bwd(l, &bl, t->err, sizeof(t->err)), 0);
	assert_int_equal(bl.impl_autograd_meta, 32);
	assert_int_equal(bl.meta_grad_fn, 48);
	assert_int_equal(bl.node_next_edges, 96);
	assert_int_equal(bl.edge_size, 24);
	assert_int_equal(bl.edge_input_nr, 16);
	assert_int_equal(bl.acc_variable, 392);
	assert_int_equal(bl.inputbuf_items, 0);
	assert_int_equal(bl.acc_vptr, 77); /* not a table key: left alone */
	assert_int_equal(layout__fill_rescan(l, &rs, t->err, sizeof(t->err)), 0);
	assert_int_equal(rs.impl_autograd_meta, 32);
	assert_int_equal(rs.meta_grad_fn, 48);
	assert_int_equal(rs.impl_version, 48);
	assert_int_equal(rs.version_value, 24);
	assert_int_equal(rs.on, 1);
	layout__free(l);

	l = layout__load(put(t, "min.yaml", TORCH_TABLE "step_class: Optimizer\n"), t->err,
			 sizeof(t->err));
	if (!l)
		fail_msg("%s", t->err);
	memset(&rs, 0, sizeof(rs));
	assert_int_equal(layout__fill_bwd(l, &bl, t->err, sizeof(t->err)), -ENOENT);
	assert_non_null(strstr(t->err, "key impl_autograd_meta: missing"));
	assert_int_equal(layout__fill_rescan(l, &rs, NULL, 0), -ENOENT);
	assert_int_equal(rs.on, 0);
	layout__free(l);
}

static void test_find(void **state)
{
	struct tmp *t = *state;
	struct layout *l;

	put(t, "python-3.11.yaml", python_table(NULL, NULL));
	put(t, "python-3.12.yaml", python_table(NULL, NULL));
	put(t, "torch-2.1.yaml", table_of("python", "2.1", NULL, NULL, NULL));
	l = layout__find(t->dir, "python", "3.11", t->err, sizeof(t->err));
	if (!l)
		fail_msg("%s", t->err);
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

/* Every shipped table loads: each key known, in its range, none its version needs missing. */
static void test_real_tables_load(void **state)
{
	char path[PATH_MAX], err[512];
	struct layout *l;
	struct dirent *d;
	size_t tables = 0;
	DIR *dir;

	(void)state;
	dir = opendir("config/layouts");
	assert_non_null(dir);
	while ((d = readdir(dir))) {
		if (!strstr(d->d_name, ".yaml"))
			continue;
		snprintf(path, sizeof(path), "config/layouts/%s", d->d_name);
		tables++;
		l = layout__load(path, err, sizeof(err));
		if (!l)
			fail_msg("%s does not load: %s", path, err);
		layout__free(l);
	}
	closedir(dir);
	assert_true(tables >= 6);
}

/* The tables shipped in config/layouts/ (tests run from the repository root). */
static void test_real_tables(void **state)
{
	/* user-space keys daemon/resolve/remote.c reads from the python table */
	static const enum layout_key extra[] = {
		LK_type_flags,	       LK_type_dictoffset,
		LK_type_cached_keys,   LK_managed_dict_flag,
		LK_managed_dict,       LK_managed_values,
		LK_dict_keys,	       LK_dict_values,
		LK_keys_log2_size,     LK_keys_log2_index_bytes,
		LK_keys_kind,	       LK_keys_nentries,
		LK_keys_indices,       LK_unicode_compact_data,
		LK_unicode_kind_shift, LK_values_items,
		LK_type_dict,	       LK_long_digits,
		LK_long_digit_bits,    LK_float_value,
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
			fail_msg("python-3.11.yaml has no integer '%s'",
				 layout_keys[extra[i]].name);
	assert_int_equal(layout__int(py, LK_managed_dict, &v), 0);
	assert_int_equal(v, -24);
	assert_int_equal(layout__int(py, LK_managed_values, &v), 0);
	assert_int_equal(v, -32);
	assert_int_equal(layout__int(py, LK_managed_dict_flag, &v), 0);
	assert_int_equal(v, 1 << 4);
	assert_int_equal(layout__int(py, LK_unicode_compact_data, &v), 0);
	assert_int_equal(v, 72);
	assert_int_equal(layout__int(py, LK_type_dict, &v), 0);
	assert_int_equal(v, 264);
	assert_int_equal(layout__int(py, LK_long_digits, &v), 0);
	assert_int_equal(v, 24);
	assert_int_equal(layout__int(py, LK_long_digit_bits, &v), 0);
	assert_int_equal(v, 30);
	assert_int_equal(layout__int(py, LK_float_value, &v), 0);
	assert_int_equal(v, 16);
	assert_int_equal(layout__int(py, LK_long_tagged, &v), -ENOENT); /* ob_size */

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
	assert_int_equal(nwl.step_marker[0], 0); /* 1.13 has no step marker */
	assert_string_equal(layout__str(tl, LK_generated_for), "1.13.0a0");
	assert_string_equal(layout__str(tl, LK_acc_vtable_symbol),
			    "_ZTVN5torch8autograd14AccumulateGradE");
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
		cmocka_unit_test_setup_teardown(test_limits, setup, teardown),
		cmocka_unit_test_setup_teardown(test_file_too_large, setup, teardown),
		cmocka_unit_test_setup_teardown(test_header_checks, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unknown_keys, setup, teardown),
		cmocka_unit_test_setup_teardown(test_required_keys, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fill_python, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_values, setup, teardown),
		cmocka_unit_test_setup_teardown(test_implausible_values, setup, teardown),
		cmocka_unit_test(test_schema),
		cmocka_unit_test_setup_teardown(test_fill_torch_strings, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fill_bwd_rescan, setup, teardown),
		cmocka_unit_test_setup_teardown(test_find, setup, teardown),
		cmocka_unit_test(test_real_tables_load),
		cmocka_unit_test_setup_teardown(test_real_tables, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
