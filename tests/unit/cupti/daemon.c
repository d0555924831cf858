// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The daemon's side of the library socket, for the library's tests (daemon.h). */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon.h"

#define GUARD_S 20 /* a message not there by then: the library hung */

int td_ring_open(struct tdaemon *d)
{
	memset(d, 0, sizeof(*d));
	d->fd = -1;
	d->ring_len = ((NW_GPU_SLOTS + 1) * NW_GPU_REQ_SIZE + 4095) & ~4095UL;
	d->ring_fd = memfd_create("gpu_ring", MFD_CLOEXEC);
	if (d->ring_fd < 0 || ftruncate(d->ring_fd, d->ring_len))
		return -1;
	d->ring = mmap(NULL, d->ring_len, PROT_READ | PROT_WRITE, MAP_SHARED, d->ring_fd, 0);
	if (d->ring == MAP_FAILED)
		return -1;
	return 0;
}

/* As BPF does: take a position, fill the entry, seq last. */
__u64 td_put(struct tdaemon *d, const void *data, __u64 numel, __u32 dtype, __u32 tid, __u64 gate)
{
	struct nw_gpu_head *h = (struct nw_gpu_head *)d->ring;
	__u64 p = __atomic_fetch_add(&h->head, 1, __ATOMIC_SEQ_CST);
	struct nw_gpu_req *e = &d->ring[1 + p % NW_GPU_SLOTS];

	e->data = (__u64)(uintptr_t)data;
	e->numel = numel;
	e->dtype = dtype;
	e->tid = tid;
	e->gate = gate;
	e->role = gate ? NW_GPU_INPUT : NW_GPU_OUTPUT;
	__atomic_store_n(&e->seq, p + 1, __ATOMIC_RELEASE);
	return p + 1;
}

int td_sock_find(const char *dir, int pid, char *buf, size_t len)
{
	char prefix[64];
	struct dirent *e;
	struct stat st;
	int ret = -1;
	DIR *d;

	snprintf(prefix, sizeof(prefix), NW_GPU_SOCK_DIR_PREFIX "%d.", pid);
	d = opendir(dir);
	if (!d)
		return -1;
	while (ret && (e = readdir(d))) {
		if (strncmp(e->d_name, prefix, strlen(prefix)))
			continue;
		snprintf(buf, len, "%s/%s/%s", dir, e->d_name, NW_GPU_SOCK_NAME);
		ret = stat(buf, &st) || !S_ISSOCK(st.st_mode) ? -1 : 0;
	}
	closedir(d);
	return ret;
}

int td_connect(struct tdaemon *d, const char *path, struct nw_gpu_ready *rd)
{
	struct {
		struct nw_gpu_msg m;
		struct nw_gpu_hello h;
	} hello = {{NW_GPU_MSG_HELLO, sizeof(struct nw_gpu_hello)},
		   {NW_GPU_VERSION, NW_GPU_SLOTS, NW_GPU_REQ_SIZE, 0}};
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = {.iov_base = &hello, .iov_len = sizeof(hello)};
	struct msghdr mh = {.msg_iov = &iov,
			    .msg_iovlen = 1,
			    .msg_control = cbuf,
			    .msg_controllen = sizeof(cbuf)};
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct timeval tv = {.tv_sec = GUARD_S};
	struct cmsghdr *c;
	size_t len;
	int type, tries;

	d->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
	if (d->fd < 0)
		return -1;
	/* the socket's file is there from its bind, before the listen: refused until then */
	for (tries = 0; connect(d->fd, (struct sockaddr *)&sa, sizeof(sa)); tries++) {
		if (errno != ECONNREFUSED || tries == GUARD_S * 100)
			return -1;
		usleep(10000);
	}
	setsockopt(d->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	c = CMSG_FIRSTHDR(&mh);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &d->ring_fd, sizeof(int));
	if (sendmsg(d->fd, &mh, 0) != sizeof(hello))
		return -1;
	while ((type = td_recv(d, rd, sizeof(*rd), &len)) != NW_GPU_MSG_READY)
		if (type < 0)
			return -1;
	if (len != sizeof(*rd))
		return -1;
	return 0;
}

int td_recv(struct tdaemon *d, void *body, size_t cap, size_t *len)
{
	char buf[NW_GPU_MSG_MAX + 1];
	struct nw_gpu_msg m;
	ssize_t n;

	n = recv(d->fd, buf, sizeof(buf), 0);
	if (n < (ssize_t)sizeof(m))
		return -1;
	memcpy(&m, buf, sizeof(m));
	if (m.len != n - sizeof(m))
		return -1;
	*len = 0;
	if (m.type == NW_GPU_MSG_NOTICE && d->nnotices < 8) {
		memcpy(d->notices[d->nnotices], buf + sizeof(m), m.len);
		d->notices[d->nnotices++][m.len] = 0;
	} else if (m.type == NW_GPU_MSG_STATS && m.len == sizeof(d->stats)) {
		memcpy(d->stats, buf + sizeof(m), m.len);
		d->nstats++;
	} else {
		if (m.len > cap)
			return -1;
		memcpy(body, buf + sizeof(m), m.len);
		*len = m.len;
	}
	return m.type;
}

int td_result(struct tdaemon *d, __u64 seq, struct nw_gpu_result *r)
{
	struct nw_gpu_result res[NW_GPU_MSG_MAX / sizeof(*r)];
	int type, stats = d->nstats, i;
	size_t len, k;

	for (;;) {
		/* results come in no particular order: every one is kept */
		for (i = 0; i < d->nres; i++)
			if (d->res[i].seq == seq) {
				*r = d->res[i];
				return 0;
			}
		/* finished work is sent before the next STATS: a few of those and it is not coming */
		if (d->nstats - stats > 3)
			return -1;
		type = td_recv(d, res, sizeof(res), &len);
		if (type < 0 || len % sizeof(*r))
			return -1;
		for (k = 0; type == NW_GPU_MSG_RESULT && k < len / sizeof(*r); k++)
			if (d->nres < TD_RESULTS)
				d->res[d->nres++] = res[k];
	}
}

int td_stats_until(struct tdaemon *d, int which, __u64 min)
{
	char buf[NW_GPU_MSG_MAX];
	size_t len;
	int n, seen = 0;

	while (d->stats[which] < min) {
		/* counted before the call returned: the second STATS from now holds it */
		if (seen++ == 3) {
			fprintf(stderr, "stats[%d] = %llu, wanted %llu\n", which,
				(unsigned long long)d->stats[which], (unsigned long long)min);
			return -1;
		}
		n = d->nstats;
		while (d->nstats == n)
			if (td_recv(d, buf, sizeof(buf), &len) < 0)
				return -1;
	}
	return 0;
}

int td_has_notice(const struct tdaemon *d, const char *part)
{
	int i;

	for (i = 0; i < d->nnotices; i++)
		if (strstr(d->notices[i], part))
			return 1;
	return 0;
}

void td_close(struct tdaemon *d)
{
	if (d->fd >= 0)
		close(d->fd);
	d->fd = -1;
}
