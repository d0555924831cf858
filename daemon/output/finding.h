/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * What the event lines are made of, data only: a finding (one named, decoded event of a
 * watched process, whatever found it: the BPF rings, the GPU library) and what the explain
 * stage concludes from findings (a diagnosis, a warning, the accounting, gradient norms). The
 * explain stage fills these; the event writers read them and include nothing of explain. No
 * record layout of any source is known here.
 */
#ifndef __OUTPUT_FINDING_H
#define __OUTPUT_FINDING_H

#include <stdint.h>

#define FINDING_MAX_DIMS 8   /* shape entries kept */
#define FINDING_CLASS_LEN 64 /* module class name bytes */

enum finding_kind {
	FINDING_NONE = 0,  /* nothing to explain (a record of another kind) */
	FINDING_ANOMALY,   /* a checked tensor holds NaN/±Inf */
	FINDING_MODULE,	   /* first call of a (root, module) pair */
	FINDING_LOSS,	   /* the value of the tensor backward() starts from */
	FINDING_MAGNITUDE, /* a module output reached a new magnitude */
	FINDING_SCALER,	   /* a gradient scaler's update: value its scale (NaN: not read) */
};

enum finding_phase {
	FINDING_FORWARD = 0,	/* a module's output */
	FINDING_PHASE_LOSS = 1, /* a tensor backward() starts from */
	FINDING_BACKWARD = 2,	/* a gradient an autograd node produced */
	FINDING_PHASES
};

/* the numbers of enum nw_step_source (bpf/nanwatch.h), whose step words carry them */
enum finding_step_source {
	FINDING_STEP_ATTACH = 0,    /* optimizer steps counted since the attach */
	FINDING_STEP_OPTIMIZER = 1, /* the optimizer's own count */
	FINDING_STEP_BACKWARD = 2,  /* no optimizer: backward passes counted since the attach */
	FINDING_STEP_LOOP = 3,	    /* the training loop's own counter (a daemon's finding only) */
};

#define FINDING_LOSS_OP_LEN 40 /* an op's name among a loss's nodes, its NUL counted */
#define FINDING_LOSS_NODES 15  /* NW_LOSS_NODES */
#define FINDING_LOSS_ROOT 0xff /* a loss node's parent: none, the loss's own node */

/*
 * Phase loss: the autograd nodes BPF walked from the loss, breadth first along every edge but
 * a parameter's. The first `line` of them are the loss's nodes along single inputs (each but
 * the last has one input that needs a gradient, and the next is that input's), as far as
 * each is named.
 */
struct finding_loss {
	unsigned int n, line;
	char op[FINDING_LOSS_NODES][FINDING_LOSS_OP_LEN]; /* "?": a node with no op's name */
	unsigned char parent[FINDING_LOSS_NODES]; /* the node whose edge found it; _ROOT: none */
	unsigned char input[FINDING_LOSS_NODES];  /* that edge's index: which operand it made */
	unsigned char also[FINDING_LOSS_NODES];	  /* another node using it; _ROOT: none known */
	unsigned char also_input[FINDING_LOSS_NODES]; /* ... as that operand */
};

struct finding {
	int kind;	    /* enum finding_kind */
	int phase;	    /* enum finding_phase */
	const char *device; /* "cpu" */
	uint64_t time_ns;   /* CLOCK_MONOTONIC; 0: now */
	uint32_t tid;
	uint64_t step;
	int step_source;      /* enum finding_step_source */
	uint64_t iteration;   /* outermost-module forward passes since the attach, 0-based */
	uint32_t step_starts; /* low 32 bits of the optimizer steps begun, as params were read */
	/* the module: its object address, the root module's, its call depth */
	uint64_t root, module;
	uint32_t depth;
	const char *layer;	  /* its path under the root ("" the root); NULL: not known */
	const char *module_class; /* type(m).__name__, NULL: none (loss, unknown maker) */
	char class_buf[FINDING_CLASS_LEN + 1];
	/* phase backward: the autograd node and the one that received its gradient */
	const char *node, *consumer; /* class names, NULL: not known */
	const char *upstream;	     /* the node that fed node its input 0's gradient, NULL */
	const char *op;		     /* node's forward op in words ("sqrt"), NULL: not known */
	char op_buf[32];
	struct finding_loss loss; /* phase loss: the nodes that made it (n 0: none named) */
	uint32_t input_nr, producers;
	/* the tensor */
	char tensor[48];	/* "output[1]", "output['key']", "loss", "grad[0]" */
	int parameters;		/* a magnitude of the module's parameters, not an output */
	uint32_t dtype;		/* nanwatch dtype code */
	const char *dtype_name; /* "float32"; NULL: not known */
	uint32_t ndim;
	uint64_t shape[FINDING_MAX_DIMS];
	uint64_t numel, scanned;
	int truncated; /* only a prefix was scanned */
	uint64_t nan, posinf, neginf;
	int has_finite; /* finite_min/max hold the extremes of its finite values */
	uint64_t finite_min_bits, finite_max_bits; /* raw element bits of dtype */
	double max_abs;				   /* largest |finite value|, 0 if none */
	double value; /* kind loss: the loss; kind magnitude: the new magnitude */
	/* verdicts: 1 true, 0 false, -1 unknown */
	int inputs_finite;
	int params_finite;
	int params_known;     /* the source had the module's parameter list */
	int nested_unchecked; /* a call nested too deep to be checked may have made it */
	int skipped;	      /* kind scaler: the scaler skipped the step */
};

