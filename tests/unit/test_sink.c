// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Output sinks on real sockets and files: a collector that stops reading
 * costs counted drops and never blocks a write, its lines arrive whole, a
 * collector gone is connected to again once one listens at its path, a stdout
 * gone breaks only its own sink, a file sink is reopened after a rename, and
 * one that fails (a full disk) holds its lines and is written again once it can.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>
#include "output/json.h"
#include "output/sink.h"

struct fix {
	char dir[64];
	char sock[128]; /* "unix:DIR/c.sock" */
	char file[128];
	int srv, peer;
};

static int setup(void **state)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	struct fix *f = calloc(1, sizeof(*f));

	strcpy(f->dir, "/tmp/test_sink.XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	snprintf(f->sock, sizeof(f->sock), "unix:%s/c.sock", f->dir);
	snprintf(f->file, sizeof(f->file), "%s/events.ndjson", f->dir);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", f->sock + 5);
	f->srv = socket(AF_UNIX, SOCK_STREAM, 0);
	if (bind(f->srv, (struct sockaddr *)&sa, sizeof(sa)) || listen(f->srv, 1))
		return -1;
	f->peer = -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fix *f = *state;
	char p[160];

	close(f->srv);
	if (f->peer >= 0)
		close(f->peer);
	unlink(f->sock + 5);
	unlink(f->file);
	snprintf(p, sizeof(p), "%s.1", f->file);
	unlink(p);
	rmdir(f->dir);
	free(f);
	return 0;
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t stat_of(struct sinks *ss, int i, const char *key)
{
	struct json j;
	char needle[64];
	const char *s, *p;
	int k;

	assert_int_equal(json__init(&j, 256), 0);
	json__object_begin(&j, NULL);
	sinks__json(ss, &j);
	json__object_end(&j);
	s = json__str(&j);
	assert_non_null(s);
	p = s;
	for (k = 0; k <= i; k++) {
		p = strstr(p + 1, "\"name\"");
		assert_non_null(p);
	}
	snprintf(needle, sizeof(needle), "\"%s\":", key);
	p = strstr(p, needle);
	assert_non_null(p);
	p += strlen(needle);
	k = !strncmp(p, "true", 4) ? 1 : atoi(p);
	json__free(&j);
	return k;
}

/* 20000 lines of 500 bytes to a collector that does not read: no write waits. */
static void test_stalled_collector(void **state)
{
	struct fix *f = *state;
	char line[500], buf[1 << 16];
	uint64_t written, dropped, got = 0;
	struct sinks *ss;
	double start;
	ssize_t n;
	int i;

	ss = sinks__new(16 << 10);
	assert_int_equal(sinks__add(ss, f->sock, buf, sizeof(buf)), 0);
	f->peer = accept(f->srv, NULL, NULL);
	assert_true(f->peer >= 0);
	memset(line, 'x', sizeof(line));
	start = now();
	for (i = 0; i < 20000; i++)
		assert_int_equal(sinks__write(ss, line, sizeof(line)), 0);
	assert_true(now() - start < 30); /* a blocked write would never return */
	dropped = stat_of(ss, 0, "dropped");
	assert_true(dropped > 0);
	assert_int_equal(sinks__take_dropped(ss, 0), dropped);
	assert_int_equal(sinks__take_dropped(ss, 0), 0);
	assert_true(sinks__pending(ss) > 0);
	/* the collector reads again: the queue drains, every line it got is whole */
	for (;;) {
		sinks__flush(ss);
		n = recv(f->peer, buf, sizeof(buf), MSG_DONTWAIT);
		if (n <= 0 && !sinks__pending(ss))
			break;
		for (i = 0; i < n; i++) {
			if (buf[i] == '\n')
				got++;
			else
				assert_int_equal(buf[i], 'x');
		}
	}
	written = stat_of(ss, 0, "written");
	assert_int_equal(written, got);
	assert_int_equal(written + dropped, 20000);
	assert_false(sinks__failed(ss));
	sinks__free(ss);
}

/* Bytes a collector read: whole lines of 694 to 700 bytes; since_nl carries a line across reads. */
static void check_lines(const char *buf, ssize_t n, size_t *since_nl)
{
	ssize_t i;

	for (i = 0; i < n; i++) {
		if (buf[i] != '\n') {
			(*since_nl)++;
			continue;
		}
		assert_true(*since_nl >= 694 && *since_nl <= 700);
		*since_nl = 0;
	}
}

/*
 * A collector that reads a little and stalls for good while a large queue is
 * flushed: when the daemon closes, what the collector has is whole lines.
 */
static void test_stalled_whole_lines(void **state)
{
	struct fix *f = *state;
	char line[700], buf[1 << 16];
	size_t since_nl = 0;
	struct sinks *ss;
	ssize_t n;
	int i;

	ss = sinks__new(1 << 20);
	assert_int_equal(sinks__add(ss, f->sock, buf, sizeof(buf)), 0);
	f->peer = accept(f->srv, NULL, NULL);
	memset(line, 'y', sizeof(line));
	for (i = 0; i < 1400; i++)
		sinks__write(ss, line, sizeof(line) - i % 7);
	assert_true(sinks__pending(ss) > 200000);
	n = recv(f->peer, buf, 50000, MSG_WAITALL); /* room for part of the queue */
	check_lines(buf, n, &since_nl);
	sinks__flush(ss);
	sinks__free(ss);
	while ((n = recv(f->peer, buf, sizeof(buf), 0)) > 0)
		check_lines(buf, n, &since_nl);
	assert_int_equal(since_nl, 0);
}

/* A listening socket at the fixture's path again, as a collector restarted makes it. */
static void listen_again(struct fix *f)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};

	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", f->sock + 5);
	f->srv = socket(AF_UNIX, SOCK_STREAM, 0);
	assert_int_equal(bind(f->srv, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(f->srv, 1), 0);
}

