// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Whom the GPU link talks to (daemon/attach/gpulink.c), with real sockets, pidfds and
 * processes, this test process playing the target: the names a library socket may have (any
 * other, whatever a target binds, is not looked at), the peer check by pidfd and uid (a process
 * that is gone, another process, another user), the search of the target's own fd table
 * (bounded; sockets inherited or passed on from another process, of another type, not
 * listening, named otherwise: passed over), no connection before the library is mapped, and
 * what a connected peer's results can do: a replay, a result for a request BPF has not written
 * (yet, or in this round of the ring) or one the ring overwrote count for nothing.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include <linux/types.h>
#include "attach/gpulink.h"
#include "nanwatch.h"
#include "nwgpu.h"

#define RING_BYTES ((size_t)(NW_GPU_SLOTS + 1) * NW_GPU_REQ_SIZE)

static char base[64]; /* a scratch directory: NANWATCH_CUPTI_DIR's part */
static int self_pidfd = -1;

static int setup(void **state)
{
	(void)state;
	snprintf(base, sizeof(base), "/tmp/nwgpulink-test.XXXXXX");
	if (!mkdtemp(base))
		return -1;
	self_pidfd = syscall(SYS_pidfd_open, getpid(), 0);
	return self_pidfd < 0 ? -1 : 0;
}

static int teardown(void **state)
{
	char cmd[128];

	(void)state;
	close(self_pidfd);
	snprintf(cmd, sizeof(cmd), "rm -rf %s", base);
	return system(cmd) ? -1 : 0;
}

static int name_ok(const char *path, size_t n)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char out[sizeof(sa.sun_path)];

	memcpy(sa.sun_path, path, n);
	return gpulink__sock_name(&sa, offsetof(struct sockaddr_un, sun_path) + n, out,
				  sizeof(out));
}

#define NAME_OK(p) name_ok(p, sizeof(p))

/* What a target's socket must be named to be looked at, whatever bytes it holds. */
static void test_sock_name(void **state)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char out[sizeof(sa.sun_path)], small[16];

	(void)state;
	assert_int_equal(NAME_OK("/tmp/.nanwatch-cupti-42.AbC123/cupti.sock"), 0);
	assert_int_equal(NAME_OK("/x/y/.nanwatch-cupti-1.q/cupti.sock"), 0);
	/* the old, predictable name; another file; no directory of its own */
	assert_int_equal(NAME_OK("/tmp/.nanwatch-cupti-42.sock"), -EINVAL);
	assert_int_equal(NAME_OK("/tmp/.nanwatch-cupti-42.a/cupti.sockx"), -EINVAL);
	assert_int_equal(NAME_OK("/tmp/.nanwatch-cupti-42.a/xcupti.sock"), -EINVAL);
	assert_int_equal(NAME_OK("/tmp/cupti.sock"), -EINVAL);
	assert_int_equal(NAME_OK("/cupti.sock"), -EINVAL);
	assert_int_equal(NAME_OK("/.nanwatch-cupti-/cupti.sock"), -EINVAL);
	assert_int_equal(NAME_OK("/tmp/x.nanwatch-cupti-1.a/cupti.sock"), -EINVAL);
	/* relative, abstract, up and out */
	assert_int_equal(NAME_OK("tmp/.nanwatch-cupti-1.a/cupti.sock"), -EINVAL);
	assert_int_equal(NAME_OK("\0tmp/.nanwatch-cupti-1.a/cupti.sock"), -EINVAL);
	assert_int_equal(NAME_OK("/tmp/../.nanwatch-cupti-1.a/cupti.sock"), -EINVAL);
	/* unnamed (an unbound socket), too short, another family */
	assert_int_equal(gpulink__sock_name(&sa, sizeof(sa_family_t), out, sizeof(out)), -EINVAL);
	assert_int_equal(gpulink__sock_name(&sa, 0, out, sizeof(out)), -EINVAL);
	strcpy(sa.sun_path, "/tmp/.nanwatch-cupti-1.a/cupti.sock");
	sa.sun_family = AF_INET;
	assert_int_equal(gpulink__sock_name(&sa, sizeof(sa), out, sizeof(out)), -EINVAL);
	sa.sun_family = AF_UNIX;
	/* a length past the structure; 108 bytes with no NUL; no room for it in out */
	assert_int_equal(gpulink__sock_name(&sa, sizeof(sa) + 1, out, sizeof(out)), -EINVAL);
	memset(sa.sun_path, 'a', sizeof(sa.sun_path));
	sa.sun_path[0] = '/';
	memcpy(sa.sun_path + sizeof(sa.sun_path) - 11, "/cupti.sock", 11);
	assert_int_equal(gpulink__sock_name(&sa, sizeof(sa), out, sizeof(out)), -EINVAL);
	strcpy(sa.sun_path, "/tmp/.nanwatch-cupti-1.a/cupti.sock");
	assert_int_equal(gpulink__sock_name(&sa, sizeof(sa), small, sizeof(small)), -EINVAL);
	/* bytes after the NUL are no part of the name */
	assert_int_equal(gpulink__sock_name(&sa, sizeof(sa), out, sizeof(out)), 0);
	assert_string_equal(out, "/tmp/.nanwatch-cupti-1.a/cupti.sock");
}

