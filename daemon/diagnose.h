/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Why the first value went bad: rules over the anomalies of the first bad iteration. */
#ifndef __DIAGNOSE_H
#define __DIAGNOSE_H

#include <stdint.h>

#define DIAG_MAX_EVIDENCE 8
#define DIAG_MAX_FIXES	  4

/* What a rule needs to know of one anomaly (the daemon fills it from the event). */
struct diag_anomaly {
	uint64_t step, iteration;
	uint64_t nan, posinf, neginf;
	double finite_max_abs;	/* largest |finite value|, 0 if none */
	const char *phase;	/* "forward", "loss" */
	const char *layer;	/* may be NULL */
	const char *module;	/* class name, may be NULL */
	const char *dtype;	/* "float16", ... */
	int inputs_finite;	/* 1, 0, -1 unknown */
	int params_finite;
	uint32_t depth;		/* 1: the outermost module */
	const char *node;	/* phase backward: the autograd node's class, may be NULL */
};

struct diagnosis {
	uint64_t step, iteration;
	const char *cause;	/* from the fixed vocabulary */
	double confidence;
	char layer[256];
	char module[64];
	char evidence[DIAG_MAX_EVIDENCE][160];
	const char *fixes[DIAG_MAX_FIXES];
	int nevidence, nfixes;
};

struct diag {
	int open;		/* an incident is being collected */
	int done;		/* its diagnosis was made */
	struct diag_anomaly first;
	char first_layer[256], first_module[64], first_phase[16], first_dtype[16];
	int root_inputs_finite; /* the outermost module's inputs in that iteration; -1 unknown */
	int root_seen;
	int top_only;		/* mode sample: only outermost outputs were checked */
	char first_node[64];
};

void diagnose__init(struct diag *d);
/* Feed each anomaly of the stream; returns 1 when the incident's first iteration is over. */
int diagnose__observe(struct diag *d, const struct diag_anomaly *a);
/* Apply the rules to what was observed; 0, or -ENOENT if there is no incident to diagnose. */
int diagnose__conclude(struct diag *d, struct diagnosis *out);

#endif /* __DIAGNOSE_H */
