// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Unit tests for daemon/util/file.c: whole files read at once, bounded, regular files only;
 * the target's files reopened from O_PATH descriptors (nothing but a regular file is ever
 * opened for reading) and read below a root through no symbolic link.
 */
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

static void test_reopen(void **state)
{
	struct stat st, other = {0};
	int fd;

	(void)state;
	put(10);
	assert_int_equal(stat(path, &st), 0);
	fd = file__reopen(open(path, O_PATH | O_CLOEXEC), &st);
	assert_true(fd >= 0);
	assert_int_equal(read(fd, (char[16]){0}, 16), 10);
	close(fd);
	/* another file than the one asked for */
	other.st_dev = st.st_dev;
	other.st_ino = st.st_ino + 1;
	assert_int_equal(file__reopen(open(path, O_PATH | O_CLOEXEC), &other), -ESTALE);
	/* not regular: refused before anything opens it (a FIFO's open would wait) */
	unlink(path);
	assert_int_equal(mkfifo(path, 0600), 0);
	alarm(10);
	assert_int_equal(file__reopen(open(path, O_PATH | O_CLOEXEC), NULL), -EINVAL);
	alarm(0);
	unlink(path);
	assert_int_equal(file__reopen(open(dir, O_PATH | O_CLOEXEC), NULL), -EISDIR);
	assert_int_equal(file__reopen(open("/dev/zero", O_PATH | O_CLOEXEC), NULL), -EINVAL);
	assert_int_equal(symlink("/etc/passwd", path), 0);
	assert_int_equal(file__reopen(open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC), NULL), -EINVAL);
	unlink(path);
}

/* Below a root: ".." and absolute links stay inside it, and no link is followed at all. */
static void test_read_in(void **state)
{
	char sub[128], *buf;
	size_t len;
	int root;

	(void)state;
	put(5);
	root = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	assert_true(root >= 0);
	buf = file__read_in(root, "/f", 64, &len);
	assert_non_null(buf);
	assert_int_equal(len, 5);
	free(buf);
	buf = file__read_in(root, "/../../f", 64, &len); /* ".." stops at the root */
	assert_non_null(buf);
	free(buf);
	errno = 0;
	assert_null(file__read_in(root, "f", 4, &len));
	assert_int_equal(errno, EFBIG);
	snprintf(sub, sizeof(sub), "%s/l", dir);
	assert_int_equal(symlink("/f", sub), 0);
	errno = 0;
	assert_null(file__read_in(root, "/l", 64, &len));
	assert_int_equal(errno, EINVAL); /* the link itself, not a regular file */
	unlink(sub);
	assert_int_equal(symlink("/", sub), 0); /* a directory on the path that is a link */
	errno = 0;
	assert_null(file__read_in(root, "/l/f", 64, &len));
	assert_int_equal(errno, ELOOP);
	unlink(sub);
	unlink(path);
	assert_int_equal(mkfifo(path, 0600), 0);
	alarm(10);
	errno = 0;
	assert_null(file__read_in(root, "/f", 64, &len));
	assert_int_equal(errno, EINVAL);
	alarm(0);
	unlink(path);
	close(root);
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
		cmocka_unit_test(test_sizes),	    cmocka_unit_test(test_limit),
		cmocka_unit_test(test_not_regular), cmocka_unit_test(test_proc),
		cmocka_unit_test(test_reopen),	    cmocka_unit_test(test_read_in),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