/* A listening SOCK_SEQPACKET at dir/name (made with its parent); its fd. */
static int listen_at(const char *dir, const char *name, int type, int do_listen)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, type | SOCK_CLOEXEC, 0);

	mkdir(dir, 0700);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", dir, name);
	unlink(sa.sun_path);
	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	if (do_listen)
		assert_int_equal(listen(fd, 4), 0);
	return fd;
}

static int connect_to(const char *dir, const char *name)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/%s", dir, name);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

static void send_fd(int sock, int fd)
{
	char cbuf[CMSG_SPACE(sizeof(int))] = {}, b = 'x';
	struct iovec iov = {&b, 1};
	struct msghdr mh = {.msg_iov = &iov,
			    .msg_iovlen = 1,
			    .msg_control = cbuf,
			    .msg_controllen = sizeof(cbuf)};
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);

	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	assert_int_equal(sendmsg(sock, &mh, 0), 1);
}

static int recv_fd(int sock)
{
	char cbuf[CMSG_SPACE(sizeof(int))], b;
	struct iovec iov = {&b, 1};
	struct msghdr mh = {.msg_iov = &iov,
			    .msg_iovlen = 1,
			    .msg_control = cbuf,
			    .msg_controllen = sizeof(cbuf)};
	int fd = -1;

	if (recvmsg(sock, &mh, MSG_CMSG_CLOEXEC) == 1 && CMSG_FIRSTHDR(&mh))
		memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&mh)), sizeof(int));
	return fd;
}

/*
 * A listener at dir/cupti.sock made by a child that hands it over and exits (as an attacker's
 * short-lived process does, its number free for anyone after it): ours now, its creator gone.
 */
static int listener_of_gone_child(const char *dir)
{
	int sp[2], fd, status;
	pid_t pid;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (!pid) {
		send_fd(sp[1], listen_at(dir, NW_GPU_SOCK_NAME, SOCK_SEQPACKET, 1));
		_exit(0);
	}
	fd = recv_fd(sp[0]);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	close(sp[0]);
	close(sp[1]);
	assert_true(fd >= 0);
	return fd;
}

/* The peer check: this process, by pidfd and uid; nobody else, even under its number. */
static void test_peer_is(void **state)
{
	char dir[128];
	int l, c, fd, sp[2];

	(void)state;
	if (geteuid())
		skip(); /* the other user's socket needs seteuid */
	snprintf(dir, sizeof(dir), "%s/.nanwatch-cupti-1.peer", base);
	l = listen_at(dir, NW_GPU_SOCK_NAME, SOCK_SEQPACKET, 1);
	c = connect_to(dir, NW_GPU_SOCK_NAME);
	assert_int_equal(gpulink__peer_is(c, self_pidfd, geteuid()), 0);
	assert_int_equal(gpulink__peer_is(l, self_pidfd, geteuid()), 0); /* who listened */
	assert_int_equal(gpulink__peer_is(c, self_pidfd, geteuid() + 1), -EPERM);
	close(c);
	close(l);
	/* a listener whose creator is gone: its pid number proves nothing */
	l = listener_of_gone_child(dir);
	c = connect_to(dir, NW_GPU_SOCK_NAME);
	assert_int_equal(gpulink__peer_is(c, self_pidfd, geteuid()), -EPERM);
	assert_int_equal(gpulink__peer_is(l, self_pidfd, geteuid()), -EPERM);
	close(c);
	close(l);
	/* a pair made here: its peer is this process */
	assert_int_equal(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp), 0);
	assert_int_equal(gpulink__peer_is(sp[0], self_pidfd, geteuid()), 0);
	close(sp[0]);
	close(sp[1]);
	/* listened by this process, but under another user's creds (seteuid, then back) */
	l = listen_at(dir, "x.sock", SOCK_SEQPACKET, 0);
	assert_int_equal(seteuid(65534), 0);
	assert_int_equal(listen(l, 4), 0);
	assert_int_equal(seteuid(0), 0);
	assert_int_equal(gpulink__peer_is(l, self_pidfd, geteuid()), -EPERM);
	assert_int_equal(gpulink__peer_is(l, self_pidfd, 65534), 0);
	close(l);
	/* not a unix socket at all */
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(gpulink__peer_is(fd, self_pidfd, geteuid()) < 0);
	close(fd);
}

