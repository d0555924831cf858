// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The GPU library's socket: connected through the target's root to the path the library
 * listens at (its pid in its own pid namespace), the peer's pid checked before anything
 * is sent, then HELLO with a read-only descriptor of the request ring. Every message and
 * every ring slot read back is bounded and checked: the target may write either.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* struct ucred */
#endif
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>
#include <linux/openat2.h>
#include <bpf/bpf.h>
#include "attach/gpulink.h"
#include "nanwatch.h"
#include "util/file.h"

#define RING_BYTES ((size_t)(NW_GPU_SLOTS + 1) * NW_GPU_REQ_SIZE)
#define RETRY_S 1.0 /* between connection attempts */

_Static_assert(sizeof(struct nw_gpu_req) == NW_GPU_REQ_SIZE, "a request fills its slot");
_Static_assert(sizeof(struct nw_gpu_head) == NW_GPU_REQ_SIZE, "the header fills slot 0");
_Static_assert(sizeof(struct nw_gpu_ctx) == sizeof(((struct nw_gpu_req *)0)->ctx),
	       "the daemon's context fills the request's");
_Static_assert(sizeof(struct nw_gpu_result) == 64, "nw_gpu_result changed: update both sides");
_Static_assert(sizeof(struct nw_gpu_ready) == 24, "nw_gpu_ready changed: update both sides");

struct gpulink {
	pid_t pid;
	int ring_fd;
	void *ring; /* our own mapping, read-write: the header's magic is ours to set */
	int sock;
	double next_try;
	struct gpulink_cb cb;
	struct gpulink_state st;
	__u64 buf[NW_GPU_MSG_MAX / 8 + 1]; /* one message, and a byte more: too long shows */
};

int gpulink__check_msg(const void *buf, size_t n, struct gpulink_msg *m)
{
	struct nw_gpu_msg h;

	if (n < sizeof(h) || n > NW_GPU_MSG_MAX)
		return -EBADMSG;
	memcpy(&h, buf, sizeof(h));
	if (h.len != n - sizeof(h))
		return -EBADMSG;
	m->type = h.type;
	m->body = (const char *)buf + sizeof(h);
	m->len = h.len;
	switch (h.type) {
	case NW_GPU_MSG_READY:
		return h.len >= sizeof(struct nw_gpu_ready) ? 0 : -EBADMSG;
	case NW_GPU_MSG_RESULT:
		return h.len && h.len % sizeof(struct nw_gpu_result) == 0 ? 0 : -EBADMSG;
	case NW_GPU_MSG_STATS:
		return h.len && h.len % sizeof(__u64) == 0 ? 0 : -EBADMSG;
	case NW_GPU_MSG_NOTICE:
		return h.len ? 0 : -EBADMSG;
	default:
		return 0; /* a later version's message: skipped */
	}
}

void gpulink__notice_text(const void *body, size_t len, char *out, size_t outlen)
{
	const unsigned char *p = body;
	size_t i, n = 0;

	if (!outlen)
		return;
	for (i = 0; i < len && n + 1 < outlen && n < GPULINK_NOTICE_MAX; i++) {
		if (p[i] == 0 || p[i] == '\n')
			break;
		out[n++] = p[i] >= 0x20 && p[i] < 0x7f ? p[i] : '?';
	}
	out[n] = 0;
}

static int slot_sane(const struct nw_gpu_req *r)
{
	const struct nw_gpu_ctx *c = (const void *)r->ctx;

	return r->role <= NW_GPU_PARAM && r->dtype >= NW_DT_F16 && r->dtype <= NW_DT_BF16 &&
	       c->ndim <= NW_MAX_DIMS && c->depth <= NW_MAX_DEPTH && c->phase <= NW_PHASE_BACKWARD;
}

