// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * libFuzzer target: the JSON reader (tools/tail/jsonread.c, jv__parse) and its two consumers, the
 * writer round trip (what it parsed, written back, parses again to the same text) and
 * nanwatch-tail's formatter (tools/tail/tailfmt.c), which reads lines that come partly from the
 * target.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "jsonread.h"
#include "tailfmt.h"

static FILE *devnull;

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	devnull = fopen("/dev/null", "w");
	return devnull ? 0 : -1;
}

/* v written as compact JSON into j; its text, or NULL. */
static const char *written(struct json *j, const struct jv *v)
{
	if (json__init(j, 256))
		abort();
	jv__write(j, NULL, v);
	return json__str(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tailfmt t = {.color = size & 1};
	struct json j1, j2;
	const char *s1, *s2;
	struct jv *v, *again;
	char err[128];

	tailfmt__line(&t, (const char *)data, size, devnull);
	v = jv__parse((const char *)data, size, err, sizeof(err));
	if (!v)
		return 0;
	s1 = written(&j1, v);
	/* nesting the writer allows less deeply than the reader is the one way to fail */
	if (s1) {
		again = jv__parse(s1, strlen(s1), err, sizeof(err));
		if (!again)
			abort(); /* we wrote what we cannot read */
		s2 = written(&j2, again);
		if (!s2 || strcmp(s1, s2))
			abort(); /* not a fixed point */
		json__free(&j2);
		jv__free(again);
	}
	json__free(&j1);
	jv__free(v);
	return 0;
}
