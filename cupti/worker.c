// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The library's worker thread: listens on its unix socket (bpf/nwgpu.h),
 * takes one daemon at a time (HELLO with the request ring's fd, READY back),
 * prepares CUDA contexts (scan kernel, result slots, scratch) outside any
 * callback, forwards finished results by polling mapped pinned memory (no
 * CUDA call, no synchronisation), scans requests whose thread stopped
 * launching, and sends STATS each second and a NOTICE once per degradation.
 * With no daemon it sleeps in poll() and the launch callbacks return at once.
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "nwcupti.h"

#define NWC_HELLO_TIMEOUT_S 5
#define NWC_QUIESCE_MS 2000 /* at most this long for scans in flight at a disconnect */

static const struct {
	__u32 bit;
	const char *text;
} nwc_notices[] = {
	{NWC_N_OTHER_SUB, "another CUPTI subscriber (torch.profiler, Nsight, compute-sanitizer) "
			  "holds the launch callbacks: CUDA tensors are not checked"},
	{NWC_N_NO_CUPTI, "libcupti or libcuda could not be loaded or subscribed to: CUDA tensors "
			 "are not checked (set NANWATCH_CUPTI_LIB to libcupti.so.13)"},
	{NWC_N_PROCADDR, "another CUPTI subscriber holds CUPTI: launches through entry points "
			 "cuGetProcAddress hands out are not seen, imported ones are"},
	{NWC_N_NO_KERNEL, "the scan kernel could not be loaded into a CUDA context: its tensors "
			  "are not checked"},
	{NWC_N_CAPTURING, "a stream was capturing a CUDA graph: tensors made during capture are "
			  "not checked (graph replays are not seen)"},
	{NWC_N_DTYPE, "a CUDA tensor of a dtype the scan kernel does not read was not checked "
		      "(float32, float16, bfloat16 and float64 are)"},
	{NWC_N_NO_MEMORY, "no free pinned result slot or stream scratch: some CUDA tensors were "
			  "not checked"},
};

__u64 nwc_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (__u64)ts.tv_sec * 1000000000ULL + ts.tv_nsec;
}

void nwc_notice(struct nwc *g, __u32 which)
{
	if (!(__atomic_load_n(&g->notices, __ATOMIC_RELAXED) & which))
		__atomic_fetch_or(&g->notices, which, __ATOMIC_RELAXED);
}

void nwc_wake(struct nwc *g)
{
	__u64 one = 1;

	if (g->wake_fd >= 0)
		(void)!write(g->wake_fd, &one, sizeof(one));
}

static int send_msg(int fd, __u32 type, const void *body, size_t len)
{
	char buf[NW_GPU_MSG_MAX];
	size_t n = nwc_msg_put(buf, sizeof(buf), type, body, len);

	if (!n)
		return -EMSGSIZE;
	return send(fd, buf, n, MSG_NOSIGNAL) == (ssize_t)n ? 0 : -errno;
}

/*
 * The socket, in a directory of its own that mkdtemp makes (0700): a name nobody can take
 * first, in a place nobody else can connect to. The daemon finds it in our fd table.
 */
static int open_listen(struct nwc *g)
{
	const char *base = getenv("NANWATCH_CUPTI_DIR");
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char dir[sizeof(sa.sun_path)];
	int fd, n;

	/* a relative one would name a place only our working directory knows */
	if (!base || base[0] != '/')
		base = "/tmp";
	n = snprintf(dir, sizeof(dir), NW_GPU_SOCK_DIR_FMT, base, (int)getpid());
	if (n < 0 || n + 1 + strlen(NW_GPU_SOCK_NAME) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	if (!mkdtemp(dir))
		return -errno;
	memcpy(sa.sun_path, dir, n);
	memcpy(sa.sun_path + n, "/" NW_GPU_SOCK_NAME, sizeof("/" NW_GPU_SOCK_NAME));
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		n = -errno;
		rmdir(dir);
		return n;
	}
	/* the socket's mode at bind is the inode's: 0600 before anyone can connect */
	fchmod(fd, 0600);
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || chmod(sa.sun_path, 0600) ||
	    listen(fd, 4)) {
		n = -errno;
		close(fd);
		unlink(sa.sun_path);
		rmdir(dir);
		return n;
	}
	memcpy(g->sock_dir, dir, sizeof(g->sock_dir));
	memcpy(g->sock_path, sa.sun_path, sizeof(g->sock_path));
	g->owner_pid = getpid();
	g->listen_fd = fd;
	return 0;
}