/* The collector goes for good: its socket closed and its path removed. */
static void collector_goes(struct fix *f)
{
	close(f->peer);
	f->peer = -1;
	close(f->srv);
	assert_int_equal(unlink(f->sock + 5), 0);
}

/* Flush until the sink connects to the collector listening again (bounded: 20 s of tries). */
static void accept_reconnect(struct fix *f, struct sinks *ss)
{
	struct pollfd p = {.fd = f->srv, .events = POLLIN};
	int i;

	for (i = 0; i < 400 && !poll(&p, 1, 0); i++) {
		sinks__flush(ss);
		poll(&p, 1, 50);
	}
	f->peer = accept(f->srv, NULL, NULL);
	assert_true(f->peer >= 0);
}

/* What the collector has to read now, up to buf's size, NUL-terminated. */
static size_t read_now(struct fix *f, struct sinks *ss, char *buf, size_t size)
{
	size_t got = 0;
	ssize_t n;

	for (;;) {
		sinks__flush(ss);
		n = recv(f->peer, buf + got, size - 1 - got, MSG_DONTWAIT);
		if (n <= 0 && !sinks__pending(ss))
			break;
		if (n > 0)
			got += n;
	}
	buf[got] = 0;
	return got;
}

/*
 * The collector goes while lines keep coming, and a new one listens at the
 * path: the file sink beside it gets every line, the collector's sink is never
 * broken, queues what fits (the oldest kept), counts the rest as dropped and
 * says so only once it is back; the new collector gets the queue, then the
 * lines written after.
 */
