// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Output sinks on real sockets and files: a collector that stops reading
 * costs counted drops and never blocks a write, its lines arrive whole, a
 * collector gone breaks only its own sink, a file sink is reopened after a
 * rename.
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
	k = atoi(p + strlen(needle));
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

/* The collector goes: its sink breaks, the file sink beside it still gets every line. */
static void test_broken_collector(void **state)
{
	struct fix *f = *state;
	char err[256], buf[4096];
	struct sinks *ss;
	int i, fd;

	ss = sinks__new(1 << 20);
	assert_int_equal(sinks__add(ss, f->sock, err, sizeof(err)), 0);
	assert_int_equal(sinks__add(ss, f->file, err, sizeof(err)), 0);
	assert_int_equal(sinks__add(ss, f->file, err, sizeof(err)), -EEXIST);
	f->peer = accept(f->srv, NULL, NULL);
	assert_int_equal(sinks__write(ss, "one", 3), 0);
	close(f->peer);
	f->peer = -1;
	for (i = 0; i < 3; i++)
		sinks__write(ss, "more", 4);
	assert_true(sinks__failed(ss));
	assert_int_equal(sinks__write(ss, "last", 4), -EPIPE);
	assert_int_equal(stat_of(ss, 1, "written"), 5);
	fd = open(f->file, O_RDONLY);
	assert_int_equal(read(fd, buf, sizeof(buf)), 24);
	assert_memory_equal(buf, "one\nmore\nmore\nmore\nlast\n", 24);
	close(fd);
	sinks__free(ss);
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_stalled_collector, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stalled_whole_lines, setup, teardown),
		cmocka_unit_test_setup_teardown(test_broken_collector, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reopen, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
