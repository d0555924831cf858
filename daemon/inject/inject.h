/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Loading a shared library into a running process: its threads are stopped with ptrace, one
 * blocked in a system call outside malloc and the dynamic loader calls dlopen, and its
 * registers and interrupted system call are put back as they were.
 */
#ifndef __INJECT_H
#define __INJECT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define INJECT_LIB_NAME "libnanwatch_cupti.so"
#define INJECT_COPY_PREFIX ".nanwatch-inject-" /* the name of a copy placed in a target's /tmp */

/*
 * Whether the text of a /proc/PID/maps maps the library: by its name, or a copy inject__load
 * placed. A process holds one instance at most: a second would take over the first's socket
 * and find CUPTI's one subscriber slot taken, and check nothing.
 */
int inject__loaded(const char *maps);

/*
 * The library --inject loads: explicit if given, else INJECT_LIB_NAME next to the running
 * binary, else in lib_dir. 0 with its absolute path in out, or -ENOENT with err written.
 */
int inject__find_lib(const char *explicit, const char *lib_dir, char *out, size_t len, char *err,
		     size_t errlen);

/*
 * dlopen(lib, RTLD_NOW) in process pid. lib is a path the daemon can open; a target with
 * another root (a container, a chroot) gets a private copy in its /tmp, removed once loaded.
 * A target that maps the library already (inject__loaded), from whatever path, is left alone.
 * 0, or a negative errno with a one-line reason in err (-EPERM: ptrace is forbidden, or the
 * target runs under seccomp, untouched; -EAGAIN: no thread at a safe point). Whatever fails
 * after the target was touched is put back: its threads' registers and the stack words
 * written, and when dlopen fails, the mappings of the library it left.
 */
int inject__load(pid_t pid, const char *lib, int verbose, char *err, size_t errlen);

/* The pure parts, exposed for the unit tests. */

/* One stopped thread as the choice sees it. */
struct inject_thread {
	pid_t tid;
	int64_t orig_rax; /* the system call it stopped in; negative: not in one */
	int64_t rax;	  /* its return value, or -ERESTART* when interrupted */
	uint64_t rsp;
	uint64_t stack_room; /* bytes of stack below rsp it may use */
	int hazard;	     /* PC or a recent return address in malloc or the loader */
	int signalled; /* stopped for a signal, not by the interrupt; or SIGSEGV blocked/ignored */
};

/* How the kernel will restart an interrupted system call (x86-64 entry code). */
enum inject_restart {
	INJECT_NOT_IN_SYSCALL = 0,
	INJECT_SYSCALL_DONE,  /* returned (a result or -EINTR): nothing to restart */
	INJECT_RESTART,	      /* -ERESTARTSYS/NOINTR/NOHAND: re-executed */
	INJECT_RESTART_BLOCK, /* -ERESTART_RESTARTBLOCK: restart_syscall */
};
enum inject_restart inject__restart_kind(int64_t orig_rax, int64_t rax);

#define INJECT_STACK_NEED (64u << 10) /* stack dlopen and a constructor may use */

/*
 * The thread to run dlopen on: in a system call, no hazard, not signalled, room on its
 * stack; a blocked one before one whose call has returned, then the main thread (tid ==
 * pid), then the lowest tid. Its index, or -EAGAIN when none qualifies.
 */
int inject__pick(const struct inject_thread *th, size_t n, pid_t pid);

/* Where the call's data goes below a stopped thread's stack pointer. */
struct inject_frame {
	uint64_t str; /* the library path, NUL-terminated */
	uint64_t rsp; /* the stack pointer at the call: (rsp + 8) % 16 == 0, [rsp] = 0 */
};

/* Below the 128-byte red zone; -EINVAL if rsp is too low to hold it. */
int inject__frame(uint64_t rsp, size_t str_bytes, struct inject_frame *f);

/* The state letter of /proc/PID/task/TID/stat ('S', 'R', 't'...); 0 if malformed. */
char inject__stat_state(const char *stat);

/* TracerPid of /proc/PID/status text; -1 if absent. */
long inject__tracer(const char *status);

/*
 * Seccomp of /proc/PID/status text: 0 none, 1 strict, 2 filter; -1 if absent (a kernel
 * without seccomp). *filters: Seccomp_filters, the filters installed (0 if absent).
 */
int inject__seccomp(const char *status, long *filters);

/* The index of the first of n words (a PC, a stack's top) inside a range [lo, hi); else -1. */
struct inject_range {
	uint64_t lo, hi;
};
int inject__in_ranges(const struct inject_range *r, size_t nr, const uint64_t *words, size_t n);

#endif /* __INJECT_H */
