/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * A small HTTP/1.1 server for one path (the metrics endpoint): GET or HEAD of it is answered
 * with what the render callback makes, anything else 404 or 405. Nothing here blocks: the
 * caller polls httpd__fd for readability (its own loop, or an outer epoll) and calls
 * httpd__serve. A request is checked byte by byte as it comes: one that cannot be a request (a
 * NUL or control byte, a bare CR, a line over HTTPD_MAX_LINE, a malformed request line or
 * header) is answered 400 at once, not left to its deadline; every connection is closed after
 * its answer, or at its deadline.
 */
#ifndef __HTTPD_H
#define __HTTPD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct httpd;

#define HTTPD_DEFAULT_TIMEOUT_MS 5000 /* a client's whole request and response */
#define HTTPD_DEFAULT_CLIENTS 8	      /* connections at once; more are closed at once */
#define HTTPD_MAX_REQUEST 8192	      /* request line and headers */
#define HTTPD_MAX_LINE 4096	      /* one of them: a request with a longer one is answered 400 */

/* The body for the path: a malloc'ed text in *out, its length returned; negative errno. */
typedef ssize_t (*httpd_render_fn)(void *ctx, char **out);

struct httpd_opts {
	const char *name;	  /* what is served, in messages: "metrics" */
	const char *path;	  /* "/metrics" */
	const char *content_type; /* of the rendered body */
	httpd_render_fn render;
	void *ctx;
	const char *listen; /* "ADDR:PORT": IPv4 or [IPv6]; port 0: any free port */
	int allow_remote;   /* 0: only a loopback address is accepted */
	int timeout_ms;	    /* 0: HTTPD_DEFAULT_TIMEOUT_MS */
	int max_clients;    /* 0: HTTPD_DEFAULT_CLIENTS */
};

/*
 * An address a user gave (option name: as the user spells it): ADDR:PORT with IPv4, [IPv6]
 * or localhost, a port 1..65535, and loopback. 0, or -EINVAL with "NAME: 'SPEC' is not ..."
 * in why.
 */
int httpd__check_listen(const char *name, const char *spec, char *why, size_t whylen);

/*
 * Parse the address, bind and listen (non-blocking). NULL with errno set and a one-line reason
 * in err: a malformed address (-EINVAL), a non-loopback one not allowed, a bind failure.
 */
struct httpd *httpd__new(const struct httpd_opts *o, char *err, size_t errlen);
void httpd__free(struct httpd *h); /* closes every connection; accepts NULL */

/* The port listened on (the chosen one for port 0). */
int httpd__port(const struct httpd *h);

/* Readable when a connection waits, a client sent data or can take more, or a client expires. */
int httpd__fd(const struct httpd *h);

/* Do what is ready now, without waiting: accept, read, answer, expire; 0 or a negative errno. */
int httpd__serve(struct httpd *h);

#endif /* __HTTPD_H */
