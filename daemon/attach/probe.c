// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Probe lifecycle: open the skeleton, set its read-only config, load, attach
 * uprobes on the target's own interpreter image (pid-filtered, so other
 * processes using the same file are not touched). Links are owned by file
 * descriptors: a killed daemon leaves nothing behind.
 *
 * The uprobes go on the descriptors the resolve opened and read (/proc/self/fd/N: the kernel
 * resolves nothing by the target's paths again) at offsets found there, not on a path with a
 * symbol name for libbpf to look up: libbpf would open and map the target's file itself, so a
 * file truncated meanwhile would raise SIGBUS in the daemon, and the path could name another
 * file by then.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_tryjoin_np */
#endif
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include "attach/gradsum.h"
#include "attach/probe.h"
#include "nanwatch.skel.h"
#include "resolve/elfsym.h"
#include "resolve/target.h"
#include "util/optval.h"

#define PROBE_LINKS_MAX 8      /* uprobe_multi links a watch holds besides its session */
#define UPROBE_MULTI_RETURN 1u /* BPF_F_UPROBE_MULTI_RETURN: this system's headers predate it */

/* A place a link of the watch's sits, its forks cleaned at (see clean_forks()). */
struct link_site {
	const void *file; /* the target's file as resolved (told apart by it) */
	int fd;		  /* the file (a descriptor of our own) */
	unsigned long off;
};

_Static_assert(PROBE_RETURN_AUTO == OPTVAL_RETURN_AUTO, "--return-probe auto: one value");
_Static_assert(sizeof(struct nw_event) == 608, "nw_event layout changed: update both sides");
_Static_assert(sizeof(struct nw_grad) == 4176, "nw_grad layout changed: update both sides");
_Static_assert(sizeof(struct nw_grad_data) == 24, "nw_grad_data changed: update both sides");
_Static_assert(sizeof(struct nw_bwd_layout) == 152, "nw_bwd_layout changed: update both sides");
_Static_assert(sizeof(struct nw_cap_tensor) == 232, "nw_cap_tensor changed: update both sides");
_Static_assert(sizeof(struct nw_cap_data) == 8216, "nw_cap_data changed: update both sides");
_Static_assert(sizeof(struct nw_cap_end) == 328, "nw_cap_end changed: update both sides");

struct probe {
	struct nanwatch_bpf *skel;
	struct ring_buffer *rb;	     /* the events ring */
	struct ring_buffer *grad_rb; /* the gradient ring, read on its own (probe__consume_grads) */
	int epfd;		     /* readable when either has records: both rings' epoll fds */
	probe_event_fn cb;
	probe_grad_fn grad_cb;
	struct gradsum *gsum; /* gradients whose histograms this side counts */
	void *ctx;
	int nprobes;
	int stats_fd;
	int session;	    /* the evaluator's both ends are one uprobe session (session_fd) */
	int session_fd;	    /* its link; -1: none (under sessions_lock once in sessions) */
	int parked;	    /* its link closed by park(), to be opened again (sessions_lock) */
	uint32_t parks;	    /* ... and opened again (atomic) */
	struct probe *next; /* in sessions (attached with a session), under sessions_lock */
	int eval_site;	    /* with a session: its place in sites, opened again at (see unpark()) */
	int pid;	    /* the target */
	/* with links: the processes the target forks cleaned of their breakpoints */
	struct link_site sites[PROBE_LINKS_MAX + 1]; /* where they sit, each once */
	int nsites;
	uint32_t forks_seen; /* the forks counted when the last cleaning began */
	int cleaner_on;	     /* cleaner was started and is not joined yet */
	uint32_t cleaned;    /* cleanings done */
	pthread_t cleaner;
	/* the uprobes as uprobe_multi links where the kernel has them (see attach_one()) */
	int multi;		    /* the programs below were loaded for them */
	int links[PROBE_LINKS_MAX]; /* their descriptors */
	int nlinks;
};

/*
 * The probes of this process attached with a uprobe session. From Linux 6.13 a return armed
 * and pending holds a lock that removing any uprobe waits for, until 100 ms after its task
 * armed its last one: a target's forward that never returns while it calls other modules
 * would hold the removal of another watch's probes (and, with them, every uprobe attach on
 * the node) for as long as it ran. A removal that takes longer than PAUSE_AFTER_MS (one
 * takes about half that here) makes every session arm no return (arm_paused) until no
 * removal is under way: the kernel then lets such a pending one go within 100 ms.
 *
 * That holds while each target's calls hit its own session alone. Every watch's session is
 * on the same uprobe when the targets share an interpreter file, and for another process's
 * hit the kernel runs no program of a pid-filtered session and arms its return: with three
 * watches, each target's calls have returns armed whatever arm_paused says (a training loop
 * entered after another watch's attach, or a forward that never returns, held the removal
 * for as long as it ran). A removal still under way after PARK_AFTER_MS has every other
 * session's link closed (park(): a thread each, as each close waits for the same lock, and
 * each counted as a removal); each watch opens its own again at its next tick once no
 * removal is under way (unpark()). Meanwhile its target is not watched, and the calls it was
 * in return unseen (the programs heal their stacks at the next call).
 */
#define PAUSE_AFTER_MS 1000
#define PARK_AFTER_MS 2000
static pthread_mutex_t sessions_lock = PTHREAD_MUTEX_INITIALIZER;
static struct probe *sessions;
static int removals; /* removals under way, parked links' closes among them */
static int paused;   /* arm_paused set in every session */
static int parking;  /* park_all() ran and a removal is still under way: links park at once */

/* Every session's arm_paused as paused says; under sessions_lock. */
static void set_paused(int on)
{
	struct probe *q;

	paused = on;
	for (q = sessions; q; q = q->next)
		__atomic_store_n(&q->skel->bss->arm_paused, on, __ATOMIC_RELEASE);
}

static void park(struct probe *q);

static void sessions_add(struct probe *p)
{
	pthread_mutex_lock(&sessions_lock);
	p->next = sessions;
	sessions = p;
	__atomic_store_n(&p->skel->bss->arm_paused, paused, __ATOMIC_RELEASE);
	if (parking)
		park(p);
	pthread_mutex_unlock(&sessions_lock);
}

/* p out of sessions; its session link's descriptor (-1: none, or parked), now the caller's. */
static int sessions_remove(struct probe *p)
{
	struct probe **q;
	int fd;

	pthread_mutex_lock(&sessions_lock);
	for (q = &sessions; *q; q = &(*q)->next)
		if (*q == p) {
			*q = p->next;
			break;
		}
	fd = p->session_fd;
	p->session_fd = -1;
	p->parked = 0;
	pthread_mutex_unlock(&sessions_lock);
	return fd;
}

/* A removal ends; under sessions_lock. */
static void removal_done(void)
{
	removals--;
	if (removals)
		return;
	if (paused)
		set_paused(0);
	parking = 0;
}

/* A parked link's close: waits as a removal does. */
static void *close_parked(void *arg)
{
	close((int)(intptr_t)arg);
	pthread_mutex_lock(&sessions_lock);
	removal_done();
	pthread_mutex_unlock(&sessions_lock);
	return NULL;
}

/* fn(arg) on a detached thread of its own; 0 when none could be started. */
static int spawn_detached(void *(*fn)(void *), void *arg)
{
	pthread_attr_t attr;
	pthread_t t;
	int spawned = 0;

	if (pthread_attr_init(&attr))
		return 0;
	if (!pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED))
		spawned = !pthread_create(&t, &attr, fn, arg);
	pthread_attr_destroy(&attr);
	return spawned;
}

