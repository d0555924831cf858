// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * nanwatch-tail: read nanwatchd's NDJSON stream on stdin and print one line
 * per event for a person. `nanwatchd --pid N | nanwatch-tail`
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "linesplit.h"
#include "tailfmt.h"

static const char usage[] =
	"Usage: nanwatch-tail [--no-color] [--help]\n"
	"Read nanwatchd's JSON event stream on stdin and print it readably.\n"
	"  -n, --no-color  no ANSI colours (also when NO_COLOR is set or stdout\n"
	"                  is not a terminal)\n"
	"  -h, --help      this text\n"
	"Lines that are not events are printed unchanged; a line longer than 1 MiB\n"
	"(no event is) is skipped, with a notice on stderr.\n";

/* Returns -1 to go on, or the exit status. */
static int parse_args(int argc, char **argv, struct tailfmt *t)
{
	static const struct option opts[] = {
		{"no-color", no_argument, NULL, 'n'},
		{"help", no_argument, NULL, 'h'},
		{},
	};
	int c;

	t->color = isatty(STDOUT_FILENO) && !getenv("NO_COLOR");
	while ((c = getopt_long(argc, argv, "nh", opts, NULL)) != -1) {
		switch (c) {
		case 'n':
			t->color = 0;
			break;
		case 'h':
			fputs(usage, stdout);
			return 0;
		default:
			fputs(usage, stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "nanwatch-tail: unexpected argument '%s'\n%s", argv[optind], usage);
		return 2;
	}
	return -1;
}

struct run {
	const struct tailfmt *t;
	const struct linesplit *ls;
};

/* One line; a line too long (NULL) is named on stderr, the output goes on. */
static int on_line(void *ctx, const char *line, size_t len)
{
	struct run *r = ctx;

	if (!line) {
		fprintf(stderr,
			"nanwatch-tail: line %lu skipped: longer than %u MiB, not an event (%llu "
			"such line%s so far)\n",
			r->ls->lineno, LINESPLIT_MAX >> 20, r->ls->skipped,
			r->ls->skipped == 1 ? "" : "s");
		return 0;
	}
	/* flush per event: the point is to watch it live through a pipe */
	if (tailfmt__line(r->t, line, len, stdout) || fflush(stdout)) {
		fprintf(stderr, "nanwatch-tail: failed to write output: %s\n", strerror(errno));
		return -EIO;
	}
	return 0;
}

/* stdin to its end, a line at a time; what one line may cost is bounded (linesplit.h). */
static int run(const struct tailfmt *t)
{
	struct linesplit ls;
	struct run r = {.t = t, .ls = &ls};
	size_t room;
	ssize_t n;
	char *p;
	int err = 0;

	if (linesplit__init(&ls, LINESPLIT_MAX)) {
		fprintf(stderr, "nanwatch-tail: failed to allocate: %s\n", strerror(ENOMEM));
		return 1;
	}
	do {
		p = linesplit__space(&ls, &room);
		n = read(STDIN_FILENO, p, room);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			fprintf(stderr, "nanwatch-tail: failed to read stdin: %s\n",
				strerror(errno));
			break;
		}
		err = linesplit__feed(&ls, n, n == 0, on_line, &r);
	} while (!err && n != 0);
	linesplit__free(&ls);
	return n < 0 || err ? 1 : 0;
}

int main(int argc, char **argv)
{
	struct tailfmt t = {0};
	int ret = parse_args(argc, argv, &t);

	if (ret >= 0)
		return ret;
	return run(&t);
}
