// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Output sinks for the NDJSON stream (see sink.h). Lines are written whole or not at all. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>
#include "output/json.h"
#include "output/lineq.h"
#include "output/path.h"
#include "output/sink.h"

struct sink {
	char spec[PATH_MAX + 8];
	const char *name;      /* "stdout", the path, or "unix:PATH" */
	const char *path;      /* a file sink's path: reopened on SIGHUP; NULL for others */
	const char *unix_path; /* a collector's socket: connected again when it goes; or NULL */
	int fd;		       /* -1 while the collector is away */
	int owned;
	int socket;	  /* sendmsg with MSG_DONTWAIT: no flag on a shared description */
	int restore;	  /* stdout's file status flags before O_NONBLOCK; -1: untouched */
	int err;	  /* the errno that broke it; 0: working (a file's is tried again) */
	int partial;	  /* the first queued line is begun: its rest belongs to this connection */
	int retry_ms;	  /* the wait before the next connect (or file write) after a failed one */
	int conn_err;	  /* the connect error last said on stderr while away */
	int64_t retry_at; /* CLOCK_MONOTONIC ms of the next connect while away, or file write */
	struct lineq q;
	uint64_t written, dropped, dropped_taken;
	uint64_t reconnects, dropped_gone; /* dropped when the collector went */
	uint64_t dropped_broken;	   /* dropped when the file failed */
};

/*
 * A collector gone, or a file that failed, is tried again after 100 ms, then twice as long
 * each time up to 5 s.
 */
#define RETRY_MIN_MS 100
#define RETRY_MAX_MS 5000

/* Sessions attached and detached on worker threads write too: every entry point locks. */
struct sinks {
	pthread_mutex_t lock;
	struct sink *s[SINKS_MAX];
	int n;
	size_t queue_bytes;
	int failed;
};

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct sinks *sinks__new(size_t queue_bytes)
{
	struct sinks *ss = calloc(1, sizeof(*ss));

	if (ss) {
		ss->queue_bytes = queue_bytes;
		pthread_mutex_init(&ss->lock, NULL);
	}
	return ss;
}

static void sink_free(struct sink *s)
{
	if (s->restore >= 0)
		fcntl(s->fd, F_SETFL, s->restore);
	if (s->owned && s->fd >= 0)
		close(s->fd);
	lineq__free(&s->q);
	free(s);
}

void sinks__free(struct sinks *ss)
{
	int i;

	if (!ss)
		return;
	for (i = 0; i < ss->n; i++)
		sink_free(ss->s[i]);
	pthread_mutex_destroy(&ss->lock);
	free(ss);
}

/*
 * stdout as inherited. A pipe or terminal is reopened through /proc so that
 * O_NONBLOCK is set on a description of our own, not on the one the shell
 * and stderr share; a socket (systemd's journal) is written with MSG_DONTWAIT.
 */