/* q's session link closed on a thread of its own, counted as a removal; under sessions_lock. */
static void park(struct probe *q)
{
	/* no thread: the link stays (a close here would wait holding the lock) */
	if (q->session_fd < 0 || !spawn_detached(close_parked, (void *)(intptr_t)q->session_fd))
		return;
	removals++;
	q->session_fd = -1;
	q->parked = 1;
}

/* Every session parked while a removal is under way; under sessions_lock. */
static void park_all(void)
{
	struct probe *q;

	if (removals <= 0)
		return;
	parking = 1;
	for (q = sessions; q; q = q->next)
		park(q);
}

/*
 * After PAUSE_AFTER_MS, pause the sessions if a removal is still under way; park them after
 * PARK_AFTER_MS. With arg NULL (no thread to wait on), pause at once and park none.
 */
static void *pauser(void *arg)
{
	if (arg)
		usleep(PAUSE_AFTER_MS * 1000);
	pthread_mutex_lock(&sessions_lock);
	if (removals > 0 && !paused)
		set_paused(1);
	pthread_mutex_unlock(&sessions_lock);
	if (!arg)
		return NULL;
	usleep((PARK_AFTER_MS - PAUSE_AFTER_MS) * 1000);
	pthread_mutex_lock(&sessions_lock);
	park_all();
	pthread_mutex_unlock(&sessions_lock);
	return NULL;
}

/* One removal begins (on 1) or ends (on 0). */
static void removal(int begins)
{
	int any;

	pthread_mutex_lock(&sessions_lock);
	if (begins)
		removals++;
	else
		removal_done();
	any = sessions != NULL;
	pthread_mutex_unlock(&sessions_lock);
	/* no session in this process (the default return probe): nothing to pause */
	if (begins && any && !spawn_detached(pauser, (void *)1))
		pauser(NULL); /* no thread to wait with: pause at once */
}

static int session_attach_type(void);
static void join_cleaner(struct probe *p);
static int multi_link(int prog_fd, int type, int file_fd, unsigned long offset, int pid,
		      unsigned flags);

/*
 * p's session link opened again once no removal is under way (p's own thread, at its tick).
 * Parked again at once if another removal has had them parked meanwhile.
 */
static void unpark(struct probe *p)
{
	int fd, go;

	pthread_mutex_lock(&sessions_lock);
	go = p->parked && !removals && p->eval_site >= 0;
	pthread_mutex_unlock(&sessions_lock);
	if (!go)
		return;
	fd = multi_link(bpf_program__fd(p->skel->progs.session_eval_frame), session_attach_type(),
			p->sites[p->eval_site].fd, p->sites[p->eval_site].off, p->pid, 0);
	if (fd < 0) /* tried again at the next tick */
		return;
	pthread_mutex_lock(&sessions_lock);
	p->session_fd = fd;
	p->parked = 0;
	if (parking)
		park(p);
	pthread_mutex_unlock(&sessions_lock);
	__atomic_add_fetch(&p->parks, 1, __ATOMIC_RELAXED);
}

static int on_record(void *ctx, void *data, size_t size)
{
	struct probe *p = ctx;

	return p->cb(p->ctx, data, size);
}

/* A gradient's histogram to the session; the ones dropped here count as lost ones. */
static int deliver_grad(struct probe *p, struct nw_grad *g)
{
	g->step &= NW_STEP_MASK;
	g->lost += gradsum__dropped(p->gsum);
	return p->grad_cb(p->ctx, g);
}

/* The gradient ring: each gradient's nw_grad, and the chunks of those counted here. */
static int on_grad_data(void *ctx, void *data, size_t size)
{
	struct probe *p = ctx;
	struct nw_grad g;
	__u32 type;

	if (size < sizeof(type) || !p->grad_cb)
		return 0;
	memcpy(&type, data, sizeof(type));
	if (type == NW_EV_GRAD_DATA) {
		gradsum__chunk(p->gsum, data, size);
		return 0;
	}
	if (type != NW_EV_GRAD || size < sizeof(g))
		return 0;
	memcpy(&g, data, sizeof(g));
	if (g.data_id && gradsum__finish(p->gsum, &g))
		return 0;
	return deliver_grad(p, &g);
}

static int s_marker(const struct probe_opts *o, const struct nw_layout *l);

/*
 * One epoll fd over both rings. The gradient ring is a ring buffer of its own so that it can
 * be read while an event is being handled: a diagnosis that closes a backward pass first
 * takes the gradients the pass may still have waiting (probe__consume_grads).
 */
static int watch_rings(struct probe *p)
{
	struct ring_buffer *rings[] = {p->rb, p->grad_rb};
	size_t i;

	p->epfd = epoll_create1(EPOLL_CLOEXEC);
	if (p->epfd < 0)
		return -errno;
	for (i = 0; i < sizeof(rings) / sizeof(rings[0]); i++) {
		struct epoll_event ev = {.events = EPOLLIN};

		if (rings[i] &&
		    epoll_ctl(p->epfd, EPOLL_CTL_ADD, ring_buffer__epoll_fd(rings[i]), &ev))
			return -errno;
	}
	return 0;
}

#define GRAD_RING_ALONE (4u << 20) /* the gradient ring without gradients' bytes */

/* scratch_map: one struct scratch a possible CPU (the programs index it by theirs). */
static int size_scratch(struct nanwatch_bpf *s)
{
	int cpus = libbpf_num_possible_cpus();

	if (cpus <= 0)
		return cpus < 0 ? cpus : -EINVAL;
	return bpf_map__set_max_entries(s->maps.scratch_map, cpus);
}

