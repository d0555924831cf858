// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The kernel's process list and exec wake-ups for discovery (see procs.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include "procs.skel.h"
#include "service/procs.h"

struct procs {
	struct procs_bpf *skel;
	struct bpf_link *iter;
	struct ring_buffer *rb;
	int execs; /* exec records taken by the last consume */
};

_Static_assert(sizeof(struct nw_proc) == 48, "nw_proc changed: update both sides");

static int on_event(void *ctx, void *data, size_t size)
{
	struct nw_proc_ev_rec e;
	struct procs *p = ctx;

	if (size < sizeof(e))
		return 0;
	memcpy(&e, data, sizeof(e));
	if (e.kind == NW_PROC_EV_EXEC)
		p->execs++; /* which one does not matter: the scan looks at every process */
	return 0;
}

struct procs *procs__open(char *err, size_t errlen)
{
	struct procs *p = calloc(1, sizeof(*p));
	int ret;

	if (!p) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	p->skel = procs_bpf__open_and_load();
	ret = p->skel ? 0 : -errno;
	if (!ret)
		ret = procs_bpf__attach(p->skel);
	if (!ret) {
		p->iter = bpf_program__attach_iter(p->skel->progs.dump_procs, NULL);
		ret = p->iter ? 0 : -errno;
	}
	if (!ret) {
		p->rb = ring_buffer__new(bpf_map__fd(p->skel->maps.events), on_event, p, NULL);
		ret = p->rb ? 0 : -errno;
	}
	if (ret) {
		snprintf(err, errlen,
			 "failed to load the process discovery programs: %s (service mode needs "
			 "BPF task iterators and tp_btf, Linux 5.8 or later with BTF)",
			 strerror(-ret));
		procs__free(p);
		errno = -ret;
		return NULL;
	}
	return p;
}

void procs__free(struct procs *p)
{
	if (!p)
		return;
	ring_buffer__free(p->rb);
	bpf_link__destroy(p->iter);
	procs_bpf__destroy(p->skel);
	free(p);
}

static int by_tgid(const void *a, const void *b)
{
	const struct nw_proc *x = a, *y = b;

	return x->tgid < y->tgid ? -1 : x->tgid > y->tgid;
}

/* Grow *buf to hold at least need bytes; 0 or -ENOMEM. */
static int reserve(char **buf, size_t *cap, size_t need)
{
	size_t n = *cap ? *cap : 64 * sizeof(struct nw_proc);
	char *b;

	if (need <= *cap)
		return 0;
	while (n < need)
		n *= 2;
	b = realloc(*buf, n);
	if (!b)
		return -ENOMEM;
	*buf = b;
	*cap = n;
	return 0;
}

long procs__list(struct procs *p, struct nw_proc **out)
{
	size_t len = 0, cap = 0, max = (size_t)PROCS_MAX * sizeof(struct nw_proc);
	char *buf = NULL;
	int fd, ret = 0;
	ssize_t n;

	fd = bpf_iter_create(bpf_link__fd(p->iter));
	if (fd < 0)
		return -errno;
	for (;;) {
		if (len + 65536 > max) {
			ret = -E2BIG;
			break;
		}
		ret = reserve(&buf, &cap, len + 65536);
		if (ret)
			break;
		n = read(fd, buf + len, 65536);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			ret = -errno;
		if (n <= 0)
			break;
		len += n;
	}
	close(fd);
	if (ret) {
		free(buf);
		return ret;
	}
	len /= sizeof(struct nw_proc);
	qsort(buf, len, sizeof(struct nw_proc), by_tgid);
	*out = (struct nw_proc *)buf;
	return len;
}

int procs__fd(const struct procs *p)
{
	return ring_buffer__epoll_fd(p->rb);
}

int procs__consume(struct procs *p)
{
	int ret;

	p->execs = 0;
	ret = ring_buffer__consume(p->rb);
	return ret < 0 ? ret : p->execs;
}
