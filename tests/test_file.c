// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Unit tests for daemon/util/file.c: whole files read at once, bounded, regular files only. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include "util/file.h"

static char dir[64], path[128];

static int setup(void **state)
{
	(void)state;
	snprintf(dir, sizeof(dir), "%s", "/tmp/test_file.XXXXXX");
	if (!mkdtemp(dir))
		return -1;
	snprintf(path, sizeof(path), "%s/f", dir);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	unlink(path);
	rmdir(dir);
	return 0;
}

static void put(size_t n)
{
	FILE *f = fopen(path, "w");
	size_t i;

	assert_non_null(f);
	for (i = 0; i < n; i++)
		fputc('a' + i % 26, f);
	assert_int_equal(fclose(f), 0);
}

static void test_sizes(void **state)
{
	static const size_t sizes[] = {0, 1, 4095, 4096, 4097, 8193, 100000};
	size_t i, len;
	char *buf;

	(void)state;
	for (i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		put(sizes[i]);
		len = 12345;
		buf = file__read(path, 1 << 20, &len);
		assert_non_null(buf);
		assert_int_equal(len, sizes[i]);
		assert_int_equal(strlen(buf), sizes[i]);
		if (sizes[i])
			assert_int_equal(buf[sizes[i] - 1], 'a' + (sizes[i] - 1) % 26);
		free(buf);
	}
}

/* Exactly max bytes is fine, one more is EFBIG, whatever the buffer's growth steps. */
static void test_limit(void **state)
{
	static const size_t max[] = {0, 1, 100, 4096, 5000, 70000};
	char *buf;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(max) / sizeof(max[0]); i++) {
		put(max[i]);
		buf = file__read(path, max[i], NULL);
		assert_non_null(buf);
		free(buf);
		put(max[i] + 1);
		errno = 0;
		assert_null(file__read(path, max[i], NULL));
		assert_int_equal(errno, EFBIG);
	}
}

static void test_not_regular(void **state)
{
	(void)state;
	errno = 0;
	assert_null(file__read(dir, 4096, NULL));
	assert_int_equal(errno, EISDIR);
	/* a FIFO without a writer: refused at once, not waited on */
	unlink(path);
	assert_int_equal(mkfifo(path, 0600), 0);
	errno = 0;
	assert_null(file__read(path, 4096, NULL));
	assert_int_equal(errno, EINVAL);
	unlink(path);
	errno = 0;
	assert_null(file__read(path, 4096, NULL));
	assert_int_equal(errno, ENOENT);
}

/* /proc files report size 0 and are read to their end all the same. */
static void test_proc(void **state)
{
	size_t len;
	char *buf = file__read("/proc/self/status", 64 << 10, &len);

	(void)state;
	assert_non_null(buf);
	assert_true(len > 0);
	assert_non_null(strstr(buf, "\nPid:"));
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sizes),
		cmocka_unit_test(test_limit),
		cmocka_unit_test(test_not_regular),
		cmocka_unit_test(test_proc),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