static void test_target_uid(void **state)
{
	uid_t uid = 12345;
	int pidfd, status;
	pid_t pid;

	(void)state;
	assert_int_equal(gpulink__target_uid(getpid(), self_pidfd, &uid), 0);
	assert_int_equal(uid, geteuid());
	/* gone: its number may name another process by now */
	pid = fork();
	if (!pid)
		_exit(0);
	pidfd = syscall(SYS_pidfd_open, pid, 0);
	assert_true(pidfd >= 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(gpulink__target_uid(pid, pidfd, &uid) < 0);
	close(pidfd);
}

static int find(char *path, size_t len)
{
	return gpulink__find(getpid(), self_pidfd, geteuid(), path, len);
}

/* Sockets of this process the search must pass over, then the library's, found. */
static void test_find(void **state)
{
	char dir[128], want[160], path[108];
	int decoys[6], l, n = 0, i;

	(void)state;
	snprintf(dir, sizeof(dir), "%s/.nanwatch-cupti-%d.find", base, (int)getpid());
	assert_int_equal(find(path, sizeof(path)), -ENOENT);
	/* the right name: a stream socket; bound, not listening; named otherwise; old name */
	decoys[n++] = listen_at(dir, NW_GPU_SOCK_NAME, SOCK_STREAM, 1);
	decoys[n++] = listen_at(dir, "cupti.sock.other", SOCK_SEQPACKET, 1);
	decoys[n++] = listen_at(base, ".nanwatch-cupti-1.sock", SOCK_SEQPACKET, 1);
	assert_int_equal(find(path, sizeof(path)), -ENOENT);
	close(decoys[0]);
	decoys[0] = listen_at(dir, NW_GPU_SOCK_NAME, SOCK_SEQPACKET, 0);
	assert_int_equal(find(path, sizeof(path)), -ENOENT);
	close(decoys[0]);
	/* listened by a process that is gone, passed to us: not our own */
	decoys[0] = listener_of_gone_child(dir);
	decoys[n++] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_int_equal(find(path, sizeof(path)), -ENOENT);
	close(decoys[0]);
	l = listen_at(dir, NW_GPU_SOCK_NAME, SOCK_SEQPACKET, 1);
	snprintf(want, sizeof(want), "%s/%s", dir, NW_GPU_SOCK_NAME);
	assert_int_equal(find(path, sizeof(path)), 0);
	assert_string_equal(path, want);
	close(l);
	for (i = 1; i < n; i++)
		close(decoys[i]);
}

/* At most GPULINK_SOCKETS_MAX sockets are looked into: a table full of them costs no more. */
static void test_find_bounded(void **state)
{
	struct rlimit rl;
	char dir[128], path[108];
	int *fds, i, n = GPULINK_SOCKETS_MAX + 8, l, lo;

	(void)state;
	getrlimit(RLIMIT_NOFILE, &rl);
	if (rl.rlim_max < (rlim_t)n + 64)
		skip();
	rl.rlim_cur = rl.rlim_max;
	setrlimit(RLIMIT_NOFILE, &rl);
	snprintf(dir, sizeof(dir), "%s/.nanwatch-cupti-%d.many", base, (int)getpid());
	fds = calloc(n, sizeof(int));
	for (i = 0; i < n; i++) {
		fds[i] = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		assert_true(fds[i] >= 0);
	}
	l = listen_at(dir, NW_GPU_SOCK_NAME, SOCK_SEQPACKET, 1);
	assert_int_equal(find(path, sizeof(path)), -ENOENT);
	/* the same listener in a low slot, as a library's made early is */
	lo = fds[0];
	close(lo);
	assert_int_equal(dup2(l, lo), lo);
	assert_int_equal(find(path, sizeof(path)), 0);
	for (i = 1; i < n; i++)
		close(fds[i]);
	close(lo);
	close(l);
	free(fds);
}

/* A ring as BPF's frozen map is: writable through our mapping, through no later one. */
struct ring {
	int fd;
	struct nw_gpu_req *m;
};

static void ring_open(struct ring *r, int seal)
{
	r->fd = memfd_create("gpu_ring", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	assert_true(r->fd >= 0);
	assert_int_equal(ftruncate(r->fd, RING_BYTES), 0);
	r->m = mmap(NULL, RING_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, r->fd, 0);
	assert_true(r->m != MAP_FAILED);
	if (seal)
		assert_int_equal(fcntl(r->fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE), 0);
}

static void ring_close(struct ring *r)
{
	munmap(r->m, RING_BYTES);
	close(r->fd);
}

/* A request at position seq - 1, as BPF writes it (head first, seq last). */
static void put(struct ring *r, uint64_t seq)
{
	struct nw_gpu_req *e = &r->m[1 + ((seq - 1) & (NW_GPU_SLOTS - 1))];
	struct nw_gpu_head *h = (struct nw_gpu_head *)r->m;

	if (h->head < seq)
		h->head = seq;
	memset(e, 0, sizeof(*e));
	e->numel = 6;
	e->dtype = NW_DT_F32;
	e->role = NW_GPU_OUTPUT;
	e->index0 = e->index1 = NW_NO_INDEX;
	e->seq = seq;
}

struct seen {
	int results, links, refused;
	uint64_t seqs[64];
};

static void on_result(void *ctx, const struct nw_gpu_req *req, const struct nw_gpu_result *r)
{
	struct seen *s = ctx;

	assert_int_equal(req->seq, r->seq);
	if (s->results < 64)
		s->seqs[s->results] = r->seq;
	s->results++;
}

static void on_link(void *ctx, int on)
{
	((struct seen *)ctx)->links = on;
}

static void on_refused(void *ctx, const char *why)
{
	(void)why;
	((struct seen *)ctx)->refused++;
}

/* The other end: this process listening as the library does. */
struct peer {
	char dir[128];
	int l, c;
	void *libmap;
};

static void peer_listen(struct peer *p, const char *tag)
{
	snprintf(p->dir, sizeof(p->dir), "%s/" NW_GPU_SOCK_DIR_PREFIX "%d.%s", base, (int)getpid(),
		 tag);
	p->l = listen_at(p->dir, NW_GPU_SOCK_NAME, SOCK_SEQPACKET, 1);
	p->c = -1;
	p->libmap = NULL;
}

/* What the daemon looks for in the target's maps: a mapping of a file of the library's name. */
static void peer_map_lib(struct peer *p)
{
	char path[192];
	int fd;

	snprintf(path, sizeof(path), "%s/libnanwatch_cupti.so", p->dir);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	assert_int_equal(ftruncate(fd, 4096), 0);
	p->libmap = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
	assert_true(p->libmap != MAP_FAILED);
	close(fd);
}

static void peer_close(struct peer *p)
{
	if (p->c >= 0)
		close(p->c);
	close(p->l);
	if (p->libmap)
		munmap(p->libmap, 4096);
}

static void peer_send(struct peer *p, uint32_t type, const void *body, uint32_t len)
{
	char buf[NW_GPU_MSG_MAX];
	struct nw_gpu_msg h = {type, len};

	memcpy(buf, &h, sizeof(h));
	memcpy(buf + sizeof(h), body, len);
	assert_int_equal(send(p->c, buf, sizeof(h) + len, 0), (ssize_t)(sizeof(h) + len));
}

/* HELLO taken (its ring not mappable writable), READY sent. */
static void peer_accept(struct peer *p)
{
	struct nw_gpu_ready rd = {.version = NW_GPU_VERSION, .mode = NW_GPU_MODE_CALLBACK};
	char cbuf[CMSG_SPACE(sizeof(int))], buf[64];
	struct iovec iov = {buf, sizeof(buf)};
	struct msghdr mh = {.msg_iov = &iov,
			    .msg_iovlen = 1,
			    .msg_control = cbuf,
			    .msg_controllen = sizeof(cbuf)};
	int fd;

	int big = 4 << 20;

	p->c = accept4(p->l, NULL, NULL, SOCK_CLOEXEC);
	assert_true(p->c >= 0);
	/* room for a flood sent before anyone reads (root: past wmem_max) */
	setsockopt(p->c, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof(big));
	assert_int_equal(recvmsg(p->c, &mh, MSG_CMSG_CLOEXEC),
			 sizeof(struct nw_gpu_msg) + sizeof(struct nw_gpu_hello));
	assert_non_null(CMSG_FIRSTHDR(&mh));
	memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&mh)), sizeof(int));
	assert_true(mmap(NULL, RING_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) ==
		    MAP_FAILED);
	assert_int_equal(errno, EPERM);
	close(fd);
	peer_send(p, NW_GPU_MSG_READY, &rd, sizeof(rd));
}

