// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Option values the command line and the config share (see optval.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "util/optval.h"

/*
 * Plain decimal digits, with a fraction (".5", "0.25", "3.") only if frac; the value in *v.
 * At most 18 digits before the point: no overflow, and far past every range here.
 */
static int decimal(const char *s, int frac, double *v)
{
	const char *p = s;
	double scale = 1;
	int digits = 0, ints = 0;

	*v = 0;
	for (; *p >= '0' && *p <= '9'; p++, digits++, ints++)
		*v = *v * 10 + (*p - '0');
	if (frac && *p == '.')
		for (p++; *p >= '0' && *p <= '9'; p++, digits++)
			*v += (*p - '0') * (scale /= 10);
	return *p || !digits || ints > 18 ? -EINVAL : 0;
}

static int bad(const char *name, const char *s, const char *what, int ret, char *why, size_t whylen)
{
	snprintf(why, whylen, "%s: '%.64s' is not %s", name, s, what);
	return ret;
}

/* A whole number min..max of unit. */
static int whole(const char *name, const char *s, long long min, long long max, const char *unit,
		 long long *out, char *why, size_t whylen)
{
	char what[96];
	double v;
	int ret = decimal(s, 0, &v);

	if (!ret && (v < min || v > max))
		ret = -ERANGE;
	if (ret) {
		snprintf(what, sizeof(what), "a whole number of %s from %lld to %lld", unit, min,
			 max);
		return bad(name, s, what, ret, why, whylen);
	}
	*out = (long long)v;
	return 0;
}

int optval__queue_kb(const char *name, const char *s, size_t *out, char *why, size_t whylen)
{
	long long v;
	int ret = whole(name, s, 1, OPTVAL_QUEUE_KB_MAX, "KiB", &v, why, whylen);

	if (!ret)
		*out = (size_t)v << 10;
	return ret;
}

int optval__max_scan_mb(const char *name, const char *s, uint64_t *out, char *why, size_t whylen)
{
	long long v;
	int ret = whole(name, s, 1, OPTVAL_MAX_SCAN_MB_MAX, "MiB", &v, why, whylen);

	if (!ret)
		*out = (uint64_t)v << 20;
	return ret;
}

int optval__grad_ring_mb(const char *name, const char *s, uint32_t *out, char *why, size_t whylen)
{
	long long v;
	int ret = whole(name, s, 0, OPTVAL_GRAD_RING_MB_MAX, "MiB", &v, why, whylen);

	if (!ret && v & (v - 1))
		return bad(name, s, "0 or a power of 2 (MiB) up to 256", -EINVAL, why, whylen);
	if (!ret)
		*out = (uint32_t)v << 20;
	return ret;
}

int optval__learn_timeout(const char *name, const char *s, unsigned int *out, char *why,
			  size_t whylen)
{
	long long v;
	int ret = whole(name, s, 1, OPTVAL_LEARN_TIMEOUT_MAX, "seconds", &v, why, whylen);

	if (!ret)
		*out = (unsigned int)v * 1000;
	return ret;
}

int optval__stats_interval(const char *name, const char *s, int *out, char *why, size_t whylen)
{
	long long v;
	int ret = whole(name, s, 0, OPTVAL_STATS_INTERVAL_MAX, "seconds", &v, why, whylen);

	if (!ret)
		*out = (int)v;
	return ret;
}

int optval__capture_max_mb(const char *name, const char *s, uint64_t *out, char *why, size_t whylen)
{
	double v, bytes;
	int ret = decimal(s, 1, &v);

	bytes = v * 1048576 + 0.5;
	if (!ret && (v > OPTVAL_CAPTURE_MAX_MB_MAX || bytes < 1))
		ret = -ERANGE;
	if (ret)
		return bad(name, s,
			   "a number of MiB more than 0 (a byte at least) and at most "
			   "512, fractions allowed",
			   ret, why, whylen);
	*out = (uint64_t)bytes;
	return 0;
}

/* Which of the NULL-terminated words s is; its index, or -EINVAL with why saying which. */
static int word(const char *name, const char *s, const char *const *words, const char *list,
		char *why, size_t whylen)
{
	int i;

	for (i = 0; words[i]; i++)
		if (!strcmp(s, words[i]))
			return i;
	return bad(name, s, list, -EINVAL, why, whylen);
}

int optval__mode(const char *name, const char *s, const char **out, char *why, size_t whylen)
{
	static const char *const modes[] = {"full", "sample", "loss", NULL};
	int i = word(name, s, modes, "full, sample or loss", why, whylen);

	if (i < 0)
		return i;
	*out = modes[i];
	return 0;
}

/* word()'s answer as a value: the first word's is base, the next base + 1, and so on. */
static int word_value(const char *name, const char *s, const char *const *words, const char *list,
		      int base, int *out, char *why, size_t whylen)
{
	int i = word(name, s, words, list, why, whylen);

	if (i < 0)
		return i;
	*out = base + i;
	return 0;
}

/* The word of a value so counted, or "unknown". */
static const char *word_of(const char *const *words, int base, int value)
{
	int i;

	for (i = 0; words[i]; i++)
		if (base + i == value)
			return words[i];
	return "unknown";
}

/* in the order of enum nw_read_method, after auto (OPTVAL_READ_AUTO) */
static const char *const read_methods[] = {"auto", "probe", "task", "adaptive", NULL};

int optval__read_method(const char *name, const char *s, int *out, char *why, size_t whylen)
{
	return word_value(name, s, read_methods, "auto, probe, task or adaptive", OPTVAL_READ_AUTO,
			  out, why, whylen);
}

const char *optval__read_method_name(int method)
{
	return word_of(read_methods, OPTVAL_READ_AUTO, method);
}

/* in the order of enum probe_return (attach/probe.h) */
static const char *const return_probes[] = {"uretprobe", "session", "auto", NULL};

int optval__return_probe(const char *name, const char *s, int *out, char *why, size_t whylen)
{
	return word_value(name, s, return_probes, "auto, session or uretprobe", 0, out, why,
			  whylen);
}

const char *optval__return_probe_name(int how)
{
	return word_of(return_probes, 0, how);
}

int optval__backward(const char *name, const char *s, int *out, char *why, size_t whylen)
{
	static const char *const modes[] = {"off", "norms", "on", NULL};
	int i = word(name, s, modes, "off, norms or on", why, whylen);

	if (i < 0)
		return i;
	*out = i;
	return 0;
}

int optval__textfile(const char *name, const char *s, char *why, size_t whylen)
{
	size_t n = strlen(s);

	if (s[0] != '/')
		snprintf(why, whylen, "%s: '%.80s' is not an absolute path", name, s);
	else if (n <= 5 || strcmp(s + n - 5, ".prom") || s[n - 6] == '/')
		snprintf(why, whylen,
			 "%s: '%.80s' does not end in NAME.prom (what the textfile collector "
			 "reads)",
			 name, s);
	else
		return 0;
	return -EINVAL;
}
