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

#include "tailfmt.h"

static const char usage[] =
	"Usage: nanwatch-tail [--no-color] [--help]\n"
	"Read nanwatchd's JSON event stream on stdin and print it readably.\n"
	"  -n, --no-color  no ANSI colours (also when NO_COLOR is set or stdout\n"
	"                  is not a terminal)\n"
	"  -h, --help      this text\n"
	"Lines that are not events are printed unchanged.\n";

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

static int run(const struct tailfmt *t)
{
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	int err = 0;

	while (!err && (n = getline(&line, &cap, stdin)) >= 0) {
		if (n > 0 && line[n - 1] == '\n')
			n--;
		err = tailfmt__line(t, line, n, stdout);
		/* flush per event: the point is to watch it live through a pipe */
		if (!err && fflush(stdout))
			err = -1;
	}
	free(line);
	if (err) {
		fprintf(stderr, "nanwatch-tail: failed to write output: %s\n", strerror(errno));
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct tailfmt t = {0};
	int ret = parse_args(argc, argv, &t);

	if (ret >= 0)
		return ret;
	return run(&t);
}
