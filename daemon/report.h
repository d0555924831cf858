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

/* NW_C_STEP_STARTS now, read after the parameters of a late check. */
typedef uint64_t (*report_steps_fn)(void *ctx);

#define REPORT_PHASES 3	/* enum nw_phase */

/* Anomalies of one phase: found = reported + suppressed + lost once the ring is drained. */
struct report_phase {
	uint64_t found;
	uint64_t reported;
	uint64_t suppressed;
	uint64_t lost;
};

/* The stats line's accounting, from the BPF counters and the lines written. */
struct report_tally {
	struct report_phase phase[REPORT_PHASES];
	struct report_phase all;	/* the three phases summed */
	/* records the ring buffers had no room for, per type */
	uint64_t lost_anomaly, lost_module, lost_mark, lost_loss, lost_grad, lost_capture;
	uint64_t lost_for_good;	/* on the events ring and not sent again (all but module) */
};

struct report {
	struct emitter *e;
	struct names *names;
	const struct remote *remote;
	report_params_fn set_params;
	report_steps_fn step_starts;	/* NULL: late parameter checks count as after a step */
	void *params_ctx;
	const struct nw_layout *layout;	/* for reading parameters late; NULL: not read */
	uint64_t tensor_type;		/* &THPVariableType in the target */
	uint64_t reported[REPORT_PHASES]; /* anomaly lines written per phase */
	uint64_t params_late;		/* anomalies whose parameters the daemon checked */
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
};

/* "attach" or "optimizer_state": where a step number comes from (enum nw_step_source). */
const char *report__step_source(int source);

/* Tensor path: "output", "output[1]", "output[1][0]". */
void report__tensor_name(const struct nw_event *ev, char *buf, size_t len);

/* inputs_finite: 1 true, 0 false, -1 unknown (some input could not be scanned). */
int report__inputs_finite(const struct nw_event *ev);

/* params_finite: 1 true, 0 false, -1 unknown (not listed yet, or not all scanned). */
int report__params_finite(const struct nw_event *ev);

/* Per-phase and per-record-type accounting from the counters and r->reported. */
void report__tally(const uint64_t c[NW_C_MAX], const uint64_t reported[REPORT_PHASES],
		   struct report_tally *t);

int report__event(struct report *r, const struct nw_event *ev);

/*
 * One raw record of the events ring buffer (size bytes at data, any alignment): a record
 * shorter than struct nw_event is not ours and skipped (0); else report__event.
 */
int report__record(struct report *r, const void *data, size_t size);

struct probe_runtime;

/*
 * stats line from the BPF counters; steps/iterations as counted in BPF since the
 * attach, step the current step and step_source where it comes from; rt may be NULL.
 */
int report__stats(struct report *r, const uint64_t c[NW_C_MAX], uint64_t steps,
		  uint64_t iterations, uint64_t step, int step_source,
		  const struct probe_runtime *rt);

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
