// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * A target for the injection tests. Prints "PID n" first, then:
 *   sleep  a counter line every 2 ms from nanosleep, with helper threads (one waiting on a
 *          condition variable, one allocating and freeing 1 MiB blocks), until killed
 *   read   for each line read from stdin (blocked in read), "n LINE"; exits at EOF
 *   xmm    as read, each byte read by a raw system call with values in xmm0-xmm3 that must
 *          survive it (the system call ABI keeps them): a clobbered one exits 4
 *   phdr   as read, but first a line is read (and dropped) inside a dl_iterate_phdr callback,
 *          which holds the loader's lock: "IN PHDR" before, "OUT PHDR" after
 *   mstats prints "IN MSTATS", then blocks for good in malloc_stats(), writing to a full
 *          pipe as stderr while it holds the main arena's lock, deep in stdio's frames
 *   fork   as read, but first a line is read (and dropped) in a pthread_atfork prepare
 *          handler, inside fork(): "IN FORK" before, "OUT FORK" once the child is reaped
 *   seccomp-kill, seccomp-eperm
 *          as sleep, under a seccomp filter (no_new_privs set, installed before "PID" and
 *          before the threads, which inherit it) that kills the process for an mmap or
 *          mprotect with PROT_EXEC, or refuses it with EPERM; everything else is allowed
 */
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <malloc.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static void say(const char *fmt, long n, const char *s)
{
	char buf[4200];
	int len = snprintf(buf, sizeof(buf), fmt, n, s);

	if (len > 0 && write(1, buf, len) != len)
		exit(3);
}

static void *waiter(void *arg)
{
	static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
	static pthread_cond_t c = PTHREAD_COND_INITIALIZER;

	(void)arg;
	pthread_mutex_lock(&m);
	for (;;)
		pthread_cond_wait(&c, &m);
	return NULL;
}

static void *allocator(void *arg)
{
	struct timespec ts = {0, 1000000};

	(void)arg;
	for (;;) {
		char *p = malloc(1 << 20); /* past the mmap threshold: mmap inside malloc */

		if (p)
			p[0] = 1;
		free(p);
		nanosleep(&ts, NULL);
	}
	return NULL;
}

static int run_sleep(void)
{
	struct timespec ts = {0, 2000000};
	pthread_t t1, t2;
	long n;

	if (pthread_create(&t1, NULL, waiter, NULL) || pthread_create(&t2, NULL, allocator, NULL))
		return 1;
	for (n = 0;; n++) {
		say("%ld%s\n", n, "");
		nanosleep(&ts, NULL);
	}
}

static long lines;
static int raw_xmm;

/* read(0, c, 1) with xmm0-xmm3 live across the syscall instruction. */
static ssize_t read_xmm(char *c)
{
	uint64_t in[4] = {0x1122334455667788, 0x99aabbccddeeff00, 0x0123456789abcdef,
			  0xfedcba9876543210};
	uint64_t out[4];
	long r;

	__asm__ volatile("movq 0(%[in]), %%xmm0\n\t"
			 "movq 8(%[in]), %%xmm1\n\t"
			 "movq 16(%[in]), %%xmm2\n\t"
			 "movq 24(%[in]), %%xmm3\n\t"
			 "syscall\n\t"
			 "movq %%xmm0, 0(%[out])\n\t"
			 "movq %%xmm1, 8(%[out])\n\t"
			 "movq %%xmm2, 16(%[out])\n\t"
			 "movq %%xmm3, 24(%[out])\n\t"
			 : "=a"(r)
			 : "0"(0L), "D"(0L), "S"(c), "d"(1L), [in] "r"(in), [out] "r"(out)
			 : "rcx", "r11", "memory", "xmm0", "xmm1", "xmm2", "xmm3");
	if (memcmp(in, out, sizeof(in))) {
		say("%.0ldXMM CLOBBERED%s\n", 0, "");
		exit(4);
	}
	return r;
}

static ssize_t read_byte(char *c)
{
	return raw_xmm ? read_xmm(c) : read(0, c, 1);
}

/* One line from stdin (blocking read of a byte at a time); 0 at EOF. */
static int echo_line(void)
{
	char line[4096];
	size_t k = 0;
	ssize_t r;

	while ((r = read_byte(line + k)) == 1 && line[k] != '\n' && k + 1 < sizeof(line))
		k++;
	if (r != 1 && !k)
		return 0;
	line[k] = 0;
	say("%ld %s\n", lines++, line);
	return 1;
}

static void drop_line(void)
{
	char c = 0;

	while (read(0, &c, 1) == 1 && c != '\n')
		;
}

static int in_phdr(struct dl_phdr_info *info, size_t size, void *ctx)
{
	(void)info;
	(void)size;
	(void)ctx;
	say("%.0ldIN PHDR%s\n", 0, "");
	drop_line();
	say("%.0ldOUT PHDR%s\n", 0, "");
	return 1;
}

static void in_fork(void)
{
	say("%.0ldIN FORK%s\n", 0, "");
	drop_line();
}

static int run_fork(void)
{
	pid_t child;

	if (pthread_atfork(in_fork, NULL, NULL))
		return 1;
	child = fork();
	if (child == 0)
		_exit(0);
	if (child < 0 || waitpid(child, NULL, 0) != child)
		return 1;
	say("%.0ldOUT FORK%s\n", 0, "");
	return 0;
}

static int run_mstats(void)
{
	char junk[4096];
	int p[2];

	memset(junk, 'x', sizeof(junk));
	if (pipe(p) || fcntl(p[1], F_SETFL, O_NONBLOCK))
		return 1;
	while (write(p[1], junk, sizeof(junk)) > 0)
		;
	while (write(p[1], junk, 1) == 1)
		;
	if (fcntl(p[1], F_SETFL, 0) || dup2(p[1], 2) != 2)
		return 1;
	say("%.0ldIN MSTATS%s\n", 0, "");
	malloc_stats();
	return 0;
}

/* Code mapped (mmap or mprotect with PROT_EXEC): the process killed, or EPERM. */
static int sandbox(int kill)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mmap, 1, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_mprotect, 0, 3),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[2])),
		BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, PROT_EXEC, 0, 1),
		BPF_STMT(BPF_RET | BPF_K,
			 kill ? SECCOMP_RET_KILL_PROCESS : SECCOMP_RET_ERRNO | (EPERM & 0xffff)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = {.len = sizeof(f) / sizeof(f[0]), .filter = f};

	return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
	       prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "sleep";

	if (!strncmp(mode, "seccomp-", 8)) {
		if (sandbox(!strcmp(mode + 8, "kill")))
			return 5;
		mode = "sleep";
	}
	say("PID %ld%s\n", getpid(), "");
	if (!strcmp(mode, "sleep"))
		return run_sleep();
	if (!strcmp(mode, "mstats"))
		return run_mstats();
	raw_xmm = !strcmp(mode, "xmm");
	if (!strcmp(mode, "phdr"))
		dl_iterate_phdr(in_phdr, NULL);
	else if (!strcmp(mode, "fork") && run_fork())
		return 1;
	else if (strcmp(mode, "read") && strcmp(mode, "fork") && !raw_xmm)
		return 2;
	while (echo_line())
		;
	return 0;
}
