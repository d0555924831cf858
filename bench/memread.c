// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * memread: the plain memory read rate of this machine, the yardstick for nanwatchd's BPF scan
 * rate in bench/bench.py. Allocates a buffer, touches it, then reads it whole, again and again,
 * summing 64-bit words, and prints one JSON line with the median rate over the passes.
 *
 *   memread [MIB [SECONDS]]     (defaults: 64 MiB, 1 s)
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_PASSES 4096

/* The sum goes here so the compiler cannot drop the reads. */
static volatile uint64_t sink;

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static uint64_t read_words(const uint64_t *buf, size_t words)
{
	uint64_t sum = 0;
	size_t i;

	for (i = 0; i < words; i++)
		sum += buf[i];
	return sum;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static int parse_args(int argc, char **argv, size_t *bytes, double *seconds)
{
	long mib = 64;
	double secs = 1.0;
	char *end;

	if (argc > 3)
		return -EINVAL;
	if (argc > 1) {
		mib = strtol(argv[1], &end, 10);
		if (*end || mib < 1 || mib > 65536)
			return -EINVAL;
	}
	if (argc > 2) {
		secs = strtod(argv[2], &end);
		if (*end || secs <= 0 || secs > 600)
			return -EINVAL;
	}
	*bytes = (size_t)mib << 20;
	*seconds = secs;
	return 0;
}

int main(int argc, char **argv)
{
	static double rates[MAX_PASSES];
	double seconds, start, t0, t1, total = 0;
	uint64_t *buf = NULL;
	size_t bytes, words;
	int passes = 0, ret = 1;

	if (parse_args(argc, argv, &bytes, &seconds)) {
		fprintf(stderr, "usage: memread [MIB [SECONDS]]\n");
		return 2;
	}
	words = bytes / sizeof(*buf);
	buf = aligned_alloc(4096, bytes);
	if (!buf) {
		fprintf(stderr, "memread: failed to allocate %zu bytes: %s\n", bytes,
			strerror(errno));
		goto cleanup;
	}
	/* touch every page with non-zero data: no zero-page or lazy-allocation effects */
	memset(buf, 0x5a, bytes);
	sink = read_words(buf, words); /* warm-up pass, not counted */
	start = now_s();
	while (passes < MAX_PASSES && (passes < 3 || now_s() - start < seconds)) {
		t0 = now_s();
		sink = read_words(buf, words);
		t1 = now_s();
		rates[passes++] = bytes / (t1 - t0);
		total += t1 - t0;
	}
	qsort(rates, passes, sizeof(rates[0]), cmp_double);
	printf("{\"buffer_bytes\":%zu,\"passes\":%d,\"seconds\":%.6f,\"bytes_per_s\":%.0f,"
	       "\"mean_bytes_per_s\":%.0f,\"min_bytes_per_s\":%.0f,\"max_bytes_per_s\":%.0f}\n",
	       bytes, passes, total, rates[passes / 2], bytes * (double)passes / total, rates[0],
	       rates[passes - 1]);
	ret = 0;
cleanup:
	free(buf);
	return ret;
}