static int open_stdout(struct sink *s, char *err, size_t errlen)
{
	struct stat st;
	int fl;

	s->name = "stdout";
	if (fstat(STDOUT_FILENO, &st)) {
		snprintf(err, errlen, "failed to use stdout: %s", strerror(errno));
		return -errno;
	}
	s->fd = STDOUT_FILENO;
	if (S_ISSOCK(st.st_mode)) {
		s->socket = 1;
	} else if (!S_ISREG(st.st_mode)) {
		s->fd = open("/proc/self/fd/1", O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
		s->owned = s->fd >= 0;
		if (s->fd < 0) {
			s->fd = STDOUT_FILENO;
			fl = fcntl(s->fd, F_GETFL);
			if (fl >= 0 && !fcntl(s->fd, F_SETFL, fl | O_NONBLOCK))
				s->restore = fl;
		}
	}
	return 0;
}

static int open_sink(struct sink *s, char *err, size_t errlen)
{
	if (!strcmp(s->spec, "-"))
		return open_stdout(s, err, errlen);
	s->name = s->spec;
	s->owned = 1;
	if (!strncmp(s->spec, "unix:", 5)) {
		s->unix_path = s->spec + 5;
		s->socket = 1;
		s->retry_ms = RETRY_MIN_MS;
		s->fd = path__connect_unix(s->unix_path, err, errlen);
		/* a listener there with its backlog full: connected from the loop */
		if (s->fd == -EAGAIN) {
			s->fd = -1;
			s->retry_at = now_ms();
			return 0;
		}
	} else {
		s->path = s->spec;
		s->fd = path__open_output(s->spec, err, errlen);
	}
	return s->fd < 0 ? s->fd : 0;
}

static int sinks_add(struct sinks *ss, const char *spec, char *err, size_t errlen)
{
	struct sink *s;
	int i, ret;

	if (ss->n == SINKS_MAX || strlen(spec) >= sizeof(s->spec)) {
		snprintf(err, errlen, "failed to add output %.256s: %s", spec,
			 ss->n == SINKS_MAX ? "too many outputs" : "name too long");
		return -E2BIG;
	}
	for (i = 0; i < ss->n; i++) {
		if (!strcmp(ss->s[i]->spec, spec)) {
			snprintf(err, errlen, "output %.256s given twice", spec);
			return -EEXIST;
		}
	}
	s = calloc(1, sizeof(*s));
	if (!s) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	strcpy(s->spec, spec);
	s->fd = -1;
	s->restore = -1;
	lineq__init(&s->q, ss->queue_bytes);
	ret = open_sink(s, err, errlen);
	if (ret) {
		sink_free(s);
		return ret;
	}
	ss->s[ss->n++] = s;
	return 0;
}

int sinks__add(struct sinks *ss, const char *spec, char *err, size_t errlen)
{
	int ret;

	pthread_mutex_lock(&ss->lock);
	ret = sinks_add(ss, spec, err, errlen);
	pthread_mutex_unlock(&ss->lock);
	return ret;
}

static ssize_t sink_out(struct sink *s, struct iovec *iov, int n)
{
	struct msghdr m = {.msg_iov = iov, .msg_iovlen = n};
	ssize_t r;

	do {
		r = s->socket ? sendmsg(s->fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL)
			      : writev(s->fd, iov, n);
	} while (r < 0 && errno == EINTR);
	return r;
}

static void next_retry(struct sink *s, int64_t now)
{
	s->retry_at = now + s->retry_ms;
	s->retry_ms = s->retry_ms * 2 > RETRY_MAX_MS ? RETRY_MAX_MS : s->retry_ms * 2;
}

/*
 * A write failed. stdout or a socket is broken for good (its reader is gone). A file (a full
 * disk, a quota) is kept with its queue: lines wait there, those that do not fit are dropped
 * and counted, and the first in it is written again after a pause (sink_flush) or on SIGHUP.
 */
static void sink_break(struct sinks *ss, struct sink *s, int e)
{
	__atomic_store_n(&ss->failed, 1, __ATOMIC_RELAXED);
	if (s->err) { /* a file tried again, still failing: said once, when it broke */
		next_retry(s, now_ms());
		return;
	}
	s->err = e;
	fprintf(stderr, "nanwatchd: failed to write to output %s: %s\n", s->name, strerror(e));
	if (!s->path) {
		lineq__clear(&s->q);
		return;
	}
	s->dropped_broken = s->dropped;
	s->retry_ms = RETRY_MIN_MS;
	next_retry(s, now_ms());
}

/* A file that failed took a write again. */
static void sink_mended(struct sink *s)
{
	s->err = 0;
	fprintf(stderr,
		"nanwatchd: writing to output %s again; lines dropped while it failed: %llu\n",
		s->name, (unsigned long long)(s->dropped - s->dropped_broken));
}

/* A send error that says the collector is gone, not that the socket is unusable. */
static int collector_gone(const struct sink *s, int e)
{
	return s->unix_path && (e == EPIPE || e == ECONNRESET || e == ENOTCONN);
}

/* The line begun in the queue is dropped: its start went where its rest cannot follow. */
static void drop_begun(struct sink *s)
{
	const char *q, *nl;
	size_t len;

	if (!s->partial)
		return;
	q = lineq__peek(&s->q, &len);
	nl = memchr(q, '\n', len);
	lineq__consume(&s->q, nl ? (size_t)(nl + 1 - q) : len);
	s->partial = 0;
	s->dropped++;
}

/*
 * The collector went: the socket is closed, the queue kept for the next one
 * (lines that do not fit while it is away are dropped, the newest first), a
 * line begun on this connection dropped, since its start went to the old one.
 */
static void sink_disconnect(struct sink *s, int e)
{
	close(s->fd);
	s->fd = -1;
	s->conn_err = 0;
	next_retry(s, now_ms());
	s->dropped_gone = s->dropped;
	drop_begun(s);
	fprintf(stderr, "nanwatchd: collector of output %s went away (%s); reconnecting\n", s->name,
		strerror(e));
}

/* 0 once connected again; -EAGAIN while the collector is away or the next try is not due. */
static int sink_connect(struct sink *s)
{
	int64_t now = now_ms();
	char err[512];
	int fd;

	if (now < s->retry_at)
		return -EAGAIN;
	fd = path__connect_unix(s->unix_path, err, sizeof(err));
	if (fd < 0) {
		next_retry(s, now);
		if (fd != -EAGAIN && -fd != s->conn_err) /* each new reason once */
			fprintf(stderr, "nanwatchd: %s; retrying\n", err);
		s->conn_err = -fd;
		return -EAGAIN;
	}
	s->fd = fd;
	s->reconnects++;
	fprintf(stderr, "nanwatchd: reconnected output %s; lines dropped while away: %llu\n",
		s->name, (unsigned long long)(s->dropped - s->dropped_gone));
	return 0;
}

/* n > 0 bytes of the first queued line were taken, len of them its whole. */
static void sink_took(struct sink *s, ssize_t n, size_t len)
{
	s->partial = (size_t)n < len;
	s->retry_ms = RETRY_MIN_MS; /* a collector that takes lines is not one that flaps */
	if (s->err)
		sink_mended(s);
}

/*
 * 0, or -EAGAIN while the reader does not take more. One line per write: a
 * pipe takes a write of up to PIPE_BUF bytes, a unix socket one of up to half
 * its buffer, whole or not at all, so a reader that stalls for good is left
 * with whole lines (short of a line longer than that).
 */
static int sink_flush(struct sinks *ss, struct sink *s)
{
	struct iovec iov;
	const char *nl;
	ssize_t n;
	int e;

	if (s->fd < 0 && sink_connect(s))
		return -EAGAIN;
	if (s->err && (!s->path || now_ms() < s->retry_at))
		return -EAGAIN;
	while (lineq__len(&s->q)) {
		iov.iov_base = (void *)lineq__peek(&s->q, &iov.iov_len);
		nl = memchr(iov.iov_base, '\n', iov.iov_len);
		if (nl)
			iov.iov_len = nl + 1 - (const char *)iov.iov_base;
		n = sink_out(s, &iov, 1);
		e = n < 0 ? errno : 0;
		if (!n || e == EAGAIN || e == EWOULDBLOCK)
			return -EAGAIN;
		if (collector_gone(s, e)) {
			sink_disconnect(s, e);
			return -EAGAIN;
		}
		if (n < 0) {
			sink_break(ss, s, e);
			return -EAGAIN;
		}
		sink_took(s, n, iov.iov_len);
		s->written += lineq__consume(&s->q, n);
	}
	return 0;
}

/* A line that cannot be written now waits in the queue, or is dropped when it does not fit. */
static void sink_hold(struct sink *s, const char *line, size_t len)
{
	if (lineq__push_line(&s->q, line, len))
		s->dropped++;
}

static void sink_line(struct sinks *ss, struct sink *s, const char *line, size_t len)
{
	struct iovec iov[2] = {
		{.iov_base = (void *)line, .iov_len = len},
		{.iov_base = "\n", .iov_len = 1},
	};
	ssize_t n;
	int e;

	if (s->err && !s->path)
		return; /* its reader is gone */
	/* behind a queue, while the collector is away or the file fails, a line waits its turn */
	if ((lineq__len(&s->q) || s->fd < 0 || s->err) && sink_flush(ss, s)) {
		if (!s->err || s->path)
			sink_hold(s, line, len);
		return;
	}
	n = sink_out(s, iov, 2);
	e = n < 0 ? errno : 0;
	if (collector_gone(s, e))
		sink_disconnect(s, e);
	if (e == EAGAIN || e == EWOULDBLOCK || collector_gone(s, e)) {
		sink_hold(s, line, len);
	} else if (n < 0) {
		sink_break(ss, s, e);
		if (s->path)
			sink_hold(s, line, len);
	} else if ((size_t)n == len + 1) {
		sink_took(s, n, n);
		s->written++;
	} else if (lineq__push_tail(&s->q, line, len, n)) {
		sink_break(ss, s, ENOMEM);
	} else {
		sink_took(s, n, len + 1);
		sink_flush(ss, s); /* a file's short write: its error comes now */
	}
}

int sinks__write(struct sinks *ss, const char *line, size_t len)
{
	int i, ret;

	pthread_mutex_lock(&ss->lock);
	for (i = 0; i < ss->n; i++)
		sink_line(ss, ss->s[i], line, len);
	ret = ss->failed ? -EPIPE : 0;
	pthread_mutex_unlock(&ss->lock);
	return ret;
}

static void flush_all(struct sinks *ss)
{
	int i;

	for (i = 0; i < ss->n; i++)
		sink_flush(ss, ss->s[i]);
}

int sinks__flush(struct sinks *ss)
{
	int ret;

	pthread_mutex_lock(&ss->lock);
	flush_all(ss);
	ret = ss->failed ? -EPIPE : 0;
	pthread_mutex_unlock(&ss->lock);
	return ret;
}

size_t sinks__pending(const struct sinks *ss)
{
	struct sinks *w = (struct sinks *)ss; /* the lock only */
	size_t n = 0;
	int i;

	pthread_mutex_lock(&w->lock);
	for (i = 0; i < ss->n; i++)
		n += ss->s[i]->err || ss->s[i]->fd < 0 ? 0 : lineq__len(&ss->s[i]->q);
	pthread_mutex_unlock(&w->lock);
	return n;
}

void sinks__drain(struct sinks *ss, int timeout_ms)
{
	int64_t end = now_ms() + timeout_ms, left;
	struct pollfd pfd[SINKS_MAX];
	int i, n;

	for (;;) {
		pthread_mutex_lock(&ss->lock);
		flush_all(ss);
		for (i = n = 0; i < ss->n; i++) {
			if (!ss->s[i]->err && ss->s[i]->fd >= 0 && lineq__len(&ss->s[i]->q))
				pfd[n++] = (struct pollfd){.fd = ss->s[i]->fd, .events = POLLOUT};
		}
		pthread_mutex_unlock(&ss->lock);
		left = end - now_ms();
		if (!n || left <= 0)
			return;
		if (poll(pfd, n, left) < 0 && errno != EINTR)
			return;
	}
}

static int same_file(int a, int b)
{
	struct stat sa, sb;

	return !fstat(a, &sa) && !fstat(b, &sb) && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

/*
 * A file that fails is reopened too (the disk it was on may be full for good, the new file
 * elsewhere), and tried at once: what its queue holds goes to the new file, but for the end
 * of a line begun in another file.
 */
static void sink_reopen(struct sinks *ss, struct sink *s)
{
	char err[512];
	int fd;

	sink_flush(ss, s);
	fd = path__open_output(s->path, err, sizeof(err));
	if (fd < 0) {
		fprintf(stderr, "nanwatchd: %s; %s\n", err,
			s->err ? "trying the file opened before again"
			       : "still writing to the file opened before");
		return;
	}
	if (!same_file(fd, s->fd))
		drop_begun(s);
	close(s->fd);
	s->fd = fd;
	if (s->err) {
		s->retry_at = 0;
		s->retry_ms = RETRY_MIN_MS;
		sink_flush(ss, s);
	}
}

void sinks__reopen(struct sinks *ss)
{
	int i;

	pthread_mutex_lock(&ss->lock);
	for (i = 0; i < ss->n; i++)
		if (ss->s[i]->path)
			sink_reopen(ss, ss->s[i]);
	pthread_mutex_unlock(&ss->lock);
}

int sinks__failed(const struct sinks *ss)
{
	return __atomic_load_n(&ss->failed, __ATOMIC_RELAXED);
}

int sinks__count(const struct sinks *ss)
{
	return ss->n;
}

const char *sinks__name(const struct sinks *ss, int i)
{
	return ss->s[i]->name;
}

uint64_t sinks__dropped(const struct sinks *ss, int i)
{
	struct sinks *w = (struct sinks *)ss; /* the lock only */
	uint64_t n;

	pthread_mutex_lock(&w->lock);
	n = ss->s[i]->dropped;
	pthread_mutex_unlock(&w->lock);
	return n;
}

uint64_t sinks__take_dropped(struct sinks *ss, int i)
{
	struct sink *s = ss->s[i];
	uint64_t n = 0;

	pthread_mutex_lock(&ss->lock);
	/* else said once the collector is back or the file takes lines, so that it has it too */
	if (s->fd >= 0 && !s->err) {
		n = s->dropped - s->dropped_taken;
		s->dropped_taken = s->dropped;
	}
	pthread_mutex_unlock(&ss->lock);
	return n;
}

void sinks__json(const struct sinks *ss, struct json *j)
{
	struct sinks *w = (struct sinks *)ss; /* the lock only */
	int i;

	pthread_mutex_lock(&w->lock);
	json__array_begin(j, "sinks");
	for (i = 0; i < ss->n; i++) {
		json__object_begin(j, NULL);
		json__string(j, "name", ss->s[i]->name);
		json__uint(j, "written", ss->s[i]->written);
		json__uint(j, "dropped", ss->s[i]->dropped);
		if (ss->s[i]->unix_path) {
			json__bool(j, "connected", ss->s[i]->fd >= 0);
			json__uint(j, "reconnects", ss->s[i]->reconnects);
		}
		if (ss->s[i]->err)
			json__string(j, "error", strerror(ss->s[i]->err));
		else
			json__null(j, "error");
		json__object_end(j);
	}
	json__array_end(j);
	pthread_mutex_unlock(&w->lock);
}