/*
 * How scans copy the target's bytes. The programs that scan are loaded sleepable whatever
 * the method (bpf_copy_from_user_task may wait on the target's page walk, and a kernel that
 * tracks which global functions may sleep refuses them in a non-sleepable program even where
 * the method makes that call dead code); where the kernel runs no sleepable uprobes
 * (sleepable 0), they load as before with the probe method.
 */
static int set_read_method(struct nanwatch_bpf *s, int method, uint64_t ns_per_page, int sleepable)
{
	/* the evaluator's entry too: it scans a pending output another call did not take */
	struct bpf_program *scanning[] = {s->progs.uprobe_eval_frame, s->progs.uretprobe_eval_frame,
					  s->progs.session_eval_frame, s->progs.uprobe_run_backward,
					  s->progs.uprobe_bwd_node};
	size_t i;
	int err;

	s->rodata->read_method = sleepable ? method : NW_READ_PROBE;
	s->rodata->task_ns_per_page = ns_per_page;
	for (i = 0; sleepable && i < sizeof(scanning) / sizeof(scanning[0]); i++) {
		err = bpf_program__set_flags(scanning[i],
					     bpf_program__flags(scanning[i]) | BPF_F_SLEEPABLE);
		if (err)
			return err;
	}
	return 0;
}

/*
 * The kernel's attach types for uprobe sessions (BPF_TRACE_UPROBE_SESSION, 6.13 on, where it
 * also has bpf_session_is_return) and uprobe_multi links (BPF_TRACE_UPROBE_MULTI, 6.6 on),
 * read from its own BTF (this system's headers predate them); -1 where it has not. Looked up
 * once.
 */
static int kernel_attach_types[2] = {-2, -2};

static int kernel_attach_type(int session)
{
	int v = __atomic_load_n(&kernel_attach_types[session], __ATOMIC_ACQUIRE), i, n;
	int types[2] = {-1, -1};
	const struct btf_type *t;
	const struct btf_enum *e;
	struct btf *btf;
	int id;

	if (v != -2)
		return v;
	btf = btf__load_vmlinux_btf();
	if (!btf || libbpf_get_error(btf))
		goto out;
	id = btf__find_by_name_kind(btf, "bpf_attach_type", BTF_KIND_ENUM);
	t = id > 0 ? btf__type_by_id(btf, id) : NULL;
	n = t ? btf_vlen(t) : 0;
	e = t ? btf_enum(t) : NULL;
	for (i = 0; i < n; i++, e++) {
		const char *name = btf__name_by_offset(btf, e->name_off);

		if (!strcmp(name, "BPF_TRACE_UPROBE_MULTI"))
			types[0] = (int)e->val;
		else if (!strcmp(name, "BPF_TRACE_UPROBE_SESSION") &&
			 btf__find_by_name_kind(btf, "bpf_session_is_return", BTF_KIND_FUNC) > 0)
			types[1] = (int)e->val;
	}
	btf__free(btf);
out:
	__atomic_store_n(&kernel_attach_types[0], types[0], __ATOMIC_RELEASE);
	__atomic_store_n(&kernel_attach_types[1], types[1], __ATOMIC_RELEASE);
	return types[session];
}

static int session_attach_type(void)
{
	return kernel_attach_type(1);
}

int probe__multi_type(void)
{
	return kernel_attach_type(0);
}

int probe__uprobe(struct bpf_program *prog, int file_fd, unsigned long offset, int pid, int ret,
		  struct bpf_link **link, int *fd)
{
	LIBBPF_OPTS(bpf_uprobe_opts, uo, .retprobe = ret);
	char path[32];
	int type = kernel_attach_type(0);

	if (type >= 0) {
		*fd = multi_link(bpf_program__fd(prog), type, file_fd, offset, pid,
				 ret ? UPROBE_MULTI_RETURN : 0);
		return *fd < 0 ? -errno : 0;
	}
	snprintf(path, sizeof(path), "/proc/self/fd/%d", file_fd);
	*link = bpf_program__attach_uprobe_opts(prog, pid, path, offset, &uo);
	return *link ? 0 : -errno;
}

/*
 * Which programs see the evaluator: the session's one (type: its attach type) or, with type
 * -1, the entry and return pair; none with off (mode loss).
 */
static int set_return_probe(struct nanwatch_bpf *s, int type, int off)
{
	bpf_program__set_autoload(s->progs.session_eval_frame, !off && type >= 0);
	bpf_program__set_autoload(s->progs.uprobe_eval_frame, !off && type < 0);
	bpf_program__set_autoload(s->progs.uretprobe_eval_frame, !off && type < 0);
	if (type < 0)
		return 0;
	return bpf_program__set_expected_attach_type(s->progs.session_eval_frame,
						     (enum bpf_attach_type)type);
}

/*
 * The uprobes as uprobe_multi links where the kernel has them (6.6 on), as the session and
 * fork_clean already are: a perf uprobe's removal waits for the returns pending on the node
 * holding the kernel's trace event lock, and every perf uprobe's attach on the node takes that
 * lock. Another tool's removal held by a long call (or another daemon's, held by a target that
 * never returns) would then hold this daemon's attaches, and its removals, for as long: a rank
 * attached meanwhile waited a minute. A link's removal waits holding nothing. 1 where the
 * programs are set for links, 0 where the kernel has none, or a negative errno.
 */
static int set_multi(struct nanwatch_bpf *s)
{
	struct bpf_program *progs[] = {s->progs.uprobe_step_marker,  s->progs.uprobe_bwd_node,
				       s->progs.uprobe_run_backward, s->progs.uprobe_scaler_update,
				       s->progs.uprobe_eval_frame,   s->progs.uretprobe_eval_frame,
				       s->progs.fork_clean};
	int type = kernel_attach_type(0);
	size_t i;

	/* the forks' cleaning: with links alone (a perf uprobe's child is cleaned at its hit) */
	bpf_program__set_autoload(s->progs.on_fork, type >= 0);
	bpf_program__set_autoload(s->progs.fork_clean, type >= 0);
	for (i = 0; type >= 0 && i < sizeof(progs) / sizeof(progs[0]); i++)
		if (bpf_program__set_expected_attach_type(progs[i], (enum bpf_attach_type)type))
			return -EINVAL;
	return type >= 0;
}

/* The uprobe_multi links closed (each close waits as a removal does). */
static void close_links(struct probe *p)
{
	while (p->nlinks > 0)
		close(p->links[--p->nlinks]);
}