static void test_collector_reconnect(void **state)
{
	struct fix *f = *state;
	char err[256], line[32], buf[8192], *p;
	uint64_t dropped;
	struct sinks *ss;
	int i, k, fd;

	ss = sinks__new(1000); /* 100 lines of 10 bytes */
	assert_int_equal(sinks__add(ss, f->sock, err, sizeof(err)), 0);
	assert_int_equal(sinks__add(ss, f->file, err, sizeof(err)), 0);
	assert_int_equal(sinks__add(ss, f->file, err, sizeof(err)), -EEXIST);
	f->peer = accept(f->srv, NULL, NULL);
	assert_int_equal(sinks__write(ss, "one", 3), 0);
	assert_int_equal(read_now(f, ss, buf, sizeof(buf)), 4);
	collector_goes(f);
	for (i = 0; i < 300; i++) {
		snprintf(line, sizeof(line), "line-%04d", i);
		assert_int_equal(sinks__write(ss, line, 9), 0);
		assert_int_equal(sinks__flush(ss), 0); /* no collector at the path: still queuing */
	}
	assert_false(sinks__failed(ss));
	assert_int_equal(stat_of(ss, 0, "connected"), 0);
	assert_int_equal(sinks__pending(ss), 0); /* nothing a reader could take now */
	dropped = sinks__dropped(ss, 0);
	assert_int_equal(dropped, 200);
	assert_int_equal(sinks__take_dropped(ss, 0), 0); /* said once it is back */
	listen_again(f);
	accept_reconnect(f, ss);
	assert_int_equal(sinks__write(ss, "after", 5), 0);
	read_now(f, ss, buf, sizeof(buf));
	/* the oldest 100 lines, in order, then the line written after */
	for (p = buf, k = 0; k < 100; k++, p += 10) {
		snprintf(line, sizeof(line), "line-%04d\n", k);
		assert_memory_equal(p, line, 10);
	}
	assert_string_equal(p, "after\n");
	assert_int_equal(sinks__take_dropped(ss, 0), 200);
	assert_int_equal(stat_of(ss, 0, "reconnects"), 1);
	assert_int_equal(stat_of(ss, 0, "connected"), 1);
	assert_int_equal(stat_of(ss, 0, "written"), 102);
	assert_int_equal(stat_of(ss, 1, "written"), 302);
	assert_int_equal(stat_of(ss, 1, "dropped"), 0);
	fd = open(f->file, O_RDONLY);
	assert_int_equal(read(fd, buf, sizeof(buf)), 4 + 3000 + 6);
	close(fd);
	assert_false(sinks__failed(ss));
	sinks__free(ss);
}

/*
 * A line too long for the socket to take at once is begun when the collector
 * goes: the next collector gets none of it (a dropped line), only whole lines.
 */
static void test_reconnect_cut_line(void **state)
{
	struct fix *f = *state;
	size_t big = 1 << 20;
	char err[256], buf[64], *line = malloc(big);
	struct sinks *ss;

	assert_non_null(line);
	memset(line, 'z', big);
	ss = sinks__new(4 << 20);
	assert_int_equal(sinks__add(ss, f->sock, err, sizeof(err)), 0);
	f->peer = accept(f->srv, NULL, NULL);
	assert_int_equal(sinks__write(ss, line, big), 0);
	assert_int_equal(stat_of(ss, 0, "written"), 0); /* begun, not done */
	assert_true(sinks__pending(ss) > 0 && sinks__pending(ss) <= big);
	assert_int_equal(sinks__write(ss, "next", 4), 0);
	collector_goes(f);
	assert_int_equal(sinks__flush(ss), 0);
	assert_int_equal(sinks__dropped(ss, 0), 1);
	listen_again(f);
	accept_reconnect(f, ss);
	assert_int_equal(read_now(f, ss, buf, sizeof(buf)), 5);
	assert_string_equal(buf, "next\n");
	assert_false(sinks__failed(ss));
	sinks__free(ss);
	free(line);
}

/* A stdout that fails breaks its sink (no reconnect but for collectors); the file goes on. */
static void test_broken_pipe(void **state)
{
	struct fix *f = *state;
	char err[256], buf[64];
	struct sinks *ss;
	int pfd[2], saved, fd;

	signal(SIGPIPE, SIG_IGN); /* as the daemon does */
	assert_int_equal(pipe(pfd), 0);
	saved = dup(STDOUT_FILENO);
	dup2(pfd[1], STDOUT_FILENO);
	close(pfd[1]);
	close(pfd[0]);
	ss = sinks__new(1 << 20);
	assert_int_equal(sinks__add(ss, "-", err, sizeof(err)), 0);
	assert_int_equal(sinks__add(ss, f->file, err, sizeof(err)), 0);
	assert_int_equal(sinks__write(ss, "one", 3), -EPIPE);
	assert_true(sinks__failed(ss));
	assert_int_equal(sinks__write(ss, "two", 3), -EPIPE);
	sinks__free(ss);
	dup2(saved, STDOUT_FILENO);
	close(saved);
	fd = open(f->file, O_RDONLY);
	assert_int_equal(read(fd, buf, sizeof(buf)), 8);
	assert_memory_equal(buf, "one\ntwo\n", 8);
	close(fd);
}