static struct gpulink *link_new(struct ring *r, struct seen *s)
{
	struct gpulink_cb cb = {
		.result = on_result, .link = on_link, .refused = on_refused, .ctx = s};
	char err[256];

	return gpulink__new(getpid(), self_pidfd, r->fd, &cb, err, sizeof(err));
}

/* A ring anyone could map writable is never handed over. */
static void test_ring_writable(void **state)
{
	struct seen s = {0};
	struct ring r;

	(void)state;
	ring_open(&r, 0);
	assert_null(link_new(&r, &s));
	assert_int_equal(errno, EPERM);
	ring_close(&r);
}

/* No connection while the target maps no library, a listener or not; then one, checked. */
static void test_tick_needs_library(void **state)
{
	struct gpulink_state st;
	struct seen s = {0};
	struct gpulink *g;
	struct peer p;
	struct ring r;

	(void)state;
	ring_open(&r, 1);
	peer_listen(&p, "nolib");
	g = link_new(&r, &s);
	assert_non_null(g);
	assert_int_equal(gpulink__tick(g, 1), 0);
	assert_int_equal(gpulink__tick(g, 3), 0);
	gpulink__state(g, &st);
	assert_int_equal(st.connected, 0);
	assert_int_equal(st.refused, 0);
	peer_map_lib(&p);
	assert_int_equal(gpulink__tick(g, 3.5), 0); /* a second after the last try, not before */
	assert_int_equal(gpulink__tick(g, 4), 1);
	peer_accept(&p);
	gpulink__poll(g);
	assert_int_equal(s.links, 1);
	gpulink__state(g, &st);
	assert_true(st.ready);
	assert_int_equal(st.connects, 1);
	assert_non_null(strstr(st.socket, NW_GPU_SOCK_NAME));
	gpulink__free(g);
	assert_int_equal(s.links, 0);
	peer_close(&p);
	ring_close(&r);
}

