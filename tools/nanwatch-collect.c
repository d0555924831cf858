// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * nanwatch-collect: read nanwatchd event streams (files or stdin, one node or many) and name,
 * per job, the rank, step and layer where it first went non-finite, telling it from the ranks
 * that received the value through the gradient all-reduce.
 *
 *   nanwatch-collect [--json] [--follow] [FILE...]
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "collect.h"
#include "linesplit.h"

#define VERSION "0.1.0"
#define FOLLOW_NS 250000000 /* how often --follow looks for more */

static const char usage[] =
	"Usage: nanwatch-collect [--json] [--follow] [FILE...]\n"
	"Read nanwatchd event streams (nanwatch/1 lines; '-' or none: stdin) and name per job\n"
	"the rank, step, iteration, layer and cause where it first went non-finite.\n"
	"  -j, --json         one JSON object per job, earliest origin first\n"
	"  -f, --follow       keep reading the files as they grow (and after a rotation);\n"
	"                     print a job's verdict when it has one and again when it changes\n"
	"      --max-jobs N   jobs held at once (default 1024; the stalest goes first)\n"
	"      --max-ranks N  ranks held per job (default 16384)\n"
	"  -h, --help         this text\n"
	"  -V, --version      print the version\n"
	"Lines that are not nanwatch/1 events are counted and reported once on stderr.\n";

struct opts {
	int json, follow;
	size_t max_jobs, max_ranks;
	char **files;
	int nfiles;
};

struct src {
	const char *name; /* as given; "-" for stdin */
	int fd;
	dev_t dev;
	ino_t ino;
	off_t pos;
	struct linesplit ls; /* lines of at most LINESPLIT_MAX bytes */
	int done;	     /* stdin at its end */
};

struct bad {
	unsigned long long lines;
	char first[512];
};

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

static int size_arg(const char *s, size_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || !*s || *s == '-' || !v)
		return -EINVAL;
	*out = v;
	return 0;
}

/* Returns -1 to go on, or the exit status. */
static int parse_args(int argc, char **argv, struct opts *o)
{
	static const struct option opts[] = {
		{"json", no_argument, NULL, 'j'},
		{"follow", no_argument, NULL, 'f'},
		{"max-jobs", required_argument, NULL, 1},
		{"max-ranks", required_argument, NULL, 2},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{},
	};
	int c;

	o->max_jobs = 1024;
	o->max_ranks = 16384;
	while ((c = getopt_long(argc, argv, "jfhV", opts, NULL)) != -1) {
		switch (c) {
		case 'j':
			o->json = 1;
			break;
		case 'f':
			o->follow = 1;
			break;
		case 1:
		case 2:
			if (size_arg(optarg, c == 1 ? &o->max_jobs : &o->max_ranks)) {
				fprintf(stderr,
					"nanwatch-collect: --%s takes a positive number, not "
					"'%s'\n",
					c == 1 ? "max-jobs" : "max-ranks", optarg);
				return 2;
			}
			break;
		case 'h':
			fputs(usage, stdout);
			return 0;
		case 'V':
			printf("nanwatch-collect %s (schema nanwatch/1)\n", VERSION);
			return 0;
		default:
			fputs(usage, stderr);
			return 2;
		}
	}
	o->files = argv + optind;
	o->nfiles = argc - optind;
	return -1;
}

static int src__open(struct src *s)
{
	struct stat st;

	if (!strcmp(s->name, "-")) {
		s->fd = STDIN_FILENO;
		return 0;
	}
	s->fd = open(s->name, O_RDONLY | O_CLOEXEC);
	if (s->fd < 0)
		return -errno;
	if (!fstat(s->fd, &st)) {
		s->dev = st.st_dev;
		s->ino = st.st_ino;
	}
	s->pos = 0;
	return 0;
}

/* lineno: the bad line's number, from 1 */
static void bad_line(struct bad *b, const struct src *s, unsigned long lineno, const char *why)
{
	if (!b->lines++)
		snprintf(b->first, sizeof(b->first), "%s:%lu: %s",
			 strcmp(s->name, "-") ? s->name : "<stdin>", lineno, why);
}

struct pump {
	struct src *s;
	struct collect *c;
	struct bad *b;
};

/* One line of s (NULL: one too long to be an event, skipped to its newline). */
static int src__line(void *ctx, const char *line, size_t n)
{
	struct pump *p = ctx;
	char why[160];

	if (!line) {
		bad_line(p->b, p->s, p->s->ls.lineno, "line longer than 1 MiB");
		return 0;
	}
	if (n && line[n - 1] == '\r')
		n--;
	if (!n)
		return 0; /* blank lines: nothing, not an error */
	if (collect__line(p->c, line, n, why, sizeof(why)))
		bad_line(p->b, p->s, p->s->ls.lineno, why);
	return 0;
}

/* Whether stdin has something to read now (--follow must not block in read on it). */
static int ready(int fd)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};

	return poll(&p, 1, 0) > 0;
}

