// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Unit tests for daemon/service/procs.c against the real kernel (root, BPF): the task
 * iterator's records and the exec wake-ups. Fork or exec is the kernel's exec count.
 */
#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include "service/procs.h"

static const struct nw_proc *find(const struct nw_proc *p, long n, pid_t pid)
{
	long i;

	for (i = 0; i < n; i++)
		if (p[i].tgid == (__u32)pid)
			return &p[i];
	return NULL;
}

static int setup(void **state)
{
	char err[512];

	*state = procs__open(err, sizeof(err));
	if (!*state)
		print_error("%s\n", err);
	return *state ? 0 : -1;
}

static int teardown(void **state)
{
	procs__free(*state);
	return 0;
}

/* A child that waits without exec (pause), or that execs sleep. */
static pid_t child(int do_exec)
{
	pid_t pid = fork();

	if (pid == 0) {
		if (do_exec)
			execl("/bin/sleep", "sleep", "30", (char *)NULL);
		pause();
		_exit(0);
	}
	return pid;
}

static void reap(pid_t pid)
{
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
}

/* Wait until the child has execed (its comm changes in /proc). */
static void wait_exec(pid_t pid)
{
	char path[64], comm[32] = "";
	int i;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/comm", pid);
	for (i = 0; i < 500 && strncmp(comm, "sleep", 5); i++) {
		f = fopen(path, "r");
		if (f) {
			if (!fgets(comm, sizeof(comm), f))
				comm[0] = 0;
			fclose(f);
		}
		usleep(10000);
	}
}

static void test_fork_and_exec(void **state)
{
	pid_t forked = child(0), execed = child(1);
	const struct nw_proc *me, *f, *e;
	struct nw_proc *p = NULL;
	long n, i;

	wait_exec(execed);
	n = procs__list(*state, &p);
	assert_true(n > 2);
	for (i = 1; i < n; i++)
		assert_true(p[i - 1].tgid < p[i].tgid); /* ascending, one record per process */
	me = find(p, n, getpid());
	f = find(p, n, forked);
	e = find(p, n, execed);
	assert_non_null(me);
	assert_non_null(f);
	assert_non_null(e);
	assert_int_equal(f->ppid, getpid());
	assert_int_equal(f->flags & NW_PROC_EXECED, 0); /* same image as its parent */
	assert_int_equal(f->exec_id, me->exec_id);
	assert_int_equal(e->flags & NW_PROC_EXECED, NW_PROC_EXECED);
	assert_int_not_equal(e->exec_id, me->exec_id);
	assert_string_equal(e->comm, "sleep");
	assert_int_equal(e->uid, getuid());
	assert_true(e->start_ns > me->start_ns);
	/* no record for a thread or a kernel thread: every tgid is a process with a comm */
	for (i = 0; i < n; i++)
		assert_int_not_equal(p[i].tgid, 2); /* kthreadd */
	free(p);
	reap(forked);
	reap(execed);
}

/* A rank whose launcher exited (setsid -f, a double fork): execed, another parent now. */
static void test_orphan(void **state)
{
	const struct nw_proc *o;
	struct nw_proc *p = NULL;
	int fds[2];
	pid_t mid, orphan = 0;
	long n;

	assert_int_equal(pipe(fds), 0);
	mid = fork();
	if (mid == 0) {
		pid_t c = child(1);

		if (write(fds[1], &c, sizeof(c)) != sizeof(c))
			_exit(1);
		_exit(0);
	}
	assert_int_equal(read(fds[0], &orphan, sizeof(orphan)), sizeof(orphan));
	waitpid(mid, NULL, 0);
	wait_exec(orphan);
	n = procs__list(*state, &p);
	o = find(p, n, orphan);
	assert_non_null(o);
	assert_int_not_equal(o->ppid, mid);
	assert_int_equal(o->flags & NW_PROC_EXECED, NW_PROC_EXECED);
	free(p);
	kill(orphan, SIGKILL);
	close(fds[0]);
	close(fds[1]);
}

/* An exec anywhere turns the descriptor readable, and consume counts it. */
static void test_exec_wakeup(void **state)
{
	struct pollfd pfd = {.fd = procs__fd(*state), .events = POLLIN};
	pid_t c;
	int n = 0, i;

	procs__consume(*state);
	c = child(1);
	for (i = 0; i < 50 && !n; i++) {
		poll(&pfd, 1, 100);
		n = procs__consume(*state);
	}
	assert_true(n >= 1);
	reap(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_fork_and_exec, setup, teardown),
		cmocka_unit_test_setup_teardown(test_orphan, setup, teardown),
		cmocka_unit_test_setup_teardown(test_exec_wakeup, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