static void send_results(struct peer *p, const struct nw_gpu_result *r, size_t n)
{
	peer_send(p, NW_GPU_MSG_RESULT, r, n * sizeof(*r));
}

static struct nw_gpu_result nan_result(uint64_t seq)
{
	return (struct nw_gpu_result){
		.seq = seq, .scanned = 6, .nan = 6, .min_key = ~0ULL, .flags = NW_GPU_R_SCANNED};
}

/*
 * A connected peer's results: each request answered once; replays, answers to requests BPF
 * has not written (past its head, or its slot still holding the round before) and to requests
 * the ring overwrote reach nobody, and are counted. Then a flood: one poll reads a bounded
 * number of messages.
 */
static void test_results_refused(void **state)
{
	struct nw_gpu_result res[8];
	struct gpulink_state st;
	struct seen s = {0};
	struct gpulink *g;
	struct peer p;
	struct ring r;
	uint64_t stats[NW_GPU_S_MAX] = {0};
	int i;

	(void)state;
	ring_open(&r, 1);
	peer_listen(&p, "results");
	peer_map_lib(&p);
	g = link_new(&r, &s);
	assert_int_equal(gpulink__tick(g, 1), 1);
	peer_accept(&p);
	gpulink__poll(g);
	put(&r, 1);
	put(&r, 2);
	res[0] = nan_result(1);
	res[1] = nan_result(1); /* the same again, in the same message */
	res[2] = nan_result(2);
	send_results(&p, res, 3);
	send_results(&p, res, 1); /* and in another */
	gpulink__poll(g);
	assert_int_equal(s.results, 2);
	assert_int_equal(s.seqs[0], 1);
	assert_int_equal(s.seqs[1], 2);
	gpulink__state(g, &st);
	assert_int_equal(st.invalid, 2);
	/* past BPF's head; the head taken but the slot not written yet; then written: answered */
	res[0] = nan_result(3);
	res[1] = nan_result(1000);
	((struct nw_gpu_head *)r.m)->head = 3;
	send_results(&p, res, 2);
	gpulink__poll(g);
	assert_int_equal(s.results, 2);
	gpulink__state(g, &st);
	assert_int_equal(st.invalid, 4);
	put(&r, 3);
	send_results(&p, res, 1);
	gpulink__poll(g);
	assert_int_equal(s.results, 3);
	/* a slot of the next round taken, its old request still there */
	((struct nw_gpu_head *)r.m)->head = 3 + NW_GPU_SLOTS;
	res[0] = nan_result(3 + NW_GPU_SLOTS);
	send_results(&p, res, 1);
	gpulink__poll(g);
	gpulink__state(g, &st);
	assert_int_equal(st.invalid, 5);
	assert_int_equal(st.lost, 0);
	/* a round later: request 4 is overwritten, lost; its successor answered once */
	for (i = 4; i <= 4 + NW_GPU_SLOTS; i++)
		put(&r, i);
	res[0] = nan_result(4);
	res[1] = nan_result(4 + NW_GPU_SLOTS);
	res[2] = nan_result(4 + NW_GPU_SLOTS);
	send_results(&p, res, 3);
	gpulink__poll(g);
	gpulink__state(g, &st);
	assert_int_equal(s.results, 4);
	assert_int_equal(st.lost, 1);
	assert_int_equal(st.invalid, 6);
	/* counts beyond the request */
	put(&r, 5 + NW_GPU_SLOTS);
	res[0] = nan_result(5 + NW_GPU_SLOTS);
	res[0].nan = 7;
	send_results(&p, res, 1);
	gpulink__poll(g);
	gpulink__state(g, &st);
	assert_int_equal(st.invalid, 7);
	assert_int_equal(s.results, 4);
	/* a flood: one poll takes GPULINK_POLL_MSGS, the next the rest */
	for (i = 0; i < GPULINK_POLL_MSGS + 10; i++)
		peer_send(&p, NW_GPU_MSG_STATS, stats, sizeof(stats));
	gpulink__poll(g);
	assert_true(recv(gpulink__fd(g), stats, sizeof(stats), MSG_PEEK | MSG_DONTWAIT) > 0);
	gpulink__poll(g);
	assert_true(recv(gpulink__fd(g), stats, sizeof(stats), MSG_PEEK | MSG_DONTWAIT) < 0);
	gpulink__state(g, &st);
	assert_true(st.connected);
	assert_int_equal(s.refused, 0);
	gpulink__free(g);
	peer_close(&p);
	ring_close(&r);
}

