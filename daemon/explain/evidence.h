/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Facts about the tensors a layer received (inputs, parameters, buffers), computed from the
 * bytes the capture copied: what tells the causes of a non-finite output apart (magnitudes
 * against the dtype's range and exp's overflow threshold, zeros, negatives, -Inf, all-zero,
 * constant and fully masked rows along the last dimension).
 */
#ifndef __EVIDENCE_H
#define __EVIDENCE_H

#include <stdint.h>
#include <linux/types.h>

#define EVIDENCE_MAX_TENSORS 32
#define EVIDENCE_NAME_LEN 48

enum evidence_role {
	EVIDENCE_INPUT = 0,
	EVIDENCE_PARAM = 1,
	EVIDENCE_BUFFER = 2,
};

enum evidence_kind {
	EVIDENCE_FLOAT = 0, /* float16, bfloat16, float32, float64 */
	EVIDENCE_BOOL = 1,  /* bool, or an integer tensor of 0s and 1s alone (a mask) */
	EVIDENCE_INT = 2,   /* an integer tensor with other values (indices, token ids, counts):
			     * no rows of it count as masked or zero */
};

struct tensor_facts {
	char name[EVIDENCE_NAME_LEN]; /* "input[1]", "temperature" */
	int role;		      /* enum evidence_role */
	int kind;		      /* enum evidence_kind */
	const char *dtype;	      /* "float32" */
	double exp_limit;	      /* log of the dtype's largest value: exp overflows above it */
	uint64_t numel;
	uint64_t nan, posinf, neginf;
	uint64_t zeros, negatives; /* finite values == 0, < 0 (kind bool: false values, 0) */
	int has_finite;
	double max_abs, min, max; /* over the finite values; min and max of an integer's too */
	/* rows along the last dimension (a 0-d or 1-d tensor is one row); rows of 1 value count
	 * as no zero, constant or masked row */
	uint64_t rows, row_len;
	uint32_t ndim;
	uint64_t zero_rows;   /* every value 0 (kind bool: every value false) */
	uint64_t const_rows;  /* longer than 1, one finite non-zero value throughout */
	uint64_t neginf_rows; /* every value -Inf */
	uint64_t true_rows;   /* kind bool: every value true (a key_padding_mask masking all) */
	uint64_t prob_rows;   /* longer than 1, values in [0, 1] summing to 1 (a distribution) */
	/* 2 or more dimensions, 2 or more rows: indices of the last dimension whose value is
	 * the same finite one in every row (a feature constant across the batch) */
	uint64_t const_cols;
};

#define EVIDENCE_MAX_OPS 16 /* NW_CAP_OPS */
#define EVIDENCE_OP_LEN 32

struct evidence_facts {
	uint64_t module, root; /* the captured call's module object and its root */
	uint64_t iteration;
	int n;
	struct tensor_facts t[EVIDENCE_MAX_TENSORS];
	/*
	 * The operations the call ran on its way to the bad output: the autograd nodes from its
	 * output back to its arguments, breadth first (the op that made the output first), as
	 * aten names ("log", "softmax", "to_copy"; "" for a node of a class not known). nops 0:
	 * none seen (no autograd: no_grad, eval, or the backward keys not known). ops_more: the
	 * walk stopped at EVIDENCE_MAX_OPS nodes with more to see. ops_partial: a tensor that
	 * needs no gradient (the batch, in a first layer) entered the graph: ops on it made no
	 * node, so an op missing from the list may still have run.
	 */
	uint64_t op_vptr[EVIDENCE_MAX_OPS];
	char ops[EVIDENCE_MAX_OPS][EVIDENCE_OP_LEN];
	int nops, ops_more, ops_partial;
	/*
	 * The walk's edges, where parents is 1: op_parent[i] is the place in ops of an op that
	 * takes op i's output as an input (the first the walk found it from; always before i),
	 * -1 for the output's own op. exp(clamp(x)): clamp's parent is the exp.
	 */
	int op_parent[EVIDENCE_MAX_OPS];
	int parents;
	/*
	 * Where that walk is not whole (ops_partial, or no autograd: nops 0), the operations
	 * the code of the module's forward names (its co_names: "x.std(0)" names std), as
	 * diagnose__code_op writes them, each once, in no order. A name there is no proof the op
	 * ran (a branch not taken), nor a name missing that it did not (an op of a helper).
	 */
	char code_ops[EVIDENCE_MAX_OPS][EVIDENCE_OP_LEN];
	int ncode;
	/* the forward's names were read (ncode may be 0: it names no op a rule looks for) */
	int code_read;
};

/*
 * Facts of a C-order tensor of torch dtype name (float16, bfloat16, float32, float64, bool,
 * uint8, int8, int16, int32, int64); -EINVAL for another dtype or a size that does not match.
 */
int evidence__scan(const void *data, uint64_t bytes, const char *dtype, const __u64 *shape,
		   uint32_t ndim, struct tensor_facts *f);

/* exp's overflow threshold in a floating dtype (88.72 for float32); 0 if not one. */
double evidence__exp_limit(const char *dtype);
/* The spacing of dtype's values at 1, 0 if no float. */
double evidence__eps(const char *dtype);
/* The argument below which exp is 0 in dtype (log of its least subnormal), 0 if no float. */
double evidence__exp_floor(const char *dtype);

#endif /* __EVIDENCE_H */
