// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * withpid PID COMMAND [ARG...]: run COMMAND as a child whose pid is PID (clone3 with set_tid,
 * root only), wait for it and exit as it did, passing on SIGTERM, SIGINT and SIGHUP. The
 * security tests use it to hand a victim the pid number an attacker's process had: the pid
 * reuse an attacker otherwise waits for, made deterministic.
 */
#include <errno.h>
#include <linux/sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile pid_t child;

static void pass_on(int sig)
{
	if (child > 0)
		kill(child, sig);
}

static pid_t spawn(pid_t want, char **argv)
{
	struct clone_args ca = {.exit_signal = SIGCHLD, .set_tid_size = 1};
	pid_t tid = want;
	long r;

	ca.set_tid = (uint64_t)(uintptr_t)&tid;
	r = syscall(SYS_clone3, &ca, sizeof(ca));
	if (r != 0)
		return (pid_t)r;
	execvp(argv[0], argv);
	fprintf(stderr, "withpid: failed to run %s: %s\n", argv[0], strerror(errno));
	_exit(127);
}

int main(int argc, char **argv)
{
	struct sigaction sa = {.sa_handler = pass_on};
	int status, sig;
	char *end;
	long want;

	if (argc < 3 || (want = strtol(argv[1], &end, 10)) <= 1 || *end) {
		fprintf(stderr, "usage: withpid PID COMMAND [ARG...]\n");
		return 2;
	}
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	child = spawn((pid_t)want, argv + 2);
	if (child < 0) {
		/* EEXIST: the number is taken */
		fprintf(stderr, "withpid: failed to start pid %ld: %s\n", want, strerror(errno));
		return errno == EEXIST ? 3 : 2;
	}
	while (waitpid(child, &status, 0) < 0)
		if (errno != EINTR)
			return 2;
	if (WIFSIGNALED(status)) {
		sig = WTERMSIG(status);
		return 128 + sig;
	}
	return WEXITSTATUS(status);
}