/*
 * The socket the search found leads, by the time the daemon connects, to another process's:
 * refused, counted, said; nothing sent.
 */
static void test_tick_refused(void **state)
{
	struct gpulink_state st;
	struct seen s = {0};
	struct gpulink *g;
	struct peer p;
	struct ring r;
	char path[192];
	int other, fd;

	(void)state;
	ring_open(&r, 1);
	peer_listen(&p, "swap");
	peer_map_lib(&p);
	g = link_new(&r, &s);
	/* ours still listens (the search finds it), but its name now leads to a gone child's */
	snprintf(path, sizeof(path), "%s/%s", p.dir, NW_GPU_SOCK_NAME);
	assert_int_equal(unlink(path), 0);
	other = listener_of_gone_child(p.dir);
	assert_int_equal(gpulink__tick(g, 1), 0);
	gpulink__state(g, &st);
	assert_int_equal(st.refused, 1);
	assert_int_equal(st.connected, 0);
	assert_int_equal(s.refused, 1);
	/* it connected and hung up before HELLO: the other side reads nothing but the end */
	fd = accept4(other, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
	assert_true(fd >= 0);
	assert_int_equal(recv(fd, path, sizeof(path), 0), 0);
	close(fd);
	close(other);
	gpulink__free(g);
	peer_close(&p);
	ring_close(&r);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sock_name),	   cmocka_unit_test(test_peer_is),
		cmocka_unit_test(test_target_uid),	   cmocka_unit_test(test_find),
		cmocka_unit_test(test_find_bounded),	   cmocka_unit_test(test_ring_writable),
		cmocka_unit_test(test_tick_needs_library), cmocka_unit_test(test_results_refused),
		cmocka_unit_test(test_tick_refused),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
