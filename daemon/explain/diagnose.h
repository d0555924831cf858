/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Why the first value went bad: rules over the anomalies of the first bad iteration. */
#ifndef __DIAGNOSE_H
#define __DIAGNOSE_H

#include <stddef.h>
#include <stdint.h>
#include "explain/evidence.h"
#include "output/finding.h"

#define DIAG_MAX_LOSSES 64    /* loss values kept, one per iteration */
#define DIAG_MAX_MARKS 256    /* magnitude marks kept, all modules together */
#define DIAG_MAX_MODULES 1024 /* modules whose warnings are remembered */
#define DIAG_GROWTH 100.0     /* x per iteration: a run-up */
#define DIAG_HORIZON 10	      /* iterations to overflow at which a run-up is worth a warning */
#define DIAG_JUMP 1e5  /* x from the first finite loss to the last: a divergence, two points do */
#define DIAG_WINDOW 16 /* losses looked at for a divergence through noise */
#define DIAG_WINDOW_MIN 4 /* ... at least this many */
#define DIAG_ROUGH 1e3	  /* x from the window's smallest loss to its last, the largest */
#define DIAG_RUNUP 2.0	  /* x per pass, at least, of gradient norms growing to a divergence */

/* The gradient norm of one backward pass (from the parameter gradients). */
struct diag_grad {
	uint64_t step, iteration;
	double norm; /* NaN/Inf when a gradient was not finite */
};

#define DIAG_MAX_GRADS 16

/* A module's output reached a new magnitude (sampled largest |value|). */
struct diag_mark {
	uint64_t module; /* the module object's address: the key */
	uint64_t step, iteration;
	double value;
	char layer[64]; /* its path, as far as it fits; "" the model; NULL kept as "?" */
};

struct diag_module {
	uint64_t module;
	uint8_t warned_range, warned_growth;
};

/* What a rule needs to know of one anomaly (the daemon fills it from the event). */
struct diag_anomaly {
	uint64_t step, iteration;
	uint64_t nan, posinf, neginf;
	double finite_max_abs; /* largest |finite value|, 0 if none */
	const char *phase;     /* "forward", "loss" */
	const char *layer;     /* may be NULL */
	const char *module;    /* class name, may be NULL */
	const char *dtype;     /* "float16", ... */
	uint64_t module_id;    /* the module object's address (0 for the loss) */
	int inputs_finite;     /* 1, 0, -1 unknown */
	int params_finite;
	uint32_t depth;	      /* 1: the outermost module */
	int outside_model;    /* an outermost module known not to be the model (a loss module) */
	const char *node;     /* phase backward: the autograd node's class, may be NULL */
	const char *op;	      /* ... its forward op in words ("sqrt"), may be NULL; phase
			       * loss: the op that made the loss ("nll_loss"), may be NULL */
	const char *upstream; /* ... the node that fed it its gradient, may be NULL */
	const struct finding_loss *loss; /* phase loss: the nodes that made it; NULL: none */
	int step_source;		 /* enum nw_step_source of step */
};

/*
 * An enclosing call that made the first anomaly's non-finite input itself: a later anomaly of
 * the incident's iteration whose module holds the first's (its layer a prefix of the first's),
 * called with finite inputs and parameters. Its code, between its calls to its children, made
 * the value (a VAE's exp of a log-variance before its decoder).
 */
struct diag_maker {
	int known;
	uint64_t module_id;
	char layer[256], module[64];
	int outside_model; /* an outermost module that is not the model (a loss module) */
	uint64_t nan, posinf, neginf;
	char code_ops[EVIDENCE_MAX_OPS][EVIDENCE_OP_LEN]; /* as diagnose__code_op names them */
	int ncode;
	/* the first name of its code that sums into groups or counts, and that is a distance */
	char group_op[EVIDENCE_OP_LEN], distance_op[EVIDENCE_OP_LEN];
};

