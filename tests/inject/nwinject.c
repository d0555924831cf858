// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The daemon's injection (daemon/inject/inject.c) on its own, for the tests: load LIB into
 * any process, Python with torch or not. Exit 0, or 1 with the daemon's one-line reason.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "inject/inject.h"

int main(int argc, char **argv)
{
	char err[1024] = "";
	int verbose = argc == 4 && !strcmp(argv[3], "-v");

	if (argc < 3 || argc > 4 || (argc == 4 && !verbose)) {
		fprintf(stderr, "usage: nwinject PID LIB [-v]\n");
		return 2;
	}
	if (inject__load(atoi(argv[1]), argv[2], verbose, err, sizeof(err))) {
		fprintf(stderr, "nwinject: %s\n", err);
		return 1;
	}
	return 0;
}
