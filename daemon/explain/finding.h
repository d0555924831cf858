/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * A finding: one named, decoded event of a watched process, whatever found it (the BPF rings
 * now, a GPU library later). The diagnosis and the event lines read findings only, never a
 * source's raw records, so this header knows no record layout.
 */
#ifndef __EXPLAIN_FINDING_H
#define __EXPLAIN_FINDING_H

#include <stdint.h>

#define FINDING_MAX_DIMS 8   /* shape entries kept */
#define FINDING_CLASS_LEN 64 /* module class name bytes */

enum finding_kind {
	FINDING_NONE = 0,  /* nothing to explain (a record of another kind) */
	FINDING_ANOMALY,   /* a checked tensor holds NaN/±Inf */
	FINDING_MODULE,	   /* first call of a (root, module) pair */
	FINDING_LOSS,	   /* the value of the tensor backward() starts from */
	FINDING_MAGNITUDE, /* a module output reached a new magnitude */
};

enum finding_phase {
	FINDING_FORWARD = 0,	/* a module's output */
	FINDING_PHASE_LOSS = 1, /* a tensor backward() starts from */
	FINDING_BACKWARD = 2,	/* a gradient an autograd node produced */
	FINDING_PHASES
};

enum finding_step_source {
	FINDING_STEP_ATTACH = 0,    /* optimizer steps counted since the attach */
	FINDING_STEP_OPTIMIZER = 1, /* the optimizer's own count */
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
	uint32_t input_nr, producers;
	/* the tensor */
	char tensor[32];	/* "output[1]", "loss", "grad[0]", "parameters" */
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
};

#endif /* __EXPLAIN_FINDING_H */
