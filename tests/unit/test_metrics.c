// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The Prometheus endpoint: the exposition text (names, HELP and TYPE, escaped label values,
 * counters that outlive their targets) and the HTTP server on a real loopback socket (GET,
 * HEAD, 404, 405, 400, malformed requests answered 400 at once, an oversized request, a
 * client that never finishes, too many clients).
 */
#include <errno.h>
#include <poll.h>
#include <regex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>
#include "output/metrics.h"
#include "output/sink.h"
#include "output/httpd.h"

static struct metrics *open_metrics(int timeout_ms, int max_clients)
{
	struct metrics_opts o = {
		.listen = "127.0.0.1:0", .timeout_ms = timeout_ms, .max_clients = max_clients};
	char err[256] = "";
	struct metrics *m = metrics__new(&o, err, sizeof(err));

	if (!m)
		fail_msg("metrics__new: %s", err);
	assert_int_not_equal(metrics__port(m), 0);
	return m;
}

static char *render(struct metrics *m)
{
	char *text = NULL;
	ssize_t n = metrics__render(m, &text);

	assert_true(n > 0);
	assert_int_equal(strlen(text), n);
	return text;
}

/* The value of the sample line that starts with "series " (name and labels as written). */
static long long value_of(const char *text, const char *series)
{
	size_t n = strlen(series);
	const char *p = text;

	while (p && *p) {
		if (!strncmp(p, series, n) && p[n] == ' ')
			return strtoll(p + n + 1, NULL, 10);
		p = strchr(p, '\n');
		if (p)
			p++;
	}
	return -1;
}

/*
 * The format's rules for every line: a sample's metric has HELP and TYPE lines before it,
 * names are valid, counters end in _total and carry the nanwatch_ prefix, values are integers.
 */
static void check_format(const char *text)
{
	char typed[64][96], name[96], type[16];
	regex_t sample;
	int ntyped = 0, i, found;
	const char *p = text;

	assert_int_equal(
		regcomp(&sample,
			"^nanwatch_[a-z_]+(\\{[a-z_]+=\"([^\"\\\\\n]|\\\\[\"\\\\n])*\""
			"(,[a-z_]+=\"([^\"\\\\\n]|\\\\[\"\\\\n])*\")*\\})? [0-9]+(\\.[0-9]+)?$",
			REG_EXTENDED | REG_NOSUB),
		0);
	while (*p) {
		const char *end = strchr(p, '\n');
		char line[1024];

		assert_non_null(end); /* every line ends with a line feed */
		assert_true((size_t)(end - p) < sizeof(line));
		memcpy(line, p, end - p);
		line[end - p] = 0;
		if (sscanf(line, "# TYPE %95s %15s", name, type) == 2) {
			assert_true(!strcmp(type, "counter") || !strcmp(type, "gauge"));
			if (!strcmp(type, "counter"))
				assert_string_equal(name + strlen(name) - 6, "_total");
			assert_true(ntyped < 64);
			strcpy(typed[ntyped++], name);
		} else if (!strncmp(line, "# HELP ", 7)) {
			assert_non_null(strchr(line + 7, ' '));
		} else {
			if (regexec(&sample, line, 0, NULL, 0))
				fail_msg("not a sample line: %s", line);
			for (i = 0, found = 0; i < ntyped; i++)
				found |= !strncmp(line, typed[i], strlen(typed[i])) &&
					 strchr("{ ", line[strlen(typed[i])]);
			if (!found)
				fail_msg("sample without a TYPE line before it: %s", line);
		}
		p = end + 1;
	}
	regfree(&sample);
}

static void test_empty_exposition(void **state)
{
	struct metrics *m = open_metrics(0, 0);
	char *text = render(m);

	(void)state;
	check_format(text);
	assert_non_null(strstr(text, "# HELP nanwatch_targets "));
	assert_non_null(strstr(text, "# TYPE nanwatch_targets gauge\n"));
	assert_non_null(strstr(text, "# TYPE nanwatch_anomalies_total counter\n"));
	assert_non_null(strstr(text, "# TYPE nanwatch_events_dropped_total counter\n"));
	assert_int_equal(value_of(text, "nanwatch_targets"), 0);
	assert_int_equal(value_of(text, "nanwatch_anomalies_total{cause=\"none\"}"), 0);
	assert_int_equal(value_of(text, "nanwatch_probe_hits_total"), 0);
	assert_int_equal(value_of(text, "nanwatch_scanned_bytes_total"), 0);
	assert_int_equal(value_of(text, "nanwatch_watches_lost_total"), 0);
	free(text);
	metrics__watch_lost(m);
	text = render(m);
	assert_int_equal(value_of(text, "nanwatch_watches_lost_total"), 1);
	free(text);
	metrics__free(m);
}

