/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * nanwatch-collect's model: nanwatch/1 event lines from many ranks of many jobs, and per job
 * the rank, step, layer and cause where it first went non-finite, told apart from the ranks
 * that only received the value through the gradient all-reduce.
 */
#ifndef __COLLECT_H
#define __COLLECT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct collect;

/* Why a rank was judged as it was, best first. */
enum collect_evidence {
	COLLECT_RECEIVED, /* non-finite parameters or parameter gradients: it got the value */
	COLLECT_UNKNOWN,  /* inputs or parameters not known */
	COLLECT_INPUT,	  /* its own input data was non-finite, its parameters finite */
	COLLECT_CREATED,  /* origin: finite inputs and parameters, non-finite output */
};

struct collect_verdict {
	const char *job;
	int found;	/* 0: no rank of the job saw a non-finite value */
	long long rank; /* -1: the stream names no rank (then host and pid name it) */
	const char *host;
	long long pid;
	long long step, iteration; /* -1 when the event lacks them */
	const char *step_source, *phase, *layer, *module, *tensor, *cause;
	const char *cause_from;			  /* "diagnosis", "anomaly" or NULL */
	int origin, inputs_finite, params_finite; /* 1, 0, or -1 for null */
	enum collect_evidence evidence;
	const char *decided_by; /* only_rank, earliest_step, earliest_time, evidence, time, rank */
	size_t tied, received, clean, ranks; /* ranks in each group, all ranks seen */
	long long world_size;		     /* -1 when no event says */
	char basis[768];		     /* the reasons, as a sentence */
};

/* max_jobs jobs at once (the one updated longest ago makes room), max_ranks ranks per job. */
struct collect *collect__new(size_t max_jobs, size_t max_ranks);
void collect__free(struct collect *c);

/*
 * One line of a stream (len bytes, no newline). 0 when it was a nanwatch/1 event, -EINVAL
 * otherwise (err says why); never fatal.
 */
int collect__line(struct collect *c, const char *line, size_t len, char *err, size_t errlen);

/* The verdict for job (NULL strings stay valid until the next collect__line); -ENOENT. */
int collect__verdict(struct collect *c, const char *job, struct collect_verdict *v);

/*
 * Every job's verdict, those with an origin first (earliest first), in JSON lines or text.
 * changed: only jobs whose verdict differs from the one printed last (--follow). Returns the
 * jobs printed, or a negative errno when writing failed.
 */
int collect__report(struct collect *c, FILE *f, int json, int changed);

struct collect_counts {
	uint64_t events;	 /* events taken */
	uint64_t evicted_jobs;	 /* jobs dropped to make room (max_jobs) */
	uint64_t dropped_events; /* events of ranks beyond max_ranks */
};
void collect__counts(const struct collect *c, struct collect_counts *out);

#endif /* __COLLECT_H */