int gpulink__copy_slot(const void *ring, uint64_t seq, struct nw_gpu_req *out)
{
	const struct nw_gpu_req *slot;
	uint64_t again;

	if (!seq)
		return -ESTALE;
	slot = (const struct nw_gpu_req *)ring + 1 + ((seq - 1) & (NW_GPU_SLOTS - 1));
	if (__atomic_load_n(&slot->seq, __ATOMIC_ACQUIRE) != seq)
		return -ESTALE;
	memcpy(out, slot, sizeof(*out));
	/* rewritten while copied: BPF zeroes seq first, so a torn copy shows here */
	again = __atomic_load_n(&slot->seq, __ATOMIC_ACQUIRE);
	if (again != seq || out->seq != seq)
		return -ESTALE;
	return slot_sane(out) ? 0 : -EINVAL;
}

int gpulink__check_result(const struct nw_gpu_req *req, const struct nw_gpu_result *r)
{
	if (r->seq != req->seq)
		return -EINVAL;
	if (!(r->flags & NW_GPU_R_SCANNED))
		return 0; /* counts unused */
	if (r->scanned > req->numel || r->nan > r->scanned || r->posinf > r->scanned ||
	    r->neginf > r->scanned || r->nan + r->posinf + r->neginf > r->scanned)
		return -EINVAL;
	return 0;
}

/* The target's pid in its own pid namespace: the last NSpid field. */
static pid_t ns_pid(pid_t pid)
{
	char path[64], *st, *line, *end;
	pid_t last = pid;
	long v;

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	st = file__read(path, 1 << 16, NULL);
	if (!st)
		return pid;
	line = strstr(st, "\nNSpid:");
	if (line) {
		line += 7;
		for (;;) {
			v = strtol(line, &end, 10);
			if (end == line)
				break;
			last = (pid_t)v;
			line = end;
		}
	}
	free(st);
	return last;
}

/* $NANWATCH_CUPTI_DIR in the target's environment (at its start), else /tmp. */
static void socket_dir(pid_t pid, char *out, size_t len)
{
	static const char key[] = "NANWATCH_CUPTI_DIR=";
	char path[64], *env;
	size_t n, i;

	snprintf(out, len, "/tmp");
	snprintf(path, sizeof(path), "/proc/%d/environ", pid);
	env = file__read(path, 1 << 20, &n);
	if (!env)
		return;
	for (i = 0; i < n; i += strlen(env + i) + 1) {
		if (!strncmp(env + i, key, sizeof(key) - 1) && env[i + sizeof(key) - 1] == '/') {
			snprintf(out, len, "%s", env + i + sizeof(key) - 1);
			break;
		}
	}
	free(env);
}

/* The library's directory inside the target's root: symlinks resolved within that root. */
static int open_dir(pid_t pid, const char *dir)
{
	struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
			       .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS};
	char path[64];
	int root, fd;

	snprintf(path, sizeof(path), "/proc/%d/root", pid);
	root = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (root < 0)
		return -errno;
	fd = syscall(SYS_openat2, root, dir, &how, sizeof(how));
	fd = fd < 0 ? -errno : fd;
	close(root);
	return fd;
}

/* A connected, non-blocking socket whose peer is the target itself; -errno. */
static int connect_lib(struct gpulink *g)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char dir[PATH_MAX], full[PATH_MAX + 64], *name;
	struct ucred cred;
	socklen_t clen = sizeof(cred);
	struct stat sb;
	int dfd, fd, ret;

	socket_dir(g->pid, dir, sizeof(dir));
	snprintf(full, sizeof(full), NW_GPU_SOCK_FMT, dir, ns_pid(g->pid));
	name = strrchr(full, '/') + 1; /* the format puts the name after the directory */
	snprintf(g->st.socket, sizeof(g->st.socket), "%.127s", full);
	dfd = open_dir(g->pid, dir);
	if (dfd < 0)
		return dfd;
	if (fstatat(dfd, name, &sb, AT_SYMLINK_NOFOLLOW) || !S_ISSOCK(sb.st_mode)) {
		close(dfd);
		return -ENOENT;
	}
	snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/%s", dfd, name);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	ret = fd < 0 ? -errno : 0;
	if (!ret && connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
		ret = -errno;
	close(dfd);
	/* the process we watch, not whoever put a socket there */
	if (!ret && (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) || cred.pid != g->pid))
		ret = -EPERM;
	if (ret && fd >= 0)
		close(fd);
	return ret ? ret : fd;
}