struct diag {
	int open; /* an incident is being collected */
	int done; /* its diagnosis was made */
	struct diag_anomaly first;
	char first_layer[256], first_module[64], first_phase[16], first_dtype[16];
	int root_inputs_finite; /* the outermost module's inputs in that iteration; -1 unknown */
	int root_seen;
	int top_only;  /* mode sample: only outermost outputs were checked */
	int loss_only; /* mode loss: only the loss was checked */
	int grads_all; /* --backward on: every gradient was checked, not only the parameters' */
	struct diag_loss losses[DIAG_MAX_LOSSES]; /* ring, oldest first from loss_head */
	unsigned int nlosses, loss_head;
	/* the first DIAG_WINDOW finite losses of the watch: a divergence over the long run */
	struct diag_loss early[DIAG_WINDOW];
	unsigned int nearly;
	struct diag_mark marks[DIAG_MAX_MARKS]; /* ring */
	unsigned int nmarks, mark_head;
	struct diag_module modules[DIAG_MAX_MODULES];
	unsigned int nmodules;
	struct diag_grad grads[DIAG_MAX_GRADS]; /* the last passes, oldest first */
	int ngrads;
	char first_node[64];
	char first_op[32], first_upstream[64];
	struct finding_loss first_loss;
	struct diag_maker maker;
	struct evidence_facts facts; /* of the captured origin call, if facts_known */
	int facts_known;
	/* a gradient scaler skipping step after step (diagnose__scaler); skips 0: none */
	uint64_t scaler_skips, scaler_from_step;
	double scaler_scale; /* NaN: not read */
};

void diagnose__init(struct diag *d);
/*
 * Steps counted since the attach (sources attach and backward_passes) are offset behind a
 * better count (source): what the incident holds so far is renumbered. Grads are given anew.
 */
void diagnose__shift(struct diag *d, int64_t offset, int source);
/*
 * A gradient scaler skipped skips steps in a row from step from_step, the last at scale
 * (NaN: not known): the incident's cause says the skipping persists, the rules tell what
 * made its first gradient non-finite.
 */
void diagnose__scaler(struct diag *d, uint64_t skips, uint64_t from_step, double scale);
/* Feed each anomaly of the stream; returns 1 when the incident's first iteration is over. */
int diagnose__observe(struct diag *d, const struct diag_anomaly *a);
/* The loss of an iteration (a later value for the same iteration replaces it). */
void diagnose__loss(struct diag *d, uint64_t step, int step_source, uint64_t iteration,
		    double value);
/*
 * A module's new magnitude mark; layer is its path (NULL: not known), limit its dtype's
 * largest finite value. Returns 1 and fills w when it deserves a warning (at most one per
 * module and reason), 0 otherwise.
 */
int diagnose__mark(struct diag *d, uint64_t module, const char *layer, uint64_t step,
		   uint64_t iteration, double value, double limit, struct diag_warning *w);
/* The gradient norms of the last backward passes, oldest first (replaces the ones given before). */
void diagnose__grads(struct diag *d, const struct diag_grad *g, int n);
/*
 * Facts about the inputs, parameters and buffers of the captured origin call (NULL: none
 * yet); the rules use them when they are of the first anomaly's module and iteration.
 */
void diagnose__facts(struct diag *d, const struct evidence_facts *f);

/*
 * A name a layer's code uses (co_names: "std", "sqrt_", "layer_norm") as the op the rules
 * know it by ("std", "sqrt", "native_layer_norm") into op; 0 for a name that is no such op.
 */
int diagnose__code_op(const char *name, char *op, size_t len);
/* name as diagnose__code_op() writes it into ops (*n of EVIDENCE_MAX_OPS used), once; a name
 * that is no such op, or a full list, leaves ops as they are. */
void diagnose__add_code_op(char ops[][EVIDENCE_OP_LEN], int *n, const char *name);
/* The module whose own code made the first anomaly's input (struct diag_maker); 0: none. */
uint64_t diagnose__maker(const struct diag *d);
/* A name the code of the maker's forward uses (co_names), kept if it is an op the rules know. */
int diagnose__maker_name(const char *name, void *d);
/* Apply the rules to what was observed; 0, or -ENOENT if there is no incident to diagnose. */
int diagnose__conclude(struct diag *d, struct diagnosis *out);

#endif /* __DIAGNOSE_H */
