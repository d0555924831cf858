// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The GPU library's socket: found among the target's own listening sockets (never a path
 * guessed from a pid number), connected through the target's root once the target maps the
 * library, the peer proven to be the target (pidfd, uid) before anything is sent, then HELLO
 * with the request ring, frozen, so that only BPF writes it. Every message and every ring slot
 * read back is bounded and checked, and a result counts once, for a request BPF has written.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* struct ucred */
#endif
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>
#include <linux/openat2.h>
#include "attach/gpulink.h"
#include "inject/inject.h"
#include "nanwatch.h"
#include "util/file.h"

#define RING_BYTES ((size_t)(NW_GPU_SLOTS + 1) * NW_GPU_REQ_SIZE)
#define RETRY_S 1.0 /* between connection attempts */

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77 /* Linux 6.5 */
#endif
#ifndef PID_FS_MAGIC
#define PID_FS_MAGIC 0x50494446 /* Linux 6.9: a pidfd's file system */
#endif

_Static_assert(sizeof(struct nw_gpu_req) == NW_GPU_REQ_SIZE, "a request fills its slot");
_Static_assert(sizeof(struct nw_gpu_head) == NW_GPU_REQ_SIZE, "the header fills slot 0");
_Static_assert(sizeof(struct nw_gpu_ctx) == sizeof(((struct nw_gpu_req *)0)->ctx),
	       "the daemon's context fills the request's");
_Static_assert(sizeof(struct nw_gpu_result) == 64, "nw_gpu_result changed: update both sides");
_Static_assert(sizeof(struct nw_gpu_ready) == 24, "nw_gpu_ready changed: update both sides");

struct gpulink {
	pid_t pid;
	int pidfd; /* the caller's: what "the target" means when a peer is checked */
	uid_t uid; /* the target's effective uid at the last try */
	int ring_fd;
	const void *ring; /* our own mapping, read-only as everyone's */
	int sock;
	int lib_seen; /* the target was seen to map the library */
	double next_try;
	struct gpulink_cb cb;
	struct gpulink_state st;
	uint64_t answered[NW_GPU_SLOTS];   /* per ring slot, the seq its last result was for */
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
	uint64_t now, again;

	if (!seq)
		return -ENOENT;
	slot = (const struct nw_gpu_req *)ring + 1 + ((seq - 1) & (NW_GPU_SLOTS - 1));
	now = __atomic_load_n(&slot->seq, __ATOMIC_ACQUIRE);
	if (now != seq)
		return now > seq ? -ESTALE : -ENOENT; /* 0: being written (BPF zeroes it first) */
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

/* The target's user: its status read while its pidfd says it runs (so the status was its). */
int gpulink__target_uid(pid_t pid, int pidfd, uid_t *uid)
{
	struct pollfd p = {.fd = pidfd, .events = POLLIN};
	char path[64], *st, *line;
	unsigned long ruid, euid;
	int ret = -EINVAL;

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	st = file__read(path, 1 << 16, NULL);
	if (!st)
		return -errno;
	line = strstr(st, "\nUid:");
	if (line && sscanf(line + 5, "%lu %lu", &ruid, &euid) == 2) {
		*uid = (uid_t)euid;
		ret = 0;
	}
	free(st);
	/* readable: it exited, and the number may name another process by now */
	if (!ret && poll(&p, 1, 0) != 0)
		ret = -ESRCH;
	return ret;
}

int gpulink__sock_name(const struct sockaddr_un *sa, socklen_t len, char *path, size_t pathlen)
{
	size_t n, k, plen = strlen(NW_GPU_SOCK_DIR_PREFIX);
	const char *base, *dir;

	if (len <= offsetof(struct sockaddr_un, sun_path) || sa->sun_family != AF_UNIX)
		return -EINVAL;
	n = len - offsetof(struct sockaddr_un, sun_path);
	if (n > sizeof(sa->sun_path))
		return -EINVAL;
	k = strnlen(sa->sun_path, n);
	/* absolute (not abstract, not relative to a directory we cannot know) */
	if (!k || k + 1 > pathlen || sa->sun_path[0] != '/')
		return -EINVAL;
	memcpy(path, sa->sun_path, k);
	path[k] = 0;
	base = strrchr(path, '/');
	if (base == path || strcmp(base + 1, NW_GPU_SOCK_NAME))
		return -EINVAL;
	for (dir = base - 1; dir > path && *dir != '/'; dir--)
		;
	if (strncmp(dir + 1, NW_GPU_SOCK_DIR_PREFIX, plen) || dir + 1 + plen >= base)
		return -EINVAL;
	return strstr(path, "/../") ? -EINVAL : 0;
}

/* Two pidfds of one process: pidfs gives every struct pid its own inode. */
static int same_process(int a, int b)
{
	struct statfs fa, fb;
	struct stat sa, sb;

	if (fstatfs(a, &fa) || fstatfs(b, &fb) || fstat(a, &sa) || fstat(b, &sb))
		return -errno;
	/* before pidfs (Linux 6.9) every pidfd shares one anonymous inode: nothing to tell */
	if (fa.f_type != PID_FS_MAGIC || fb.f_type != PID_FS_MAGIC)
		return -ENOTSUP;
	return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino ? 0 : -EPERM;
}

int gpulink__peer_is(int sock, int pidfd, uid_t uid)
{
	struct ucred cr;
	socklen_t len = sizeof(cr);
	int peer = -1, ret;

	if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cr, &len))
		return -errno;
	if (cr.uid != uid)
		return -EPERM;
	len = sizeof(peer);
	/* the struct pid of the process that listened: a number used again is another */
	if (getsockopt(sock, SOL_SOCKET, SO_PEERPIDFD, &peer, &len))
		return errno == ENOPROTOOPT ? -ENOTSUP : errno == ESRCH ? -EPERM : -errno;
	ret = same_process(peer, pidfd);
	close(peer);
	return ret;
}

