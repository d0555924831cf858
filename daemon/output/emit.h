/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Event lines of schema nanwatch/1: the common fields, sequence numbers and time stamps. */
#ifndef __EMIT_H
#define __EMIT_H

#include <stdint.h>
#include "output/json.h"

#define NW_SCHEMA "nanwatch/1"

struct sinks;
struct target;

struct emitter {
	struct sinks *sinks;
	const struct target *t;
	struct json j;
	uint64_t seq;
	int64_t mono_to_real; /* realtime - monotonic, ns: BPF stamps are monotonic */
	int failed;	      /* a sink broke: the watch ends (the others still get lines) */
	char host[256];
	char step_variable[32]; /* the loop counter steps of source loop_variable come from */
};

int emit__init(struct emitter *e, struct sinks *s, const struct target *t);
void emit__free(struct emitter *e);

/* Start an event line with the common fields; mono_ns 0 means now. */
struct json *emit__begin(struct emitter *e, const char *event, uint64_t mono_ns);
/* Close and write the line to every working sink; 0 or a negative errno (-EPIPE: a sink broke). */
int emit__end(struct emitter *e);

/* RFC 3339 UTC with nanoseconds: 2026-11-29T14:40:00.123456789Z */
void emit__format_time(int64_t real_ns, char *buf, size_t len);

/* CLOCK_REALTIME ns of an event's CLOCK_MONOTONIC time (0: now), as its line's "time" says. */
int64_t emit__real_time(const struct emitter *e, uint64_t mono_ns);

#endif /* __EMIT_H */
