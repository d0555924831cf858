// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Common fields of every event line, and writing the line to the sinks. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "output/emit.h"
#include "output/sink.h"
#include "resolve/target.h"

static int64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int emit__init(struct emitter *e, struct sinks *s, const struct target *t)
{
	memset(e, 0, sizeof(*e));
	e->sinks = s;
	e->t = t;
	e->mono_to_real = clock_ns(CLOCK_REALTIME) - clock_ns(CLOCK_MONOTONIC);
	if (gethostname(e->host, sizeof(e->host) - 1))
		strcpy(e->host, "unknown");
	return json__init(&e->j, 4096);
}

void emit__free(struct emitter *e)
{
	json__free(&e->j);
}

void emit__format_time(int64_t real_ns, char *buf, size_t len)
{
	time_t sec;
	struct tm tm;
	char day[32];

	if (real_ns < 0)
		real_ns = 0; /* before 1970: not a time this program stamps */
	sec = real_ns / 1000000000;
	if (!gmtime_r(&sec, &tm) || !strftime(day, sizeof(day), "%Y-%m-%dT%H:%M:%S", &tm))
		snprintf(day, sizeof(day), "1970-01-01T00:00:00");
	snprintf(buf, len, "%s.%09lldZ", day, (long long)(real_ns % 1000000000));
}

/* A BPF stamp (monotonic ns) as real time; now when the stamp is 0 or cannot be one. */
int64_t emit__real_time(const struct emitter *e, uint64_t mono_ns)
{
	if (!e || !mono_ns || mono_ns > (uint64_t)INT64_MAX ||
	    (e->mono_to_real > 0 && (int64_t)mono_ns > INT64_MAX - e->mono_to_real))
		return clock_ns(CLOCK_REALTIME);
	return (int64_t)mono_ns + e->mono_to_real;
}

struct json *emit__begin(struct emitter *e, const char *event, uint64_t mono_ns)
{
	struct json *j = &e->j;
	char when[48];

	json__reset(j);
	json__object_begin(j, NULL);
	json__string(j, "schema", NW_SCHEMA);
	json__string(j, "event", event);
	emit__format_time(emit__real_time(e, mono_ns), when, sizeof(when));
	json__string(j, "time", when);
	json__uint(j, "seq", e->seq);
	json__string(j, "host", e->host);
	json__int(j, "pid", e->t->pid);
	json__string(j, "comm", e->t->comm);
	if (e->t->rank >= 0)
		json__int(j, "rank", e->t->rank);
	if (e->t->local_rank >= 0)
		json__int(j, "local_rank", e->t->local_rank);
	if (e->t->world_size >= 0)
		json__int(j, "world_size", e->t->world_size);
	if (e->t->job[0])
		json__string(j, "job", e->t->job);
	return j;
}

int emit__end(struct emitter *e)
{
	const char *s;
	int err;

	json__object_end(&e->j);
	s = json__str(&e->j);
	if (!s)
		return e->j.err ? e->j.err : -EINVAL;
	/* every line takes a seq, written or dropped: a reader sees a gap where one is missing */
	err = sinks__write(e->sinks, s, json__len(&e->j));
	e->seq++;
	if (err)
		e->failed = 1;
	return err;
}
