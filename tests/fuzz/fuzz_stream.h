/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Fuzz targets that write events: the stream goes to stdout, and stdout goes nowhere. */
#ifndef __FUZZ_STREAM_H
#define __FUZZ_STREAM_H

#include <fcntl.h>
#include <unistd.h>
#include "output/emit.h"
#include "output/sink.h"

/* e writes the target t's events to stdout, which is /dev/null. 0, or -1. */
static inline int fuzz_stream_init(struct emitter *e, struct target *t)
{
	char err[256];
	struct sinks *s;
	int fd;

	fd = open("/dev/null", O_WRONLY);
	if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0)
		return -1;
	close(fd);
	s = sinks__new(SINK_DEFAULT_QUEUE);
	if (!s || sinks__add(s, "-", err, sizeof(err)) || emit__init(e, s, t))
		return -1;
	return 0;
}

#endif /* __FUZZ_STREAM_H */