/* A link's place, for clean_forks() (and unpark()): once each; its index or a negative errno. */
static int add_site(struct probe *p, const void *file, int file_fd, unsigned long off)
{
	struct link_site *w;
	int i;

	for (i = 0; i < p->nsites; i++)
		if (p->sites[i].file == file && p->sites[i].off == off)
			return i;
	if (p->nsites >= (int)(sizeof(p->sites) / sizeof(p->sites[0])))
		return -E2BIG;
	w = &p->sites[p->nsites];
	w->fd = fcntl(file_fd, F_DUPFD_CLOEXEC, 0);
	if (w->fd < 0)
		return -errno;
	w->file = file;
	w->off = off;
	return p->nsites++;
}

static void drop_sites(struct probe *p)
{
	while (p->nsites > 0)
		close(p->sites[--p->nsites].fd);
}

static int configure(struct probe *p, const struct target *t, const struct nw_layout *l,
		     const struct probe_opts *o, int sleepable)
{
	struct nanwatch_bpf *s = p->skel;
	int ret;

	s->rodata->targ_tgid = t->pid;
	s->rodata->max_scan_bytes = o->max_scan_bytes;
	memcpy((void *)&s->rodata->L, l, sizeof(*l));
	s->rodata->A.tuple_type = t->tuple_type;
	s->rodata->A.list_type = t->list_type;
	s->rodata->A.tensor_type = t->tensor_type;
	s->rodata->step_by_marker = s_marker(o, l);
	s->rodata->top_only = o->top_only;
	s->rodata->loss_only = o->loss_only;
	if (o->rescan)
		memcpy((void *)&s->rodata->RS, o->rescan, sizeof(*o->rescan));
	if (o->dict)
		memcpy((void *)&s->rodata->D, o->dict, sizeof(*o->dict));
	/* mode loss: not loaded at all, nothing of the module probes stays in the kernel */
	ret = set_return_probe(s, p->session ? session_attach_type() : -1, o->loss_only);
	if (!ret)
		ret = set_multi(s);
	if (ret < 0)
		return ret;
	p->multi = ret;
	if (o->loss_only)
		bpf_program__set_autoload(s->progs.uprobe_bwd_node, false);
	s->rodata->capture_max_bytes = o->capture_max_bytes;
	s->rodata->c10_codes = o->c10_codes;
	if (o->capture_ring_bytes) {
		int err = bpf_map__set_max_entries(s->maps.captures, o->capture_ring_bytes);

		if (err)
			return err;
	}
	if (o->node_symbol && o->bwd) {
		s->rodata->backward_on = 1;
		s->rodata->backward_all = o->backward_all;
		memcpy((void *)&s->rodata->BL, o->bwd, sizeof(*o->bwd));
	}
	s->rodata->gpu_on = o->gpu;
	s->rodata->gpu_device = o->gpu_device;
	s->rodata->gpu_index_off = o->gpu ? o->gpu_index_off : -1;
	s->rodata->time_copies = o->bpf_stats;
	ret = size_scratch(s);
	if (ret)
		return ret;
	/* without gradients' bytes, the ring holds their nw_grads alone */
	s->rodata->grad_offload = o->grad_ring_bytes != 0;
	s->rodata->grad_ring_bytes = o->grad_ring_bytes ? o->grad_ring_bytes : GRAD_RING_ALONE;
	ret = bpf_map__set_max_entries(s->maps.grad_data, s->rodata->grad_ring_bytes);
	if (ret)
		return ret;
	ret = set_read_method(s, o->read_method, o->task_ns_per_page, sleepable);
	if (ret)
		return ret;
	if (o->ringbuf_bytes)
		return bpf_map__set_max_entries(s->maps.events, o->ringbuf_bytes);
	return 0;
}

/* Open, configure and load the object; 0 or a negative errno (errno too). */
static int open_load(struct probe *p, const struct target *t, const struct nw_layout *l,
		     const struct probe_opts *o, int sleepable)
{
	int ret;

	if (p->skel) { /* a load again: what the last try attached goes */
		join_cleaner(p);
		removal(1);
		close_links(p);
		nanwatch_bpf__destroy(p->skel);
		if (p->session_fd >= 0)
			close(p->session_fd);
		removal(0);
	}
	drop_sites(p);
	p->eval_site = -1;
	p->session_fd = -1;
	p->nprobes = 0;
	p->skel = nanwatch_bpf__open();
	if (!p->skel)
		return -errno;
	ret = configure(p, t, l, o, sleepable);
	if (!ret)
		ret = nanwatch_bpf__load(p->skel);
	return ret;
}

/* Where a uprobe goes: the open file (shown by its path in messages), the function's offset. */
struct site {
	const struct elfsym *file;
	const char *shown;
	const char *symbol;
	uint64_t offset; /* 0: the symbol is not in the file */
};

/*
 * One uprobe (or uretprobe) at a site (see probe__uprobe()): a link's descriptor kept in
 * p->links, its place for the forks' cleaning; a perf uprobe's link in *link.
 */
static int attach_one(struct probe *p, struct bpf_program *prog, struct bpf_link **link,
		      const struct target *t, const struct site *at, bool retprobe, char *err,
		      size_t errlen)
{
	int ret, fd = -1;

	if (!at->file || !at->offset) {
		snprintf(err, errlen, "failed to attach uprobe to %s:%.60s: %s", at->shown,
			 at->symbol, at->file ? "no such symbol in the file" : "file not open");
		return -ENOENT;
	}
	ret = p->nlinks >= PROBE_LINKS_MAX ? -E2BIG
					   : probe__uprobe(prog, elfsym__fd(at->file), at->offset,
							   t->pid, retprobe, link, &fd);
	if (fd >= 0) {
		p->links[p->nlinks++] = fd;
		ret = add_site(p, at->file, elfsym__fd(at->file), at->offset);
	}
	if (ret < 0) {
		snprintf(err, errlen, "failed to attach uprobe to %s:%.60s: %s", at->shown,
			 at->symbol, strerror(-ret));
		return ret;
	}
	p->nprobes++;
	return 0;
}

/*
 * union bpf_attr's link_create for a uprobe_multi link (Linux 6.6 on), as the kernel lays it
 * out: this system's headers predate it.
 */
struct multi_link_attr {
	__u32 prog_fd;
	__u32 target_fd;
	__u32 attach_type;
	__u32 flags;
	__u64 path;
	__u64 offsets;
	__u64 ref_ctr_offsets;
	__u64 cookies;
	__u32 cnt;
	__u32 multi_flags;
	__u32 pid;
	__u32 pad;
};
_Static_assert(offsetof(struct multi_link_attr, pid) == 56, "uprobe_multi link_create layout");

/*
 * A uprobe_multi link of prog (attach type type, flags as uprobe_multi's) at offset of the
 * file open at file_fd, for process pid alone: its descriptor, or -1 (errno set).
 */