/* The next daemon: root or our own user (SO_PEERCRED). */
static int accept_daemon(struct nwc *g)
{
	struct pollfd p = {.fd = g->listen_fd, .events = POLLIN};
	struct ucred cr;
	socklen_t len = sizeof(cr);
	int fd;

	if (poll(&p, 1, -1) < 0)
		return -1;
	fd = accept4(g->listen_fd, NULL, NULL, SOCK_CLOEXEC);
	if (fd < 0)
		return -1;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) ||
	    (cr.uid != 0 && cr.uid != getuid())) {
		close(fd);
		return -1;
	}
	return fd;
}

/* HELLO and the ring's fd; the ring mapped read-only. */
static int recv_hello(struct nwc *g, int fd)
{
	char buf[NW_GPU_MSG_MAX], cbuf[CMSG_SPACE(sizeof(int) * 4)];
	struct iovec iov = {.iov_base = buf, .iov_len = sizeof(buf)};
	struct msghdr mh = {.msg_iov = &iov,
			    .msg_iovlen = 1,
			    .msg_control = cbuf,
			    .msg_controllen = sizeof(cbuf)};
	struct timeval tv = {.tv_sec = NWC_HELLO_TIMEOUT_S};
	struct cmsghdr *c;
	int ringfd = -1, i, n, k;
	void *m;

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
	for (c = n > 0 ? CMSG_FIRSTHDR(&mh) : NULL; c; c = CMSG_NXTHDR(&mh, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (i = 0; i < k; i++) {
			int x;

			memcpy(&x, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
			if (ringfd < 0)
				ringfd = x;
			else
				close(x);
		}
	}
	if (n < 0 || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || nwc_hello_check(buf, n) ||
	    ringfd < 0) {
		if (ringfd >= 0)
			close(ringfd);
		return -EPROTO;
	}
	g->ring_len = (size_t)(NW_GPU_SLOTS + 1) * NW_GPU_REQ_SIZE;
	m = mmap(NULL, g->ring_len, PROT_READ, MAP_SHARED, ringfd, 0);
	close(ringfd);
	if (m == MAP_FAILED)
		return -errno;
	/* no magic yet: the daemon sets it once READY is back, and BPF writes from then on */
	g->ring = m;
	return 0;
}

/* Kernel, scratch and (once) the pinned result slots in context c. */
int nwc_ctx_prepare(struct nwc *g, struct nwc_ctx *c)
{
	size_t outs = NWC_OUTS * sizeof(struct nw_scan_out);
	/* the streams' scratch, then the slots' verdicts: one allocation, zeroed */
	size_t scratch = NWC_STREAMS * sizeof(struct nw_scan_scratch) + NWC_OUTS * sizeof(__u32);
	CUcontext old;
	CUmodule mod;
	CUdeviceptr dp = 0;
	void *p = NULL;
	int ok, i;

	if (g->cu.CtxPushCurrent(c->ctx))
		goto failed;
	ok = !g->cu.ModuleLoadData(&mod, nw_scan_fatbin) &&
	     !g->cu.ModuleGetFunction(&c->fn, mod, NW_SCAN_KERNEL) &&
	     !g->cu.MemAlloc(&c->scratch, scratch) && !g->cu.MemsetD8(c->scratch, 0, scratch);
	c->flags = c->scratch + NWC_STREAMS * sizeof(struct nw_scan_scratch);
	if (ok && !g->outs) {
		/* device pointer == host pointer (unified addressing), as the kernel assumes */
		if (!g->cu.MemHostAlloc(&p, outs,
					NWC_CU_MEMHOSTALLOC_DEVICEMAP |
						NWC_CU_MEMHOSTALLOC_PORTABLE) &&
		    !g->cu.MemHostGetDevicePointer(&dp, p, 0) && dp == (CUdeviceptr)(uintptr_t)p) {
			memset(p, 0, outs);
			pthread_mutex_lock(&g->lock);
			for (i = 0; i < NWC_OUTS; i++)
				g->free_slots[i] = NWC_OUTS - 1 - i;
			g->nfree = NWC_OUTS;
			g->outs = p;
			pthread_mutex_unlock(&g->lock);
			g->state |= NW_GPU_ST_PINNED;
		} else {
			nwc_notice(g, NWC_N_NO_MEMORY);
		}
	}
	g->cu.CtxPopCurrent(&old);
	if (!ok)
		goto failed;
	g->state |= NW_GPU_ST_KERNEL;
	__atomic_store_n(&c->state, NWC_CTX_READY, __ATOMIC_RELEASE);
	return 0;
failed:
	nwc_notice(g, NWC_N_NO_KERNEL);
	__atomic_store_n(&c->state, NWC_CTX_FAILED, __ATOMIC_RELEASE);
	return -1;
}

static void prepare_wanted(struct nwc *g)
{
	int i, n = __atomic_load_n(&g->nctxs, __ATOMIC_ACQUIRE);

	if (!g->cu.CtxPushCurrent)
		return;
	for (i = 0; i < n; i++)
		if (__atomic_load_n(&g->ctxs[i].state, __ATOMIC_ACQUIRE) == NWC_CTX_WANTED)
			nwc_ctx_prepare(g, &g->ctxs[i]);
}

/* The devices, and the primary contexts the process already uses, prepared. */
static __u32 prepare_devices(struct nwc *g)
{
	unsigned int flags;
	int n = 0, d, active;
	CUdevice dev;
	CUcontext ctx;

	if (!g->cu.DeviceGetCount || g->cu.DeviceGetCount(&n))
		return 0;
	for (d = 0; d < n; d++) {
		/* never retain an inactive one: that would create a context on that GPU */
		if (g->cu.DeviceGet(&dev, d) ||
		    g->cu.DevicePrimaryCtxGetState(dev, &flags, &active) || !active)
			continue;
		if (!g->cu.DevicePrimaryCtxRetain(&ctx, dev))
			nwc_ctx_find(g, ctx, 1);
	}
	prepare_wanted(g);
	return n;
}

static int connect_daemon(struct nwc *g, int fd)
{
	struct nw_gpu_ready rd = {.version = NW_GPU_VERSION, .mode = g->mode};
	const struct nw_gpu_head *h;

	if (recv_hello(g, fd))
		return -EPROTO;
	rd.devices = prepare_devices(g);
	if (g->mode == NW_GPU_MODE_INTERPOSE)
		nwc_ip_patch();
	h = (const struct nw_gpu_head *)g->ring;
	/* no callback is inside the ring now (connected is 0) */
	memset(g->taken, 0, sizeof(g->taken));
	pthread_mutex_lock(&g->lock);
	memset(g->seqmap, 0, sizeof(g->seqmap));
	g->nhostres = 0;
	pthread_mutex_unlock(&g->lock);
	memset(g->stats, 0, sizeof(g->stats));
	g->notices_sent = 0;
	g->start_pos = __atomic_load_n(&h->head, __ATOMIC_ACQUIRE);
	g->wpos = g->start_pos;
	g->epoch++;
	rd.state = g->state;
	rd.cuda_driver = g->cuda_driver;
	/* launches scan from here on: a daemon that has READY may rely on it */
	__atomic_store_n(&g->connected, 1, __ATOMIC_SEQ_CST);
	return send_msg(fd, NW_GPU_MSG_READY, &rd, sizeof(rd)) ? -EPIPE : 0;
}

static int send_results(struct nwc *g, int fd)
{
	struct nw_gpu_result res[256];
	char buf[NW_GPU_MSG_MAX];
	size_t n, off, used, len;

	while ((n = nwc_collect(g, res, sizeof(res) / sizeof(res[0]))) > 0) {
		for (off = 0; off < n; off += used) {
			len = nwc_msg_results(buf, sizeof(buf), res + off, n - off, &used);
			if (!len || send(fd, buf, len, MSG_NOSIGNAL) != (ssize_t)len)
				return -EPIPE;
			__atomic_fetch_add(&g->stats[NW_GPU_S_RESULTS], used, __ATOMIC_RELAXED);
		}
		if (n < sizeof(res) / sizeof(res[0]))
			break;
	}
	return 0;
}

static int send_notices(struct nwc *g, int fd)
{
	__u32 want = __atomic_load_n(&g->notices, __ATOMIC_RELAXED) & ~g->notices_sent;
	size_t i;

	for (i = 0; want && i < sizeof(nwc_notices) / sizeof(nwc_notices[0]); i++) {
		if (!(want & nwc_notices[i].bit))
			continue;
		if (send_msg(fd, NW_GPU_MSG_NOTICE, nwc_notices[i].text,
			     strlen(nwc_notices[i].text)))
			return -EPIPE;
		g->notices_sent |= nwc_notices[i].bit;
	}
	return 0;
}

static int send_stats(struct nwc *g, int fd)
{
	__u64 s[NW_GPU_S_MAX];
	int i;

	for (i = 0; i < NW_GPU_S_MAX; i++)
		s[i] = __atomic_load_n(&g->stats[i], __ATOMIC_RELAXED);
	return send_msg(fd, NW_GPU_MSG_STATS, s, sizeof(s));
}

/* Connected: until the daemon closes or a send fails. */
static void serve(struct nwc *g, int fd)
{
	struct pollfd p[2] = {{.fd = fd, .events = POLLIN}, {.fd = g->wake_fd, .events = POLLIN}};
	__u64 last_stats = nwc_now_ns(), now, v;
	char buf[NW_GPU_MSG_MAX];

	for (;;) {
		/* 1 ms while scans are in flight, else the drain's and STATS' pace */
		if (poll(p, g->wake_fd >= 0 ? 2 : 1, nwc_inflight(g) ? 1 : 20) < 0 &&
		    errno != EINTR)
			return;
		if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
			ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);

			if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
				return;
		}
		if (g->wake_fd >= 0 && (p[1].revents & POLLIN))
			(void)!read(g->wake_fd, &v, sizeof(v));
		prepare_wanted(g);
		if (g->mode == NW_GPU_MODE_INTERPOSE)
			nwc_ip_patch(); /* objects loaded since */
		now = nwc_now_ns();
		nwc_drain_stale(g, now);
		if (send_results(g, fd) || send_notices(g, fd))
			return;
		if (now - last_stats >= 1000000000ULL) {
			if (send_stats(g, fd))
				return;
			last_stats = now;
		}
	}
}