/* SIGHUP after logrotate's rename: new lines in a new file at the path, mode 0640. */
static void test_reopen(void **state)
{
	struct fix *f = *state;
	char err[256], old[160], buf[64];
	struct sinks *ss;
	struct stat st;
	mode_t mask;
	int fd;

	snprintf(old, sizeof(old), "%s.1", f->file);
	mask = umask(0);
	ss = sinks__new(1 << 20);
	assert_int_equal(sinks__add(ss, f->file, err, sizeof(err)), 0);
	assert_int_equal(sinks__write(ss, "before", 6), 0);
	assert_int_equal(rename(f->file, old), 0);
	sinks__reopen(ss);
	assert_int_equal(sinks__write(ss, "after", 5), 0);
	umask(mask);
	assert_int_equal(stat(f->file, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0640);
	fd = open(old, O_RDONLY);
	assert_int_equal(read(fd, buf, sizeof(buf)), 7);
	close(fd);
	fd = open(f->file, O_RDONLY);
	assert_int_equal(read(fd, buf, sizeof(buf)), 6);
	assert_memory_equal(buf, "after\n", 6);
	close(fd);
	sinks__free(ss);
}

/* The file's whole text, NUL-terminated, in buf; its length. */
static size_t file_text(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY);
	ssize_t n;

	assert_true(fd >= 0);
	n = read(fd, buf, size - 1);
	assert_true(n >= 0);
	buf[n] = 0;
	close(fd);
	return n;
}

/* RLIMIT_FSIZE stands for a full disk: past it a write is cut short, then fails (EFBIG). */
static void file_limit(rlim_t bytes)
{
	struct rlimit r;

	signal(SIGXFSZ, SIG_IGN);
	assert_int_equal(getrlimit(RLIMIT_FSIZE, &r), 0);
	r.rlim_cur = bytes;
	assert_int_equal(setrlimit(RLIMIT_FSIZE, &r), 0);
}

static int has_error(struct sinks *ss)
{
	struct json j;
	int ret;

	assert_int_equal(json__init(&j, 256), 0);
	json__object_begin(&j, NULL);
	sinks__json(ss, &j);
	json__object_end(&j);
	ret = !strstr(json__str(&j), "\"error\":null");
	json__free(&j);
	return ret;
}

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};

	nanosleep(&ts, NULL);
}

/*
 * A file sink over 100 lines of 10 bytes, "one" written, then a full disk cutting line 1
 * short: broken, line 1's end and lines 2..100 queued, 101..150 dropped.
 */
static struct sinks *file_full(struct fix *f)
{
	char err[256], line[32];
	struct sinks *ss;
	int i;

	ss = sinks__new(1000);
	assert_int_equal(sinks__add(ss, f->file, err, sizeof(err)), 0);
	assert_int_equal(sinks__write(ss, "one", 3), 0);
	file_limit(4 + 10 + 5);
	assert_int_equal(sinks__write(ss, "line-0000", 9), 0);
	assert_int_equal(sinks__write(ss, "line-0001", 9), -EPIPE);
	assert_true(sinks__failed(ss));
	for (i = 2; i <= 150; i++) {
		snprintf(line, sizeof(line), "line-%04d", i);
		sinks__write(ss, line, 9);
	}
	assert_true(has_error(ss));
	assert_int_equal(sinks__dropped(ss, 0), 50);
	assert_int_equal(sinks__take_dropped(ss, 0), 0); /* said once it takes lines again */
	assert_int_equal(sinks__pending(ss), 0);	 /* nothing to wait for in a drain */
	return ss;
}

