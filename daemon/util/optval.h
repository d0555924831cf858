/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The values of the options that nanwatchd's command line (main.c) and the service's config
 * (service/config.c) both take, read here once, so that both accept the same text in the same
 * units and ranges and say the same about a bad one: "NAME: 'TEXT' is not WHAT", NAME as the
 * caller spells the option (--capture-max-mb, capture_max_mb). Numbers are plain decimal: no
 * sign, space, exponent or 0x; a fraction only where the option takes one.
 * Each returns 0 with the value in *out, or -EINVAL (-ERANGE: a number out of range) with
 * why written.
 */
#ifndef __OPTVAL_H
#define __OPTVAL_H

#include <stddef.h>
#include <stdint.h>

#define OPTVAL_QUEUE_KB_MAX (1 << 20)	 /* --output-queue-kb, output_queue_kb: KiB, 1.. */
#define OPTVAL_MAX_SCAN_MB_MAX (1 << 20) /* --max-scan-mb, max_scan_mb: MiB, 1.. */
#define OPTVAL_GRAD_RING_MB_MAX 256	 /* --grad-ring-mb, grad_ring_mb: MiB, 0 or a power of 2 */
#define OPTVAL_GRAD_RING_MB_DEFAULT 8
#define OPTVAL_STATS_INTERVAL_MAX 86400 /* --stats-interval, stats_interval: s, 0 (none).. */
#define OPTVAL_CAPTURE_MAX_MB_MAX 512	/* --capture-max-mb, capture_max_mb: MiB, fractions */
#define OPTVAL_LEARN_TIMEOUT_MAX 3600	/* --learn-timeout, learn_timeout: s, 1.. */
#define OPTVAL_LEARN_TIMEOUT_DEFAULT 120

/* KiB each output holds back: whole, 1..OPTVAL_QUEUE_KB_MAX; *out in bytes. */
int optval__queue_kb(const char *name, const char *s, size_t *out, char *why, size_t whylen);

/* MiB scanned of each tensor: whole, 1..OPTVAL_MAX_SCAN_MB_MAX; *out in bytes. */
int optval__max_scan_mb(const char *name, const char *s, uint64_t *out, char *why, size_t whylen);

/*
 * MiB of the ring that takes parameter gradients' bytes to the daemon for their histograms:
 * 0 (counted in BPF) or a power of 2 up to OPTVAL_GRAD_RING_MB_MAX; *out in bytes.
 */
int optval__grad_ring_mb(const char *name, const char *s, uint32_t *out, char *why, size_t whylen);

/* Seconds nanwatch-layout may run: whole, 1..OPTVAL_LEARN_TIMEOUT_MAX; *out in ms. */
int optval__learn_timeout(const char *name, const char *s, unsigned int *out, char *why,
			  size_t whylen);

/* Seconds between stats lines: whole, 0 (at the detach only)..OPTVAL_STATS_INTERVAL_MAX. */
int optval__stats_interval(const char *name, const char *s, int *out, char *why, size_t whylen);

/*
 * MiB one capture may hold: more than 0, at most OPTVAL_CAPTURE_MAX_MB_MAX, fractions allowed
 * (a budget of a few bytes is a valid test), at least one byte; *out in bytes, rounded.
 */
int optval__capture_max_mb(const char *name, const char *s, uint64_t *out, char *why,
			   size_t whylen);

/* The watch's mode: full, sample or loss; *out points at the constant. */
int optval__mode(const char *name, const char *s, const char **out, char *why, size_t whylen);

/* The backward pass: off, norms or on; *out 0, 1 or 2. */
int optval__backward(const char *name, const char *s, int *out, char *why, size_t whylen);

/*
 * How scans copy a tensor's bytes: auto, probe, task or adaptive; *out OPTVAL_READ_AUTO or
 * an enum nw_read_method value (bpf/nanwatch.h).
 */
#define OPTVAL_READ_AUTO (-1)
int optval__read_method(const char *name, const char *s, int *out, char *why, size_t whylen);
/* The name the option and event lines give a value of that (OPTVAL_READ_AUTO: "auto"). */
const char *optval__read_method_name(int method);

/*
 * How the frame evaluator's returns are seen: auto, session or uretprobe; *out an enum
 * probe_return value (attach/probe.h), and the name back. The default: OPTVAL_RETURN_AUTO.
 */
#define OPTVAL_RETURN_AUTO 2 /* PROBE_RETURN_AUTO */
int optval__return_probe(const char *name, const char *s, int *out, char *why, size_t whylen);
const char *optval__return_probe_name(int how);

/*
 * The metrics textfile: an absolute path ending in NAME.prom (node_exporter's textfile
 * collector reads *.prom files alone); else "NAME: 'TEXT' is not an absolute path" or
 * "... does not end in NAME.prom".
 */
int optval__textfile(const char *name, const char *s, char *why, size_t whylen);

#endif /* __OPTVAL_H */