/* How many sample lines start with prefix. */
static int lines_with(const char *text, const char *prefix)
{
	const char *p = text;
	int n = 0;

	for (; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		n += !strncmp(p, prefix, strlen(prefix));
	return n;
}

/*
 * A target's first non-finite value: a series only once diagnosed, with the labels a page
 * needs; kept once the target is gone, for the last METRICS_FIRST_KEPT targets.
 */
static void test_first_nonfinite(void **state)
{
	struct metrics *m = open_metrics(0, 0);
	struct metrics_values v = {.anomalies = 2, .first_time = 1700000000.25};
	struct metrics_target *x = metrics__target_add(m, 10, 3, "job-1");
	char host[256] = "", series[1024], *text;
	int i;

	(void)state;
	assert_int_equal(gethostname(host, sizeof(host) - 1), 0);
	metrics__target_update(x, &v);
	text = render(m);
	check_format(text);
	assert_int_equal(lines_with(text, "nanwatch_first_nonfinite_step{"), 0); /* undiagnosed */
	free(text);
	v.cause = "exp_overflow";
	v.cause_step = 42;
	snprintf(v.cause_layer, sizeof(v.cause_layer), "encoder.attn");
	metrics__target_update(x, &v);
	snprintf(series, sizeof(series),
		 "nanwatch_first_nonfinite_step{job_id=\"job-1\",rank=\"3\",host=\"%s\",pid=\"10\","
		 "layer=\"encoder.attn\",cause=\"exp_overflow\"}",
		 host);
	text = render(m);
	check_format(text);
	assert_int_equal(value_of(text, series), 42);
	assert_non_null(strstr(text, "nanwatch_first_nonfinite_time_seconds{job_id=\"job-1\","));
	assert_non_null(strstr(text, "cause=\"exp_overflow\"} 1700000000.250\n"));
	free(text);
	metrics__target_remove(m, x); /* gone: still there */
	text = render(m);
	assert_int_equal(value_of(text, series), 42);
	free(text);
	for (i = 0; i < METRICS_FIRST_KEPT + 44; i++) {
		x = metrics__target_add(m, 1000 + i, -1, NULL);
		assert_non_null(x);
		metrics__target_update(x, &v);
		metrics__target_remove(m, x);
	}
	text = render(m);
	check_format(text);
	assert_int_equal(lines_with(text, "nanwatch_first_nonfinite_step{"), METRICS_FIRST_KEPT);
	assert_int_equal(value_of(text, series), -1); /* the oldest went first */
	assert_null(strstr(text, "pid=\"1043\""));
	assert_non_null(strstr(text, "pid=\"1044\""));
	free(text);
	metrics__free(m);
}

/* The textfile: the exposition, replaced whole, 0644, nothing left beside it. */
static void test_textfile(void **state)
{
	char dir[] = "/tmp/nw-textfile-XXXXXX", path[64], err[256] = "", *text, buf[65536];
	struct metrics_opts o = {.textfile = path};
	struct metrics_values v = {.anomalies = 1};
	struct metrics *m;
	struct stat st;
	struct dirent *d;
	DIR *dd;
	FILE *f;
	size_t n;
	int files = 0;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/nanwatch.prom", dir);
	m = metrics__new(&o, err, sizeof(err));
	if (!m)
		fail_msg("metrics__new: %s", err);
	assert_int_equal(metrics__fd(m), -1); /* no endpoint */
	metrics__target_update(metrics__target_add(m, 7, -1, NULL), &v);
	assert_int_equal(metrics__tick(m), 1);
	assert_int_equal(metrics__tick(m), 0); /* not before a second */
	text = render(m);
	f = fopen(path, "r");
	assert_non_null(f);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = 0;
	fclose(f);
	assert_string_equal(buf, text);
	free(text);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0644);
	metrics__free(m); /* written once more */
	dd = opendir(dir);
	assert_non_null(dd);
	while ((d = readdir(dd)))
		if (d->d_name[0] != '.') {
			assert_string_equal(d->d_name, "nanwatch.prom");
			files++;
		}
	closedir(dd);
	assert_int_equal(files, 1);
	unlink(path);
	rmdir(dir);
}