static int multi_link(int prog_fd, int type, int file_fd, unsigned long offset, int pid,
		      unsigned flags)
{
	struct multi_link_attr a;
	char self[32];

	snprintf(self, sizeof(self), "/proc/self/fd/%d", file_fd);
	memset(&a, 0, sizeof(a));
	a.prog_fd = prog_fd;
	a.attach_type = type;
	a.path = (uintptr_t)self;
	a.offsets = (uintptr_t)&offset;
	a.cnt = 1;
	a.multi_flags = flags;
	a.pid = pid;
	return (int)syscall(SYS_bpf, BPF_LINK_CREATE, &a, sizeof(a));
}

/* The evaluator's session: one uprobe_multi link at the site, for the target's process. */
static int attach_session(struct probe *p, const struct target *t, const struct site *at, char *err,
			  size_t errlen)
{
	int fd;

	if (!at->file || !at->offset) {
		snprintf(err, errlen, "failed to attach uprobe to %s:%.60s: %s", at->shown,
			 at->symbol, at->file ? "no such symbol in the file" : "file not open");
		return -ENOENT;
	}
	fd = multi_link(bpf_program__fd(p->skel->progs.session_eval_frame), session_attach_type(),
			elfsym__fd(at->file), at->offset, t->pid, 0);
	if (fd < 0) {
		int e = errno;

		snprintf(err, errlen, "failed to attach a uprobe session to %s:%.60s: %s",
			 at->shown, at->symbol, strerror(e));
		return -e;
	}
	p->session_fd = fd;
	p->nprobes++;
	p->eval_site = add_site(p, at->file, elfsym__fd(at->file), at->offset);
	if (p->eval_site < 0) {
		fd = p->eval_site;
		snprintf(err, errlen, "failed to keep the evaluator's file: %s", strerror(-fd));
		return fd;
	}
	return 0;
}

/* The target's forks counted (see clean_forks()), with links alone. */
static int attach_fork(struct probe *p, char *err, size_t errlen)
{
	p->skel->links.on_fork = bpf_program__attach(p->skel->progs.on_fork);
	if (!p->skel->links.on_fork) {
		int e = errno;

		snprintf(err, errlen, "failed to attach the fork tracepoint: %s", strerror(e));
		return -e;
	}
	return 0;
}

/*
 * The processes the target forked keep the breakpoints of its links in their copy of the
 * pages (the kernel takes a perf uprobe's out at a child's first hit, not a link's), and would
 * trap at each: at every Python call they make from C, for the frame evaluator's. At each
 * place, a uprobe_multi link of a program that does nothing (fork_clean) for the target
 * alone, and closed: its removal has the kernel look at every process mapping the file and
 * take the breakpoint out of each one no probe wants, the children among them (the target
 * keeps its own). Then the close waits for the returns pending on the node: a thread of its
 * own, not counted as a removal (a target that holds its returns for good keeps only its
 * cleaner waiting, never pauses the other watches); a link, not a perf uprobe, whose removal
 * would wait holding the kernel's trace event lock.
 */
static void *clean_forks(void *arg)
{
	struct probe *p = arg;
	int i, fd, done = 0;

	for (i = 0; i < p->nsites; i++) {
		fd = multi_link(bpf_program__fd(p->skel->progs.fork_clean), kernel_attach_type(0),
				p->sites[i].fd, p->sites[i].off, p->pid, 0);
		if (fd >= 0) {
			close(fd);
			done = 1;
		}
	}
	if (done)
		__atomic_add_fetch(&p->cleaned, 1, __ATOMIC_RELAXED);
	return NULL;
}

static void join_cleaner(struct probe *p)
{
	if (p->cleaner_on)
		pthread_join(p->cleaner, NULL);
	p->cleaner_on = 0;
}

void probe__tick(struct probe *p)
{
	uint32_t n;

	if (!p || !p->skel || !p->skel->links.on_fork)
		return;
	unpark(p);
	/* one cleaning at a time: the last one, if still running, takes the forks after */
	if (p->cleaner_on && pthread_tryjoin_np(p->cleaner, NULL) == EBUSY)
		return;
	p->cleaner_on = 0;
	n = (uint32_t)__atomic_load_n(&p->skel->bss->counters[NW_C_FORKS], __ATOMIC_RELAXED);
	if (n == p->forks_seen)
		return;
	p->forks_seen = n; /* a fork after this is cleaned by the next one */
	if (pthread_create(&p->cleaner, NULL, clean_forks, p))
		clean_forks(p);
	else
		p->cleaner_on = 1;
}

/* The target's execve: its image, and every probe's file, are replaced. */
static int attach_exec(struct probe *p, char *err, size_t errlen)
{
	struct nanwatch_bpf *s = p->skel;

	s->links.on_exec = bpf_program__attach(s->progs.on_exec);
	if (!s->links.on_exec) {
		int e = errno;

		snprintf(err, errlen, "failed to attach the exec tracepoint: %s", strerror(e));
		return -e;
	}
	return 0;
}

/* The optional torch probes: the step marker, the backward pass's nodes, the loss. */
static int attach_torch(struct probe *p, const struct target *t, const struct probe_opts *o,
			const struct nw_layout *l, char *err, size_t errlen)
{
	const struct site step = {t->torch_cpu_elf, t->torch_cpu_path, o->step_symbol,
				  o->step_offset};
	const struct site node = {t->torch_cpu_elf, t->torch_cpu_path, o->node_symbol,
				  o->node_offset};
	const struct site loss = {t->torch_python_elf, t->torch_path, o->backward_symbol,
				  o->backward_offset};
	const struct site scaler = {t->torch_cpu_elf, t->torch_cpu_path, o->scaler_symbol,
				    o->scaler_offset};
	struct nanwatch_bpf *s = p->skel;
	int ret = 0;

	if (s_marker(o, l)) {
		if (!t->torch_cpu_path[0]) {
			snprintf(err, errlen,
				 "torch layout names a step marker but pid %d maps "
				 "no libtorch_cpu.so",
				 t->pid);
			return -ENOENT;
		}
		ret = attach_one(p, s->progs.uprobe_step_marker, &s->links.uprobe_step_marker, t,
				 &step, false, err, errlen);
	}
	if (!ret && o->node_symbol && o->bwd)
		ret = attach_one(p, s->progs.uprobe_bwd_node, &s->links.uprobe_bwd_node, t, &node,
				 false, err, errlen);
	if (!ret && o->backward_symbol && (!o->top_only || o->loss_only))
		ret = attach_one(p, s->progs.uprobe_run_backward, &s->links.uprobe_run_backward, t,
				 &loss, false, err, errlen);
	/* mode loss keeps to the loss: one probe hit a step */
	if (!ret && o->scaler_symbol && !o->loss_only)
		ret = attach_one(p, s->progs.uprobe_scaler_update, &s->links.uprobe_scaler_update,
				 t, &scaler, false, err, errlen);
	return ret;
}

