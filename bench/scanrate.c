// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * scanrate: how fast BPF copies user memory on this host, by method and chunk size: the
 * sweep behind nanwatchd's choice of a read method (daemon/attach/readcal.h), printed by
 * make bench. For each method (probe: bpf_probe_read_user; user: bpf_copy_from_user; task:
 * bpf_copy_from_user_task), each chunk size and each state of the memory (new: pages just
 * mapped and written, as a new tensor's; warm: pages the kernel copied before), the median
 * rate of several copies of a buffer, one JSON line each, from 4 KiB chunks up to the watch's
 * own (NW_SCAN_CHUNK), then the attach-time choice and that chunk:
 *
 *   scanrate [MIB [TRIES]]     (defaults: 16 MiB, 5)
 *
 * Needs root (BPF). Exit status 0, 1 when the probe cannot load, 2 for bad usage.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <linux/types.h>
#include "nanwatch.h"
#include "attach/readcal.h"
#include "util/optval.h"

#define MAX_TRIES 32

static const char *const method_names[NW_RC_METHODS] = {"probe", "user", "task"};

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* One line of the sweep: the median of tries copies by method, chunk bytes a call. */
static int sweep_one(struct readcal *rc, int m, uint32_t chunk, size_t bytes, int tries, int warm)
{
	double rates[MAX_TRIES];
	int i;

	for (i = 0; i < tries; i++) {
		rates[i] = readcal__rate(rc, m, chunk, bytes, warm);
		if (rates[i] < 0) {
			fprintf(stderr, "scanrate: failed to copy by %s: %s\n", method_names[m],
				strerror((int)-rates[i]));
			return -1;
		}
	}
	qsort(rates, tries, sizeof(rates[0]), cmp_double);
	printf("{\"method\":\"%s\",\"offered\":true,\"memory\":\"%s\",\"chunk\":%u,"
	       "\"bytes\":%zu,\"tries\":%d,\"gbps\":%.3f,\"min_gbps\":%.3f,\"max_gbps\":%.3f}\n",
	       method_names[m], warm ? "warm" : "new", chunk, bytes, tries, rates[tries / 2],
	       rates[0], rates[tries - 1]);
	return 0;
}

static int sweep(struct readcal *rc, size_t bytes, int tries)
{
	size_t c;
	int m, warm;

	for (m = 0; m < NW_RC_METHODS; m++) {
		if (m != NW_RC_PROBE && !readcal__sleepable(rc)) {
			printf("{\"method\":\"%s\",\"offered\":false}\n", method_names[m]);
			continue;
		}
		/* 4 KiB up to the watch's chunk, what its scratch holds */
		for (warm = 0; warm < 2; warm++)
			for (c = 4096; c <= NW_SCAN_CHUNK && c <= NW_RC_MAX_CHUNK; c *= 2)
				if (sweep_one(rc, m, (uint32_t)c, bytes, tries, warm))
					return -1;
	}
	return 0;
}

static int parse_args(int argc, char **argv, long *mib, long *tries)
{
	char *end;

	if (argc > 3)
		return -EINVAL;
	if (argc > 1) {
		*mib = strtol(argv[1], &end, 10);
		if (*end || *mib < 1 || *mib > 4096)
			return -EINVAL;
	}
	if (argc > 2) {
		*tries = strtol(argv[2], &end, 10);
		if (*end || *tries < 1 || *tries > MAX_TRIES)
			return -EINVAL;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct readcal_choice ch;
	struct readcal *rc;
	long mib = 16, tries = 5;
	char err[256];
	int ret;

	if (parse_args(argc, argv, &mib, &tries)) {
		fprintf(stderr, "usage: scanrate [MIB [TRIES]]   (MIB 1..4096, TRIES 1..%d)\n",
			MAX_TRIES);
		return 2;
	}
	rc = readcal__open(err, sizeof(err));
	if (!rc) {
		fprintf(stderr, "scanrate: %s\n", err);
		return 1;
	}
	ret = sweep(rc, (size_t)mib << 20, (int)tries);
	readcal__close(rc);
	if (ret)
		return 1;
	readcal__choose(&ch);
	printf("{\"choice\":\"%s\",\"task_ns_per_page\":%llu,\"scan_chunk\":%d,\"why\":\"%s\"}\n",
	       optval__read_method_name(ch.method), (unsigned long long)ch.task_ns_per_page,
	       NW_SCAN_CHUNK, ch.why);
	return 0;
}
