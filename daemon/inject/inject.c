// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * nanwatchd --inject: dlopen a library in a running process, as gdb's `call dlopen` and
 * linux-inject do. Every thread is seized and interrupted; one stopped in a system call,
 * with no frame of its call chain (inject/unwind.c) in the dynamic loader or libc's malloc
 * and dl* families, is chosen; the others are let go (a lock one of them holds is released, never
 * waited on forever); the chosen one calls dlopen with a return address of 0, so the return
 * stops it with SIGSEGV; its registers, x87/SSE/AVX state included, are put back. Written
 * back with its orig_rax and -ERESTART* value, the interrupted call is restarted by the
 * kernel's own signal-return path once the thread leaves the stop; while the call runs,
 * orig_rax is -1 so that path leaves the call's registers alone (gdb's amd64_linux_write_pc).
 * Only x86-64.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* process_vm_readv */
#endif
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/openat2.h>
#include "inject/inject.h"
#include "inject/unwind.h"
#include "resolve/elfsym.h"
#include "resolve/target.h"
#include "util/file.h"

#define RED_ZONE 128
#define MAX_THREADS 4096
/*
 * The top of a stack searched for return addresses into libc's hazards, and into the loader:
 * without unwind tables, a word there may be a stale one in a live frame's uninitialised
 * space. The loader runs its own system calls, so a thread in one has its PC there; left
 * in a stack, its addresses are mostly stale ones of lazy binding, so only the first few
 * frames are searched for them (a thread waiting for the loader's lock in libc).
 */
#define SCAN_BYTES 2048
#define LOADER_SCAN_BYTES 256
#define UNWIND_FRAMES 256
#define STOP_TIMEOUT_MS 3000	 /* for a thread to reach the interrupt stop */
#define CALL_TIMEOUT_MS 60000	 /* for dlopen and the library's constructors */
#define PICK_TRIES 50		 /* stops, 20 ms apart, to find a thread at a safe point */
#define XSTATE_MAX (64u << 10)	 /* AVX-512 and AMX state fit */
#define SYM_SPAN_MAX (64u << 10) /* a hazard function ends at the next symbol, at most this */
#define RTLD_NOW_ 2
#define RTLD_DLOPEN_ 0x80000000 /* __libc_dlopen_mode's flag (glibc < 2.34 without libdl) */

/* include/linux/errno.h: the kernel-internal restart codes a stopped thread's rax may hold */
#define ERESTARTSYS_ 512
#define ERESTARTNOINTR_ 513
#define ERESTARTNOHAND_ 514
#define ERESTART_RESTARTBLOCK_ 516

struct map {
	uint64_t start, end, off;
	dev_t dev;
	ino_t ino;
	int exec;
	char *path; /* NULL for an anonymous mapping */
};

struct thr {
	pid_t tid;
	int stopped;
	int sig; /* a signal it stopped for: handed back at the detach */
	struct user_regs_struct regs;
};

struct inject {
	pid_t pid;
	int verbose;
	struct map *maps;
	size_t nmaps;
	uint64_t dlopen, dlerror; /* in the target; dlerror 0: none to ask */
	uint64_t munmap;	  /* libc's, for what a failed dlopen left mapped; 0: none */
	int flags;		  /* dlopen's */
	struct unwind *uw;	  /* the threads' call chains */
	struct inject_range *hz;  /* the loader's code (nld ranges), then libc's malloc and dl* */
	size_t nhz, nld;
	struct thr *th;
	size_t nth;
	int loaded; /* the target maps the library already */
	char *err;
	size_t errlen;
};

enum inject_restart inject__restart_kind(int64_t orig_rax, int64_t rax)
{
	if (orig_rax < 0)
		return INJECT_NOT_IN_SYSCALL;
	switch (rax) {
	case -ERESTARTSYS_:
	case -ERESTARTNOINTR_:
	case -ERESTARTNOHAND_:
		return INJECT_RESTART;
	case -ERESTART_RESTARTBLOCK_:
		return INJECT_RESTART_BLOCK;
	default:
		return INJECT_SYSCALL_DONE;
	}
}

int inject__pick(const struct inject_thread *th, size_t n, pid_t pid)
{
	int best = -EAGAIN, best_rank = -1;
	size_t i;

	for (i = 0; i < n; i++) {
		enum inject_restart k = inject__restart_kind(th[i].orig_rax, th[i].rax);
		int rank;

		if (k == INJECT_NOT_IN_SYSCALL || th[i].hazard || th[i].signalled ||
		    th[i].stack_room < INJECT_STACK_NEED)
			continue;
		rank = (k != INJECT_SYSCALL_DONE) * 2 + (th[i].tid == pid);
		if (rank > best_rank || (rank == best_rank && th[i].tid < th[best].tid)) {
			best = i;
			best_rank = rank;
		}
	}
	return best;
}

int inject__frame(uint64_t rsp, size_t str_bytes, struct inject_frame *f)
{
	uint64_t need = RED_ZONE + str_bytes + 64;

	if (!str_bytes || str_bytes > PATH_MAX || rsp < need + INJECT_STACK_NEED)
		return -EINVAL;
	f->str = (rsp - RED_ZONE - str_bytes) & ~15ULL;
	f->rsp = f->str - 16 - 8; /* 16-aligned, less the return address a call pushes */
	return 0;
}

char inject__stat_state(const char *stat)
{
	const char *p = strrchr(stat, ')'); /* comm may hold spaces and parentheses */

	if (!p || p[1] != ' ' || !p[2] || p[3] != ' ')
		return 0;
	return p[2];
}

long inject__tracer(const char *status)
{
	const char *p = strstr(status, "\nTracerPid:");

	return p ? strtol(p + 11, NULL, 10) : -1;
}

int inject__seccomp(const char *status, long *filters)
{
	const char *p = strstr(status, "\nSeccomp:"), *f = strstr(status, "\nSeccomp_filters:");

	*filters = f ? strtol(f + 17, NULL, 10) : 0;
	return p ? (int)strtol(p + 9, NULL, 10) : -1;
}

int inject__in_ranges(const struct inject_range *r, size_t nr, const uint64_t *words, size_t n)
{
	size_t i, j;

	for (i = 0; i < n; i++)
		for (j = 0; j < nr; j++)
			if (words[i] >= r[j].lo && words[i] < r[j].hi)
				return i;
	return -1;
}