/* "one", then lines first..last (10 bytes each) from p: their count, or -1. */
static int lines_from(const char *p, int first, int last)
{
	char want[32];
	int i;

	for (i = first; i <= last; i++, p += 10) {
		snprintf(want, sizeof(want), "line-%04d\n", i);
		if (memcmp(p, want, 10))
			return -1;
	}
	return *p ? -1 : last - first + 1;
}

/*
 * A file on a full disk: lines wait, and once there is room (here: the limit raised) the next
 * try, 100 ms after the failure, writes them whole, the cut line completed, in order; the
 * dropped lines are taken then, and the file is written directly again.
 */
static void test_file_full_recovers(void **state)
{
	struct fix *f = *state;
	struct sinks *ss = file_full(f);
	char buf[4096];

	file_limit(RLIM_INFINITY);
	sinks__flush(ss); /* before the next try is due: nothing */
	assert_int_equal(file_text(f->file, buf, sizeof(buf)), 19);
	sleep_ms(150);
	assert_int_equal(sinks__flush(ss), -EPIPE); /* it broke once: the watch is told */
	file_text(f->file, buf, sizeof(buf));
	assert_memory_equal(buf, "one\n", 4);
	assert_int_equal(lines_from(buf + 4, 0, 100), 101);
	assert_false(has_error(ss));
	assert_int_equal(sinks__take_dropped(ss, 0), 50);
	assert_int_equal(sinks__take_dropped(ss, 0), 0);
	assert_int_equal(stat_of(ss, 0, "written"), 102);
	sinks__write(ss, "line-0151", 9);
	assert_int_equal(file_text(f->file, buf, sizeof(buf)), 4 + 102 * 10);
	assert_int_equal(stat_of(ss, 0, "written"), 103);
	sinks__free(ss);
}

/*
 * Tries that fail wait twice as long each time: after tries at about 100, 300 and 700 ms
 * (the next 800 ms later), room made is not used 100 ms on, and is by 1 s on.
 */
static void test_file_full_backs_off(void **state)
{
	struct fix *f = *state;
	struct sinks *ss = file_full(f);
	char buf[4096];
	int wait[] = {150, 250, 450}, i;

	for (i = 0; i < 3; i++) {
		sleep_ms(wait[i]);
		sinks__flush(ss);
		assert_true(has_error(ss));
	}
	file_limit(RLIM_INFINITY);
	sleep_ms(100);
	sinks__flush(ss);
	assert_int_equal(file_text(f->file, buf, sizeof(buf)), 19);
	sleep_ms(900);
	sinks__flush(ss);
	assert_false(has_error(ss));
	file_text(f->file, buf, sizeof(buf));
	assert_int_equal(lines_from(buf + 4, 0, 100), 101);
	sinks__free(ss);
}

/*
 * SIGHUP on a file that fails (here: renamed away, room made): reopened and tried at once;
 * the new file gets the queued lines but for the end of the line cut in the old one
 * (dropped), which keeps what it had.
 */
static void test_file_full_reopen(void **state)
{
	struct fix *f = *state;
	struct sinks *ss = file_full(f);
	char old[160], buf[4096];

	snprintf(old, sizeof(old), "%s.1", f->file);
	assert_int_equal(rename(f->file, old), 0);
	file_limit(RLIM_INFINITY);
	sinks__reopen(ss);
	assert_false(has_error(ss));
	assert_int_equal(file_text(old, buf, sizeof(buf)), 19);
	file_text(f->file, buf, sizeof(buf));
	assert_int_equal(lines_from(buf, 2, 100), 99);
	assert_int_equal(sinks__take_dropped(ss, 0), 51);
	sinks__free(ss);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_stalled_collector, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stalled_whole_lines, setup, teardown),
		cmocka_unit_test_setup_teardown(test_collector_reconnect, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reconnect_cut_line, setup, teardown),
		cmocka_unit_test_setup_teardown(test_broken_pipe, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reopen, setup, teardown),
		cmocka_unit_test_setup_teardown(test_file_full_recovers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_file_full_backs_off, setup, teardown),
		cmocka_unit_test_setup_teardown(test_file_full_reopen, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