/* A descriptor of the target's (the target's fd n, through its pidfd) its library listens on. */
static int listener_ok(int fd, int pidfd, uid_t uid, char *path, size_t pathlen)
{
	struct sockaddr_un sa;
	socklen_t len = sizeof(sa);
	int type = 0, acc = 0, ret;
	socklen_t ol = sizeof(type);

	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &ol) || type != SOCK_SEQPACKET)
		return -ENOENT;
	ol = sizeof(acc);
	if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &acc, &ol) || !acc)
		return -ENOENT;
	if (getsockname(fd, (struct sockaddr *)&sa, &len) ||
	    gpulink__sock_name(&sa, len, path, pathlen))
		return -ENOENT;
	/* a listener inherited from a parent, or passed on by another process, is not ours */
	ret = gpulink__peer_is(fd, pidfd, uid);
	return ret == -ENOTSUP ? ret : ret ? -ENOENT : 0;
}

/* Whether entry name of /proc/PID/fd is a socket: its fd number, or -1. */
static int socket_fd(int dfd, const char *name)
{
	char link[64], *end;
	ssize_t n;
	long v;

	v = strtol(name, &end, 10);
	if (end == name || *end || v < 0 || v > INT_MAX)
		return -1;
	n = readlinkat(dfd, name, link, sizeof(link) - 1);
	if (n <= 0)
		return -1;
	link[n] = 0;
	return strncmp(link, "socket:[", 8) ? -1 : (int)v;
}

int gpulink__find(pid_t pid, int pidfd, uid_t uid, char *path, size_t pathlen)
{
	int dfd, n, fd, entries = 0, sockets = 0, ret = -ENOENT;
	char dir[64];
	struct dirent *e;
	DIR *d;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", pid);
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	d = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (!d) {
		ret = -errno;
		if (dfd >= 0)
			close(dfd);
		return ret;
	}
	while (ret == -ENOENT && (e = readdir(d)) && entries++ < GPULINK_FDS_MAX) {
		n = socket_fd(dfd, e->d_name);
		if (n < 0 || sockets++ >= GPULINK_SOCKETS_MAX)
			continue;
		/* through the pidfd: the target's own descriptor, whatever the number names now */
		fd = syscall(SYS_pidfd_getfd, pidfd, n, 0);
		if (fd < 0)
			continue;
		ret = listener_ok(fd, pidfd, uid, path, pathlen);
		close(fd);
	}
	closedir(d);
	return ret;
}