/* The torch probes, then the frame evaluator's return and entry. */
static int attach(struct probe *p, const struct target *t, const struct probe_opts *o,
		  const struct nw_layout *l, char *err, size_t errlen)
{
	const struct site eval = {t->python_elf, t->python_path, "_PyEval_EvalFrameDefault",
				  t->eval_offset};
	struct nanwatch_bpf *s = p->skel;
	int ret;

	if (o->loss_only && !o->backward_symbol) {
		snprintf(err, errlen, "mode loss needs the torch table's backward_symbol");
		return -ENOENT;
	}
	/*
	 * The torch probes first: BPF counts nothing until the first whole forward pass
	 * (see count_step()), and then every probe is live. Of the evaluator's, the return
	 * probe first: a call entered before the entry probe is live then returns unseen,
	 * and none entered after it can return unseen.
	 */
	p->pid = t->pid;
	ret = attach_exec(p, err, errlen);
	if (!ret && p->multi)
		ret = attach_fork(p, err, errlen);
	if (!ret)
		ret = attach_torch(p, t, o, l, err, errlen);
	if (ret || o->loss_only)
		return ret;
	if (p->session)
		return attach_session(p, t, &eval, err, errlen);
	ret = attach_one(p, s->progs.uretprobe_eval_frame, &s->links.uretprobe_eval_frame, t, &eval,
			 true, err, errlen);
	if (!ret)
		ret = attach_one(p, s->progs.uprobe_eval_frame, &s->links.uprobe_eval_frame, t,
				 &eval, false, err, errlen);
	return ret;
}

static int silent_print(enum libbpf_print_level level, const char *fmt, va_list args)
{
	if (level == LIBBPF_DEBUG)
		return 0;
	return vfprintf(stderr, fmt, args);
}

static int quiet_print(enum libbpf_print_level level, const char *fmt, va_list args)
{
	(void)level;
	(void)fmt;
	(void)args;
	return 0;
}

static int s_marker(const struct probe_opts *o, const struct nw_layout *l)
{
	return o->step_symbol && l->step_marker[0];
}

/* Load (sleepable where the kernel can), freeze the GPU ring, attach; 0 or a negative errno. */
static int load_attach(struct probe *p, const struct target *t, const struct nw_layout *l,
		       const struct probe_opts *o, char *err, size_t errlen)
{
	int ret = open_load(p, t, l, o, 1);

	if (ret == -EINVAL) /* a kernel without sleepable uprobes: the probe method alone */
		ret = open_load(p, t, l, o, 0);
	if (ret) {
		snprintf(err, errlen, "failed to load BPF programs: %s%s", strerror(-ret),
			 ret == -EPERM ? " (missing CAP_SYS_ADMIN, or CAP_BPF and CAP_PERFMON)"
				       : " (run with --verbose for the verifier log)");
		return ret;
	}
	/* before anyone holds it: BPF alone writes the ring a target's library is handed */
	ret = bpf_map_freeze(bpf_map__fd(p->skel->maps.gpu_ring));
	if (ret) {
		snprintf(err, errlen, "failed to freeze the GPU request ring: %s", strerror(-ret));
		return ret;
	}
	return attach(p, t, o, l, err, errlen);
}

struct probe *probe__open(const struct target *t, const struct nw_layout *l,
			  const struct probe_opts *o, probe_event_fn cb, void *ctx, char *err,
			  size_t errlen)
{
	struct probe *p = calloc(1, sizeof(*p));
	int ret;

	if (!p) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	p->cb = cb;
	p->grad_cb = o->grad_cb;
	p->ctx = ctx;
	p->stats_fd = -1;
	p->session_fd = -1;
	p->eval_site = -1;
	p->epfd = -1;
	libbpf_set_print(o->verbose ? silent_print : quiet_print);
	if (o->bpf_stats) {
		p->stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
		if (p->stats_fd < 0) {
			ret = p->stats_fd;
			snprintf(err, errlen, "failed to enable BPF run-time stats: %s%s",
				 strerror(-ret), ret == -EPERM ? " (missing CAP_SYS_ADMIN)" : "");
			goto fail;
		}
	}
	p->session = o->return_probe == PROBE_RETURN_SESSION ||
		     (o->return_probe == PROBE_RETURN_AUTO && session_attach_type() >= 0);
	if (p->session && session_attach_type() < 0) {
		ret = -EOPNOTSUPP;
		snprintf(err, errlen,
			 "--return-probe session: this kernel has no uprobe sessions "
			 "(Linux 6.13 on)");
		goto fail;
	}
	ret = load_attach(p, t, l, o, err, errlen);
	if (ret)
		goto fail;
	p->rb = ring_buffer__new(bpf_map__fd(p->skel->maps.events), on_record, p, NULL);
	if (!p->rb) {
		ret = -errno;
		snprintf(err, errlen, "failed to create ring buffer: %s", strerror(errno));
		goto fail;
	}
	if (o->node_symbol) {
		p->gsum = gradsum__new();
		if (!p->gsum) {
			ret = -ENOMEM;
			snprintf(err, errlen, "out of memory");
			goto fail;
		}
		p->grad_rb = ring_buffer__new(bpf_map__fd(p->skel->maps.grad_data), on_grad_data, p,
					      NULL);
		if (!p->grad_rb) {
			ret = -errno;
			snprintf(err, errlen, "failed to create the gradient ring buffer: %s",
				 strerror(errno));
			goto fail;
		}
	}
	ret = watch_rings(p);
	if (ret) {
		snprintf(err, errlen, "failed to poll the ring buffers: %s", strerror(-ret));
		goto fail;
	}
	if (p->session)
		sessions_add(p);
	return p;
fail:
	probe__close(p);
	errno = -ret;
	return NULL;
}

int probe__return_probe(const struct probe *p)
{
	return p->session ? PROBE_RETURN_SESSION : PROBE_RETURN_URETPROBE;
}

int probe__read_method(const struct probe *p)
{
	return p->skel->rodata->read_method;
}

void probe__close(struct probe *p)
{
	int fd;

	if (!p)
		return;
	ring_buffer__free(p->rb);
	ring_buffer__free(p->grad_rb);
	if (p->epfd >= 0)
		close(p->epfd);
	gradsum__free(p->gsum);
	fd = sessions_remove(p);
	if (p->skel) { /* what is still attached goes with the skeleton */
		/* a cleaner still waiting: nothing armed here, and removal() pauses the rest */
		if (p->cleaner_on)
			__atomic_store_n(&p->skel->bss->stopped, 1, __ATOMIC_SEQ_CST);
		removal(1);
		join_cleaner(p);
		if (fd >= 0)
			close(fd);
		close_links(p);
		nanwatch_bpf__destroy(p->skel);
		removal(0);
	}
	if (p->stats_fd >= 0)
		close(p->stats_fd);
	drop_sites(p);
	free(p);
}