/* Back to idle: no callback reads the ring once connected is 0 and active drains. */
static void disconnect(struct nwc *g, int fd)
{
	struct nw_gpu_result res[256];
	__u64 until = nwc_now_ns() + NWC_QUIESCE_MS * 1000000ULL;

	__atomic_store_n(&g->connected, 0, __ATOMIC_SEQ_CST);
	while (__atomic_load_n(&g->active, __ATOMIC_SEQ_CST))
		sched_yield();
	if (g->ring)
		munmap((void *)g->ring, g->ring_len);
	g->ring = NULL;
	close(fd);
	/* scans in flight finish into slots the next daemon must not be told about */
	while (nwc_inflight(g) && nwc_now_ns() < until) {
		nwc_collect(g, res, sizeof(res) / sizeof(res[0]));
		usleep(1000);
	}
	nwc_collect(g, res, sizeof(res) / sizeof(res[0]));
}

void *nwc_worker_main(void *arg)
{
	struct nwc *g = arg;
	int fd;

	pthread_setname_np(pthread_self(), "nanwatch-cupti");
	if (open_listen(g))
		return NULL;
	for (;;) {
		fd = accept_daemon(g);
		if (fd < 0) {
			if (g->listen_fd < 0)
				return NULL;
			continue;
		}
		if (!connect_daemon(g, fd))
			serve(g, fd);
		disconnect(g, fd);
	}
}