/* Whether the target maps the library (or a copy --inject placed in a container's /tmp). */
static int lib_mapped(pid_t pid)
{
	char path[64], *maps;
	int yes;

	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	maps = file__read(path, 64 << 20, NULL);
	if (!maps)
		return 0;
	yes = inject__loaded(maps);
	free(maps);
	return yes;
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

/* A connected, non-blocking socket to path (as the target sees it); -errno. */
static int connect_path(pid_t pid, char *path)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char *slash = strrchr(path, '/');
	struct stat sb;
	int dfd, fd, ret;

	*slash = 0;
	dfd = open_dir(pid, path);
	*slash = '/';
	if (dfd < 0)
		return dfd;
	if (fstatat(dfd, slash + 1, &sb, AT_SYMLINK_NOFOLLOW) || !S_ISSOCK(sb.st_mode)) {
		close(dfd);
		return -ENOENT;
	}
	snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/%s", dfd, slash + 1);
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	ret = fd < 0 ? -errno : 0;
	if (!ret && connect(fd, (struct sockaddr *)&sa, sizeof(sa)))
		ret = -errno;
	close(dfd);
	if (ret && fd >= 0)
		close(fd);
	return ret ? ret : fd;
}

static void refuse(struct gpulink *g, int why)
{
	char text[512];

	g->st.refused++;
	snprintf(text, sizeof(text),
		 "refused the GPU library socket %.120s of pid %d: %s; GPU tensors are not "
		 "checked while it is there",
		 g->st.socket, g->pid,
		 why == -ENOTSUP ? "this kernel cannot name the peer (SO_PEERPIDFD and pidfs "
				   "need Linux 6.9)"
				 : "its peer is not the target process and its user");
	if (g->cb.refused)
		g->cb.refused(g->cb.ctx, text);
}

