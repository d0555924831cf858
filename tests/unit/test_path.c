// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Symlink-free opening on a real temporary tree: a symlinked parent, a
 * symlink named with a trailing slash, FIFOs, sockets and hard links, by
 * openat2 and by the component walk used where openat2 is missing.
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
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>
#include "output/path.h"

struct tree {
	char root[64]; /* root/real/ a directory, root/lnk -> real */
	char p[256];
};

static const char *at(struct tree *t, const char *rel)
{
	snprintf(t->p, sizeof(t->p), "%s/%s", t->root, rel);
	return t->p;
}

static int setup(void **state)
{
	struct tree *t = calloc(1, sizeof(*t));

	strcpy(t->root, "/tmp/test_path.XXXXXX");
	if (!mkdtemp(t->root) || mkdir(at(t, "real"), 0755) || symlink("real", at(t, "lnk")))
		return -1;
	*state = t;
	return 0;
}

static int teardown(void **state)
{
	struct tree *t = *state;
	static const char *const names[] = {"real/x",	"real/y", "real/fifo", "real/sock",
					    "real/new", "lnk",	  "real"};
	unsigned i;

	for (i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		remove(at(t, names[i]));
	rmdir(t->root);
	free(t);
	return 0;
}

static void expect_dir(int fd)
{
	struct stat st;

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	close(fd);
}

static void test_dirs(void **state)
{
	int (*open_dir[2])(const char *) = {path__open_dir, path__open_dir_walk};
	struct tree *t = *state;
	int i;

	for (i = 0; i < 2; i++) {
		expect_dir(open_dir[i](at(t, "real")));
		expect_dir(open_dir[i](at(t, "real/"))); /* a trailing slash changes nothing */
		expect_dir(open_dir[i](at(t, "real//./")));
		assert_int_equal(open_dir[i](at(t, "lnk")), -ELOOP);
		assert_int_equal(open_dir[i](at(t, "lnk/")), -ELOOP);
		assert_int_equal(open_dir[i](at(t, "lnk/.")), -ELOOP);
		assert_int_equal(open_dir[i](at(t, "real/none")), -ENOENT);
		assert_int_equal(open_dir[i](""), -ENOENT);
	}
	assert_non_null(strstr(path__reason(-ELOOP), "symlink"));
}

static void test_output_files(void **state)
{
	struct tree *t = *state;
	char err[512], first[256];
	struct stat st;
	mode_t old;
	int fd;

	old = umask(0);
	fd = path__open_output(at(t, "real/new"), err, sizeof(err));
	umask(old);
	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0640);
	close(fd);
	/* a symlinked parent, and the file named through it */
	assert_int_equal(path__open_output(at(t, "lnk/x"), err, sizeof(err)), -ELOOP);
	assert_non_null(strstr(err, "symlink"));
	assert_int_equal(access(at(t, "real/x"), F_OK), -1); /* not created */
	assert_int_equal(path__open_output(at(t, "lnk/new"), err, sizeof(err)), -ELOOP);
	assert_int_equal(path__open_output(at(t, "lnk"), err, sizeof(err)), -ELOOP);
	assert_int_equal(path__open_output(at(t, "real/"), err, sizeof(err)), -EISDIR);
	/* a second name for the file */
	snprintf(first, sizeof(first), "%s", at(t, "real/new"));
	assert_int_equal(link(first, at(t, "real/y")), 0);
	assert_int_equal(path__open_output(first, err, sizeof(err)), -EMLINK);
	assert_non_null(strstr(err, "hard links"));
	assert_int_equal(path__open_output(at(t, "real/y"), err, sizeof(err)), -EMLINK);
}

/* A FIFO nobody reads is refused at once, not waited on. */
static void test_special_files(void **state)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct tree *t = *state;
	char err[512];
	int s, fd;

	assert_int_equal(mkfifo(at(t, "real/fifo"), 0600), 0);
	assert_int_equal(path__open_output(t->p, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "FIFO"));
	s = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_true(strlen(at(t, "real/sock")) < sizeof(sa.sun_path));
	memcpy(sa.sun_path, t->p, strlen(t->p) + 1);
	assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(s, 1), 0);
	assert_int_equal(path__open_output(t->p, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "socket"));
	assert_int_equal(path__open_output("/dev/null", err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "device"));
	/* the collector's socket: reached directly, not through the symlinked parent */
	fd = path__connect_unix(at(t, "real/sock"), err, sizeof(err));
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(path__connect_unix(at(t, "lnk/sock"), err, sizeof(err)), -ELOOP);
	assert_int_equal(path__connect_unix(at(t, "real/fifo"), err, sizeof(err)), -ENOTSOCK);
	close(s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_dirs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_output_files, setup, teardown),
		cmocka_unit_test_setup_teardown(test_special_files, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