static int fail(struct inject *in, int ret, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int fail(struct inject *in, int ret, const char *fmt, ...)
{
	va_list ap;
	int n;

	n = snprintf(in->err, in->errlen, "failed to inject into pid %d: ", in->pid);
	va_start(ap, fmt);
	if (n > 0 && (size_t)n < in->errlen)
		vsnprintf(in->err + n, in->errlen - n, fmt, ap);
	va_end(ap);
	return ret;
}

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');

	return s ? s + 1 : path;
}

/* ---- the library's path ---- */

static int lib_at(const char *dir, char *out, size_t len)
{
	char path[PATH_MAX];

	if (snprintf(path, sizeof(path), "%s/%s", dir, INJECT_LIB_NAME) >= (int)sizeof(path) ||
	    access(path, R_OK) || !realpath(path, out) || strlen(out) >= len)
		return -ENOENT;
	return 0;
}

int inject__find_lib(const char *explicit, const char *lib_dir, char *out, size_t len, char *err,
		     size_t errlen)
{
	char exe[PATH_MAX], real[PATH_MAX];
	ssize_t n;

	if (explicit) {
		if (!realpath(explicit, real) || access(real, R_OK) || strlen(real) >= len) {
			snprintf(err, errlen, "failed to open --inject-lib %s: %s", explicit,
				 strerror(errno ? errno : ENAMETOOLONG));
			return -ENOENT;
		}
		strcpy(out, real);
		return 0;
	}
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		exe[n] = 0;
		*strrchr(exe, '/') = 0;
		if (!lib_at(exe, out, len))
			return 0;
	}
	if (!lib_at(lib_dir, out, len))
		return 0;
	snprintf(err, errlen,
		 "failed to find %s next to nanwatchd or in %s: build it (make, with CUDA) or "
		 "give --inject-lib PATH",
		 INJECT_LIB_NAME, lib_dir);
	return -ENOENT;
}

/* ---- the target's mappings and symbols ---- */

static void maps_free(struct inject *in)
{
	size_t i;

	for (i = 0; i < in->nmaps; i++)
		free(in->maps[i].path);
	free(in->maps);
	in->maps = NULL;
	in->nmaps = 0;
}

static int maps_add(struct inject *in, const char *line)
{
	unsigned long long start, end, off, ino;
	unsigned int major, minor;
	char perms[8];
	struct map *m;
	int pos = 0;

	if (sscanf(line, "%llx-%llx %7s %llx %x:%x %llu %n", &start, &end, perms, &off, &major,
		   &minor, &ino, &pos) < 7)
		return 0;
	m = realloc(in->maps, (in->nmaps + 1) * sizeof(*m));
	if (!m)
		return -ENOMEM;
	in->maps = m;
	m += in->nmaps;
	*m = (struct map){.start = start,
			  .end = end,
			  .off = off,
			  .dev = makedev(major, minor),
			  .ino = ino,
			  .exec = perms[2] == 'x'};
	if (pos && line[pos] && !(m->path = strdup(line + pos)))
		return -ENOMEM;
	in->nmaps++;
	return 0;
}

static int maps_read(struct inject *in)
{
	char path[64], *buf, *line, *save = NULL;
	int ret = 0;

	snprintf(path, sizeof(path), "/proc/%d/maps", in->pid);
	buf = file__read(path, TARGET_MAX_MAPS, NULL);
	if (!buf && errno == ENOENT)
		return fail(in, -ESRCH, "no such process");
	if (!buf && (errno == EACCES || errno == EPERM))
		return fail(in, -EPERM,
			    "ptrace not permitted: %s is not readable (another user's process: "
			    "the daemon needs CAP_SYS_PTRACE)",
			    path);
	if (!buf)
		return fail(in, -errno, "failed to read %s: %s", path, strerror(errno));
	in->loaded = inject__loaded(buf);
	for (line = strtok_r(buf, "\n", &save); line && !ret; line = strtok_r(NULL, "\n", &save))
		ret = maps_add(in, line);
	free(buf);
	return ret ? fail(in, ret, "out of memory") : 0;
}

/* Every executable file mapping, for the unwinder: its tables are read when a frame needs them. */
static int unwind_setup(struct inject *in)
{
	size_t i, j;
	int ret = 0;

	in->uw = unwind__new(in->pid);
	if (!in->uw)
		return fail(in, -ENOMEM, "out of memory");
	for (i = 0; i < in->nmaps && !ret; i++) {
		const struct map *m = &in->maps[i];

		if (!m->exec || !m->path || m->path[0] != '/' || strstr(m->path, " (deleted)"))
			continue;
		for (j = 0; j < in->nmaps; j++) {
			const struct map *b = &in->maps[j];

			if (b->off == 0 && b->dev == m->dev && b->ino == m->ino && b->path &&
			    !strcmp(b->path, m->path)) {
				ret = unwind__add(in->uw, m->start, m->end, b->start, m->path,
						  m->dev, m->ino);
				break;
			}
		}
	}
	return ret ? fail(in, ret, "out of memory") : 0;
}

static const struct map *map_at(const struct inject *in, uint64_t addr)
{
	size_t i;

	for (i = 0; i < in->nmaps; i++)
		if (addr >= in->maps[i].start && addr < in->maps[i].end)
			return &in->maps[i];
	return NULL;
}

/* The first file mapping whose name starts with one of the prefixes (NULL-terminated). */
static const struct map *find_image(const struct inject *in, const char *const *prefixes)
{
	size_t i, j;

	for (i = 0; i < in->nmaps; i++) {
		const struct map *m = &in->maps[i];

		if (!m->path || m->path[0] != '/' || m->off || strstr(m->path, " (deleted)"))
			continue;
		for (j = 0; prefixes[j]; j++)
			if (!strncmp(base_name(m->path), prefixes[j], strlen(prefixes[j])))
				return m;
	}
	return NULL;
}

struct image {
	struct elfsym *e;
	uint64_t bias; /* runtime address - link-time address */
};

/* The mapped file itself (target__open_image), read bounded (elfsym), never by its path. */
static int image_open(struct inject *in, const struct map *m, struct image *img)
{
	uint64_t first;
	int fd;

	fd = target__open_image(in->pid, m->path, m->start, m->end, m->dev, m->ino);
	if (fd < 0)
		return fail(in, fd, "failed to open %s: %s", m->path, target__image_why(fd));
	img->e = elfsym__open_fd(fd, NULL);
	if (!img->e)
		return fail(in, -errno, "failed to read %s: %s", m->path,
			    target__image_why(-errno));
	if (elfsym__first_load(img->e, &first)) {
		elfsym__close(img->e);
		img->e = NULL;
		return fail(in, -ENOEXEC, "%s has no loadable segment", m->path);
	}
	img->bias = m->start - first;
	return 0;
}

