/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Where event lines go: stdout, files, collectors' unix sockets, several at
 * once. No sink can stall the daemon: writes never block, a sink whose reader
 * is slow holds back a bounded queue of whole lines and drops (and counts)
 * the lines that do not fit. A stdout whose writes fail (a closed pipe) is
 * broken for good: one line on stderr, nothing more is written to it, and the
 * others carry on. A collector that goes away breaks nothing: its sink queues
 * lines (dropping the newest when full) and connects again from sinks__flush,
 * 100 ms after, then twice as long each time up to 5 s, never waiting. A file
 * whose writes fail (a full disk) is broken until it takes a line again: one
 * line on stderr when it breaks, one when it works again; meanwhile it queues
 * as a collector away does, its first line is written again on the same
 * schedule, and at once after sinks__reopen (SIGHUP).
 */
#ifndef __SINK_H
#define __SINK_H

#include <stddef.h>
#include <stdint.h>

#define SINKS_MAX 8
#define SINK_DEFAULT_QUEUE (1024 * 1024)

struct json;
struct sinks;

struct sinks *sinks__new(size_t queue_bytes);
void sinks__free(struct sinks *ss); /* accepts NULL */

/*
 * Add a sink. spec: "-" (stdout), "unix:PATH" (connect to a listening stream
 * socket) or a file path (appended, created 0640; no symlink anywhere in the
 * path, a regular file with one link). 0 or a negative errno, message in err.
 */
int sinks__add(struct sinks *ss, const char *spec, char *err, size_t errlen);

/*
 * One line (a newline is added) to every working sink; -EPIPE once any sink broke (a file
 * that works again included).
 */
int sinks__write(struct sinks *ss, const char *line, size_t len);

/*
 * Hand queued lines to the sinks that take them now, connecting again to
 * collectors gone whose next try is due; -EPIPE once any sink is broken.
 */
int sinks__flush(struct sinks *ss);

/* Bytes queued over all working sinks whose reader is there. */
size_t sinks__pending(const struct sinks *ss);

/* Flush, waiting for readers at most timeout_ms; what is still queued then is left. */
void sinks__drain(struct sinks *ss, int timeout_ms);

/*
 * Reopen file sinks at their paths (after a log rotation), a broken one included, which is
 * tried again at once; others are left alone.
 */
void sinks__reopen(struct sinks *ss);

/* Whether a sink broke since it was added (one that works again included). */
int sinks__failed(const struct sinks *ss);
int sinks__count(const struct sinks *ss);
const char *sinks__name(const struct sinks *ss, int i);

/* Lines sink i dropped since it was added. */
uint64_t sinks__dropped(const struct sinks *ss, int i);

/*
 * Lines sink i dropped since the last call; 0 while its collector is away or
 * its file fails: what it dropped meanwhile is taken once it takes lines again.
 */
uint64_t sinks__take_dropped(struct sinks *ss, int i);

/* "sinks": [{name, written, dropped, error, and for a socket connected, reconnects}]. */
void sinks__json(const struct sinks *ss, struct json *j);

#endif /* __SINK_H */