/* Anomalies by cause: before the diagnosis under none; counts stay when their target goes. */
static void test_targets_and_causes(void **state)
{
	struct metrics_values a = {.anomalies = 5,
				   .undiagnosed = 2,
				   .cause = "lr_too_high",
				   .steps = 7,
				   .iterations = 14,
				   .probe_hits = 100,
				   .bytes = 4096,
				   .tensors = 9,
				   .warnings = 1,
				   .skipped_steps = 4};
	struct metrics_values b = {.anomalies = 3,
				   .undiagnosed = 3,
				   .steps = 2,
				   .probe_hits = 50,
				   .bytes = 1,
				   .skipped_steps = 2};
	struct metrics *m = open_metrics(0, 0);
	struct metrics_target *ta = metrics__target_add(m, 4242, 3, "job-1");
	struct metrics_target *tb = metrics__target_add(m, 77, -1, NULL);
	char *text;

	(void)state;
	metrics__target_update(ta, &a);
	metrics__target_update(tb, &b);
	text = render(m);
	check_format(text);
	assert_int_equal(value_of(text, "nanwatch_targets"), 2);
	assert_int_equal(value_of(text, "nanwatch_anomalies_total{cause=\"none\"}"), 5);
	assert_int_equal(value_of(text, "nanwatch_anomalies_total{cause=\"lr_too_high\"}"), 3);
	assert_int_equal(value_of(text, "nanwatch_diagnoses_total{cause=\"lr_too_high\"}"), 1);
	assert_int_equal(value_of(text, "nanwatch_probe_hits_total"), 150);
	assert_int_equal(value_of(text, "nanwatch_scanned_bytes_total"), 4097);
	assert_int_equal(value_of(text, "nanwatch_scanned_tensors_total"), 9);
	assert_int_equal(value_of(text, "nanwatch_warnings_total"), 1);
	assert_int_equal(value_of(text, "nanwatch_skipped_steps_total"), 6);
	assert_int_equal(
		value_of(text,
			 "nanwatch_target_steps_total{pid=\"4242\",rank=\"3\",job_id=\"job-1\"}"),
		7);
	assert_int_equal(value_of(text, "nanwatch_target_iterations_total{pid=\"4242\",rank=\"3\","
					"job_id=\"job-1\"}"),
			 14);
	assert_int_equal(value_of(text, "nanwatch_target_steps_total{pid=\"77\"}"), 2);
	assert_int_equal(value_of(text, "nanwatch_target_anomalies_total{pid=\"77\"}"), 3);
	free(text);

	metrics__target_remove(m, ta);
	text = render(m);
	check_format(text);
	assert_int_equal(value_of(text, "nanwatch_targets"), 1);
	assert_int_equal(value_of(text, "nanwatch_anomalies_total{cause=\"none\"}"), 5);
	assert_int_equal(value_of(text, "nanwatch_anomalies_total{cause=\"lr_too_high\"}"), 3);
	assert_int_equal(value_of(text, "nanwatch_diagnoses_total{cause=\"lr_too_high\"}"), 1);
	assert_int_equal(value_of(text, "nanwatch_probe_hits_total"), 150);
	assert_null(strstr(text, "pid=\"4242\""));
	free(text);
	metrics__target_remove(m, NULL);
	metrics__free(m);
}

/* Backslash, double quote and line feed escaped; invalid UTF-8 as U+FFFD. */
static void test_label_escaping(void **state)
{
	struct metrics *m = open_metrics(0, 0);
	char dir[] = "/tmp/test_metrics.XXXXXX", path[128], err[256] = "", *text;
	struct sinks *ss = sinks__new(4096);
	struct metrics_values st = {.steps = 1};

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/ev\"a\\b\nc.ndjson", dir);
	assert_int_equal(sinks__add(ss, path, err, sizeof(err)), 0);
	metrics__target_update(metrics__target_add(m, 9, 0, "a\"b\\c\nd\xff"), &st);
	assert_int_equal(metrics__update_sinks(m, ss), 0);
	text = render(m);
	check_format(text);
	assert_int_equal(value_of(text, "nanwatch_target_steps_total{pid=\"9\",rank=\"0\","
					"job_id=\"a\\\"b\\\\c\\nd\xef\xbf\xbd\"}"),
			 1);
	snprintf(path, sizeof(path),
		 "nanwatch_events_dropped_total{sink=\"%s/ev\\\"a\\\\b\\nc.ndjson\"}", dir);
	assert_int_equal(value_of(text, path), 0);
	free(text);
	sinks__free(ss);
	snprintf(path, sizeof(path), "%s/ev\"a\\b\nc.ndjson", dir);
	unlink(path);
	rmdir(dir);
	metrics__free(m);
}

