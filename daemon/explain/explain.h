/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The explain stage: findings named, judged (late parameter checks, origin), fed to the
 * diagnosis and handed to the event writers; the accounting of what was found and lost.
 */
#ifndef __EXPLAIN_H
#define __EXPLAIN_H

#include <stddef.h>
#include <stdint.h>
#include "explain/diagnose.h"
#include "output/finding.h"
#include "nanwatch.h"

struct emitter;
struct names;
struct remote;
struct probe_runtime;
struct grad_norm;
struct json;

/* Hands a module's parameter list to the attach stage (the BPF maps). */
typedef int (*explain_params_fn)(void *ctx, uint64_t module, const struct nw_params *np);

/* A module seen for the first time, for the attach stage to vouch for (resolve/keep.h). */
typedef void (*explain_module_fn)(void *ctx, uint64_t module);

/* NW_C_STEP_STARTS now, read after the parameters of a late check. */
typedef uint64_t (*explain_steps_fn)(void *ctx);

#define EXPLAIN_HELD 16	      /* gradient anomalies held until their step's fate is known */
#define EXPLAIN_HOLD_ITERS 64 /* ... for at most this many iterations once a scaler is seen */
#define EXPLAIN_SKIP_RUN 32   /* consecutive skipped steps that make an incident */

/* A finding kept for later, with the strings it points to. */
struct explain_held {
	struct finding f;
	char layer[256];
	int class_off; /* f.module_class is f.class_buf + this; -1: it points elsewhere */
	int op_own;    /* f.op is f.op_buf */
	int layer_own; /* f.layer is layer */
};

/*
 * A gradient scaler (mixed precision): the steps it skipped, and the gradient anomalies
 * held until the scaler's update says whether their step was skipped (they were the
 * overflow it backs off from) or not.
 */
struct explain_scaler {
	struct explain_held held[EXPLAIN_HELD];
	int nheld;
	uint64_t updates;	 /* scaler updates seen */
	uint64_t skipped;	 /* ... of them skipped steps */
	uint64_t run;		 /* consecutive skipped steps, up to the last update */
	uint64_t run_start_step; /* the first of them */
	int run_start_source;
	double scale;			 /* at the last update; NaN: not read */
	uint64_t folded[FINDING_PHASES]; /* anomalies found in skipped steps: not reported */
	struct explain_held run_first;	 /* the first anomaly of the run */
	int has_run_first;
	int incident;	 /* the skipping was reported as an incident */
	uint64_t events; /* skipped_step lines written */
};

struct explain {
	struct emitter *e;
	struct names *names;
	const struct remote *remote;
	explain_params_fn set_params;
	explain_module_fn new_module; /* NULL: none */
	explain_steps_fn step_starts; /* NULL: late parameter checks count as after a step */
	/* the model's object address, 0 not known (an outermost module that is not it is named
	 * so); NULL: never known */
	explain_steps_fn model;
	/* the names the code of type(module).forward uses, one cb call each (co_names), for a
	 * module whose code made a value between its calls; NULL: not read */
	void (*code_names)(void *ctx, uint64_t module, int (*cb)(const char *name, void *cb_ctx),
			   void *cb_ctx);
	/* take the gradients still queued, before a pass is closed; NULL: none queue */
	void (*take_grads)(void *ctx);
	void *params_ctx;
	const struct nw_layout *layout;	   /* for reading parameters late; NULL: not read */
	uint64_t tensor_type;		   /* &THPVariableType in the target */
	uint64_t reported[FINDING_PHASES]; /* anomaly lines written per phase */
	uint64_t params_late;		   /* anomalies whose parameters the daemon checked */
	uint64_t anomalies;		   /* anomaly lines written */
	uint64_t warnings;		   /* warning lines written */
	const char *cause;		   /* the diagnosis's, NULL until it is written */
	uint64_t cause_step;		   /* ... its step, and its layer ("" none) */
	char cause_layer[256];
	double first_time;    /* the first anomaly's time, its line's (Unix seconds); 0: none */
	uint64_t undiagnosed; /* anomaly lines written before the diagnosis */
	int loss_only;	      /* mode loss: module outputs are not checked */
	int grads_all;	      /* --backward on: every gradient is checked, not the parameters' */
	uint64_t modules;     /* distinct (root, module) pairs seen */
	uint64_t lost_reported;
	uint64_t unnamed;	  /* anomalies whose module is not under its root's tree */
	uint64_t forward_iter_p1; /* iteration + 1 of the last module output reported */
	struct diag diag;	  /* the incident being collected for its diagnosis */
	const char *capture;	  /* the incident's capture directory, or NULL */
	struct backward *bwd;	  /* node names, gradient norms; NULL: backward not watched */
	/* a stats line's fields of another source of findings; NULL: none */
	void (*stats_extra)(struct json *j, const void *ctx);
	const void *stats_ctx;
	const char *read_method; /* how scans copy the target's bytes, for stats lines */
	struct explain_scaler sc;
	/* the training loop's step counter (session/loopstep.c): added to steps counted
	 * since the attach once found */
	int loop_on;
	int64_t loop_offset;
};

/* Per-phase and per-record-type accounting from the counters and x->reported. */
void explain__tally(const uint64_t c[NW_C_MAX], const uint64_t reported[FINDING_PHASES],
		    struct explain_tally *t);

/* One finding, from whichever source: judged, fed to the diagnosis, written. */
int explain__finding(struct explain *x, const struct finding *f);

/*
 * One raw record of the events ring buffer (size bytes at data, any alignment), decoded
 * once (explain__decode) and explained: a record shorter than struct nw_event is not
 * ours and skipped (0).
 */
int explain__record(struct explain *x, const void *data, size_t size);

/*
 * stats line from the BPF counters; steps/iterations as counted in BPF since the
 * attach, step the current step and step_source where it comes from; rt may be NULL.
 */
int explain__stats(struct explain *x, const uint64_t c[NW_C_MAX], uint64_t steps,
		   uint64_t iterations, uint64_t step, int step_source,
		   const struct probe_runtime *rt);

/*
 * The diagnosis line once the incident's first iteration is over: iteration
 * is the target's current one (UINT64_MAX: the watch ends, conclude now).
 */
int explain__diagnose(struct explain *x, uint64_t iteration);

/*
 * The gradient anomalies held for a scaler's verdict that the target's iteration now
 * (records up to it consumed) no longer leaves in doubt; all of them at the watch's end.
 */
void explain__release(struct explain *x, uint64_t iteration);
void explain__release_all(struct explain *x);

/*
 * The training loop's step counter was found (on 1: steps counted since the attach are
 * offset behind it) or lost (on 0). What the incident holds so far is renumbered.
 */
void explain__set_loop(struct explain *x, int on, int64_t offset);

/* A step counted since the attach (source attach or backward_passes) as it is written now. */
uint64_t explain__step(const struct explain *x, uint64_t step, int *source);

/* A parameter gradient histogram from the BPF side. */
int explain__grad(struct explain *x, const struct nw_grad *g);

/*
 * Gradient norms of the last completed backward passes, oldest first (at most max);
 * returns how many. For rules that look at the trend (gradient explosion).
 */
int explain__grad_norms(const struct explain *x, struct grad_norm *out, int max);

/* A lost line if the kernel dropped events since the last call. */
int explain__lost(struct explain *x, const uint64_t c[NW_C_MAX]);

#endif /* __EXPLAIN_H */
