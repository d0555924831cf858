// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Service mode: the config, discovery by /proc scan, and the loop over many sessions. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "service/config.h"
#include "service/service.h"
#include "util/utf8.h"

/* A message quotes the file's text: never raw on a terminal. */
static void say(FILE *f, const char *prefix, const char *msg)
{
	fputs(prefix, f);
	utf8__write_safe(f, msg, strlen(msg));
	fputc('\n', f);
}

int service__check_config(const char *path)
{
	char err[1024] = "", sum[1024];
	struct config *c = config__load(path, err, sizeof(err));

	if (!c) {
		int ret = errno;

		say(stderr, "nanwatchd: ", err[0] ? err : strerror(ret));
		return -ret;
	}
	config__summary(c, sum, sizeof(sum));
	say(stdout, "", sum);
	config__free(c);
	return 0;
}