static uint64_t image_sym(const struct image *img, const char *name)
{
	uint64_t a;

	return img->e && !elfsym__find(img->e, name, &a) ? img->bias + a : 0;
}

/* Every symbol address of a file, sorted: where a function ends is where the next begins. */
struct addrs {
	uint64_t *a;
	size_t n, cap;
};

static int addrs_add(const char *name, uint64_t addr, void *ctx)
{
	struct addrs *s = ctx;
	uint64_t *a;

	(void)name;
	if (s->n == s->cap) {
		s->cap = s->cap ? s->cap * 2 : 4096;
		a = realloc(s->a, s->cap * sizeof(*a));
		if (!a)
			return -ENOMEM;
		s->a = a;
	}
	s->a[s->n++] = addr;
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static uint64_t next_addr(const struct addrs *s, uint64_t addr)
{
	size_t lo = 0, hi = s->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (s->a[mid] <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < s->n && s->a[lo] - addr < SYM_SPAN_MAX ? s->a[lo] : addr + SYM_SPAN_MAX;
}

static int hz_add(struct inject *in, uint64_t lo, uint64_t hi)
{
	struct inject_range *r = realloc(in->hz, (in->nhz + 1) * sizeof(*r));

	if (!r)
		return -ENOMEM;
	in->hz = r;
	in->hz[in->nhz++] = (struct inject_range){lo, hi};
	return 0;
}

/*
 * libc's functions that hold the malloc arenas' locks or the loader's (fork holds every
 * arena's; dl_iterate_phdr the loader's while its callback runs): internal helpers such as
 * _int_malloc are not exported, and fall inside the exported function before them.
 */
static const char *const libc_hazards[] = {
	"malloc",
	"free",
	"calloc",
	"realloc",
	"reallocarray",
	"memalign",
	"valloc",
	"pvalloc",
	"aligned_alloc",
	"posix_memalign",
	"malloc_trim",
	"mallinfo",
	"mallinfo2",
	"malloc_stats",
	"malloc_info",
	"mallopt",
	"__libc_malloc",
	"__libc_free",
	"__libc_calloc",
	"__libc_realloc",
	"__libc_memalign",
	"fork",
	"_Fork",
	"dlopen",
	"dlclose",
	"dlsym",
	"dlvsym",
	"dlerror",
	"dladdr",
	"dladdr1",
	"dlinfo",
	"dlmopen",
	"dl_iterate_phdr",
	"__libc_dlopen_mode",
	"__libc_dlsym",
	"__libc_dlclose",
	"exit",
	NULL,
};

static int libc_ranges(struct inject *in, const struct image *libc)
{
	struct addrs s = {};
	size_t i;
	int ret;

	ret = elfsym__each(libc->e, "", addrs_add, &s);
	if (!ret)
		qsort(s.a, s.n, sizeof(*s.a), cmp_u64);
	for (i = 0; !ret && libc_hazards[i]; i++) {
		uint64_t a;

		if (elfsym__find(libc->e, libc_hazards[i], &a))
			continue;
		ret = hz_add(in, libc->bias + a, libc->bias + next_addr(&s, a));
	}
	free(s.a);
	return ret;
}

static int is_loader(const char *path)
{
	const char *b = base_name(path);

	return !strncmp(b, "ld-linux", 8) || !strncmp(b, "ld-2.", 5) || !strcmp(b, "ld.so") ||
	       !strncmp(b, "ld64.so", 7);
}

/* dlopen (libc since glibc 2.34, else libdl, else libc's __libc_dlopen_mode) and the hazards. */
static int resolve_syms(struct inject *in)
{
	static const char *const libc_names[] = {"libc.so.6", "libc-2.", NULL};
	static const char *const libdl_names[] = {"libdl.so", "libdl-2.", NULL};
	struct image libc = {}, libdl = {};
	const struct map *m;
	size_t i;
	int ret = 0;

	for (i = 0; i < in->nmaps && !ret; i++)
		if (in->maps[i].exec && in->maps[i].path && is_loader(in->maps[i].path))
			ret = hz_add(in, in->maps[i].start, in->maps[i].end);
	in->nld = in->nhz;
	m = find_image(in, libc_names);
	if (!m)
		return fail(in, -ENOEXEC, "no glibc libc.so.6 mapped (a static or musl program)");
	ret = ret ? ret : image_open(in, m, &libc);
	if (ret)
		return ret;
	ret = libc_ranges(in, &libc);
	in->flags = RTLD_NOW_;
	in->munmap = image_sym(&libc, "munmap");
	in->dlopen = image_sym(&libc, "dlopen");
	in->dlerror = image_sym(&libc, "dlerror");
	m = in->dlopen ? NULL : find_image(in, libdl_names);
	if (m && !ret && !image_open(in, m, &libdl)) {
		in->dlopen = image_sym(&libdl, "dlopen");
		in->dlerror = image_sym(&libdl, "dlerror");
	}
	if (!in->dlopen) {
		in->dlopen = image_sym(&libc, "__libc_dlopen_mode");
		in->dlerror = 0;
		in->flags = RTLD_NOW_ | RTLD_DLOPEN_;
	}
	elfsym__close(libc.e);
	elfsym__close(libdl.e);
	if (ret)
		return fail(in, ret, "out of memory");
	if (!in->dlopen)
		return fail(in, -ENOENT, "no dlopen in %s or a mapped libdl", m ? m->path : "libc");
	return 0;
}

/* ---- ptrace: seize, stop, inspect, let go ---- */

static int now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int)(ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
}

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

/* The next wait status of a traced thread; -ETIMEDOUT after timeout_ms. */
static int wait_thread(pid_t tid, int *status, int timeout_ms)
{
	int start = now_ms(), pause = 0;

	for (;;) {
		pid_t r = waitpid(tid, status, __WALL | WNOHANG);

		if (r == tid)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
		if (now_ms() - start > timeout_ms)
			return -ETIMEDOUT;
		sleep_ms(pause);
		pause = pause < 5 ? pause + 1 : 5;
	}
}

static int is_group_stop_sig(int sig)
{
	return sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU;
}

/* Read the thread ids of the process; at most MAX_THREADS. */
static int list_tasks(pid_t pid, pid_t *tids, size_t *n)
{
	char path[64];
	struct dirent *d;
	DIR *dir;

	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	dir = opendir(path);
	if (!dir)
		return -errno;
	*n = 0;
	while ((d = readdir(dir)) && *n < MAX_THREADS) {
		long t = strtol(d->d_name, NULL, 10);

		if (t > 0 && t <= INT_MAX)
			tids[(*n)++] = (pid_t)t;
	}
	closedir(dir);
	return 0;
}

static struct thr *find_thr(struct inject *in, pid_t tid)
{
	size_t i;

	for (i = 0; i < in->nth; i++)
		if (in->th[i].tid == tid)
			return &in->th[i];
	return NULL;
}

/* Why ptrace is refused: another tracer, Yama, or a missing capability; 0 for a thread that
 * exited. */
static int explain_eperm(struct inject *in, pid_t tid)
{
	char path[64], *buf;
	long tracer = -1, scope = -1;
	char state;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", in->pid, tid);
	buf = file__read(path, 64 << 10, NULL);
	state = buf ? inject__stat_state(buf) : 'X';
	free(buf);
	if (state == 'Z' || state == 'X')
		return 0; /* a thread that exited (a main thread gone before the others) */
	snprintf(path, sizeof(path), "/proc/%d/task/%d/status", in->pid, tid);
	buf = file__read(path, 64 << 10, NULL);
	if (buf)
		tracer = inject__tracer(buf);
	free(buf);
	buf = file__read("/proc/sys/kernel/yama/ptrace_scope", 64, NULL);
	if (buf)
		scope = strtol(buf, NULL, 10);
	free(buf);
	if (tracer > 0)
		return fail(in, -EPERM,
			    "ptrace not permitted: thread %d is already traced by pid %ld (a "
			    "debugger or another tracer); detach it first",
			    tid, tracer);
	if (scope == 3)
		return fail(in, -EPERM,
			    "ptrace not permitted: kernel.yama.ptrace_scope is 3 (ptrace disabled "
			    "until reboot)");
	return fail(in, -EPERM,
		    "ptrace not permitted (the daemon needs CAP_SYS_PTRACE, and no sandbox, "
		    "seccomp filter or LSM that forbids ptrace)");
}

/*
 * A thread under seccomp (strict, or a filter: seccomp(2) cannot be left, and no_new_privs
 * with it) is refused: what its filter does to the calls dlopen and the library's
 * constructor make (open, mmap of code, mprotect) cannot be known before they are made, and
 * it may kill the whole process for one (SECCOMP_RET_KILL_PROCESS) or refuse a later
 * segment's mmap and leave the first mapped. A thread that exited is no concern.
 */
static int check_seccomp(struct inject *in, pid_t tid, const char *status)
{
	long filters;
	int mode = inject__seccomp(status, &filters);

	if (mode <= 0)
		return 0;
	return fail(in, -EPERM,
		    "the process runs under seccomp (thread %d: %s%ld filter%s), which may kill it "
		    "or refuse the calls dlopen makes (open, mmap of code): not injected; load the "
		    "library as it starts instead (nanwatch-run: CUDA_INJECTION64_PATH)",
		    tid, mode == 1 ? "strict mode, " : "", filters, filters == 1 ? "" : "s");
}

/* Before anything is touched: refuse a traced, stopped or seccomp-confined process. */
static int precheck(struct inject *in, const pid_t *tids, size_t n)
{
	char path[96], *buf;
	size_t i;
	int ret;

	for (i = 0; i < n; i++) {
		long tracer;
		char state;

		snprintf(path, sizeof(path), "/proc/%d/task/%d/status", in->pid, tids[i]);
		buf = file__read(path, 64 << 10, NULL);
		tracer = buf ? inject__tracer(buf) : -1;
		ret = buf ? check_seccomp(in, tids[i], buf) : 0;
		free(buf);
		if (tracer > 0)
			return explain_eperm(in, tids[i]);
		if (ret)
			return ret;
		snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", in->pid, tids[i]);
		buf = file__read(path, 64 << 10, NULL);
		state = buf ? inject__stat_state(buf) : 0;
		free(buf);
		if (state == 'T' || state == 't')
			return fail(in, -EAGAIN,
				    "the process is stopped (SIGSTOP); continue it "
				    "first");
	}
	return 0;
}

static int seize_one(struct inject *in, pid_t tid)
{
	struct thr *t;

	if (ptrace(PTRACE_SEIZE, tid, 0, 0)) {
		if (errno == ESRCH)
			return 0; /* exited meanwhile */
		if (errno == EPERM)
			return explain_eperm(in, tid);
		return fail(in, -errno, "failed to seize thread %d: %s", tid, strerror(errno));
	}
	t = &in->th[in->nth++];
	*t = (struct thr){.tid = tid};
	if (ptrace(PTRACE_INTERRUPT, tid, 0, 0) && errno != ESRCH)
		return fail(in, -errno, "failed to interrupt thread %d: %s", tid, strerror(errno));
	return 0;
}

/* Wait for a seized thread's first stop and read its registers. */
static int stop_one(struct inject *in, struct thr *t)
{
	int st, ret = wait_thread(t->tid, &st, STOP_TIMEOUT_MS);

	if (ret == -ECHILD || (!ret && !WIFSTOPPED(st)))
		return 0; /* it exited: nothing to restore */
	if (ret)
		return fail(in, ret, "thread %d did not stop within %d ms (uninterruptible?)",
			    t->tid, STOP_TIMEOUT_MS);
	t->stopped = 1;
	if (st >> 16 != PTRACE_EVENT_STOP)
		t->sig = WSTOPSIG(st); /* a signal came first: hand it back at the detach */
	else if (is_group_stop_sig(WSTOPSIG(st)))
		t->sig = -1; /* job-control stop: never the chosen thread */
	if (ptrace(PTRACE_GETREGS, t->tid, 0, &t->regs))
		return fail(in, -errno, "failed to read thread %d's registers: %s", t->tid,
			    strerror(errno));
	return 0;
}

/* precheck on every thread, before the library is placed (a copy written into its root). */
static int check_threads(struct inject *in)
{
	pid_t *tids = malloc(MAX_THREADS * sizeof(*tids));
	size_t n = 0;
	int ret;

	if (!tids)
		return fail(in, -ENOMEM, "out of memory");
	ret = list_tasks(in->pid, tids, &n);
	if (ret)
		ret = fail(in, ret == -ENOENT ? -ESRCH : ret, "failed to list threads: %s",
			   strerror(-ret));
	else
		ret = precheck(in, tids, n);
	free(tids);
	return ret;
}

/* Seize and stop every thread; threads made meanwhile are found by listing again. */
static int stop_all(struct inject *in)
{
	pid_t *tids = malloc(MAX_THREADS * sizeof(*tids));
	size_t n = 0, i, done = 0;
	int ret, first = 1;

	if (!tids)
		return fail(in, -ENOMEM, "out of memory");
	for (;;) {
		size_t before = in->nth;

		ret = list_tasks(in->pid, tids, &n);
		if (ret) {
			ret = fail(in, ret == -ENOENT ? -ESRCH : ret, "failed to list threads: %s",
				   strerror(-ret));
			break;
		}
		if (first && (ret = precheck(in, tids, n)))
			break;
		first = 0;
		for (i = 0; i < n && !ret; i++)
			if (!find_thr(in, tids[i]) && in->nth < MAX_THREADS)
				ret = seize_one(in, tids[i]);
		for (; done < in->nth && !ret; done++)
			ret = stop_one(in, &in->th[done]);
		if (ret || in->nth == before)
			break;
	}
	free(tids);
	return ret;
}

static void detach_one(struct thr *t)
{
	if (t->tid > 0)
		ptrace(PTRACE_DETACH, t->tid, 0, t->sig > 0 ? t->sig : 0);
	t->tid = 0;
}

/* Let every thread but keep go: its stop ends and its interrupted system call restarts. */
static void detach_all(struct inject *in, const struct thr *keep)
{
	size_t i;

	for (i = 0; i < in->nth; i++)
		if (&in->th[i] != keep)
			detach_one(&in->th[i]);
	if (!keep)
		in->nth = 0;
}

/* ---- choosing the thread ---- */

static size_t read_words(pid_t pid, uint64_t addr, uint64_t *w, size_t n)
{
	struct iovec local = {w, n * 8}, remote = {(void *)addr, n * 8};
	ssize_t got = process_vm_readv(pid, &local, 1, &remote, 1, 0);

	return got > 0 ? (size_t)got / 8 : 0;
}

/*
 * The call's return faults with SIGSEGV; the kernel forces a blocked or ignored one through by
 * resetting its action to the default for good. Threads that block or ignore it are not used.
 */
static int segv_masked(pid_t pid, pid_t tid)
{
	char path[96], *buf, *p;
	unsigned long long blk = ~0ULL, ign = ~0ULL;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/status", pid, tid);
	buf = file__read(path, 64 << 10, NULL);
	if (!buf)
		return 1;
	p = strstr(buf, "\nSigBlk:");
	if (p)
		blk = strtoull(p + 8, NULL, 16);
	p = strstr(buf, "\nSigIgn:");
	if (p)
		ign = strtoull(p + 8, NULL, 16);
	free(buf);
	return ((blk | ign) >> (SIGSEGV - 1)) & 1;
}

static void unwind_regs_of(const struct user_regs_struct *r, struct unwind_regs *u)
{
	const uint64_t v[17] = {r->rax, r->rdx, r->rcx, r->rbx, r->rsi, r->rdi,
				r->rbp, r->rsp, r->r8,	r->r9,	r->r10, r->r11,
				r->r12, r->r13, r->r14, r->r15, r->rip};

	memcpy(u->r, v, sizeof(v));
	u->known = (1u << 17) - 1;
}

/*
 * The first of the thread's PCs (its own, then its callers' return addresses) in a hazard:
 * the frames the unwind tables give; past the frame where they end, the words of the stack
 * (loader addresses only in the first LOADER_SCAN_BYTES). Its index in w, or -1.
 */
static int find_hazard(struct inject *in, const struct thr *t, const struct map *m, uint64_t *w,
		       size_t *nframes, int *whole)
{
	struct unwind_regs ur;
	uint64_t rest, avail;
	size_t n, k;
	int hit;

	unwind_regs_of(&t->regs, &ur);
	n = unwind__walk(in->uw, &ur, m->start, m->end, w, UNWIND_FRAMES, &rest);
	*nframes = n;
	*whole = !rest;
	hit = inject__in_ranges(in->hz, in->nhz, w, n);
	if (hit >= 0 || !rest || rest < m->start || rest >= m->end)
		return hit;
	avail = (m->end - rest) / 8;
	k = read_words(in->pid, rest, w + n, avail < SCAN_BYTES / 8 ? avail : SCAN_BYTES / 8);
	hit = inject__in_ranges(in->hz, in->nld, w + n,
				k < LOADER_SCAN_BYTES / 8 ? k : LOADER_SCAN_BYTES / 8);
	if (hit < 0)
		hit = inject__in_ranges(in->hz + in->nld, in->nhz - in->nld, w + n, k);
	return hit < 0 ? -1 : (int)n + hit;
}

static void describe(struct inject *in, const struct thr *t, struct inject_thread *d,
		     uint64_t *words)
{
	const struct map *m = map_at(in, t->regs.rsp);
	size_t frames = 0;
	int hit = -1, whole = 0;

	*d = (struct inject_thread){.tid = t->tid,
				    .orig_rax = (int64_t)t->regs.orig_rax,
				    .rax = (int64_t)t->regs.rax,
				    .rsp = t->regs.rsp,
				    .signalled = t->sig != 0 || segv_masked(in->pid, t->tid)};
	if (m) {
		d->stack_room = m->path && !strcmp(m->path, "[stack]") ? UINT64_MAX / 2
								       : t->regs.rsp - m->start;
		hit = find_hazard(in, t, m, words, &frames, &whole);
	}
	d->hazard = !m || hit >= 0;
	if (!in->verbose)
		return;
	fprintf(stderr, "nanwatchd: thread %d: syscall %lld rax %lld pc 0x%llx, %zu frames%s%s",
		t->tid, (long long)d->orig_rax, (long long)d->rax, (unsigned long long)t->regs.rip,
		frames, whole ? "" : " and a stack scan", d->signalled ? " (signalled)" : "");
	if (hit >= 0)
		fprintf(stderr, " (0x%llx, %s: in malloc or the loader)",
			(unsigned long long)words[hit],
			(size_t)hit < frames ? "a frame" : "a stack word");
	fputc('\n', stderr);
}

static struct thr *choose(struct inject *in)
{
	struct inject_thread *d = calloc(in->nth ? in->nth : 1, sizeof(*d));
	uint64_t *words = malloc((UNWIND_FRAMES + SCAN_BYTES / 8) * sizeof(*words));
	struct thr *t = NULL;
	size_t i;
	int k;

	if (d && words) {
		for (i = 0; i < in->nth; i++) {
			describe(in, &in->th[i], &d[i], words);
			d[i].signalled |= !in->th[i].stopped;
		}
		k = inject__pick(d, in->nth, in->pid);
		t = k >= 0 ? &in->th[k] : NULL;
	}
	free(d);
	free(words);
	return t;
}

/* Stop everything until a thread is at a safe point; the others are let go again. */
static int stop_and_choose(struct inject *in, struct thr **chosen)
{
	int tries, ret;

	for (tries = 0; tries < PICK_TRIES; tries++) {
		ret = stop_all(in);
		if (!ret && !in->nth)
			ret = fail(in, -ESRCH, "the process exited");
		if (ret) {
			detach_all(in, NULL);
			return ret;
		}
		*chosen = choose(in);
		detach_all(in, *chosen);
		if (*chosen)
			return 0;
		sleep_ms(20);
	}
	return fail(in, -EAGAIN,
		    "no thread at a safe point after %d tries (each must be blocked in a system "
		    "call, outside malloc and the dynamic loader); try again later",
		    PICK_TRIES);
}

/* ---- the call ---- */

/* The thread's FPU/SSE/AVX state: the syscall ABI keeps it, and dlopen does not. */
struct fpstate {
	void *buf;
	size_t len;
	int xstate; /* NT_X86_XSTATE, else PTRACE_GETFPREGS */
};

static int fp_save(pid_t tid, struct fpstate *fp)
{
	struct iovec iov;

	fp->buf = calloc(1, XSTATE_MAX);
	if (!fp->buf)
		return -ENOMEM;
	iov = (struct iovec){fp->buf, XSTATE_MAX};
	if (!ptrace(PTRACE_GETREGSET, tid, (void *)NT_X86_XSTATE, &iov)) {
		fp->len = iov.iov_len;
		fp->xstate = 1;
		return 0;
	}
	fp->len = sizeof(struct user_fpregs_struct);
	return ptrace(PTRACE_GETFPREGS, tid, 0, fp->buf) ? -errno : 0;
}

static int fp_restore(pid_t tid, const struct fpstate *fp)
{
	struct iovec iov = {fp->buf, fp->len};

	if (fp->xstate)
		return ptrace(PTRACE_SETREGSET, tid, (void *)NT_X86_XSTATE, &iov) ? -errno : 0;
	return ptrace(PTRACE_SETFPREGS, tid, 0, fp->buf) ? -errno : 0;
}

/* Write n bytes (padded with zeros to whole words) at addr, word by word through ptrace. */
static int poke(pid_t tid, uint64_t addr, const void *data, size_t n)
{
	size_t i;

	for (i = 0; i < n; i += 8) {
		uint64_t w = 0;

		memcpy(&w, (const char *)data + i, n - i < 8 ? n - i : 8);
		if (ptrace(PTRACE_POKEDATA, tid, (void *)(addr + i), (void *)w))
			return -errno;
	}
	return 0;
}

/*
 * fn(a0, a1) on the thread, from the frame at sp whose return address is 0: the return
 * faults at PC 0 and stops the thread. Signals meant for the thread meanwhile are delivered.
 */
static int call(struct inject *in, const struct thr *t, uint64_t fn, uint64_t a0, uint64_t a1,
		uint64_t sp, uint64_t *ret)
{
	struct user_regs_struct r = t->regs;
	int st, err;
	uint64_t zero = 0;

	r.rip = fn;
	r.rdi = a0;
	r.rsi = a1;
	r.rsp = sp;
	r.rax = 0;
	r.orig_rax = -1; /* not in a system call: the kernel must not "restart" the call */
	err = poke(t->tid, sp, &zero, 8);
	if (err || ptrace(PTRACE_SETREGS, t->tid, 0, &r) || ptrace(PTRACE_CONT, t->tid, 0, 0))
		return fail(in, err ? err : -errno, "failed to set up the call on thread %d: %s",
			    t->tid, strerror(err ? -err : errno));
	for (;;) {
		err = wait_thread(t->tid, &st, CALL_TIMEOUT_MS);
		if (err == -ETIMEDOUT) {
			ptrace(PTRACE_INTERRUPT, t->tid, 0, 0);
			if (wait_thread(t->tid, &st, STOP_TIMEOUT_MS) || !WIFSTOPPED(st))
				return fail(in, -ETIMEDOUT, "dlopen did not return within %d s",
					    CALL_TIMEOUT_MS / 1000);
			return fail(in, -ETIMEDOUT,
				    "dlopen did not return within %d s; thread %d was put back "
				    "where it was (its loader state may be inconsistent)",
				    CALL_TIMEOUT_MS / 1000, t->tid);
		}
		if (err || !WIFSTOPPED(st))
			return fail(in, -ESRCH, "the process exited during dlopen");
		if (st >> 16 == PTRACE_EVENT_STOP) {
			ptrace(PTRACE_CONT, t->tid, 0, 0); /* a job-control stop: finish first */
			continue;
		}
		if (WSTOPSIG(st) != SIGSEGV) {
			ptrace(PTRACE_CONT, t->tid, 0, WSTOPSIG(st));
			continue;
		}
		if (ptrace(PTRACE_GETREGS, t->tid, 0, &r))
			return fail(in, -errno, "failed to read registers: %s", strerror(errno));
		if (r.rip != 0)
			return fail(in, -EFAULT,
				    "the call faulted at 0x%llx (in dlopen or a constructor); the "
				    "thread was put back",
				    (unsigned long long)r.rip);
		*ret = r.rax;
		return 0;
	}
}

/* dlerror()'s message, bounded, or a generic one. */
static void dl_error(struct inject *in, const struct thr *t, uint64_t sp, char *msg, size_t len)
{
	uint64_t p = 0;
	size_t i;

	snprintf(msg, len, "dlopen returned NULL");
	if (!in->dlerror || call(in, t, in->dlerror, 0, 0, sp, &p) || !p)
		return;
	for (i = 0; i + 1 < len; i++) {
		struct iovec local = {msg + i, 1}, remote = {(void *)(p + i), 1};

		if (process_vm_readv(in->pid, &local, 1, &remote, 1, 0) != 1 || !msg[i])
			break;
		if ((unsigned char)msg[i] < 0x20)
			msg[i] = ' ';
	}
	msg[i] = 0;
}

/* check_seccomp on the chosen thread, once more: a filter may have come since the precheck. */
static int thread_seccomp(struct inject *in, pid_t tid)
{
	char path[96], *buf;
	int ret;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/status", in->pid, tid);
	buf = file__read(path, 64 << 10, NULL);
	if (!buf)
		return fail(in, -ESRCH, "failed to read %s: %s", path, strerror(errno));
	ret = check_seccomp(in, tid, buf);
	free(buf);
	return ret;
}

/* The library as the target opens it (see place()). */
struct placed {
	char path[PATH_MAX]; /* as the target opens it */
	int tmpfd;	     /* its /tmp, when a private copy was made there; else -1 */
	char name[64];
	dev_t dev; /* the file: its mappings are what a failed dlopen may leave */
	ino_t ino;
};

#define LEFT_MAX 64 /* mappings of the library a failed dlopen may leave: a few per segment */

/* The mappings of pl's file in the target now: by device and inode, its path, a copy's name. */
static size_t lib_mappings(struct inject *in, const struct placed *pl, struct inject_range *r)
{
	unsigned long long start, end, off, ino;
	char path[64], *buf, *line, *save = NULL;
	unsigned int major, minor;
	size_t n = 0;
	int pos;

	snprintf(path, sizeof(path), "/proc/%d/maps", in->pid);
	buf = file__read(path, TARGET_MAX_MAPS, NULL);
	for (line = buf ? strtok_r(buf, "\n", &save) : NULL; line && n < LEFT_MAX;
	     line = strtok_r(NULL, "\n", &save)) {
		pos = 0;
		if (sscanf(line, "%llx-%llx %*s %llx %x:%x %llu %n", &start, &end, &off, &major,
			   &minor, &ino, &pos) < 6)
			continue;
		if ((makedev(major, minor) == pl->dev && ino == pl->ino) ||
		    (pos && !strcmp(line + pos, pl->path)) ||
		    (pl->tmpfd >= 0 && pos && strstr(line + pos, pl->name)))
			r[n++] = (struct inject_range){start, end};
	}
	free(buf);
	return n;
}

/* Mappings of the library the target had before the call: never its own to remove. */
struct lib_maps {
	struct inject_range r[LEFT_MAX];
	size_t n;
};

/* The mappings of ls not in before (ranges that were there exactly, kept). */
static size_t new_mappings(struct lib_maps *ls, const struct lib_maps *before)
{
	size_t i, j, k = 0;

	for (i = 0; i < ls->n; i++) {
		for (j = 0; j < before->n; j++)
			if (ls->r[i].lo == before->r[j].lo && ls->r[i].hi == before->r[j].hi)
				break;
		if (j == before->n)
			ls->r[k++] = ls->r[i];
	}
	return ls->n = k;
}

/*
 * dlopen failed: glibc leaves what it mapped of a file it could not finish (its first
 * mapping, when a later segment's mmap is refused), unreferenced. The mappings of the file
 * that were not there before the call are removed with the target's munmap on the same
 * thread. How many are left; *found: how many there were.
 */
static size_t unmap_leftovers(struct inject *in, const struct thr *t, uint64_t sp,
			      const struct placed *pl, const struct lib_maps *before, size_t *found)
{
	struct lib_maps now;
	size_t i;
	uint64_t ret;

	now.n = lib_mappings(in, pl, now.r);
	*found = new_mappings(&now, before);
	for (i = 0; i < now.n && in->munmap; i++)
		if (call(in, t, in->munmap, now.r[i].lo, now.r[i].hi - now.r[i].lo, sp, &ret))
			break; /* the thread faulted or the process went: no more calls */
	if (!now.n)
		return 0;
	now.n = lib_mappings(in, pl, now.r);
	return new_mappings(&now, before);
}

/*
 * What the call changes in the target, to put it back: the stack below the red zone that
 * its data overwrites (unused by the thread, put back all the same), and the mappings of the
 * library there before it (a failed dlopen's are those that were not).
 */
struct undo {
	uint64_t addr;
	size_t n;
	uint64_t w[(PATH_MAX + 64) / 8];
	struct lib_maps before;
};

static int stack_save(struct inject *in, const struct thr *t, const struct inject_frame *f,
		      size_t len, struct undo *c)
{
	size_t n = (f->str + len - f->rsp + 7) / 8;

	if (n > sizeof(c->w) / 8 || read_words(in->pid, f->rsp, c->w, n) != n)
		return fail(in, -EFAULT, "failed to read thread %d's stack", t->tid);
	c->addr = f->rsp;
	c->n = n; /* put back from now on */
	return 0;
}

/* Call dlopen(pl->path) on thread t, put everything back, detach. */
static int run_dlopen(struct inject *in, struct thr *t, const struct placed *pl)
{
	const char *path = pl->path;
	size_t len = strlen(path) + 1, left, found;
	struct undo *undo = calloc(1, sizeof(*undo));
	struct fpstate fp = {};
	struct inject_frame f = {};
	uint64_t handle = 0;
	char msg[512];
	int ret, put;

	ret = undo ? inject__frame(t->regs.rsp, len, &f) : -ENOMEM;
	if (ret)
		ret = fail(in, ret, undo ? "thread %d's stack pointer is too low" : "out of memory",
			   t->tid);
	if (!ret)
		ret = thread_seccomp(in, t->tid); /* stopped, it cannot take a filter now */
	if (!ret)
		ret = stack_save(in, t, &f, len, undo);
	if (!ret && (ret = fp_save(t->tid, &fp)))
		ret = fail(in, ret, "failed to save thread %d's FPU state: %s", t->tid,
			   strerror(-ret));
	if (!ret && (ret = poke(t->tid, f.str, path, len)))
		ret = fail(in, ret, "failed to write into thread %d's stack: %s", t->tid,
			   strerror(-ret));
	if (!ret) {
		undo->before.n = lib_mappings(in, pl, undo->before.r);
		ret = call(in, t, in->dlopen, f.str, in->flags, f.rsp, &handle);
	}
	if (!ret && !handle) {
		dl_error(in, t, f.rsp, msg, sizeof(msg));
		left = unmap_leftovers(in, t, f.rsp, pl, &undo->before, &found);
		ret = fail(in, -ENOEXEC, "failed to load %s: %s%s", path, msg,
			   left	   ? "; mappings of it are left in the process (munmap failed)"
			   : found ? " (what dlopen left mapped of it was unmapped)"
				   : "");
	}
	if (in->verbose && !ret)
		fprintf(stderr, "nanwatchd: dlopen(%s) on thread %d of pid %d: handle 0x%llx\n",
			path, t->tid, in->pid, (unsigned long long)handle);
	/* registers last: their orig_rax and -ERESTART* make the kernel restart the call */
	put = fp.buf && fp.len ? fp_restore(t->tid, &fp) : 0;
	if (undo && undo->n && poke(t->tid, undo->addr, undo->w, undo->n * 8) && !put)
		put = -EFAULT;
	if (ptrace(PTRACE_SETREGS, t->tid, 0, &t->regs))
		put = -errno;
	if (put && !ret)
		ret = fail(in, put, "failed to restore thread %d: %s", t->tid, strerror(-put));
	free(fp.buf);
	free(undo);
	t->sig = 0; /* the stop is our SIGSEGV: never delivered */
	detach_one(t);
	return ret;
}

/* ---- the library inside the target's root ---- */

static int openat2_(int dirfd, const char *path, int flags, mode_t mode)
{
	struct open_how how = {.flags = flags, .mode = mode, .resolve = RESOLVE_IN_ROOT};

	return syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
}

/* Copy lib to the target's /tmp (resolved inside its root, never through our own). */
static int copy_in(struct inject *in, const char *lib, struct placed *pl)
{
	char root[64], buf[64 << 10];
	int rootfd, src = -1, dst = -1, ret = 0;
	struct stat st = {};
	ssize_t n;

	snprintf(root, sizeof(root), "/proc/%d/root", in->pid);
	snprintf(pl->name, sizeof(pl->name), INJECT_COPY_PREFIX "%d-%d.so", getpid(), in->pid);
	rootfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	pl->tmpfd = rootfd < 0 ? -1 : openat2_(rootfd, "/tmp", O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
	if (pl->tmpfd < 0) {
		ret = -errno;
		goto cleanup;
	}
	unlinkat(pl->tmpfd, pl->name, 0); /* ours, from an earlier run that was killed */
	dst = openat(pl->tmpfd, pl->name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
		     0644);
	src = open(lib, O_RDONLY | O_CLOEXEC);
	if (dst < 0 || src < 0) {
		ret = -errno;
		goto cleanup;
	}
	while ((n = read(src, buf, sizeof(buf))) > 0)
		if (write(dst, buf, n) != n) {
			n = -1;
			break;
		}
	if (n < 0 || fchmod(dst, 0644) || fstat(dst, &st))
		ret = -errno;
	pl->dev = st.st_dev;
	pl->ino = st.st_ino;
	snprintf(pl->path, sizeof(pl->path), "/tmp/%s", pl->name);
cleanup:
	if (ret && pl->tmpfd >= 0 && dst >= 0)
		unlinkat(pl->tmpfd, pl->name, 0);
	if (ret && pl->tmpfd >= 0) {
		close(pl->tmpfd);
		pl->tmpfd = -1;
	}
	if (src >= 0)
		close(src);
	if (dst >= 0)
		close(dst);
	if (rootfd >= 0)
		close(rootfd);
	if (ret)
		return fail(in, ret,
			    "failed to copy %s into the process's root (/tmp there): %s; the "
			    "library must be reachable inside its mount namespace",
			    lib, strerror(-ret));
	return 0;
}

/* The path the target opens: lib itself when the target sees the same file there. */
static int place(struct inject *in, const char *lib, struct placed *pl)
{
	char there[PATH_MAX + 64];
	struct stat ours, theirs;

	pl->tmpfd = -1;
	if (lib[0] != '/' || strlen(lib) >= sizeof(pl->path))
		return fail(in, -EINVAL, "the library path must be absolute: %s", lib);
	if (stat(lib, &ours))
		return fail(in, -errno, "failed to open %s: %s", lib, strerror(errno));
	snprintf(there, sizeof(there), "/proc/%d/root%s", in->pid, lib);
	if (!stat(there, &theirs) && theirs.st_dev == ours.st_dev && theirs.st_ino == ours.st_ino) {
		strcpy(pl->path, lib);
		pl->dev = ours.st_dev;
		pl->ino = ours.st_ino;
		return 0;
	}
	return copy_in(in, lib, pl);
}

static void unplace(struct placed *pl)
{
	if (pl->tmpfd < 0)
		return;
	unlinkat(pl->tmpfd, pl->name, 0); /* mapped, it stays loaded */
	close(pl->tmpfd);
	pl->tmpfd = -1;
}

int inject__loaded(const char *maps)
{
	return strstr(maps, "/" INJECT_LIB_NAME) || strstr(maps, "/" INJECT_COPY_PREFIX);
}

int inject__load(pid_t pid, const char *lib, int verbose, char *err, size_t errlen)
{
	struct inject in = {.pid = pid, .verbose = verbose, .err = err, .errlen = errlen};
	struct placed pl = {.tmpfd = -1};
	sigset_t all, old;
	struct thr *t = NULL;
	int ret;

	/* a tracer that dies while the call runs leaves the thread to return to address 0 */
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, &old);

	in.th = calloc(MAX_THREADS, sizeof(*in.th));
	ret = in.th ? maps_read(&in) : fail(&in, -ENOMEM, "out of memory");
	if (!ret && in.loaded) {
		if (verbose)
			fprintf(stderr, "nanwatchd: pid %d has %s loaded already\n", pid,
				INJECT_LIB_NAME);
		goto out;
	}
	if (!ret)
		ret = check_threads(&in);
	if (!ret)
		ret = resolve_syms(&in);
	if (!ret)
		ret = unwind_setup(&in);
	if (!ret)
		ret = place(&in, lib, &pl);
	if (!ret)
		ret = stop_and_choose(&in, &t);
	if (!ret)
		ret = run_dlopen(&in, t, &pl);
out:
	unplace(&pl);
	unwind__free(in.uw);
	maps_free(&in);
	free(in.hz);
	free(in.th);
	sigprocmask(SIG_SETMASK, &old, NULL);
	return ret;
}