static void test_addresses(void **state)
{
	static const char *bad[] = {"127.0.0.1",	 "127.0.0.1:", "127.0.0.1:x",
				    "127.0.0.1:70000",	 "[::1]9464",  "::1:9464",
				    "host.example:9464", ":9464"};
	struct metrics_opts o = {};
	char err[256];
	struct metrics *m;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		o.listen = bad[i];
		err[0] = 0;
		m = metrics__new(&o, err, sizeof(err));
		if (m)
			fail_msg("accepted '%s'", bad[i]);
		assert_int_equal(errno, EINVAL);
		assert_non_null(strstr(err, "invalid metrics address"));
	}
	o.listen = "0.0.0.0:0";
	assert_null(metrics__new(&o, err, sizeof(err)));
	assert_int_equal(errno, EINVAL);
	assert_non_null(strstr(err, "not a loopback address"));
	o.allow_remote = 1;
	m = metrics__new(&o, err, sizeof(err));
	assert_non_null(m);
	metrics__free(m);
	o.allow_remote = 0;
	o.listen = "localhost:0";
	m = metrics__new(&o, err, sizeof(err));
	assert_non_null(m);
	metrics__free(m);
	o.listen = "[::1]:0";
	m = metrics__new(&o, err, sizeof(err));
	if (!m) /* no IPv6 here: the address itself was accepted */
		assert_true(errno == EAFNOSUPPORT || errno == EADDRNOTAVAIL);
	metrics__free(m);
}

