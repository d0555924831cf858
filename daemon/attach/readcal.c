// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The copy-rate probe and the attach-time choice of a read method (see readcal.h). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <bpf/libbpf.h>
#include "nanwatch.h"
#include "attach/probe.h"
#include "attach/readcal.h" /* before the skeleton: its .bss holds a struct nw_rc_run */
#include "readcal.skel.h"

#define CAL_BYTES (4u << 20)	/* copied per measurement: 1024 new pages */
#define CAL_CHUNK NW_SCAN_CHUNK /* the watch's chunk */
#define CAL_TRIES 3		/* best of, each on pages new to the kernel */

_Static_assert(sizeof(struct nw_rc_run) == 48, "nw_rc_run changed: update both sides");
_Static_assert(CAL_CHUNK <= NW_RC_MAX_CHUNK, "the calibration copies the watch's chunk at once");

struct readcal {
	struct readcal_bpf *skel;
	struct bpf_link *plain, *sleepable; /* perf uprobes, where the kernel has no links */
	int plain_fd, sleepable_fd;	    /* else uprobe_multi links (-1: none) */
};

/* The function the probes sit on: it only has to be called, with its arguments in place. */
__attribute__((noinline, used)) void nanwatch_readcal_target(const void *buf, size_t len)
{
	__asm__ volatile("" : : "r"(buf), "r"(len) : "memory");
}

/* The file offset of our own code at addr, from /proc/self/maps; 0 if not found. */
static uint64_t self_offset(uintptr_t addr)
{
	char line[512];
	uint64_t off = 0;
	FILE *f = fopen("/proc/self/maps", "re");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi, foff;
		char perms[8];

		if (sscanf(line, "%lx-%lx %7s %lx", &lo, &hi, perms, &foff) != 4)
			continue;
		if (addr >= lo && addr < hi && perms[2] == 'x') {
			off = addr - lo + foff;
			break;
		}
	}
	fclose(f);
	return off;
}

/* prog on our own function, as the watch's uprobes are (probe__uprobe()). 0 or -1 (errno set). */
static int attach(struct bpf_program *prog, uint64_t off, struct bpf_link **link, int *fd)
{
	int exe = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	int ret;

	if (exe < 0)
		return -1;
	ret = probe__uprobe(prog, exe, off, getpid(), 0, link, fd);
	close(exe);
	errno = -ret;
	return ret ? -1 : 0;
}

/* Load with the sleepable program where the kernel takes it, else without. */
static struct readcal_bpf *load(int sleepable)
{
	struct readcal_bpf *skel = readcal_bpf__open();
	int type = probe__multi_type();

	if (!skel)
		return NULL;
	if (!sleepable)
		bpf_program__set_autoload(skel->progs.uprobe_rc_sleepable, false);
	if (type >= 0 && (bpf_program__set_expected_attach_type(skel->progs.uprobe_rc_probe,
								(enum bpf_attach_type)type) ||
			  bpf_program__set_expected_attach_type(skel->progs.uprobe_rc_sleepable,
								(enum bpf_attach_type)type))) {
		readcal_bpf__destroy(skel);
		return NULL;
	}
	if (readcal_bpf__load(skel)) {
		readcal_bpf__destroy(skel);
		return NULL;
	}
	return skel;
}

struct readcal *readcal__open(char *err, size_t errlen)
{
	struct readcal *rc = calloc(1, sizeof(*rc));
	uint64_t off = self_offset((uintptr_t)nanwatch_readcal_target);
	int e;

	if (!rc || !off) {
		snprintf(err, errlen,
			 "failed to find the copy-rate probe's function in /proc/self/maps");
		free(rc);
		return NULL;
	}
	rc->plain_fd = rc->sleepable_fd = -1;
	rc->skel = load(1);
	if (!rc->skel)
		rc->skel = load(0);
	if (!rc->skel) {
		e = errno;
		goto fail;
	}
	if (attach(rc->skel->progs.uprobe_rc_probe, off, &rc->plain, &rc->plain_fd)) {
		e = errno;
		goto fail;
	}
	if (bpf_program__fd(rc->skel->progs.uprobe_rc_sleepable) >= 0 &&
	    attach(rc->skel->progs.uprobe_rc_sleepable, off, &rc->sleepable, &rc->sleepable_fd)) {
		e = errno;
		goto fail;
	}
	return rc;
fail:
	snprintf(err, errlen, "failed to load the copy-rate probe: %s", strerror(e));
	readcal__close(rc);
	return NULL;
}

