// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* A small HTTP/1.1 server on one path: see httpd.h. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* accept4 */
#endif
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>
#include "output/httpd.h"

#define STR_(x) #x
#define STR(x) STR_(x)

#define TAG_LISTEN 0
#define TAG_TIMER 1
#define TAG_CLIENT 2 /* + the client's slot */

#define TEXT_PLAIN "text/plain; charset=utf-8"

struct client {
	int fd;
	uint64_t deadline_ms;
	size_t rlen;
	size_t checked;	 /* bytes of req looked at: each is checked once, as it comes */
	size_t line;	 /* where the line being read begins */
	int lines;	 /* lines of the head complete */
	const char *bad; /* why the request is malformed (answered 400), or NULL */
	char *resp;
	size_t resp_len, resp_off;
	char req[HTTPD_MAX_REQUEST];
};

struct httpd {
	int lfd, tfd, epfd;
	int port;
	int timeout_ms;
	int max_clients;
	struct client **clients;
	const char *name, *path, *content_type;
	httpd_render_fn render;
	void *ctx;
};

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000ULL + ts.tv_nsec / 1000000;
}

static int parse_port(const char *s, int *port)
{
	char *end;
	long v;

	if (*s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v > 65535)
		return -EINVAL;
	*port = v;
	return 0;
}

/* "ADDR:PORT" with ADDR IPv4, [IPv6] or localhost. */
static int parse_listen(const char *spec, struct sockaddr_storage *sa, socklen_t *len)
{
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)sa;
	struct sockaddr_in *s4 = (struct sockaddr_in *)sa;
	const char *colon;
	char host[64];
	size_t n;
	int port;

	memset(sa, 0, sizeof(*sa));
	if (spec[0] == '[') {
		colon = strstr(spec, "]:");
		n = colon ? (size_t)(colon - spec - 1) : 0;
		if (!colon || n >= sizeof(host) || parse_port(colon + 2, &port))
			return -EINVAL;
		memcpy(host, spec + 1, n);
		host[n] = 0;
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons(port);
		*len = sizeof(*s6);
		return inet_pton(AF_INET6, host, &s6->sin6_addr) == 1 ? 0 : -EINVAL;
	}
	colon = strrchr(spec, ':');
	n = colon ? (size_t)(colon - spec) : 0;
	if (!colon || n >= sizeof(host) || parse_port(colon + 1, &port))
		return -EINVAL;
	memcpy(host, spec, n);
	host[n] = 0;
	s4->sin_family = AF_INET;
	s4->sin_port = htons(port);
	*len = sizeof(*s4);
	if (!strcmp(host, "localhost")) {
		s4->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		return 0;
	}
	return inet_pton(AF_INET, host, &s4->sin_addr) == 1 ? 0 : -EINVAL;
}

static int port_of(const struct sockaddr_storage *sa)
{
	return ntohs(sa->ss_family == AF_INET6 ? ((const struct sockaddr_in6 *)sa)->sin6_port
					       : ((const struct sockaddr_in *)sa)->sin_port);
}

static int is_loopback(const struct sockaddr_storage *sa)
{
	const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;
	const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;

	if (sa->ss_family == AF_INET)
		return (ntohl(s4->sin_addr.s_addr) >> 24) == 127;
	if (IN6_IS_ADDR_LOOPBACK(&s6->sin6_addr))
		return 1;
	return IN6_IS_ADDR_V4MAPPED(&s6->sin6_addr) && s6->sin6_addr.s6_addr[12] == 127;
}

int httpd__check_listen(const char *name, const char *spec, char *why, size_t whylen)
{
	struct sockaddr_storage sa;
	socklen_t len;

	if (parse_listen(spec, &sa, &len) || !port_of(&sa)) {
		snprintf(why, whylen,
			 "%s: '%.64s' is not ADDR:PORT (IPv4, [IPv6] or localhost; port 1..65535)",
			 name, spec);
		return -EINVAL;
	}
	if (!is_loopback(&sa)) {
		snprintf(why, whylen,
			 "%s: '%.64s' is not a loopback address (127.0.0.0/8, [::1], localhost): "
			 "the endpoint has no authentication",
			 name, spec);
		return -EINVAL;
	}
	/* an IPv6 socket of its own (IPV6_V6ONLY) cannot bind one */
	if (sa.ss_family == AF_INET6 &&
	    IN6_IS_ADDR_V4MAPPED(&((struct sockaddr_in6 *)&sa)->sin6_addr)) {
		snprintf(why, whylen,
			 "%s: '%.64s' is a v4-mapped address: give the IPv4 one (127.0.0.1:PORT)",
			 name, spec);
		return -EINVAL;
	}
	return 0;
}