static int client(const struct metrics *m)
{
	struct sockaddr_in sa = {.sin_family = AF_INET,
				 .sin_port = htons(metrics__port(m)),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/*
 * Serve until the client fd sees the end of the response (the server closes); the response
 * in buf. Returns its length. Bounded by polls of at most 10 s with nothing happening.
 */
static size_t until_closed(struct metrics *m, int fd, char *buf, size_t size)
{
	size_t len = 0;
	ssize_t n;

	for (;;) {
		struct pollfd p[2] = {{.fd = metrics__fd(m), .events = POLLIN},
				      {.fd = fd, .events = POLLIN}};

		if (poll(p, 2, 10000) <= 0)
			fail_msg("nothing happened in 10 s");
		assert_int_equal(metrics__serve(m), 0);
		if (!(p[1].revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		n = recv(fd, buf + len, size - 1 - len, MSG_DONTWAIT);
		if (n < 0 && errno == EAGAIN)
			continue;
		if (n <= 0)
			break;
		len += n;
		assert_true(len < size - 1);
	}
	buf[len] = 0;
	return len;
}

static size_t exchange_n(struct metrics *m, const char *req, size_t len, char *buf, size_t size)
{
	int fd = client(m);
	size_t n;

	assert_int_equal(send(fd, req, len, 0), (ssize_t)len);
	n = until_closed(m, fd, buf, size);
	close(fd);
	return n;
}

static size_t exchange(struct metrics *m, const char *req, char *buf, size_t size)
{
	return exchange_n(m, req, strlen(req), buf, size);
}

static const char *body_of(const char *resp)
{
	const char *p = strstr(resp, "\r\n\r\n");

	assert_non_null(p);
	return p + 4;
}

static void test_http_get(void **state)
{
	struct metrics_values st = {.anomalies = 2, .undiagnosed = 2, .probe_hits = 12};
	struct metrics *m = open_metrics(0, 0);
	static char resp[65536], clen[64];
	char *text;

	(void)state;
	metrics__target_update(metrics__target_add(m, 1234, -1, NULL), &st);
	text = render(m);
	exchange(m, "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept: */*\r\n\r\n", resp, sizeof(resp));
	assert_memory_equal(resp, "HTTP/1.1 200 OK\r\n", 17);
	assert_non_null(
		strstr(resp, "\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"));
	snprintf(clen, sizeof(clen), "\r\nContent-Length: %zu\r\n", strlen(text));
	assert_non_null(strstr(resp, clen));
	assert_string_equal(body_of(resp), text);
	assert_int_equal(value_of(body_of(resp), "nanwatch_probe_hits_total"), 12);

	/* HTTP/1.0, a query string, a bare line feed ending the head */
	exchange(m, "GET /metrics?x=1 HTTP/1.0\n\n", resp, sizeof(resp));
	assert_memory_equal(resp, "HTTP/1.1 200 OK\r\n", 17);
	assert_string_equal(body_of(resp), text);

	exchange(m, "HEAD /metrics HTTP/1.1\r\n\r\n", resp, sizeof(resp));
	assert_memory_equal(resp, "HTTP/1.1 200 OK\r\n", 17);
	assert_non_null(strstr(resp, clen));
	assert_string_equal(body_of(resp), "");
	free(text);
	metrics__free(m);
}

static void test_http_errors(void **state)
{
	struct metrics *m = open_metrics(0, 0);
	static char resp[65536], big[HTTPD_MAX_REQUEST + 100];

	(void)state;
	exchange(m, "GET / HTTP/1.1\r\n\r\n", resp, sizeof(resp));
	assert_memory_equal(resp, "HTTP/1.1 404 Not Found\r\n", 24);
	exchange(m, "GET /metricsx HTTP/1.1\r\n\r\n", resp, sizeof(resp));
	assert_memory_equal(resp, "HTTP/1.1 404 Not Found\r\n", 24);
	exchange(m, "POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n", resp, sizeof(resp));
	assert_memory_equal(resp, "HTTP/1.1 405 Method Not Allowed\r\n", 33);
	assert_non_null(strstr(resp, "\r\nAllow: GET, HEAD\r\n"));
	exchange(m, "hello\r\n\r\n", resp, sizeof(resp));
	assert_memory_equal(resp, "HTTP/1.1 400 Bad Request\r\n", 26);
	exchange(m, "GET /metrics\r\n\r\n", resp, sizeof(resp)); /* HTTP/0.9 */
	assert_memory_equal(resp, "HTTP/1.1 400 Bad Request\r\n", 26);

	/* header lines within HTTPD_MAX_LINE that pass HTTPD_MAX_REQUEST together */
	memset(big, 'a', sizeof(big) - 1);
	memcpy(big, "GET /metrics HTTP/1.1\r\nX: ", 26);
	memcpy(big + 3000, "\r\nY: ", 5);
	memcpy(big + 6000, "\r\nZ: ", 5);
	exchange(m, big, resp, sizeof(resp));
	assert_memory_equal(resp, "HTTP/1.1 431 Request Header Fields Too Large\r\n", 46);
	metrics__free(m);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

#define REQ(s) s, sizeof(s) - 1

/*
 * Heads that cannot be requests, none of them finished: each is answered 400, saying why, as
 * soon as it is sent (the deadline is a minute away; until_closed gives up after 10 s of
 * nothing); the server answers a scrape after them.
 */
static void test_http_malformed(void **state)
{
	static const struct {
		const char *req;
		size_t len;
		const char *why;
	} bad[] = {
		{REQ("GET /metrics HTTP/1.1\r\nHost: a\0b"), "NUL or control byte"},
		{REQ("GET /met\0rics HTTP/1.1"), "NUL or control byte"},
		{REQ("GET /metrics HTTP/1.1\r\nX: \x01"), "NUL or control byte"},
		{REQ("GET /metrics\x1b HTTP/1.1"), "NUL or control byte"},
		{REQ("GET /metrics HTTP/1.1\r\nX: a\x7f"), "NUL or control byte"},
		{REQ("GET /metrics HTTP/1.1\rHost: x"), "CR not followed by LF"},
		{REQ("\r\n"), "no request line"},
		{REQ("G@T /metrics HTTP/1.1\r\n"), "not a token"},
		{REQ(" /metrics HTTP/1.1\r\n"), "no method"},
		{REQ("GET\t/metrics HTTP/1.1\r\n"), "not a token"},
		{REQ("GET  /metrics HTTP/1.1\r\n"), "request target"},
		{REQ("GET /m\xc3\xa9trics HTTP/1.1\r\n"), "request target"},
		{REQ("GET /metrics HTTP/2.0\r\n"), "not HTTP/1.x"},
		{REQ("GET /metrics FTP/1.1\r\n"), "not HTTP/1.x"},
		{REQ("GET /metrics HTTP/1.1 \r\n"), "not HTTP/1.x"},
		{REQ("GET /metrics HTTP/1.1\r\nHost x\r\n"), "not name: value"},
		{REQ("GET /metrics HTTP/1.1\r\nHost : x\r\n"), "not name: value"},
		{REQ("GET /metrics HTTP/1.1\r\n: x\r\n"), "not name: value"},
		{REQ("GET /metrics HTTP/1.1\r\nA: b\r\n c\r\n"), "folded"},
	};
	struct metrics *m = open_metrics(60000, 0);
	static char resp[65536], longline[HTTPD_MAX_LINE + 10];
	double start, took, most = 0;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		start = now_s();
		exchange_n(m, bad[i].req, bad[i].len, resp, sizeof(resp));
		took = now_s() - start;
		most = took > most ? took : most;
		if (strncmp(resp, "HTTP/1.1 400 Bad Request\r\n", 26) || !strstr(resp, bad[i].why))
			fail_msg("request %zu: %s", i, resp);
	}
	memset(longline, 'a', sizeof(longline));
	memcpy(longline, "GET /", 5);
	exchange_n(m, longline, sizeof(longline), resp, sizeof(resp));
	assert_memory_equal(resp, "HTTP/1.1 400 Bad Request\r\n", 26);
	assert_non_null(strstr(resp, "a line longer than 4096 bytes"));
	assert_true(most < 2);
	/* a tab and obs-text in a header value, a bare LF ending a line: fine */
	exchange(m, "GET /metrics HTTP/1.1\r\nX: caf\xc3\xa9\tau lait\nHost: x\r\n\r\n", resp,
		 sizeof(resp));
	assert_memory_equal(resp, "HTTP/1.1 200 OK\r\n", 17);
	metrics__free(m);
}

/* A client that sends half a request: others are served meanwhile, and it is closed at its deadline. */
static void test_slow_client(void **state)
{
	struct metrics *m = open_metrics(300, 0);
	static char resp[65536];
	int slow = client(m);

	(void)state;
	assert_int_equal(send(slow, "GET /met", 8, 0), 8);
	assert_int_equal(metrics__serve(m), 0);
	exchange(m, "GET /metrics HTTP/1.1\r\n\r\n", resp, sizeof(resp));
	assert_memory_equal(resp, "HTTP/1.1 200 OK\r\n", 17);
	/* the deadline's timer makes the fd readable: closed without an answer */
	assert_int_equal(until_closed(m, slow, resp, sizeof(resp)), 0);
	close(slow);
	metrics__free(m);
}

/* Past max_clients a connection is closed at once; the ones held stay and are answered. */
static void test_too_many_clients(void **state)
{
	struct metrics *m = open_metrics(0, 2);
	static char resp[65536];
	int a = client(m), b = client(m), c;

	(void)state;
	assert_int_equal(send(a, "GET /metrics HTTP/1.1\r\n", 23, 0), 23);
	assert_int_equal(send(b, "GET /metrics HTTP/1.1\r\n", 23, 0), 23);
	c = client(m);
	assert_int_equal(until_closed(m, c, resp, sizeof(resp)), 0);
	close(c);
	assert_int_equal(send(a, "\r\n", 2, 0), 2);
	until_closed(m, a, resp, sizeof(resp));
	assert_memory_equal(resp, "HTTP/1.1 200 OK\r\n", 17);
	assert_int_equal(send(b, "\r\n", 2, 0), 2);
	until_closed(m, b, resp, sizeof(resp));
	assert_memory_equal(resp, "HTTP/1.1 200 OK\r\n", 17);
	close(a);
	close(b);
	metrics__free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_empty_exposition), cmocka_unit_test(test_targets_and_causes),
		cmocka_unit_test(test_label_escaping),	 cmocka_unit_test(test_addresses),
		cmocka_unit_test(test_http_get),	 cmocka_unit_test(test_http_errors),
		cmocka_unit_test(test_http_malformed),	 cmocka_unit_test(test_slow_client),
		cmocka_unit_test(test_too_many_clients), cmocka_unit_test(test_first_nonfinite),
		cmocka_unit_test(test_textfile),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
