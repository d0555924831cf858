/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Turning raw BPF events and counters into named events on the stream. */
#ifndef __REPORT_H
#define __REPORT_H

#include <stdint.h>
#include "diagnose.h"
#include "nanwatch.h"

struct emitter;
struct names;
struct remote;

/* Hands a module's parameter list to the BPF side. */
typedef int (*report_params_fn)(void *ctx, uint64_t module, const struct nw_params *np);

struct report {
	struct emitter *e;
	struct names *names;
	const struct remote *remote;
	report_params_fn set_params;
	void *params_ctx;
	uint64_t anomalies;	/* anomaly lines written */
	uint64_t warnings;	/* warning lines written */
	int loss_only;		/* mode loss: module outputs are not checked */
	uint64_t modules;	/* distinct (root, module) pairs seen */
	uint64_t lost_reported;
	uint64_t unnamed;	/* anomalies whose module is not under its root's tree */
	uint64_t forward_iter_p1; /* iteration + 1 of the last module output reported */
	struct diag diag;	/* the incident being collected for its diagnosis */
	const char *capture;	/* the incident's capture directory, or NULL */
	struct backward *bwd;	/* node names, gradient norms; NULL: backward not watched */
	int exec_seen;		/* the target called execve: the watch is over */
};

/* Tensor path: "output", "output[1]", "output[1][0]". */
void report__tensor_name(const struct nw_event *ev, char *buf, size_t len);

/* inputs_finite: 1 true, 0 false, -1 unknown (some input could not be scanned). */
int report__inputs_finite(const struct nw_event *ev);

/* params_finite: 1 true, 0 false, -1 unknown (not listed yet, or not all scanned). */
int report__params_finite(const struct nw_event *ev);

int report__event(struct report *r, const struct nw_event *ev);

struct probe_runtime;

/* stats line from the BPF counters; steps/iterations as counted in BPF; rt may be NULL. */
int report__stats(struct report *r, const uint64_t c[NW_C_MAX], uint64_t steps,
		  uint64_t iterations, const struct probe_runtime *rt);

/*
 * The diagnosis line once the incident's first iteration is over: iteration
 * is the target's current one (UINT64_MAX: the watch ends, conclude now).
 */
int report__diagnose(struct report *r, uint64_t iteration);

/* A parameter gradient histogram from the BPF side. */
int report__grad(struct report *r, const struct nw_grad *g);

struct grad_norm;

/*
 * Gradient norms of the last completed backward passes, oldest first (at most max);
 * returns how many. For rules that look at the trend (gradient explosion).
 */
int report__grad_norms(const struct report *r, struct grad_norm *out, int max);

/* A lost line if the kernel dropped events since the last call. */
int report__lost(struct report *r, const uint64_t c[NW_C_MAX]);

#endif /* __REPORT_H */