static int epoll_add(int epfd, int fd, uint32_t events, uint64_t tag)
{
	struct epoll_event ev = {.events = events, .data.u64 = tag};

	return epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) ? -errno : 0;
}

static int open_listener(struct httpd *h, const struct sockaddr_storage *sa, socklen_t len)
{
	struct sockaddr_storage bound;
	socklen_t blen = sizeof(bound);
	int one = 1;

	h->lfd = socket(sa->ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (h->lfd < 0)
		return -errno;
	setsockopt(h->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (sa->ss_family == AF_INET6)
		setsockopt(h->lfd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
	if (bind(h->lfd, (const struct sockaddr *)sa, len) || listen(h->lfd, 16) ||
	    getsockname(h->lfd, (struct sockaddr *)&bound, &blen))
		return -errno;
	h->port = ntohs(bound.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&bound)->sin6_port
						    : ((struct sockaddr_in *)&bound)->sin_port);
	return 0;
}

static int open_loop(struct httpd *h)
{
	int ret;

	h->epfd = epoll_create1(EPOLL_CLOEXEC);
	h->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (h->epfd < 0 || h->tfd < 0)
		return -errno;
	ret = epoll_add(h->epfd, h->lfd, EPOLLIN, TAG_LISTEN);
	if (!ret)
		ret = epoll_add(h->epfd, h->tfd, EPOLLIN, TAG_TIMER);
	return ret;
}

struct httpd *httpd__new(const struct httpd_opts *o, char *err, size_t errlen)
{
	struct sockaddr_storage sa;
	struct httpd *h = NULL;
	socklen_t len;
	int ret;

	if (parse_listen(o->listen, &sa, &len)) {
		snprintf(err, errlen, "invalid %s address '%s' (ADDR:PORT, [IPv6]:PORT)", o->name,
			 o->listen);
		ret = -EINVAL;
		goto fail;
	}
	if (!o->allow_remote && !is_loopback(&sa)) {
		snprintf(err, errlen,
			 "%s address '%s' is not a loopback address: the endpoint has no "
			 "authentication; listen on 127.0.0.1 or [::1]",
			 o->name, o->listen);
		ret = -EINVAL;
		goto fail;
	}
	h = calloc(1, sizeof(*h));
	if (h) {
		h->lfd = h->tfd = h->epfd = -1;
		h->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : HTTPD_DEFAULT_TIMEOUT_MS;
		h->max_clients = o->max_clients > 0 ? o->max_clients : HTTPD_DEFAULT_CLIENTS;
		h->clients = calloc(h->max_clients, sizeof(*h->clients));
		h->name = o->name;
		h->path = o->path;
		h->content_type = o->content_type;
		h->render = o->render;
		h->ctx = o->ctx;
	}
	if (!h || !h->clients) {
		snprintf(err, errlen, "out of memory");
		ret = -ENOMEM;
		goto fail;
	}
	ret = open_listener(h, &sa, len);
	if (ret) {
		snprintf(err, errlen, "failed to listen on %s for %s: %s", o->listen, o->name,
			 strerror(-ret));
		goto fail;
	}
	ret = open_loop(h);
	if (ret) {
		snprintf(err, errlen, "failed to set up the %s server: %s", o->name,
			 strerror(-ret));
		goto fail;
	}
	return h;
fail:
	httpd__free(h);
	errno = -ret;
	return NULL;
}

int httpd__port(const struct httpd *h)
{
	return h->port;
}

int httpd__fd(const struct httpd *h)
{
	return h->epfd;
}

static void client_close(struct httpd *h, int i)
{
	struct client *c = h->clients[i];

	if (!c)
		return;
	close(c->fd); /* leaves the epoll set with it */
	free(c->resp);
	free(c);
	h->clients[i] = NULL;
}

/* The timer fires at the earliest deadline; disarmed without clients. */
static void arm_timer(struct httpd *h)
{
	struct itimerspec its = {};
	uint64_t first = 0;
	int i;

	for (i = 0; i < h->max_clients; i++)
		if (h->clients[i] && (!first || h->clients[i]->deadline_ms < first))
			first = h->clients[i]->deadline_ms;
	if (first) {
		its.it_value.tv_sec = first / 1000;
		its.it_value.tv_nsec = (first % 1000) * 1000000 + 1;
	}
	timerfd_settime(h->tfd, TFD_TIMER_ABSTIME, &its, NULL);
}

static void accept_clients(struct httpd *h)
{
	struct client *c;
	int fd, i, n;

	for (n = 0; n < 64; n++) {
		fd = accept4(h->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return; /* EAGAIN, or an aborted connection */
		for (i = 0; i < h->max_clients && h->clients[i]; i++)
			;
		c = i < h->max_clients ? calloc(1, sizeof(*c)) : NULL;
		if (!c || epoll_add(h->epfd, fd, EPOLLIN, TAG_CLIENT + i)) {
			free(c); /* too many clients at once: this one is turned away */
			close(fd);
			continue;
		}
		c->fd = fd;
		c->deadline_ms = now_ms() + h->timeout_ms;
		h->clients[i] = c;
	}
}

static const char body_405[] = "method not allowed: GET or HEAD\n";
static const char body_431[] = "request header fields too large\n";

/* The whole response, headers and body (none for HEAD), into c->resp. */
static int respond(struct client *c, int status, const char *reason, const char *type,
		   const char *extra, const char *body, size_t blen, int head)
{
	static const char fmt[] = "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s"
				  "Connection: close\r\n\r\n";
	int n = snprintf(NULL, 0, fmt, status, reason, type, blen, extra ? extra : "");
	size_t len = n + (head ? 0 : blen);

	c->resp = malloc(len + 1);
	if (!c->resp)
		return -ENOMEM;
	snprintf(c->resp, n + 1, fmt, status, reason, type, blen, extra ? extra : "");
	if (!head)
		memcpy(c->resp + n, body, blen);
	c->resp_len = len;
	return 0;
}

/* A 400 saying why, and so that no client waits for its deadline on a request that cannot be. */
static int respond_400(struct client *c)
{
	char body[128];
	int n = snprintf(body, sizeof(body), "bad request: %s\n", c->bad);

	return respond(c, 400, "Bad Request", TEXT_PLAIN, NULL, body, n, 0);
}

/* RFC 9110's tchar: what a method or a header name is made of. */
static int is_tchar(unsigned char ch)
{
	return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
	       (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

static size_t token_len(const char *p, const char *end)
{
	const char *s = p;

	while (p < end && is_tchar(*p))
		p++;
	return p - s;
}

/* "METHOD SP TARGET SP HTTP/1.x" (end: before its CRLF): NULL, or why it is not one. */
static const char *check_request_line(const char *p, const char *end)
{
	size_t n = token_len(p, end);

	if (!n)
		return "no method";
	p += n;
	if (p == end || *p++ != ' ')
		return "a method that is not a token, or no request target";
	for (n = 0; p<end && * p> ' ' && *p < 0x7f; p++)
		n++;
	if (!n || p == end || *p++ != ' ')
		return "a request target of other than visible characters, or no version";
	if (end - p != 8 || memcmp(p, "HTTP/1.", 7) || p[7] < '0' || p[7] > '9')
		return "not HTTP/1.x";
	return NULL;
}

/* "name: value" (controls were refused byte by byte): NULL, or why it is not one. */
static const char *check_header(const char *p, const char *end)
{
	size_t n = token_len(p, end);

	if (!n && (*p == ' ' || *p == '\t'))
		return "a folded header line";
	if (!n || p + n == end || p[n] != ':')
		return "a header line that is not name: value";
	return NULL;
}

/*
 * Check the bytes that came since the last look: 1 once the head is complete (an empty line),
 * 0 to wait for more, -EINVAL with c->bad set as soon as it cannot be a request (a NUL or
 * control byte, a CR without LF, a line over HTTPD_MAX_LINE, a malformed request line or
 * header). A bare LF ends a line too (RFC 9112 2.2 lets a server take it).
 */
static int client_check(struct client *c)
{
	const char *r = c->req;
	size_t i, end;

	for (; c->checked < c->rlen; c->checked++) {
		i = c->checked;
		if (i > c->line && r[i - 1] == '\r' && r[i] != '\n')
			c->bad = "a CR not followed by LF";
		else if (r[i] == '\n') {
			end = i > c->line && r[i - 1] == '\r' ? i - 1 : i;
			if (end == c->line)
				return c->lines ? 1 : (c->bad = "no request line", -EINVAL);
			c->bad = c->lines ? check_header(r + c->line, r + end)
					  : check_request_line(r + c->line, r + end);
			c->lines++;
			c->line = i + 1;
		} else if (((unsigned char)r[i] < 0x20 && r[i] != '\t' && r[i] != '\r') ||
			   r[i] == 0x7f) {
			c->bad = "a NUL or control byte";
		} else if (i - c->line >= HTTPD_MAX_LINE) {
			c->bad = "a line longer than " STR(HTTPD_MAX_LINE) " bytes";
		}
		if (c->bad)
			return -EINVAL;
	}
	return 0;
}

/* Answer a complete, well-formed request head: GET or HEAD of the path, with or without a query. */
static int answer(struct httpd *h, struct client *c)
{
	const char *method = c->req, *target = strchr(method, ' ') + 1;
	size_t mlen = target - 1 - method, tlen = strcspn(target, " ?");
	char *body = NULL, nf[128];
	ssize_t n;
	int head, ret;

	head = mlen == 4 && !memcmp(method, "HEAD", 4);
	if (!head && !(mlen == 3 && !memcmp(method, "GET", 3)))
		return respond(c, 405, "Method Not Allowed", TEXT_PLAIN, "Allow: GET, HEAD\r\n",
			       body_405, sizeof(body_405) - 1, 0);
	if (tlen != strlen(h->path) || memcmp(target, h->path, tlen)) {
		n = snprintf(nf, sizeof(nf), "not found: the %s are at %s\n", h->name, h->path);
		return respond(c, 404, "Not Found", TEXT_PLAIN, NULL, nf, n, head);
	}
	n = h->render(h->ctx, &body);
	if (n < 0)
		return n;
	ret = respond(c, 200, "OK", h->content_type, NULL, body, n, head);
	free(body);
	return ret;
}

/* Send what the socket takes; 1 once all is sent, 0 to go on, negative on an error. */
static int client_send(struct client *c)
{
	ssize_t n;

	while (c->resp_off < c->resp_len) {
		n = send(c->fd, c->resp + c->resp_off, c->resp_len - c->resp_off,
			 MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -errno;
		c->resp_off += n;
	}
	return 1;
}

/*
 * Read what came; 1 once the request head is complete, 0 to wait, -EINVAL for a malformed
 * one, -E2BIG for one too large, another negative errno to give up.
 */
static int client_read(struct client *c)
{
	size_t room = sizeof(c->req) - 1 - c->rlen;
	ssize_t n;
	int ret;

	if (!room)
		return -E2BIG;
	n = recv(c->fd, c->req + c->rlen, room, MSG_DONTWAIT);
	if (n < 0)
		return errno == EAGAIN || errno == EINTR ? 0 : -errno;
	if (n == 0)
		return -ECONNRESET; /* closed before the request was complete */
	c->rlen += n;
	c->req[c->rlen] = 0;
	ret = client_check(c);
	if (ret)
		return ret;
	return c->rlen == sizeof(c->req) - 1 ? -E2BIG : 0;
}

static void client_event(struct httpd *h, int i)
{
	struct client *c = h->clients[i];
	struct epoll_event ev = {.events = EPOLLOUT, .data.u64 = TAG_CLIENT + i};
	int ret;

	if (!c)
		return;
	if (!c->resp) {
		ret = client_read(c);
		if (ret == -E2BIG)
			ret = respond(c, 431, "Request Header Fields Too Large", TEXT_PLAIN, NULL,
				      body_431, sizeof(body_431) - 1, 0);
		else if (ret == -EINVAL)
			ret = respond_400(c);
		else if (ret == 1)
			ret = answer(h, c);
		if (ret < 0)
			goto close;
		if (!c->resp)
			return;
		shutdown(c->fd, SHUT_RD);
		epoll_ctl(h->epfd, EPOLL_CTL_MOD, c->fd, &ev);
	}
	ret = client_send(c);
	if (ret == 0)
		return;
	if (ret == 1)
		shutdown(c->fd, SHUT_WR);
close:
	client_close(h, i);
}

static void expire_clients(struct httpd *h)
{
	uint64_t now = now_ms();
	int i;

	for (i = 0; i < h->max_clients; i++)
		if (h->clients[i] && h->clients[i]->deadline_ms <= now)
			client_close(h, i);
}

int httpd__serve(struct httpd *h)
{
	struct epoll_event ev[16];
	uint64_t ticks;
	int i, n;

	n = epoll_wait(h->epfd, ev, 16, 0);
	if (n < 0)
		return errno == EINTR ? 0 : -errno;
	for (i = 0; i < n; i++) {
		if (ev[i].data.u64 == TAG_LISTEN)
			accept_clients(h);
		else if (ev[i].data.u64 == TAG_TIMER)
			(void)!read(h->tfd, &ticks, sizeof(ticks));
		else
			client_event(h, ev[i].data.u64 - TAG_CLIENT);
	}
	expire_clients(h);
	arm_timer(h);
	return 0;
}

void httpd__free(struct httpd *h)
{
	int i;

	if (!h)
		return;
	for (i = 0; h->clients && i < h->max_clients; i++)
		client_close(h, i);
	free(h->clients);
	if (h->lfd >= 0)
		close(h->lfd);
	if (h->tfd >= 0)
		close(h->tfd);
	if (h->epfd >= 0)
		close(h->epfd);
	free(h);
}
