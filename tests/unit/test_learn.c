// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Who a target's learning runs as: the ids of its /proc/PID/status, never root. */
#include <errno.h>
#include <grp.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include "resolve/learn.h"

/* A child with these ids, waiting until killed; its pid. */
static pid_t child_as(uid_t uid, gid_t gid, const gid_t *groups, int n)
{
	int p[2];
	pid_t pid;
	char c;

	assert_int_equal(pipe(p), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlives a failed test */
		if (setgroups(n, groups) || setresgid(gid, gid, gid) || setresuid(uid, uid, uid))
			_exit(1);
		if (write(p[1], "x", 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	close(p[1]);
	assert_int_equal(read(p[0], &c, 1), 1);
	close(p[0]);
	return pid;
}

static void stop(pid_t pid)
{
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

static void test_identity(void **state)
{
	static const gid_t groups[] = {4, 24, 27};
	struct learn_identity id;
	uid_t owner = 0;
	pid_t pid;

	(void)state;
	if (geteuid())
		skip(); /* making a process of another user needs root */
	pid = child_as(4321, 4322, groups, 3);
	assert_int_equal(learn__identity(pid, &id, &owner), 0);
	assert_int_equal(owner, 4321);
	assert_int_equal(id.uid, 4321);
	assert_int_equal(id.gid, 4322);
	assert_int_equal(id.ngroups, 3);
	assert_memory_equal(id.groups, groups, sizeof(groups));
	stop(pid);

	/* no supplementary group */
	pid = child_as(4321, 4321, NULL, 0);
	assert_int_equal(learn__identity(pid, &id, &owner), 0);
	assert_int_equal(id.ngroups, 0);
	stop(pid);

	/* root's own process: learned as nobody, no group, kept as root's */
	assert_int_equal(learn__identity(getpid(), &id, &owner), 0);
	assert_int_equal(owner, 0);
	assert_int_equal(id.uid, LEARN_NOBODY);
	assert_int_equal(id.gid, LEARN_NOBODY);
	assert_int_equal(id.ngroups, 0);

	assert_true(learn__identity(0x3ffffff0, &id, &owner) < 0); /* no such process */
}

/* More groups than can be handed on: refused, not cut (that would be another identity). */
static void test_too_many_groups(void **state)
{
	gid_t groups[LEARN_MAX_GROUPS + 1];
	struct learn_identity id;
	uid_t owner;
	pid_t pid;
	int i;

	(void)state;
	if (geteuid())
		skip();
	for (i = 0; i <= LEARN_MAX_GROUPS; i++)
		groups[i] = 1000 + i;
	pid = child_as(4321, 4321, groups, LEARN_MAX_GROUPS);
	assert_int_equal(learn__identity(pid, &id, &owner), 0);
	assert_int_equal(id.ngroups, LEARN_MAX_GROUPS);
	stop(pid);
	pid = child_as(4321, 4321, groups, LEARN_MAX_GROUPS + 1);
	assert_int_equal(learn__identity(pid, &id, &owner), -E2BIG);
	stop(pid);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_identity),
		cmocka_unit_test(test_too_many_groups),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