void probe__detach(struct probe *p)
{
	int fd;

	if (!p)
		return;
	/*
	 * Each probe takes about a tenth of a second to remove: stop them all at once
	 * first, so that no count (steps at the step marker, iterations at the frame
	 * evaluator) runs on after another has stopped.
	 */
	__atomic_store_n(&p->skel->bss->stopped, 1, __ATOMIC_SEQ_CST);
	fd = sessions_remove(p); /* no other watch's removal parks it now */
	removal(1);
	if (fd >= 0)
		close(fd);
	close_links(p);
	nanwatch_bpf__detach(p->skel);
	removal(0);
}

int probe__poll(struct probe *p, int timeout_ms)
{
	struct epoll_event ev[2];

	if (epoll_wait(p->epfd, ev, 2, timeout_ms) < 0)
		return -errno;
	/* gradient histograms come without a wake-up: take them at every poll */
	return probe__consume(p);
}

int probe__fd(const struct probe *p)
{
	return p->epfd;
}

int probe__consume_grads(struct probe *p)
{
	int n = p->grad_rb ? ring_buffer__consume(p->grad_rb) : 0;

	return n < 0 ? n : 0;
}

int probe__consume(struct probe *p)
{
	int n = ring_buffer__consume(p->rb);

	return n < 0 ? n : probe__consume_grads(p);
}

int probe__count(const struct probe *p)
{
	return p->nprobes;
}

void probe__counters(const struct probe *p, uint64_t out[NW_C_MAX])
{
	int i;

	for (i = 0; i < NW_C_MAX; i++)
		out[i] = __atomic_load_n(&p->skel->bss->counters[i], __ATOMIC_RELAXED);
	out[NW_C_BWD_GRADS_LOST] += gradsum__dropped(p->gsum); /* this side's drops too */
	out[NW_C_FORKS_CLEANED] = __atomic_load_n(&p->cleaned, __ATOMIC_RELAXED);
	out[NW_C_PARKED] = __atomic_load_n(&p->parks, __ATOMIC_RELAXED);
}

uint64_t probe__steps(const struct probe *p)
{
	return __atomic_load_n(&p->skel->bss->counters[NW_C_STEPS], __ATOMIC_RELAXED);
}

uint64_t probe__step(const struct probe *p, int *source)
{
	uint64_t w = __atomic_load_n(&p->skel->bss->step_count, __ATOMIC_RELAXED);

	*source = w >> NW_STEP_SHIFT;
	return w & NW_STEP_MASK;
}

static void loop_snap_copy(const struct nw_loop_snap *src, struct probe_loop *out);

void probe__loop(const struct probe *p, struct probe_loop *out)
{
	const struct nanwatch_bpf__bss *b = p->skel->bss;
	__u32 tid;
	__u64 ts = 0;

	out->step_word = __atomic_load_n(&b->step_count, __ATOMIC_ACQUIRE);
	tid = __atomic_load_n(&b->loop_tid, __ATOMIC_RELAXED);
	out->tid = tid;
	out->tstate = 0;
	if (tid && !bpf_map_lookup_elem(bpf_map__fd(p->skel->maps.tstates), &tid, &ts))
		out->tstate = ts;
	loop_snap_copy(&b->loop_snap, out);
}

/* A copy of what BPF wrote as the last root forward pass began, if it was not writing. */
static void loop_snap_copy(const struct nw_loop_snap *src, struct probe_loop *out)
{
	uint64_t seq = __atomic_load_n(&src->seq, __ATOMIC_ACQUIRE);

	out->snap_ok = 0;
	if (seq & 1)
		return;
	memcpy(&out->snap, (const void *)src, sizeof(out->snap));
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	out->snap_ok = __atomic_load_n(&src->seq, __ATOMIC_RELAXED) == seq && out->snap.seq == seq;
}

void probe__loop_slots(struct probe *p, const uint64_t *slots, int n, uint64_t gen)
{
	struct nanwatch_bpf__bss *b = p->skel->bss;
	int i;

	if (n < 0)
		n = 0;
	if (n > NW_LOOP_SLOTS)
		n = NW_LOOP_SLOTS;
	__atomic_store_n(&b->loop_nslots, 0, __ATOMIC_RELEASE);
	for (i = 0; i < n; i++)
		__atomic_store_n(&b->loop_slots[i], slots[i], __ATOMIC_RELAXED);
	__atomic_store_n(&b->loop_gen, gen, __ATOMIC_RELEASE);
	__atomic_store_n(&b->loop_nslots, (uint64_t)n, __ATOMIC_RELEASE);
}

uint64_t probe__optimizer(const struct probe *p)
{
	return __atomic_load_n(&p->skel->bss->step_opt, __ATOMIC_RELAXED);
}

void probe__set_step_state(struct probe *p, uint64_t impl)
{
	__atomic_store_n(&p->skel->bss->step_impl, impl, __ATOMIC_RELAXED);
}

int probe__execed(const struct probe *p)
{
	return __atomic_load_n(&p->skel->bss->execed, __ATOMIC_RELAXED);
}

uint64_t probe__iterations(const struct probe *p)
{
	return __atomic_load_n(&p->skel->bss->iter_started, __ATOMIC_RELAXED);
}

uint64_t probe__model(const struct probe *p)
{
	return __atomic_load_n(&p->skel->bss->root_module, __ATOMIC_RELAXED);
}

static void prog_runtime(const struct bpf_program *prog, uint64_t *ns, uint64_t *runs)
{
	struct bpf_prog_info info = {};
	__u32 len = sizeof(info);

	*ns = *runs = 0;
	if (!bpf_obj_get_info_by_fd(bpf_program__fd(prog), &info, &len)) {
		*ns = info.run_time_ns;
		*runs = info.run_cnt;
	}
}