/* A connected socket whose peer is the target itself, once the target maps the library. */
static int connect_lib(struct gpulink *g)
{
	char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
	int fd, ret;

	/* its user now: one that changed since the attach listens as the new one */
	ret = gpulink__target_uid(g->pid, g->pidfd, &g->uid);
	if (!ret)
		ret = gpulink__find(g->pid, g->pidfd, g->uid, path, sizeof(path));
	if (!ret || ret == -ENOTSUP)
		snprintf(g->st.socket, sizeof(g->st.socket), "%s", path);
	if (ret == -ENOTSUP)
		refuse(g, ret);
	if (ret)
		return ret;
	/* a socket of that name is no library: the process must map one */
	if (!g->lib_seen)
		g->lib_seen = lib_mapped(g->pid);
	if (!g->lib_seen)
		return -ENOENT;
	fd = connect_path(g->pid, path);
	if (fd < 0)
		return fd;
	/* the path may lead elsewhere by now: the one the daemon connected to is what counts */
	ret = gpulink__peer_is(fd, g->pidfd, g->uid);
	if (ret) {
		close(fd);
		refuse(g, ret);
		return ret;
	}
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

static const struct nw_gpu_head *head(const struct gpulink *g)
{
	return g->ring;
}

static void set_link(struct gpulink *g, int on)
{
	if (g->cb.link)
		g->cb.link(g->cb.ctx, on);
}

static void disconnect(struct gpulink *g)
{
	if (g->sock >= 0)
		close(g->sock);
	g->sock = -1;
	set_link(g, 0); /* BPF stops writing requests nobody reads */
	g->st.connected = g->st.ready = 0;
}

int gpulink__tick(struct gpulink *g, double now)
{
	int fd;

	if (g->sock >= 0 || now < g->next_try)
		return g->sock >= 0;
	g->next_try = now + RETRY_S;
	fd = connect_lib(g);
	if (fd < 0)
		return 0;
	/* frozen (gpulink__new made sure): the peer can map it read-only, nothing more */
	if (send_hello(fd, g->ring_fd)) {
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
	set_link(g, 1);
	if (g->cb.ready)
		g->cb.ready(g->cb.ctx, &r);
}

/*
 * One result against the ring as BPF left it (written: BPF's head, read after the message
 * came): 0 and req filled if it counts; -ESTALE (the ring moved on: lost), or -EINVAL (not a
 * request BPF has written, a second answer, or counts out of range).
 */
static int take_result(struct gpulink *g, const struct nw_gpu_result *r, uint64_t written,
		       struct nw_gpu_req *req)
{
	uint64_t *last;
	int ret;

	/* no library can have read a request BPF had not written when the message came */
	if (!r->seq || r->seq > written)
		return -EINVAL;
	if (written - r->seq >= NW_GPU_SLOTS)
		return -ESTALE;
	last = &g->answered[(r->seq - 1) & (NW_GPU_SLOTS - 1)];
	if (*last == r->seq)
		return -EINVAL; /* replayed: one request, one result */
	ret = gpulink__copy_slot(g->ring, r->seq, req);
	/* not there: BPF rewrites it for a later request, or had not written it yet */
	if (ret == -ENOENT)
		ret = __atomic_load_n(&head(g)->head, __ATOMIC_ACQUIRE) - r->seq >= NW_GPU_SLOTS
			      ? -ESTALE
			      : -EINVAL;
	if (!ret)
		ret = gpulink__check_result(req, r);
	if (!ret)
		*last = r->seq;
	return ret;
}

static void on_results(struct gpulink *g, const struct gpulink_msg *m)
{
	uint64_t written = __atomic_load_n(&head(g)->head, __ATOMIC_ACQUIRE);
	struct nw_gpu_result r;
	struct nw_gpu_req req;
	size_t i;
	int ret;

	for (i = 0; i + sizeof(r) <= m->len; i += sizeof(r)) {
		memcpy(&r, (const char *)m->body + i, sizeof(r));
		ret = take_result(g, &r, written, &req);
		if (ret == -ESTALE)
			g->st.lost++;
		else if (ret)
			g->st.invalid++;
		else if (g->cb.result)
			g->cb.result(g->cb.ctx, &req, &r);
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
	int msgs = 0;
	ssize_t n;

	/* bounded: a peer that never stops sending waits for the next poll like everyone else */
	while (g->sock >= 0 && msgs++ < GPULINK_POLL_MSGS) {
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

/* The ring mapped read-only, once it is sure nobody can map it writable (frozen). */
static int map_ring(struct gpulink *g, char *err, size_t errlen)
{
	void *w = mmap(NULL, RING_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, g->ring_fd, 0);
	void *m;

	if (w != MAP_FAILED) {
		munmap(w, RING_BYTES);
		snprintf(err, errlen, "refused to hand over the GPU request ring: it is writable");
		return -EPERM;
	}
	m = mmap(NULL, RING_BYTES, PROT_READ, MAP_SHARED, g->ring_fd, 0);
	if (m == MAP_FAILED) {
		int e = errno;

		snprintf(err, errlen, "failed to map the GPU request ring: %s", strerror(e));
		return -e;
	}
	g->ring = m;
	return 0;
}

struct gpulink *gpulink__new(pid_t pid, int pidfd, int ring_fd, const struct gpulink_cb *cb,
			     char *err, size_t errlen)
{
	struct gpulink *g = calloc(1, sizeof(*g));
	int ret;

	if (!g) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	g->pid = pid;
	g->pidfd = pidfd;
	g->ring_fd = ring_fd;
	g->sock = -1;
	g->cb = *cb;
	ret = pidfd < 0 ? -EBADF : gpulink__target_uid(pid, pidfd, &g->uid);
	if (ret)
		snprintf(err, errlen, "failed to read the user of pid %d: %s", pid, strerror(-ret));
	else
		ret = map_ring(g, err, errlen);
	if (ret) {
		free(g);
		errno = -ret;
		return NULL;
	}
	return g;
}

void gpulink__free(struct gpulink *g)
{
	if (!g)
		return;
	disconnect(g);
	munmap((void *)g->ring, RING_BYTES);
	free(g);
}