/* The explain stage's conclusions. */
#define DIAG_MAX_EVIDENCE 10
#define DIAG_MAX_FIXES 4
#define DIAG_TREND 8 /* losses in a diagnosis' loss_trend */

/* The scalar backward() started from, one per iteration. */
struct diag_loss {
	uint64_t step, iteration;
	int step_source; /* enum finding_step_source */
	double value;	 /* NaN/Inf kept as they are */
};

/* Why a warning is due: a magnitude near the dtype's range, or a run-up towards it. */
struct diag_warning {
	const char *reason;  /* "near_range", "growth" */
	double value;	     /* the sampled largest |value| */
	double limit;	     /* the dtype's largest finite value */
	double growth;	     /* x per iteration since the module's previous mark; 0: none */
	int iterations_left; /* to overflow at that growth; -1: unknown */
};

#define DIAG_MAX_BASIS 6

struct diagnosis {
	uint64_t step, iteration;
	const char *cause; /* from the fixed vocabulary */
	double confidence;
	char layer[256];
	char module[64];
	char evidence[DIAG_MAX_EVIDENCE][256]; /* a line, whole */
	const char *fixes[DIAG_MAX_FIXES];
	int nevidence, nfixes;
	int64_t origin_step; /* the optimizer step whose update began it; -1: none found */
	struct diag_loss trend[DIAG_TREND]; /* the losses up to the first anomaly's iteration */
	int ntrend;
	char fix_buf[DIAG_MAX_FIXES][160]; /* fixes that carry numbers */
	/*
	 * The kinds of facts the cause rests on ("loss_trend", "gradient_norms", "model_inputs",
	 * "loss_value", "autograd_node", "parameters", "input_values", "operations",
	 * "operations_partial",
	 * "output_values", "gradient_scaler", "mode"): what a replay of the capture, which rests
	 * on the operations it runs, is to be weighed against.
	 */
	const char *basis[DIAG_MAX_BASIS];
	int nbasis;
};

/* Anomalies of one phase: found = reported + suppressed + lost once the ring is drained. */
struct explain_phase {
	uint64_t found;
	uint64_t reported;
	uint64_t suppressed;
	uint64_t lost;
	uint64_t in_skipped_steps; /* found in steps a gradient scaler skipped: not reported */
};

/* The stats line's accounting, from the BPF counters and the lines written. */
struct explain_tally {
	uint64_t lost_scaler; /* gradient scaler updates */
	struct explain_phase phase[FINDING_PHASES];
	struct explain_phase all; /* the three phases summed */
	/* records the ring buffers had no room for, per type */
	uint64_t lost_anomaly, lost_module, lost_mark, lost_loss, lost_grad, lost_capture;
	uint64_t lost_for_good; /* on the events ring and not sent again (all but module) */
};

#define BWD_MAX_TOP 3 /* modules listed with the largest gradient norms */

/* One module's share of a backward pass's gradient norm. */
struct grad_module {
	uint64_t root, module;
	double lo2, hi2; /* bounds of the sum of squares of its parameters' gradients */
};

/*
 * Gradient norm of one backward pass (the parameter gradients it computed, each as it
 * enters AccumulateGrad): the true L2 norm lies in [low, high], high/low <= 1.25;
 * norm = sqrt(low * high) is within a factor sqrt(1.25) (11.8%) of it.
 */
struct grad_norm {
	uint64_t iteration, step;
	double norm, low, high;
	double max_abs_low, max_abs_high; /* the largest finite |g| lies in [low, high) */
	uint64_t params;		  /* parameter gradients measured */
	uint64_t elements;
	uint64_t nonfinite; /* NaN/±Inf elements among them */
	int complete;	    /* no histogram was dropped around this pass */
	int ntop;
	struct grad_module top[BWD_MAX_TOP]; /* largest per-module norms first */
};

#endif /* __OUTPUT_FINDING_H */