int probe__runtime(const struct probe *p, struct probe_runtime *rt)
{
	memset(rt, 0, sizeof(*rt));
	if (p->stats_fd < 0)
		return -ENODATA;
	if (p->session) {
		/* one program runs both ends: the returns count (and time) themselves */
		prog_runtime(p->skel->progs.session_eval_frame, &rt->entry_ns, &rt->entry_runs);
		rt->return_runs = __atomic_load_n(&p->skel->bss->counters[NW_C_RETURN_HITS],
						  __ATOMIC_RELAXED);
		rt->return_ns =
			__atomic_load_n(&p->skel->bss->counters[NW_C_RETURN_NS], __ATOMIC_RELAXED);
		rt->entry_runs -=
			rt->return_runs < rt->entry_runs ? rt->return_runs : rt->entry_runs;
		rt->entry_ns -= rt->return_ns < rt->entry_ns ? rt->return_ns : rt->entry_ns;
	} else {
		prog_runtime(p->skel->progs.uprobe_eval_frame, &rt->entry_ns, &rt->entry_runs);
		prog_runtime(p->skel->progs.uretprobe_eval_frame, &rt->return_ns, &rt->return_runs);
	}
	prog_runtime(p->skel->progs.uprobe_run_backward, &rt->loss_ns, &rt->loss_runs);
	prog_runtime(p->skel->progs.uprobe_bwd_node, &rt->node_ns, &rt->node_runs);
	prog_runtime(p->skel->progs.uprobe_step_marker, &rt->step_ns, &rt->step_runs);
	prog_runtime(p->skel->progs.uprobe_scaler_update, &rt->scaler_ns, &rt->scaler_runs);
	return 0;
}

int probe__set_params(struct probe *p, uint64_t module, const struct nw_params *np)
{
	int err = bpf_map__update_elem(p->skel->maps.params, &module, sizeof(module), np,
				       sizeof(*np), BPF_ANY);

	return err < 0 ? err : 0;
}

int probe__set_keep(struct probe *p, uint64_t module, const struct nw_keep *k)
{
	int err = bpf_map__update_elem(p->skel->maps.keep_mods, &module, sizeof(module), k,
				       sizeof(*k), BPF_ANY);

	return err < 0 ? err : 0;
}

int probe__set_defer(struct probe *p, uint64_t module, const struct nw_defer *d)
{
	int err = bpf_map__update_elem(p->skel->maps.defer_mods, &module, sizeof(module), d,
				       sizeof(*d), BPF_ANY);

	return err < 0 ? err : 0;
}

void probe__keep_on(struct probe *p, uint64_t tensor, const uint64_t used[NW_KEEP_HOOKS])
{
	int i;

	for (i = 0; i < NW_KEEP_HOOKS; i++)
		__atomic_store_n(&p->skel->bss->keep_global_used[i], used[i], __ATOMIC_RELAXED);
	__atomic_store_n(&p->skel->bss->keep_tensor, tensor, __ATOMIC_RELEASE);
}

int probe__set_buffers(struct probe *p, uint64_t module, const struct nw_params *np)
{
	int err = bpf_map__update_elem(p->skel->maps.cap_buffers, &module, sizeof(module), np,
				       sizeof(*np), BPF_ANY);

	return err < 0 ? err : 0;
}

int probe__capture_fd(const struct probe *p)
{
	return bpf_map__fd(p->skel->maps.captures);
}

int probe__gpu_ring_fd(const struct probe *p)
{
	return bpf_map__fd(p->skel->maps.gpu_ring);
}

void probe__gpu_link(struct probe *p, int on)
{
	__atomic_store_n(&p->skel->bss->gpu_link, on ? 1 : 0, __ATOMIC_RELEASE);
}

/*
 * Load every program with every feature on (nothing is attached, no target needed) and
 * hand fn each program's name and the instructions the verifier processed for it.
 */
int probe__verifier_stats(const struct nw_layout *l, const struct nw_bwd_layout *bl,
			  const struct nw_rescan *rs, const struct nw_dict_layout *dict,
			  int step_by_marker,
			  void (*fn)(const char *name, uint32_t insns, void *ctx), void *ctx,
			  char *err, size_t errlen)
{
	struct nanwatch_bpf *s = nanwatch_bpf__open();
	struct bpf_program *prog;
	int ret;

	if (!s) {
		snprintf(err, errlen, "failed to open the BPF object: %s", strerror(errno));
		return -errno;
	}
	/* addresses of a target: any non-zero value takes the paths a real one does */
	s->rodata->targ_tgid = 1;
	s->rodata->A.tuple_type = 1ULL << 40;
	s->rodata->A.list_type = 2ULL << 40;
	s->rodata->A.tensor_type = 3ULL << 40;
	memcpy((void *)&s->rodata->L, l, sizeof(*l));
	memcpy((void *)&s->rodata->BL, bl, sizeof(*bl));
	s->rodata->BL.acc_vptr = 4ULL << 40;
	s->rodata->BL.end_vptr[0] = 5ULL << 40;
	s->rodata->BL.seq_modid = 1; /* the creator search on: its programs are verified too */
	s->rodata->BL.node_sequence_nr = 24;
	memcpy((void *)&s->rodata->RS, rs, sizeof(*rs));
	s->rodata->step_by_marker = step_by_marker;
	s->rodata->RS.on = 1;
	memcpy((void *)&s->rodata->D, dict, sizeof(*dict));
	s->rodata->grad_offload = 1; /* gradients' bytes to the daemon: their paths too */
	s->rodata->grad_ring_bytes = 8u << 20;
	s->rodata->capture_max_bytes = 1 << 20;
	s->rodata->c10_codes = 1;
	s->rodata->backward_on = 1;
	s->rodata->backward_all = 1;
	s->rodata->gpu_on = 1;
	s->rodata->gpu_device = 1;
	s->rodata->gpu_index_off = l->impl_device >= 0 ? l->impl_device + 1 : -1;
	s->rodata->time_copies = 1;
	ret = set_read_method(s, NW_READ_ADAPTIVE, 1000, 1);
	/* the session's program where the kernel has them, and the entry and return pair */
	if (!ret)
		ret = set_return_probe(s, session_attach_type(), 0);
	if (!ret) /* as a watch loads them */
		ret = set_multi(s) < 0 ? -EINVAL : 0;
	bpf_program__set_autoload(s->progs.uprobe_eval_frame, true);
	bpf_program__set_autoload(s->progs.uretprobe_eval_frame, true);
	if (!ret)
		ret = nanwatch_bpf__load(s);
	if (ret) {
		snprintf(err, errlen, "failed to load the BPF programs: %s", strerror(-ret));
		goto out;
	}
	bpf_object__for_each_program(prog, s->obj)
	{
		struct bpf_prog_info info = {};
		__u32 len = sizeof(info);
		int fd = bpf_program__fd(prog);

		if (fd >= 0 && !bpf_obj_get_info_by_fd(fd, &info, &len))
			fn(bpf_program__name(prog), info.verified_insns, ctx);
	}
out:
	nanwatch_bpf__destroy(s);
	return ret;
}