/*
 * A descriptor of the ring that cannot be mapped writable, where the kernel lets one map
 * it at all (older kernels refuse a shared mapping of a read-only map descriptor, and the
 * library gets ours: what it could write is only ever read as untrusted).
 */
static int ring_ro_fd(int ring_fd)
{
	LIBBPF_OPTS(bpf_get_fd_by_id_opts, o, .open_flags = BPF_F_RDONLY);
	struct bpf_map_info info = {};
	__u32 len = sizeof(info);
	void *m;
	int fd;

	if (bpf_obj_get_info_by_fd(ring_fd, &info, &len))
		return -errno;
	fd = bpf_map_get_fd_by_id_opts(info.id, &o);
	if (fd < 0)
		return fd;
	m = mmap(NULL, RING_BYTES, PROT_READ, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED) {
		close(fd);
		return -EACCES;
	}
	munmap(m, RING_BYTES);
	return fd;
}

static int send_hello(int sock, int fd)
{
	struct {
		struct nw_gpu_msg h;
		struct nw_gpu_hello b;
	} m = {{NW_GPU_MSG_HELLO, sizeof(struct nw_gpu_hello)},
	       {NW_GPU_VERSION, NW_GPU_SLOTS, NW_GPU_REQ_SIZE, 0}};
	char cbuf[CMSG_SPACE(sizeof(int))] = {};
	struct iovec iov = {&m, sizeof(m)};
	struct msghdr mh = {.msg_iov = &iov,
			    .msg_iovlen = 1,
			    .msg_control = cbuf,
			    .msg_controllen = sizeof(cbuf)};
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);

	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	return sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) == (ssize_t)sizeof(m) ? 0 : -EIO;
}

static struct nw_gpu_head *head(const struct gpulink *g)
{
	return g->ring;
}

static void set_magic(struct gpulink *g, uint64_t magic)
{
	__atomic_store_n(&head(g)->magic, magic, __ATOMIC_RELEASE);
}

static void disconnect(struct gpulink *g)
{
	if (g->sock >= 0)
		close(g->sock);
	g->sock = -1;
	set_magic(g, 0); /* BPF stops writing requests nobody reads */
	g->st.connected = g->st.ready = 0;
}

int gpulink__tick(struct gpulink *g, double now)
{
	int fd, ro, ret;

	if (g->sock >= 0 || now < g->next_try)
		return g->sock >= 0;
	g->next_try = now + RETRY_S;
	fd = connect_lib(g);
	if (fd < 0)
		return 0;
	ro = ring_ro_fd(g->ring_fd);
	ret = send_hello(fd, ro >= 0 ? ro : g->ring_fd);
	if (ro >= 0)
		close(ro);
	if (ret) {
		close(fd);
		return 0;
	}
	g->sock = fd;
	g->st.connected = 1;
	return 1;
}

static void on_ready(struct gpulink *g, const struct gpulink_msg *m)
{
	struct nw_gpu_ready r;

	memcpy(&r, m->body, sizeof(r));
	if (r.version != NW_GPU_VERSION) {
		g->st.invalid++;
		disconnect(g);
		return;
	}
	g->st.ready = 1;
	g->st.mode = r.mode;
	g->st.state = r.state;
	g->st.devices = r.devices;
	g->st.cuda_driver = r.cuda_driver;
	g->st.connects++;
	set_magic(g, NW_GPU_MAGIC);
	if (g->cb.ready)
		g->cb.ready(g->cb.ctx, &r);
}