void readcal__close(struct readcal *rc)
{
	if (!rc)
		return;
	bpf_link__destroy(rc->sleepable);
	bpf_link__destroy(rc->plain);
	if (rc->sleepable_fd >= 0)
		close(rc->sleepable_fd);
	if (rc->plain_fd >= 0)
		close(rc->plain_fd);
	readcal_bpf__destroy(rc->skel);
	free(rc);
}

int readcal__sleepable(const struct readcal *rc)
{
	return rc && (rc->sleepable || rc->sleepable_fd >= 0);
}

/* One timed copy of len bytes at buf, chunk bytes a call, by method; *ns and *bytes its run. */
static int copy_once(struct readcal *rc, int method, uint32_t chunk, const void *buf, size_t len,
		     uint64_t *ns, uint64_t *bytes)
{
	struct nw_rc_run *r = &rc->skel->bss->run;

	if (method < 0 || method >= NW_RC_METHODS || !chunk || chunk > NW_RC_MAX_CHUNK)
		return -EINVAL;
	if (method != NW_RC_PROBE && !readcal__sleepable(rc))
		return -EOPNOTSUPP;
	memset(r, 0, sizeof(*r));
	r->method = method;
	r->chunk = chunk;
	r->tid = syscall(SYS_gettid);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	nanwatch_readcal_target(buf, len);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (!r->done)
		return -EIO;
	*ns = r->ns;
	*bytes = r->bytes;
	return r->errors ? -EFAULT : 0;
}

double readcal__rate(struct readcal *rc, int method, uint32_t chunk, size_t bytes, int warm)
{
	char *buf = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint64_t ns = 0, copied = 0;
	int err;

	if (buf == MAP_FAILED)
		return -errno;
	memset(buf, 0x5a, bytes); /* present, as a new tensor's pages are */
	err = copy_once(rc, method, chunk, buf, bytes, &ns, &copied);
	if (!err && warm) {
		memset(buf, 0x3c, bytes); /* written again by the process, as a reused buffer is */
		err = copy_once(rc, method, chunk, buf, bytes, &ns, &copied);
	}
	munmap(buf, bytes);
	if (err)
		return err;
	return ns ? (double)copied / ns : 0;
}

/* Best rate of CAL_TRIES copies by method, each of CAL_BYTES; 0 if one failed. */
static double best_rate(struct readcal *rc, int method, int warm)
{
	double best = 0, r;
	int i;

	for (i = 0; i < CAL_TRIES; i++) {
		r = readcal__rate(rc, method, CAL_CHUNK, CAL_BYTES, warm);
		if (r < 0)
			return 0;
		if (r > best)
			best = r;
	}
	return best;
}

static void measure(struct readcal_choice *c)
{
	char err[160];
	struct readcal *rc = readcal__open(err, sizeof(err));

	c->method = NW_READ_PROBE;
	if (!rc) {
		snprintf(c->why, sizeof(c->why), "%s", err);
		return;
	}
	c->probe_fresh_gbps = best_rate(rc, NW_RC_PROBE, 0);
	c->probe_warm_gbps = best_rate(rc, NW_RC_PROBE, 1);
	if (readcal__sleepable(rc))
		c->task_fresh_gbps = best_rate(rc, NW_RC_TASK, 0);
	readcal__close(rc);
	if (c->task_fresh_gbps <= 0) {
		snprintf(c->why, sizeof(c->why), "no sleepable uprobes here: probe reads");
		return;
	}
	c->task_ns_per_page = (uint64_t)(4096 / c->task_fresh_gbps);
	if (c->probe_fresh_gbps >= c->task_fresh_gbps) {
		snprintf(c->why, sizeof(c->why), "new pages: probe %.2f GB/s, task %.2f GB/s",
			 c->probe_fresh_gbps, c->task_fresh_gbps);
		return;
	}
	c->method = NW_READ_ADAPTIVE;
	snprintf(c->why, sizeof(c->why),
		 "new pages: probe %.2f GB/s, task %.2f GB/s; pages read before: probe %.2f GB/s",
		 c->probe_fresh_gbps, c->task_fresh_gbps, c->probe_warm_gbps);
}

static pthread_once_t once = PTHREAD_ONCE_INIT;
static struct readcal_choice chosen;

static void choose_once(void)
{
	/* libbpf's own lines would go to stderr: a failure is said in chosen.why instead */
	libbpf_print_fn_t old = libbpf_set_print(NULL);

	measure(&chosen);
	libbpf_set_print(old);
}

void readcal__choose(struct readcal_choice *out)
{
	pthread_once(&once, choose_once);
	*out = chosen;
}
