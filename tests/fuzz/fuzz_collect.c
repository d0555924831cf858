// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * libFuzzer target: nanwatch-collect's model (tools/collect/collect.c) on lines of event
 * streams, with small limits so that eviction and dropped ranks are reached, and its reports
 * (text and JSON, all jobs and changed ones) written out.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include "collect.h"

static FILE *devnull;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	devnull = fopen("/dev/null", "w");
	return devnull ? 0 : -1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = (const char *)data, *end = p + size, *nl;
	struct collect *c = collect__new(3, 3);
	char err[160];
	int i = 0;

	if (!c)
		return 0;
	while (p < end) {
		nl = memchr(p, '\n', end - p);
		if (!nl)
			nl = end;
		collect__line(c, p, nl - p, err, sizeof(err));
		/* now and then a --follow report in between */
		if (++i % 4 == 0)
			collect__report(c, devnull, i & 8, 1);
		p = nl + 1;
	}
	collect__report(c, devnull, 0, 0);
	collect__report(c, devnull, 1, 0);
	collect__free(c);
	return 0;
}
