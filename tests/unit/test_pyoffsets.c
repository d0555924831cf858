// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Published interpreter offsets (_Py_DebugOffsets) overriding a layout table. */
#include <errno.h>
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
#include "resolve/pyoffsets.h"
#include "resolve/remote.h"

#define PY313 0x030d05f0ULL

/* The shipped 3.13 table without its debug_ words, with body's keys in place of its own. */
static struct layout *table(const char *body)
{
	char path[] = "/tmp/nw-pyoffsets-XXXXXX";
	char err[256], line[1024];
	struct layout *l;
	int fd = mkstemp(path);
	FILE *f, *base;

	assert_true(fd >= 0);
	f = fdopen(fd, "w");
	base = fopen("config/layouts/python-3.13.yaml", "r");
	assert_non_null(base);
	while (fgets(line, sizeof(line), base)) {
		char key[80];
		size_t n = strcspn(line, ":");

		snprintf(key, sizeof(key), "\n%.*s:", (int)n, line);
		if (!strncmp(line, "debug_", 6) ||
		    (line[0] != '#' && n < 64 &&
		     (strstr(body, key + 1) == body || strstr(body, key))))
			continue;
		fputs(line, f);
	}
	fclose(base);
	fputs(body, f);
	fclose(f);
	l = layout__load(path, err, sizeof(err));
	unlink(path);
	if (!l)
		fail_msg("%s", err);
	return l;
}

static void words_with(uint64_t *w, size_t n)
{
	size_t i;

	memset(w, 0, n * sizeof(*w));
	memcpy(&w[0], "xdebugpy", 8);
	w[1] = PY313;
	for (i = 3; i < n; i++)
		w[i] = 1000 + i; /* distinct values: each index is visible */
}

static void test_applies_named_words(void **state)
{
	struct layout *l = table("debug_frame_code: 30\ndebug_obj_type: 45\n"
				 "debug_unicode_ascii_data: 70\n");
	struct nw_layout nl = {.frame_code = 32, .obj_type = 8};
	struct remote_layout rl = {.obj_type = 8};
	uint64_t w[128];
	char err[256] = "";

	(void)state;
	words_with(w, 128);
	assert_int_equal(pyoffsets__apply_words(w, 128, PY313, l, &nl, &rl, err, sizeof(err)), 3);
	assert_int_equal(nl.frame_code, 1030);
	assert_int_equal(nl.obj_type, 1045);
	assert_int_equal(rl.obj_type, 1045);
	assert_int_equal(nl.unicode_ascii_data, 1070);
	assert_int_equal(rl.unicode_ascii_data, 1070);
	assert_int_equal(nl.frame_localsplus, 0); /* not named: the table's value stays */
	layout__free(l);
}

static void test_no_debug_keys_reads_nothing(void **state)
{
	struct layout *l = table("frame_code: 32\n");
	struct nw_layout nl = {.frame_code = 32};
	struct remote_layout rl = {};
	char err[256] = "";

	(void)state;
	/* 3.11 tables: no published offsets are needed, even with nothing read */
	assert_int_equal(pyoffsets__apply_words(NULL, 0, 0x030b02f0, l, &nl, &rl, err, sizeof(err)),
			 0);
	assert_int_equal(nl.frame_code, 32);
	layout__free(l);
}

static void test_refuses_bad_cookie_version_index(void **state)
{
	struct layout *l = table("debug_frame_code: 30\n");
	struct layout *far = table("debug_frame_code: 100\n");
	struct nw_layout nl = {};
	struct remote_layout rl = {};
	uint64_t w[128];
	char err[256];

	(void)state;
	words_with(w, 128);
	memcpy(&w[0], "xdebugpX", 8);
	assert_int_equal(pyoffsets__apply_words(w, 128, PY313, l, &nl, &rl, err, sizeof(err)),
			 -ENOENT);
	assert_non_null(strstr(err, "cookie"));
	words_with(w, 128);
	assert_int_equal(pyoffsets__apply_words(w, 128, 0x030c00f0, l, &nl, &rl, err, sizeof(err)),
			 -EINVAL);
	assert_non_null(strstr(err, "version"));
	/* a word past what was read (a table's index is at most 127, see test_layout) */
	assert_int_equal(pyoffsets__apply_words(w, 64, PY313, far, &nl, &rl, err, sizeof(err)),
			 -ERANGE);
	/* an unreadable _PyRuntime when the table relies on it */
	assert_int_equal(pyoffsets__apply_words(w, 0, PY313, l, &nl, &rl, err, sizeof(err)),
			 -ENOENT);
	/* an absurd published value is refused, not used */
	w[30] = 1ULL << 40;
	assert_int_equal(pyoffsets__apply_words(w, 128, PY313, l, &nl, &rl, err, sizeof(err)),
			 -ERANGE);
	layout__free(l);
	layout__free(far);
}

static void test_real_313_table_names_words(void **state)
{
	struct layout *l;
	char err[256];
	long long v;

	(void)state;
	l = layout__load("config/layouts/python-3.13.yaml", err, sizeof(err));
	assert_non_null(l);
	assert_int_equal(layout__debug_word(l, LK_frame_code, &v), 0);
	assert_int_equal(v, 30);
	assert_int_equal(layout__debug_word(l, LK_frame_localsplus, &v), 0);
	assert_int_equal(v, 32);
	layout__free(l);
	l = layout__load("config/layouts/python-3.11.yaml", err, sizeof(err));
	assert_non_null(l);
	assert_int_equal(layout__debug_word(l, LK_frame_code, &v), -ENOENT);
	layout__free(l);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_applies_named_words),
		cmocka_unit_test(test_no_debug_keys_reads_nothing),
		cmocka_unit_test(test_refuses_bad_cookie_version_index),
		cmocka_unit_test(test_real_313_table_names_words),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
