// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * traced CMD ARGS...: run CMD with this process as its tracer (PTRACE_SEIZE, no stops of its
 * own; signals are passed on), so another tracer is refused. Exits as CMD does.
 */
#include <signal.h>
#include <stdio.h>
#include <sys/ptrace.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	pid_t child;
	int st;

	if (argc < 2)
		return 2;
	child = fork();
	if (child == 0) {
		execvp(argv[1], argv + 1);
		_exit(127);
	}
	if (child < 0 || ptrace(PTRACE_SEIZE, child, 0, 0)) {
		perror("traced");
		return 1;
	}
	while (waitpid(child, &st, __WALL) == child) {
		if (WIFEXITED(st))
			return WEXITSTATUS(st);
		if (WIFSIGNALED(st))
			return 128 + WTERMSIG(st);
		if (st >> 16 == PTRACE_EVENT_STOP)
			ptrace(PTRACE_LISTEN, child, 0, 0);
		else
			ptrace(PTRACE_CONT, child, 0, WSTOPSIG(st));
	}
	return 1;
}