/* Read what is there; 1 when something was read, 0 at the end for now, negative errno. */
static int src__pump(struct src *s, struct collect *c, struct bad *b, int follow)
{
	int live = follow && s->fd == STDIN_FILENO, eof = 0, any = 0;
	struct pump p = {s, c, b};
	size_t room;
	ssize_t n;
	char *to;

	while (!eof && (!live || ready(s->fd))) {
		to = linesplit__space(&s->ls, &room);
		n = read(s->fd, to, room);
		if (n < 0 && errno == EINTR) {
			if (stop)
				return any;
			continue;
		}
		if (n < 0)
			return -errno;
		eof = n == 0;
		any |= n > 0;
		s->pos += n;
		linesplit__feed(&s->ls, n, 0, src__line, &p);
	}
	/* a file being written may end mid-line: wait for the rest when following */
	if (eof && (!follow || s->fd == STDIN_FILENO))
		linesplit__feed(&s->ls, 0, 1, src__line, &p);
	if (eof && s->fd == STDIN_FILENO)
		s->done = 1;
	return any;
}

/* --follow: a file truncated in place is read again from its start; one renamed away
 * (logrotate) is read to its end, then the new file at the path is opened. */
static void src__reopen_if_moved(struct src *s)
{
	struct stat st, now;

	if (s->fd == STDIN_FILENO || fstat(s->fd, &st))
		return;
	if (st.st_size < s->pos) {
		lseek(s->fd, 0, SEEK_SET);
		s->pos = 0;
		linesplit__reset(&s->ls);
		return;
	}
	if (stat(s->name, &now) || (now.st_dev == s->dev && now.st_ino == s->ino))
		return;
	close(s->fd);
	linesplit__reset(&s->ls);
	if (src__open(s))
		s->fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

static int report(struct collect *c, const struct opts *o, int changed)
{
	int n = collect__report(c, stdout, o->json, changed);

	if (n < 0 || fflush(stdout)) {
		fprintf(stderr, "nanwatch-collect: failed to write output: %s\n",
			strerror(n < 0 ? -n : errno));
		return -EIO;
	}
	return 0;
}

static int follow(struct src *srcs, int n, struct collect *c, struct bad *b, const struct opts *o)
{
	struct timespec ts = {0, FOLLOW_NS};
	int i, any, open_inputs;

	while (!stop) {
		any = 0;
		open_inputs = 0;
		for (i = 0; i < n; i++) {
			if (srcs[i].done)
				continue;
			open_inputs++;
			if (src__pump(&srcs[i], c, b, 1) > 0)
				any = 1;
			else
				src__reopen_if_moved(&srcs[i]);
		}
		if (any && report(c, o, 1))
			return 1;
		if (!open_inputs)
			break;
		if (!any)
			nanosleep(&ts, NULL);
	}
	return 0;
}

static void summary(const struct collect *c, const struct bad *b)
{
	struct collect_counts n;

	collect__counts(c, &n);
	if (b->lines)
		fprintf(stderr,
			"nanwatch-collect: %llu line%s skipped (not nanwatch/1 events); the "
			"first: %s\n",
			b->lines, b->lines == 1 ? "" : "s", b->first);
	if (n.evicted_jobs)
		fprintf(stderr,
			"nanwatch-collect: %llu jobs forgotten to hold at most --max-jobs\n",
			(unsigned long long)n.evicted_jobs);
	if (n.dropped_events)
		fprintf(stderr,
			"nanwatch-collect: %llu events of ranks beyond --max-ranks ignored\n",
			(unsigned long long)n.dropped_events);
}

static int run(const struct opts *o, struct src *srcs, int n, struct collect *c)
{
	struct bad b = {0};
	int i, err, status = 0;

	for (i = 0; i < n; i++) {
		srcs[i].name = o->nfiles ? o->files[i] : "-";
		if (linesplit__init(&srcs[i].ls, LINESPLIT_MAX))
			return 1;
		err = src__open(&srcs[i]);
		if (err) {
			fprintf(stderr, "nanwatch-collect: failed to open %s: %s\n", srcs[i].name,
				strerror(-err));
			srcs[i].done = 1;
			status = 1;
			continue;
		}
		err = src__pump(&srcs[i], c, &b, o->follow);
		if (err < 0) {
			fprintf(stderr, "nanwatch-collect: failed to read %s: %s\n", srcs[i].name,
				strerror(-err));
			status = 1;
		}
		if (!o->follow)
			srcs[i].done = 1;
	}
	if (report(c, o, o->follow))
		status = 1;
	else if (o->follow && follow(srcs, n, c, &b, o))
		status = 1;
	summary(c, &b);
	return status;
}

int main(int argc, char **argv)
{
	struct sigaction sa = {.sa_handler = on_signal};
	struct opts o = {0};
	struct collect *c;
	struct src *srcs;
	int ret = parse_args(argc, argv, &o), n, i;

	if (ret >= 0)
		return ret;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	n = o.nfiles ? o.nfiles : 1;
	c = collect__new(o.max_jobs, o.max_ranks);
	srcs = calloc(n, sizeof(*srcs));
	if (!c || !srcs) {
		fprintf(stderr, "nanwatch-collect: failed to allocate: %s\n", strerror(ENOMEM));
		ret = 1;
	} else {
		ret = run(&o, srcs, n, c);
	}
	for (i = 0; srcs && i < n; i++) {
		if (srcs[i].fd > STDIN_FILENO)
			close(srcs[i].fd);
		linesplit__free(&srcs[i].ls);
	}
	free(srcs);
	collect__free(c);
	return ret;
}
