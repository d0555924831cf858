// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* notify: the datagram a service manager reads, on a real socket (a path and an abstract name). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>
#include "util/notify.h"

/* A datagram socket bound at name ('@' for abstract); the fd. */
static int listen_at(const char *name)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	size_t n = strlen(name);
	int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	memcpy(sa.sun_path, name, n);
	if (name[0] == '@')
		sa.sun_path[0] = 0;
	assert_int_equal(bind(fd, (struct sockaddr *)&sa,
			      offsetof(struct sockaddr_un, sun_path) + n + (name[0] != '@')),
			 0);
	return fd;
}

static void expect_datagram(int fd, const char *want)
{
	char buf[64] = "";
	ssize_t n = recv(fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);

	assert_int_equal(n, strlen(want));
	assert_string_equal(buf, want);
}

static void test_path(void **state)
{
	char dir[] = "/tmp/nw-notify-XXXXXX", path[64];
	int fd;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/notify", dir);
	fd = listen_at(path);
	setenv("NOTIFY_SOCKET", path, 1);
	assert_int_equal(notify__send("READY=1"), 0);
	expect_datagram(fd, "READY=1");
	assert_int_equal(notify__send("STOPPING=1"), 0);
	expect_datagram(fd, "STOPPING=1");
	close(fd);
	unlink(path);
	/* nobody listens any more */
	assert_int_equal(notify__send("READY=1"), -ENOENT);
	rmdir(dir);
	unsetenv("NOTIFY_SOCKET");
}

static void test_abstract(void **state)
{
	char name[64];
	int fd;

	(void)state;
	snprintf(name, sizeof(name), "@nw-notify-test-%d", (int)getpid());
	fd = listen_at(name);
	setenv("NOTIFY_SOCKET", name, 1);
	assert_int_equal(notify__send("READY=1"), 0);
	expect_datagram(fd, "READY=1");
	close(fd);
	unsetenv("NOTIFY_SOCKET");
}

static void test_not_asked(void **state)
{
	(void)state;
	unsetenv("NOTIFY_SOCKET");
	assert_int_equal(notify__send("READY=1"), 0);
	setenv("NOTIFY_SOCKET", "relative/sock", 1);
	assert_int_equal(notify__send("READY=1"), -EINVAL);
	setenv("NOTIFY_SOCKET", "@", 1);
	assert_int_equal(notify__send("READY=1"), -EINVAL);
	unsetenv("NOTIFY_SOCKET");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_path),
		cmocka_unit_test(test_abstract),
		cmocka_unit_test(test_not_asked),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