static void on_results(struct gpulink *g, const struct gpulink_msg *m)
{
	struct nw_gpu_result r;
	struct nw_gpu_req req;
	size_t i;
	int ret;

	for (i = 0; i + sizeof(r) <= m->len; i += sizeof(r)) {
		memcpy(&r, (const char *)m->body + i, sizeof(r));
		ret = gpulink__copy_slot(g->ring, r.seq, &req);
		if (!ret)
			ret = gpulink__check_result(&req, &r);
		if (ret == -ESTALE)
			g->st.lost++;
		else if (ret)
			g->st.invalid++;
		if (g->cb.result)
			g->cb.result(g->cb.ctx, ret ? NULL : &req, &r);
	}
}

static void on_msg(struct gpulink *g, const struct gpulink_msg *m)
{
	char text[GPULINK_NOTICE_MAX + 1];
	size_t n;

	switch (m->type) {
	case NW_GPU_MSG_READY:
		on_ready(g, m);
		break;
	case NW_GPU_MSG_RESULT:
		if (g->st.ready)
			on_results(g, m);
		break;
	case NW_GPU_MSG_STATS:
		n = m->len / sizeof(__u64);
		memcpy(g->st.stats, m->body, (n < NW_GPU_S_MAX ? n : NW_GPU_S_MAX) * sizeof(__u64));
		g->st.have_stats = 1;
		break;
	case NW_GPU_MSG_NOTICE:
		gpulink__notice_text(m->body, m->len, text, sizeof(text));
		if (g->cb.notice && text[0])
			g->cb.notice(g->cb.ctx, text);
		break;
	}
}

/* Descriptors the peer sent along are not wanted: closed. */
static void close_fds(struct msghdr *mh)
{
	struct cmsghdr *c;
	size_t i, n;
	int fd;

	for (c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (i = 0; i < n; i++) {
			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			close(fd);
		}
	}
}

int gpulink__poll(struct gpulink *g)
{
	char cbuf[CMSG_SPACE(8 * sizeof(int))];
	struct gpulink_msg m;
	ssize_t n;

	while (g->sock >= 0) {
		struct iovec iov = {g->buf, NW_GPU_MSG_MAX + 1};
		struct msghdr mh = {.msg_iov = &iov,
				    .msg_iovlen = 1,
				    .msg_control = cbuf,
				    .msg_controllen = sizeof(cbuf)};

		n = recvmsg(g->sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			break;
		if (n > 0)
			close_fds(&mh);
		if (n <= 0 || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) ||
		    gpulink__check_msg(g->buf, n, &m)) {
			if (n > 0)
				g->st.invalid++;
			disconnect(g); /* closed, or it lied: the next tick connects again */
			break;
		}
		on_msg(g, &m);
	}
	return 0;
}

int gpulink__slot(const struct gpulink *g, uint64_t seq, struct nw_gpu_req *out)
{
	return gpulink__copy_slot(g->ring, seq, out);
}

int gpulink__fd(const struct gpulink *g)
{
	return g ? g->sock : -1;
}

void gpulink__state(const struct gpulink *g, struct gpulink_state *out)
{
	*out = g->st;
	out->written = __atomic_load_n(&head(g)->head, __ATOMIC_RELAXED);
	out->dropped = __atomic_load_n(&head(g)->dropped, __ATOMIC_RELAXED);
}

struct gpulink *gpulink__new(pid_t pid, int ring_fd, const struct gpulink_cb *cb, char *err,
			     size_t errlen)
{
	struct gpulink *g = calloc(1, sizeof(*g));

	if (!g) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	g->pid = pid;
	g->ring_fd = ring_fd;
	g->sock = -1;
	g->cb = *cb;
	g->ring = mmap(NULL, RING_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, ring_fd, 0);
	if (g->ring == MAP_FAILED) {
		int e = errno;

		snprintf(err, errlen, "failed to map the GPU request ring: %s", strerror(e));
		free(g);
		errno = e;
		return NULL;
	}
	return g;
}

void gpulink__free(struct gpulink *g)
{
	if (!g)
		return;
	disconnect(g);
	munmap(g->ring, RING_BYTES);
	free(g);
}
