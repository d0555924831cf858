// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Evidence: facts scanned from captured bytes, and the causes the diagnosis draws from them
 * (values decide, class names only add confidence).
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include "explain/diagnose.h"
#include "explain/evidence.h"

#define MODULE 0x7f0010ULL

static void scan_f32(struct tensor_facts *f, const float *v, __u64 rows, __u64 cols,
		     const char *name, int role)
{
	__u64 shape[2] = {rows, cols};

	memset(f, 0, sizeof(*f));
	assert_int_equal(evidence__scan(v, rows * cols * 4, "float32", shape, 2, f), 0);
	snprintf(f->name, sizeof(f->name), "%s", name);
	f->role = role;
}

static void test_scan_float(void **state)
{
	const float v[] = {0, 0, 0, 2, 2, 2, -1, 3, INFINITY, -INFINITY, -INFINITY, -INFINITY};
	struct tensor_facts f;

	(void)state;
	scan_f32(&f, v, 4, 3, "input[0]", EVIDENCE_INPUT);
	assert_int_equal(f.rows, 4);
	assert_int_equal(f.zero_rows, 1);
	assert_int_equal(f.const_rows, 1);
	assert_int_equal(f.neginf_rows, 1);
	assert_int_equal(f.zeros, 3);
	assert_int_equal(f.negatives, 1);
	assert_int_equal(f.posinf, 1);
	assert_int_equal(f.neginf, 3);
	assert_true(f.max == 3 && f.min == -1 && f.max_abs == 3);
	assert_true(fabs(f.exp_limit - 88.7228) < 1e-3);
}

static void test_scan_half_and_mask(void **state)
{
	/* float16 bits: 12.0 (0x4a00), -0.0 (0x8000), 1.0 (0x3c00), NaN (0x7e00) */
	const uint16_t h[] = {0x4a00, 0x8000, 0x3c00, 0x7e00};
	const uint8_t mask[] = {1, 1, 0, 1, 0, 0};
	__u64 hs[1] = {4}, ms[2] = {3, 2};
	struct tensor_facts f;

	(void)state;
	memset(&f, 0, sizeof(f));
	assert_int_equal(evidence__scan(h, sizeof(h), "float16", hs, 1, &f), 0);
	assert_true(f.max == 12 && f.nan == 1 && f.zeros == 1 && f.rows == 1);
	assert_true(f.max > f.exp_limit); /* exp(12) overflows float16 (limit 11.09) */
	memset(&f, 0, sizeof(f));
	assert_int_equal(evidence__scan(mask, sizeof(mask), "bool", ms, 2, &f), 0);
	assert_int_equal(f.kind, EVIDENCE_BOOL);
	assert_int_equal(f.true_rows, 1);
	assert_int_equal(f.zero_rows, 1);
	/* int64 0s and 1s are a mask (an attention_mask); token ids (a row of padding 0s, one
	 * of ids above 1) are not, and no row of theirs counts */
	{
		const int64_t am[] = {1, 1, 0, 0, 0, 0}, ids[] = {0, 0, 0, 7, 3, 9};
		__u64 is[2] = {2, 3};

		memset(&f, 0, sizeof(f));
		assert_int_equal(evidence__scan(am, sizeof(am), "int64", is, 2, &f), 0);
		assert_int_equal(f.kind, EVIDENCE_BOOL);
		assert_int_equal(f.zero_rows, 1);
		memset(&f, 0, sizeof(f));
		assert_int_equal(evidence__scan(ids, sizeof(ids), "int64", is, 2, &f), 0);
		assert_int_equal(f.kind, EVIDENCE_INT);
		assert_int_equal(f.zero_rows, 0);
		assert_int_equal(f.true_rows, 0);
		assert_int_equal(f.zeros, 3);
	}
	assert_int_equal(evidence__scan(mask, 5, "bool", ms, 2, &f), -EINVAL);
	assert_int_equal(evidence__scan(mask, 6, "complex64", ms, 2, &f), -EINVAL);
}

static struct diag_anomaly origin(const char *module, uint64_t nan, uint64_t pos, uint64_t neg)
{
	struct diag_anomaly a = {
		.step = 4,
		.iteration = 4,
		.nan = nan,
		.posinf = pos,
		.neginf = neg,
		.finite_max_abs = 2.5,
		.phase = "forward",
		.layer = "blocks.0.f",
		.module = module,
		.dtype = "float32",
		.module_id = MODULE,
		.inputs_finite = 1,
		.params_finite = 1,
		.depth = 3,
	};

	return a;
}

/* One incident: the anomaly, its call's facts, the next iteration; the cause. */
static const char *conclude_with(struct diagnosis *g, struct diag_anomaly *a,
				 struct evidence_facts *x)
{
	struct diag_anomaly next = origin("Linear", 1, 0, 0);
	struct diag d;

	diagnose__init(&d);
	assert_int_equal(diagnose__observe(&d, a), 0);
	if (x) {
		x->module = MODULE;
		x->iteration = a->iteration;
		diagnose__facts(&d, x);
	}
	next.iteration = a->iteration + 1;
	assert_int_equal(diagnose__observe(&d, &next), 1);
	assert_int_equal(diagnose__conclude(&d, g), 0);
	assert_true(g->nevidence > 0 && g->confidence > 0 && g->confidence <= 1);
	return g->cause;
}

static int said(const struct diagnosis *g, const char *part)
{
	int i;

	for (i = 0; i < g->nevidence; i++)
		if (strstr(g->evidence[i], part))
			return 1;
	return 0;
}

static void test_zero_norm_in_a_norm_class(void **state)
{
	/* x / x.norm(dim=-1): an all-zero row is 0/0; nothing computed a variance */
	const float x[] = {0.5, -1, 2, 0, 0, 0, 1, 1.5, -2};
	struct evidence_facts fx = {.n = 1};
	struct diag_anomaly a = origin("L2Norm", 3, 0, 0);
	struct diagnosis g;

	(void)state;
	scan_f32(&fx.t[0], x, 3, 3, "input[0]", EVIDENCE_INPUT);
	assert_string_equal(conclude_with(&g, &a, &fx), "division_by_zero");
	assert_true(said(&g, "1 of 3 rows along the last dimension are all zero"));
}

static void test_softmax_exp_overflow_in_attention_class(void **state)
{
	/* exp(s) / exp(s).sum(): 104.2 > 88.72, Inf/Inf; no -inf anywhere */
	const float s[] = {1, 104.2f, -3, 2, 0.5f, 7};
	struct evidence_facts fx = {.n = 1};
	struct diag_anomaly a = origin("SelfAttention", 3, 0, 0);
	struct diagnosis g;

	(void)state;
	scan_f32(&fx.t[0], s, 2, 3, "input[0]", EVIDENCE_INPUT);
	assert_string_equal(conclude_with(&g, &a, &fx), "exp_overflow");
	assert_true(said(&g, "104.2") && said(&g, "88.72"));
}

static void test_exp_of_learned_scale(void **state)
{
	/* logit_scale.exp() * sims: a learned log-scale past the threshold, a parameter */
	const float scale[] = {95.0f};
	const float sims[] = {0.5f, -0.25f, 1, -1};
	struct evidence_facts fx = {.n = 2};
	struct diag_anomaly a = origin("Clip", 3, 0, 0);
	struct diagnosis g;

	(void)state;
	scan_f32(&fx.t[0], sims, 2, 2, "input[0]", EVIDENCE_INPUT);
	scan_f32(&fx.t[1], scale, 1, 1, "logit_scale", EVIDENCE_PARAM);
	assert_string_equal(conclude_with(&g, &a, &fx), "exp_overflow");
	assert_true(said(&g, "parameter logit_scale: 95"));
	assert_true(g.nfixes > 0 && strstr(g.fixes[0], "bound the learned log-scale"));
	/* an input past it: the row maximum's fix */
	fx.t[1].role = EVIDENCE_INPUT;
	assert_string_equal(conclude_with(&g, &a, &fx), "exp_overflow");
	assert_true(g.nfixes > 0 && strstr(g.fixes[0], "row maximum"));
}

static void test_masked_average_zero_over_zero(void **state)
{
	/* (x * m).sum(-1) / m.sum(-1), a mask row with nothing selected */
	const float x[] = {-1, 2, -3, 4, 5, -6};
	const float m[] = {1, 0, 1, 0, 0, 0};
	struct evidence_facts fx = {.n = 2};
	struct diag_anomaly a = origin("MaskedMean", 1, 0, 0);
	struct diagnosis g;

	(void)state;
	scan_f32(&fx.t[0], x, 2, 3, "input[0]", EVIDENCE_INPUT);
	scan_f32(&fx.t[1], m, 2, 3, "input[1]", EVIDENCE_INPUT);
	assert_string_equal(conclude_with(&g, &a, &fx), "division_by_zero");
	assert_true(said(&g, "input[1] (float32): 1 of 2 rows"));
}

static void test_constant_rows_and_the_name(void **state)
{
	const float x[] = {3, 3, 3, 1, 2, 4};
	struct evidence_facts fx = {.n = 1};
	struct diag_anomaly a = origin("Standardize", 3, 0, 0);
	struct diagnosis g;
	double plain;

	(void)state;
	scan_f32(&fx.t[0], x, 2, 3, "input[0]", EVIDENCE_INPUT);
	assert_string_equal(conclude_with(&g, &a, &fx), "norm_zero_variance");
	plain = g.confidence;
	a.module = "MyLayerNorm"; /* the name agrees: more confidence, same cause */
	assert_string_equal(conclude_with(&g, &a, &fx), "norm_zero_variance");
	assert_true(g.confidence > plain);
}

static void test_mask_rows_decide_attention(void **state)
{
	const uint8_t pad[] = {0, 0, 1, 1, 1, 1};
	const float x[] = {0.1f, -0.2f, 0.3f, 0.4f};
	struct evidence_facts fx = {.n = 2};
	struct diag_anomaly a = origin("Mixer", 2, 0, 0);
	__u64 shape[2] = {2, 3};
	struct diagnosis g;

	(void)state;
	scan_f32(&fx.t[0], x, 2, 2, "input[0]", EVIDENCE_INPUT);
	assert_int_equal(evidence__scan(pad, 6, "bool", shape, 2, &fx.t[1]), 0);
	snprintf(fx.t[1].name, sizeof(fx.t[1].name), "input[1]");
	assert_string_equal(conclude_with(&g, &a, &fx), "attention_fully_masked");
	assert_true(said(&g, "1 of 2 rows along the last dimension are all true"));
}

/* An attention layer whose captured tensors show nothing: the name alone decides nothing. */
static void test_attention_name_alone(void **state)
{
	const float x[] = {0.1f, -0.2f, 0.3f, 0.4f};
	struct evidence_facts fx = {.n = 1};
	struct diag_anomaly a = origin("MultiheadAttention", 2, 0, 0);
	struct diagnosis g;

	(void)state;
	scan_f32(&fx.t[0], x, 2, 2, "input[0]", EVIDENCE_INPUT);
	assert_string_equal(conclude_with(&g, &a, &fx), "unknown");
	assert_true(g.confidence < 0.5);
	assert_true(said(&g, "can be neither seen nor ruled out"));
}

static void test_mask_buffer_row_all_neginf(void **state)
{
	const float x[] = {0.1f, -0.2f, 0.3f, 0.4f};
	const float m[] = {0, -INFINITY, -INFINITY, -INFINITY};
	struct evidence_facts fx = {.n = 2};
	struct diag_anomaly a = origin("Block", 2, 0, 0);
	struct diagnosis g;

	(void)state;
	scan_f32(&fx.t[0], x, 2, 2, "input[0]", EVIDENCE_INPUT);
	scan_f32(&fx.t[1], m, 2, 2, "causal", EVIDENCE_BUFFER);
	assert_string_equal(conclude_with(&g, &a, &fx), "attention_fully_masked");
	assert_true(said(&g, "buffer causal (float32): 1 of 2 rows along the last dimension are "
			     "all -Inf"));
}

static void test_inf_zero_parameter_or_large_one(void **state)
{
	const float x[] = {0.3f, -0.7f, 0.9f, -0.1f};
	const float t[] = {0};
	const float k[] = {95};
	struct evidence_facts fx = {.n = 2};
	struct diag_anomaly a = origin("Scale", 0, 2, 2);
	struct diagnosis g;

	(void)state;
	scan_f32(&fx.t[0], x, 2, 2, "input[0]", EVIDENCE_INPUT);
	scan_f32(&fx.t[1], t, 1, 1, "temperature", EVIDENCE_PARAM);
	assert_string_equal(conclude_with(&g, &a, &fx), "division_by_zero");
	assert_true(said(&g, "parameter temperature holds 1 zeros"));
	scan_f32(&fx.t[1], k, 1, 1, "k", EVIDENCE_BUFFER);
	a = origin("Gate", 0, 3, 0);
	assert_string_equal(conclude_with(&g, &a, &fx), "exp_overflow");
	assert_true(said(&g, "buffer k: 95"));
}

static void test_scan_probability_rows(void **state)
{
	/* a softmax row, a one-hot row, a row past 1, a row with a negative value */
	const float v[] = {0.25f, 0.5f, 0.25f, 0, 1, 0, 0, 1.5f, 0, -0.5f, 1, 0.5f};
	const uint16_t h[] = {0x3800, 0x3400, 0x3400}; /* float16 0.5, 0.25, 0.25 */
	__u64 hs[1] = {3};
	struct tensor_facts f;

	(void)state;
	scan_f32(&f, v, 4, 3, "input[0]", EVIDENCE_INPUT);
	assert_int_equal(f.prob_rows, 2);
	memset(&f, 0, sizeof(f));
	assert_int_equal(evidence__scan(h, sizeof(h), "float16", hs, 1, &f), 0);
	assert_int_equal(f.prob_rows, 1);
}

/* ±Inf from zeros: log(0) when the zeros are probabilities, else a division by 0. */
static void test_inf_from_zero_probability(void **state)
{
	const float p[] = {1, 0, 0, 0, 0.25f, 0.75f, 0, 0};
	const float x[] = {0.5f, 0, 2, 0, 1, 3, 1, 1};
	const float t[] = {0};
	struct evidence_facts fx = {.n = 1};
	struct diag_anomaly a = origin("ProbNLL", 0, 1, 0);
	struct diagnosis g;

	(void)state;
	scan_f32(&fx.t[0], p, 2, 4, "input[0]", EVIDENCE_INPUT);
	assert_string_equal(conclude_with(&g, &a, &fx), "loss_log_zero");
	assert_true(said(&g, "all 2 rows along the last dimension are probability distributions"));
	assert_true(fabs(g.confidence - 0.75) < 1e-9);
	/* the same zeros in rows that are not distributions: a division */
	scan_f32(&fx.t[0], x, 2, 4, "input[0]", EVIDENCE_INPUT);
	assert_string_equal(conclude_with(&g, &a, &fx), "division_by_zero");
	/* Inf of both signs: log(0) makes one */
	scan_f32(&fx.t[0], p, 2, 4, "input[0]", EVIDENCE_INPUT);
	a = origin("ProbNLL", 0, 2, 2);
	assert_string_equal(conclude_with(&g, &a, &fx), "division_by_zero");
	/* a zero temperature beside the probabilities: a division fits as well as the log */
	fx.n = 2;
	scan_f32(&fx.t[1], t, 1, 1, "temperature", EVIDENCE_PARAM);
	a = origin("ProbNLL", 0, 1, 0);
	assert_string_equal(conclude_with(&g, &a, &fx), "division_by_zero");
}

/* float16 does not decide alone: a zero reaching the layer with nothing near the range. */
static void test_fp16_from_values(void **state)
{
	const float p[] = {1, 0, 0, 0, 0.25f, 0.75f, 0, 0};
	const float x[] = {0.5f, 1, 2, 3, 1, 3, 1, 1};
	struct evidence_facts fx = {.n = 1};
	struct diag_anomaly a = origin("ProbNLL", 0, 1, 0);
	struct diagnosis g;

	(void)state;
	a.dtype = "float16";
	scan_f32(&fx.t[0], p, 2, 4, "input[0]", EVIDENCE_INPUT);
	assert_string_equal(conclude_with(&g, &a, &fx), "loss_log_zero");
	/* no zero anywhere, values near the float16 maximum: an overflow, two facts */
	scan_f32(&fx.t[0], x, 2, 4, "input[0]", EVIDENCE_INPUT);
	a.finite_max_abs = 60000;
	assert_string_equal(conclude_with(&g, &a, &fx), "fp16_overflow");
	assert_true(fabs(g.confidence - 0.75) < 1e-9);
	/* a zero, but the output's finite values reach the range: still an overflow */
	scan_f32(&fx.t[0], p, 2, 4, "input[0]", EVIDENCE_INPUT);
	assert_string_equal(conclude_with(&g, &a, &fx), "fp16_overflow");
	assert_true(fabs(g.confidence - 0.55) < 1e-9);
}

static void test_negatives(void **state)
{
	const float x[] = {0.5f, -0.2f, 1.5f, 2};
	const float var[] = {1, 0.5f, -0.5f, 1, 2, 1, 1, 1, 1, 1, 1, 1};
	struct evidence_facts fx = {.n = 1};
	struct diag_anomaly a = origin("Feature", 4, 0, 0);
	struct diagnosis g;
	double weak;

	(void)state;
	scan_f32(&fx.t[0], x, 1, 4, "input[0]", EVIDENCE_INPUT);
	assert_string_equal(conclude_with(&g, &a, &fx), "invalid_domain");
	weak = g.confidence;
	/* a negative in a buffer otherwise >= 0 (a running variance): a second fact */
	fx.n = 2;
	scan_f32(&fx.t[1], var, 1, 12, "running_var", EVIDENCE_BUFFER);
	assert_string_equal(conclude_with(&g, &a, &fx), "invalid_domain");
	assert_true(g.confidence > weak);
	assert_true(said(&g, "buffer running_var, otherwise non-negative, holds 1 negative"));
}

static void test_nothing_or_another_call(void **state)
{
	const float x[] = {0.5f, 0.2f, 1.5f, 2};
	struct evidence_facts fx = {.n = 1};
	struct diag_anomaly a = origin("Feature", 4, 0, 0);
	struct diagnosis g;
	struct diag d;

	(void)state;
	scan_f32(&fx.t[0], x, 1, 4, "input[0]", EVIDENCE_INPUT);
	assert_string_equal(conclude_with(&g, &a, &fx), "unknown");
	assert_true(said(&g, "none of its 1 captured tensors"));
	/* facts of another module's call are not this one's */
	diagnose__init(&d);
	fx.module = MODULE + 8;
	fx.iteration = 4;
	diagnose__observe(&d, &a);
	diagnose__facts(&d, &fx);
	a.iteration = 5;
	diagnose__observe(&d, &a);
	assert_int_equal(diagnose__conclude(&d, &g), 0);
	assert_string_equal(g.cause, "unknown");
	assert_true(said(&g, "not captured"));
}

/* The call's autograd ops, from its output back ("" for a class not known). */
static void with_ops(struct evidence_facts *x, const char *const *ops)
{
	int i;

	for (i = 0; ops[i] && i < EVIDENCE_MAX_OPS; i++)
		snprintf(x->ops[i], sizeof(x->ops[i]), "%s", ops[i]);
	x->nops = i;
	x->parents = 0;
}

/* The walk's edges for the ops set last: parent[i] the op that takes op i's output. */
static void with_edges(struct evidence_facts *x, const int *parent)
{
	int i;

	for (i = 0; i < x->nops; i++)
		x->op_parent[i] = parent[i];
	x->parents = 1;
}

static void test_scan_constant_columns(void **state)
{
	/* a one-hot column that is 1 in every row, one that is 0 in every row */
	const float v[] = {0.3f, 1, 0, 0.9f, 1, 0, -2, 1, 0};
	struct tensor_facts f;

	(void)state;
	scan_f32(&f, v, 3, 3, "input[0]", EVIDENCE_INPUT);
	assert_int_equal(f.const_cols, 2);
	assert_int_equal(f.const_rows, 0);
	scan_f32(&f, v, 1, 9, "input[0]", EVIDENCE_INPUT);
	assert_int_equal(f.const_cols, 0); /* one row: no spread to speak of */
}

static void test_ops_log_of_underflow(void **state)
{
	/* -log(softmax(logits)[target]): logits far apart, no zero among the inputs */
	const float logits[] = {3000, -2000, 5, 1, 2, 3};
	const char *const ops[] = {"mean", "neg", "log", "gather", "softmax", NULL};
	struct evidence_facts fx = {.n = 1};
	struct diag_anomaly a = origin("ProbNLL", 0, 1, 0);
	struct diagnosis g;

	(void)state;
	scan_f32(&fx.t[0], logits, 2, 3, "input[0]", EVIDENCE_INPUT);
	/* the values alone: a logit above exp's threshold */
	assert_string_equal(conclude_with(&g, &a, &fx), "exp_overflow");
	with_ops(&fx, ops);
	assert_string_equal(conclude_with(&g, &a, &fx), "loss_log_zero");
	assert_true(said(&g, "takes no exp"));
	assert_true(said(&g, "takes log of what softmax made"));
	assert_true(said(&g, "from its output back (autograd): mean, neg, log, gather, softmax"));
	/* what it rests on: the captured values and the call's ops */
	assert_int_equal(g.nbasis, 2);
	assert_string_equal(g.basis[0], "input_values");
	assert_string_equal(g.basis[1], "operations");
	/* an exp among the ops: the threshold counts */
	with_ops(&fx, (const char *const[]){"log", "sum", "exp", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "exp_overflow");
}

static void test_ops_nan(void **state)
{
	/* readings far above exp's threshold, a small spread: no exp, a sqrt of a difference */
	const float readings[] = {3000.01f, 3000.02f, 3000.0f, 3000.03f};
	/* a one-hot feature constant down the batch, a continuous one */
	const float batch[] = {1, 0.5f, 1, -0.25f, 1, 2};
	/* a teacher's probabilities with exact zeros (rows sum to 1) */
	const float teacher[] = {0.75f, 0.25f, 0, 1, 0, 0};
	struct evidence_facts fx = {.n = 1};
	struct diag_anomaly a = origin("FastNorm", 3, 0, 0);
	struct diagnosis g;

	(void)state;
	scan_f32(&fx.t[0], readings, 1, 4, "input[0]", EVIDENCE_INPUT);
	assert_string_equal(conclude_with(&g, &a, &fx), "exp_overflow");
	with_ops(&fx, (const char *const[]){"mul", "div", "sub", "sqrt", "mean", "add", "sub",
					    "mean", "mul", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "invalid_domain");
	assert_true(said(&g, "sqrt's argument comes from a subtraction (sub)"));
	/* a first layer: ops on the batch (no gradient) left no node, an exp may be among them */
	with_ops(&fx, (const char *const[]){"mul", NULL});
	fx.ops_partial = 1;
	assert_string_equal(conclude_with(&g, &a, &fx), "exp_overflow");
	assert_true(
		said(&g, "(autograd): mul, and ops on tensors that need no gradient (no node)"));
	assert_string_equal(g.basis[1], "operations_partial");
	fx.ops_partial = 0;
	/* a division by a standard deviation over a constant feature */
	a = origin("BatchStandardize", 2, 0, 0);
	scan_f32(&fx.t[0], batch, 3, 2, "input[0]", EVIDENCE_INPUT);
	with_ops(&fx, (const char *const[]){"add", "mul", "div", "sub", "std", "mean", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "norm_zero_variance");
	assert_true(said(&g, "1 of its 2 features (last dimension) are the same in every row"));
	/* an all-zero row into a root mean square (RMSNorm without eps), or into an L2 norm */
	a = origin("RMSNorm", 3, 0, 0);
	scan_f32(&fx.t[0], (const float[]){0.5f, -1, 0, 0}, 2, 2, "input[0]", EVIDENCE_INPUT);
	with_ops(&fx, (const char *const[]){"mul", "div", "sqrt", "mean", "pow", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "norm_zero_variance");
	assert_true(said(&g, "divides by a root mean square (sqrt of a mean)"));
	with_ops(&fx, (const char *const[]){"mul", "div", "linalg_vector_norm", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "division_by_zero");
	scan_f32(&fx.t[0], batch, 3, 2, "input[0]", EVIDENCE_INPUT);
	/* a norm over a running variance with a negative value: sqrt of it */
	a = origin("BatchNorm1d", 2, 0, 0);
	fx.n = 2;
	scan_f32(&fx.t[1], (const float[]){1, 0.5f, -0.25f, 2, 1, 1, 3, 1, 1, 1, 2, 1}, 1, 12,
		 "running_var", EVIDENCE_BUFFER);
	with_ops(&fx, (const char *const[]){"native_batch_norm", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "invalid_domain");
	fx.n = 1;
	/* a division by a count the call made: 0/0 */
	a = origin("Prototypes", 8, 0, 0);
	with_ops(&fx, (const char *const[]){"div", "mm", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "division_by_zero");
	/* 0 * log(0) of a probability that needs no gradient (no log node) */
	a = origin("SoftTargetKL", 1, 0, 0);
	fx.n = 2;
	scan_f32(&fx.t[1], teacher, 2, 3, "input[1]", EVIDENCE_INPUT);
	with_ops(&fx, (const char *const[]){"mean", "sum", "mul", "sub", "log_softmax", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "loss_log_zero");
	/* ... and without the ops the values alone say less */
	fx.nops = 0;
	assert_string_not_equal(conclude_with(&g, &a, &fx), "loss_log_zero");
}

/* What a forward's co_names hold, through the names the rules know. */
static void with_code(struct evidence_facts *x, const char *const *names)
{
	char op[EVIDENCE_OP_LEN];
	int i;

	x->ncode = 0;
	for (i = 0; names[i]; i++)
		if (diagnose__code_op(names[i], op, sizeof(op)))
			memcpy(x->code_ops[x->ncode++], op, sizeof(op));
}

static void test_code_op_names(void **state)
{
	char op[EVIDENCE_OP_LEN];

	(void)state;
	assert_int_equal(diagnose__code_op("std", op, sizeof(op)), 1);
	assert_string_equal(op, "std");
	assert_int_equal(diagnose__code_op("sqrt_", op, sizeof(op)), 1);
	assert_string_equal(op, "sqrt");
	assert_int_equal(diagnose__code_op("layer_norm", op, sizeof(op)), 1);
	assert_string_equal(op, "native_layer_norm");
	assert_int_equal(diagnose__code_op("true_divide", op, sizeof(op)), 1);
	assert_string_equal(op, "div");
	assert_int_equal(diagnose__code_op("masked_fill_", op, sizeof(op)), 1);
	assert_string_equal(op, "masked_fill");
	/* attributes and globals that are no op, private names, an op's name cut short */
	assert_int_equal(diagnose__code_op("weight", op, sizeof(op)), 0);
	assert_int_equal(diagnose__code_op("torch", op, sizeof(op)), 0);
	assert_int_equal(diagnose__code_op("_sqrt", op, sizeof(op)), 0);
	assert_int_equal(diagnose__code_op("_", op, sizeof(op)), 0);
	assert_int_equal(diagnose__code_op("", op, sizeof(op)), 0);
	assert_int_equal(diagnose__code_op("sqrt", op, 3), 0);
}

/*
 * A first layer: the ops on the batch (no gradient) left no autograd node, and the code of its
 * forward names them.
 */
static void test_code_ops_of_a_first_layer(void **state)
{
	const float readings[] = {3000.01f, 3000.02f, 3000.0f, 3000.03f};
	const float batch[] = {1, 0.5f, 1, -0.25f, 1, 2};
	const char *const partial[] = {"mul", NULL};
	struct evidence_facts fx = {.n = 1};
	struct diag_anomaly a = origin("FastNorm", 3, 0, 0);
	struct diagnosis g;

	(void)state;
	scan_f32(&fx.t[0], readings, 1, 4, "input[0]", EVIDENCE_INPUT);
	with_ops(&fx, partial);
	fx.ops_partial = 1;
	assert_string_equal(conclude_with(&g, &a, &fx), "exp_overflow");
	/* sqrt((x * x).mean() - mean * mean + eps): the code names a sqrt and no exp */
	with_code(&fx, (const char *const[]){"mean", "torch", "sqrt", "eps", "weight", NULL});
	assert_int_equal(fx.ncode, 2);
	assert_string_equal(conclude_with(&g, &a, &fx), "invalid_domain");
	assert_true(said(&g, "(FastNorm.forward) names, where autograd did not record them all: "
			     "mean, sqrt"));
	assert_true(said(&g, "the layer's code names no exp; it names sqrt"));
	assert_int_equal(g.nbasis, 3);
	assert_string_equal(g.basis[1], "operations_partial");
	assert_string_equal(g.basis[2], "operations_code");
	/* an exp named in the code: the threshold counts again */
	with_code(&fx, (const char *const[]){"mean", "sqrt", "exp", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "exp_overflow");
	/* (x - x.mean(0)) / x.std(0) over a batch with a constant feature */
	a = origin("BatchStandardize", 2, 0, 0);
	scan_f32(&fx.t[0], batch, 3, 2, "input[0]", EVIDENCE_INPUT);
	fx.ncode = 0;
	assert_string_not_equal(conclude_with(&g, &a, &fx), "norm_zero_variance");
	with_code(&fx, (const char *const[]){"mean", "std", "weight", "bias", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "norm_zero_variance");
	assert_true(said(&g, "the call divides by a spread (std)"));
	/* a root mean square of an all-zero row: x / x.pow(2).mean(-1).sqrt(), "/" unnamed */
	a = origin("RMSNorm", 3, 0, 0);
	scan_f32(&fx.t[0], (const float[]){0.5f, -1, 0, 0}, 2, 2, "input[0]", EVIDENCE_INPUT);
	with_code(&fx, (const char *const[]){"pow", "mean", "sqrt", "weight", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "norm_zero_variance");
	assert_true(said(&g, "divides by a root mean square (sqrt of a mean)"));
	/* no autograd at all (no_grad): the code's names alone */
	fx.nops = 0;
	fx.ops_partial = 0;
	assert_string_equal(conclude_with(&g, &a, &fx), "norm_zero_variance");
	assert_true(g.nbasis == 2 && !strcmp(g.basis[1], "operations_code"));
}

/*
 * softmax(logits / t) with a temperature buffer annealed to 0, under no_grad (a teacher): NaN
 * only, the code names softmax alone, the inputs hold negatives. The zero scalar is the
 * division; not where the whole graph is known and holds none, nor a zero input or a zero
 * among many values.
 */
static void test_nan_zero_scalar(void **state)
{
	const float logits[] = {0.5f, -0.25f, 1, -1, 2, 0.75f};
	const float zero = 0, zeros[] = {0, 0, 0};
	struct evidence_facts fx = {.n = 2};
	struct diag_anomaly a = origin("Sharpen", 6, 0, 0);
	struct diagnosis g;

	(void)state;
	scan_f32(&fx.t[0], logits, 2, 3, "input[0]", EVIDENCE_INPUT);
	scan_f32(&fx.t[1], &zero, 1, 1, "t", EVIDENCE_BUFFER);
	with_code(&fx, (const char *const[]){"F", "softmax", "t", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "division_by_zero");
	assert_true(said(&g, "buffer t is a single value, 0: a division by it is"));
	assert_true(said(&g, "softmax over ±Inf values is NaN"));
	assert_true(g.confidence >= 0.7);
	/* the code names no softmax: the zero alone, less sure */
	with_code(&fx, (const char *const[]){"t", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "division_by_zero");
	assert_true(g.confidence < 0.7);
	/* autograd saw every op and none divides: not this */
	fx.ncode = 0;
	with_ops(&fx, (const char *const[]){"softmax", "mul", NULL});
	fx.ops_partial = 0;
	assert_string_not_equal(conclude_with(&g, &a, &fx), "division_by_zero");
	with_ops(&fx, (const char *const[]){"softmax", "div", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "division_by_zero");
	/* a parameter of three zeros (a bias), or a zero passed in: no sign */
	fx.nops = 0;
	with_code(&fx, (const char *const[]){"softmax", NULL});
	scan_f32(&fx.t[1], zeros, 1, 3, "bias", EVIDENCE_PARAM);
	assert_string_not_equal(conclude_with(&g, &a, &fx), "division_by_zero");
	scan_f32(&fx.t[1], &zero, 1, 1, "input[1]", EVIDENCE_INPUT);
	assert_string_not_equal(conclude_with(&g, &a, &fx), "division_by_zero");
}

/*
 * (x - x.mean(0)) / (x.std(0) + 1e-5) on the epoch's last batch, of one sample: the std over a
 * dimension of one value is NaN (n - 1 = 0), not a zero variance an epsilon would mend. With
 * two rows, or one constant row, or a 1-d input, it is the spread's zero again.
 */
static void test_nan_std_of_one_row(void **state)
{
	const float row[] = {0.5f, -1, 2, 0.25f}, rows[] = {0.5f, -1, 2, 0.25f, 1, 1, -2, 3};
	const float same[] = {2, 2, 2, 2};
	const char *const ops[] = {"div", "sub", "add", "mean", "std", NULL};
	struct evidence_facts fx = {.n = 1};
	struct diag_anomaly a = origin("Standardize", 4, 0, 0);
	struct diagnosis g;
	__u64 shape1[1] = {4};

	(void)state;
	scan_f32(&fx.t[0], row, 1, 4, "input[0]", EVIDENCE_INPUT);
	with_ops(&fx, ops);
	assert_string_equal(conclude_with(&g, &a, &fx), "norm_zero_variance");
	assert_true(said(&g, "input[0] (float32) is one row of 4 values that are not all equal"));
	assert_true(said(&g, "divides by n - 1 = 0"));
	assert_true(strstr(g.fixes[0], "correction=0") != NULL);
	/* var_mean too */
	with_ops(&fx, (const char *const[]){"div", "var_mean", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "norm_zero_variance");
	assert_true(said(&g, "divides by n - 1 = 0"));
	/* two rows: the spread's zero, as before */
	scan_f32(&fx.t[0], rows, 2, 4, "input[0]", EVIDENCE_INPUT);
	with_ops(&fx, ops);
	assert_string_equal(conclude_with(&g, &a, &fx), "norm_zero_variance");
	assert_false(said(&g, "n - 1 = 0"));
	/* one constant row: its spread is 0 */
	scan_f32(&fx.t[0], same, 1, 4, "input[0]", EVIDENCE_INPUT);
	assert_string_equal(conclude_with(&g, &a, &fx), "norm_zero_variance");
	assert_false(said(&g, "n - 1 = 0"));
	/* a 1-d input of 4 values: no dimension of one */
	memset(&fx.t[0], 0, sizeof(fx.t[0]));
	assert_int_equal(evidence__scan(row, sizeof(row), "float32", shape1, 1, &fx.t[0]), 0);
	snprintf(fx.t[0].name, sizeof(fx.t[0].name), "input[0]");
	assert_string_equal(conclude_with(&g, &a, &fx), "norm_zero_variance");
	assert_false(said(&g, "n - 1 = 0"));
	/* a layer norm (over the last dimension): not this */
	scan_f32(&fx.t[0], row, 1, 4, "input[0]", EVIDENCE_INPUT);
	with_ops(&fx, (const char *const[]){"native_layer_norm", NULL});
	conclude_with(&g, &a, &fx);
	assert_false(said(&g, "n - 1 = 0"));
}

/*
 * -(p * log p) of p = softmax(logits), logits 9000 apart: some p are exactly 0, and 0 * log(0)
 * is NaN. The negatives are the logits': not a log of negatives. Logits close together, or
 * no multiplication among the ops: as before.
 */
static void test_nan_entropy_of_zero_probability(void **state)
{
	const float wide[] = {-5712, 3532, 0.5f, 1, -2, 0.25f};
	const float close[] = {-3, 2, 0.5f, 1, -2, 0.25f};
	const char *const entropy[] = {"neg", "mean", "sum", "mul", "softmax", "log", NULL};
	struct evidence_facts fx = {.n = 1};
	struct diag_anomaly a = origin("Entropy", 1, 0, 0);
	struct diagnosis g;

	(void)state;
	scan_f32(&fx.t[0], wide, 2, 3, "input[0]", EVIDENCE_INPUT);
	with_ops(&fx, entropy);
	assert_string_equal(conclude_with(&g, &a, &fx), "loss_log_zero");
	assert_true(said(&g, "input[0] spans 9244 (from -5712 to 3532)"));
	assert_true(said(&g, "takes log of what softmax made, and multiplies"));
	assert_true(strstr(g.fixes[0], "torch.special.entr") != NULL);
	/* without autograd, the code's names (no name for "*") */
	fx.nops = 0;
	with_code(&fx, (const char *const[]){"torch", "softmax", "log", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "loss_log_zero");
	fx.ncode = 0;
	/* the same ops with logits close together: no probability is 0 */
	scan_f32(&fx.t[0], close, 2, 3, "input[0]", EVIDENCE_INPUT);
	with_ops(&fx, entropy);
	assert_string_equal(conclude_with(&g, &a, &fx), "invalid_domain");
	/* far apart, but no multiplication: not p * log p */
	scan_f32(&fx.t[0], wide, 2, 3, "input[0]", EVIDENCE_INPUT);
	with_ops(&fx, (const char *const[]){"neg", "sum", "softmax", "log", NULL});
	assert_string_not_equal(conclude_with(&g, &a, &fx), "loss_log_zero");
}

/*
 * acos of a cosine made as a dot product over norms, rounding past 1: its domain is [-1, 1],
 * so the input's negatives say nothing and the fix clamps into it. And a binary cross-entropy
 * by hand, y * log(sigmoid(x)): its fixes are the log-sigmoid ones.
 */
static void test_nan_acos_and_log_sigmoid(void **state)
{
	const float x[] = {-1.25f, 0.5f, 2, -0.75f};
	const float wide[] = {-435.7f, 176.3f, 0.5f, 1};
	struct evidence_facts fx = {.n = 1};
	struct diag_anomaly a = origin("Angle", 2, 0, 0);
	struct diagnosis g;

	(void)state;
	scan_f32(&fx.t[0], x, 2, 2, "input[0]", EVIDENCE_INPUT);
	with_ops(&fx, (const char *const[]){"acos", "div", "sum", "mul", "norm", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "invalid_domain");
	assert_true(said(&g, "acos of a value outside [-1, 1] is NaN"));
	assert_true(said(&g, "ratio the call made (div)"));
	assert_false(said(&g, "negative values reach it"));
	assert_true(strstr(g.fixes[0], "clamp(-1 + 1e-7, 1 - 1e-7)") != NULL);
	/* a sqrt: the negatives are the fact, as before */
	with_ops(&fx, (const char *const[]){"sqrt", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "invalid_domain");
	assert_true(said(&g, "negative values reach it"));
	a = origin("BCE", 1, 0, 0);
	scan_f32(&fx.t[0], wide, 2, 2, "input[0]", EVIDENCE_INPUT);
	with_ops(&fx, (const char *const[]){"neg", "mean", "add", "mul", "mul", "log", "log",
					    "sigmoid", "rsub", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "loss_log_zero");
	assert_true(said(&g, "takes log of what sigmoid made, and multiplies"));
	assert_true(strstr(g.fixes[0], "F.logsigmoid") != NULL);
}

/*
 * A tanh-squashed Gaussian's log-probability, log(1 - tanh(u)^2), with u past 9: tanh is 1,
 * log(0) = -Inf (negated: +Inf). The observation reaching the policy is above exp's
 * threshold, but its one exp takes a clamp's output (the log-std clamped). Without the walk's
 * edges the value fact still decides for exp, as before; with an exp of a Linear's output it
 * decides again. log1p(-sigmoid(x)) is the same log of 0.
 */
static void test_saturated_log_bounded_exp(void **state)
{
	const float obs[] = {0.3f, -1.1f, 672, 0.8f};
	const float small[] = {0.3f, -1.1f, 4, 0.8f};
	struct evidence_facts fx = {.n = 1};
	struct diag_anomaly a = origin("Policy", 0, 1, 0);
	struct diagnosis g;

	(void)state;
	scan_f32(&fx.t[0], obs, 2, 2, "input[0]", EVIDENCE_INPUT);
	with_ops(&fx, (const char *const[]){"sub", "log", "rsub", "pow", "exp", "clamp", "tanh",
					    "addmm", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "exp_overflow");
	with_edges(&fx, (const int[]){-1, 0, 1, 2, 0, 4, 3, 5});
	assert_string_equal(conclude_with(&g, &a, &fx), "loss_log_zero");
	assert_true(said(&g, "takes log of 1 minus what tanh made"));
	assert_true(said(&g, "the call's exp takes what clamp made: a bounded exponent"));
	assert_true(strstr(g.fixes[0], "F.softplus(-2 * u)") != NULL);
	/* a clamp may have no max: with no other explanation its exp can still overflow */
	with_ops(&fx, (const char *const[]){"sub", "exp", "clamp", "addmm", NULL});
	with_edges(&fx, (const int[]){-1, 0, 1, 2});
	assert_string_equal(conclude_with(&g, &a, &fx), "exp_overflow");
	/* ... a clamp_max is a bound */
	with_ops(&fx, (const char *const[]){"sub", "exp", "clamp_max", "addmm", NULL});
	with_edges(&fx, (const int[]){-1, 0, 1, 2});
	assert_string_not_equal(conclude_with(&g, &a, &fx), "exp_overflow");
	assert_true(said(&g, "what clamp_max made: a bounded exponent"));
	with_ops(&fx, (const char *const[]){"sub", "log", "rsub", "pow", "exp", "clamp", "tanh",
					    "addmm", NULL});
	/* the exp takes the Linear's output: the value can reach it */
	with_edges(&fx, (const int[]){-1, 0, 1, 2, 0, 6, 3, 4});
	assert_string_equal(conclude_with(&g, &a, &fx), "exp_overflow");
	assert_false(said(&g, "a bounded exponent"));
	/* log1p(-sigmoid(x)) */
	a = origin("Gate", 0, 0, 2);
	scan_f32(&fx.t[0], small, 2, 2, "input[0]", EVIDENCE_INPUT);
	with_ops(&fx, (const char *const[]){"log1p", "neg", "sigmoid", "addmm", NULL});
	with_edges(&fx, (const int[]){-1, 0, 1, 2});
	assert_string_equal(conclude_with(&g, &a, &fx), "loss_log_zero");
	assert_true(said(&g, "takes log1p of minus what sigmoid made: log(1 - it)"));
	assert_true(strstr(g.fixes[0], "F.logsigmoid(-x)") != NULL);
}

/*
 * A NaN from finite inputs whose call divides what it made: 0/0 of a count; or, where the div
 * takes a softmax's scores (gumbel_softmax at tau 0), a temperature of 0.
 */
static void test_div_made(void **state)
{
	const float x[] = {0.3f, -1.1f, 2, 0.8f};
	struct evidence_facts fx = {.n = 1};
	struct diag_anomaly a = origin("Sampler", 8, 0, 0);
	struct diagnosis g;

	(void)state;
	scan_f32(&fx.t[0], x, 2, 2, "input[0]", EVIDENCE_INPUT);
	with_ops(&fx, (const char *const[]){"softmax", "div", "add", "addmm", "t", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "division_by_zero");
	assert_true(said(&g, "by a value it made itself"));
	with_edges(&fx, (const int[]){-1, 0, 1, 2, 3});
	assert_string_equal(conclude_with(&g, &a, &fx), "division_by_zero");
	assert_true(said(&g, "divides (div) the scores of a softmax"));
	assert_true(strstr(g.fixes[0], "temperature") != NULL);
	/* F.normalize(relu(fc(x)), eps=0): a norm of a dead row divided by */
	with_ops(&fx, (const char *const[]){"div", "relu", "expand", "addmm", "clamp_min", "t",
					    "norm", NULL});
	with_edges(&fx, (const int[]){-1, 0, 0, 1, 2, 3, 4});
	assert_string_equal(conclude_with(&g, &a, &fx), "division_by_zero");
	assert_true(said(&g, "the call divides (div) and takes a norm (norm)"));
	assert_true(strstr(g.fixes[0], "clamp_min(1e-12)") != NULL);
	/* a softmax over what a div fed elsewhere: the count's 0/0 */
	with_ops(&fx, (const char *const[]){"div", "sum", "softmax", "addmm", NULL});
	with_edges(&fx, (const int[]){-1, 0, 1, 2});
	assert_string_equal(conclude_with(&g, &a, &fx), "division_by_zero");
	assert_true(said(&g, "by a value it made itself"));
}

/*
 * exp(scores) / exp(scores).sum(-1, keepdim=True) in a layer's own code: Inf/Inf of an exp's
 * overflow, by the walk's edges (the div takes the exp and the sum, or the sum takes it).
 */
static void test_softmax_by_hand(void **state)
{
	const float x[] = {0.3f, -1.1f, 2, 0.8f};
	struct evidence_facts fx = {.n = 1};
	struct diag_anomaly a = origin("Attn", 2, 0, 0);
	struct diagnosis g;

	(void)state;
	scan_f32(&fx.t[0], x, 2, 2, "input[0]", EVIDENCE_INPUT);
	with_ops(&fx, (const char *const[]){"bmm", "div", "exp", "sum", "bmm", "addmm", NULL});
	with_edges(&fx, (const int[]){-1, 0, 1, 1, 2, 4});
	assert_string_equal(conclude_with(&g, &a, &fx), "exp_overflow");
	assert_true(said(&g, "divides an exp by a sum of exps (a softmax by hand"));
	assert_true(said(&g, "above 88.72 in float32, and Inf/Inf is NaN"));
	assert_true(strstr(g.fixes[0], "torch.softmax") != NULL);
	/* the exp reached through a view first: the sum takes it */
	with_ops(&fx, (const char *const[]){"div", "view", "sum", "exp", "bmm", NULL});
	with_edges(&fx, (const int[]){-1, 0, 0, 2, 3});
	assert_string_equal(conclude_with(&g, &a, &fx), "exp_overflow");
	/* a sum divided, with no exp under it: a count's 0/0 */
	with_ops(&fx, (const char *const[]){"div", "sum", "bmm", "exp", NULL});
	with_edges(&fx, (const int[]){-1, 0, 1, 2});
	assert_string_equal(conclude_with(&g, &a, &fx), "division_by_zero");
}

/*
 * logits.masked_fill(~allowed, -inf) returned as they are: -Inf alone, the mask's own fill.
 * What reads them goes wrong (a label-smoothed loss: loss_log_zero); with a mask row hiding
 * every position among the inputs, a softmax over it (attention_fully_masked). A masked_fill
 * that is not the last op, or NaN beside the -Inf, is judged as before.
 */
static void test_masked_fill_inf(void **state)
{
	const float x[] = {0.3f, -1.1f, 2, 0.8f};
	const uint8_t hide[] = {1, 1, 0, 1};
	__u64 ms[2] = {2, 2};
	struct evidence_facts fx = {.n = 1};
	struct diag_anomaly a = origin("LM", 0, 0, 320);
	struct diagnosis g;

	(void)state;
	scan_f32(&fx.t[0], x, 2, 2, "input[0]", EVIDENCE_INPUT);
	with_ops(&fx, (const char *const[]){"masked_fill", "addmm", "tanh", "embedding", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "loss_log_zero");
	assert_true(said(&g, "last op fills a mask (masked_fill) and it returned -Inf alone"));
	assert_true(strstr(g.fixes[0], "torch.finfo(scores.dtype).min") != NULL);
	/* a mask row hiding every position reached it */
	memset(&fx.t[1], 0, sizeof(fx.t[1]));
	assert_int_equal(evidence__scan(hide, sizeof(hide), "bool", ms, 2, &fx.t[1]), 0);
	snprintf(fx.t[1].name, sizeof(fx.t[1].name), "input[1]");
	fx.t[1].role = EVIDENCE_INPUT;
	fx.n = 2;
	assert_string_equal(conclude_with(&g, &a, &fx), "attention_fully_masked");
	assert_true(said(&g, "hides every position"));
	/* NaN beside it, or a masked_fill that is not the last op: not the mask's own fill */
	fx.n = 1;
	a.nan = 3;
	conclude_with(&g, &a, &fx);
	assert_false(said(&g, "last op fills a mask"));
	a.nan = 0;
	with_ops(&fx, (const char *const[]){"add", "masked_fill", "addmm", NULL});
	conclude_with(&g, &a, &fx);
	assert_false(said(&g, "last op fills a mask"));
}

/*
 * A BCE module by hand, -(y * log(p) + (1 - y) * log(1 - p)), given p from a sigmoid outside
 * it that rounded to exactly 1: log(1 - p) is -Inf, and a target of 0 times it NaN. Not a
 * domain op's negative (the subtraction made no negative). The 0/1 targets are no
 * probability: the input named is p.
 */
static void test_one_under_log(void **state)
{
	const float p[] = {0.25f, 1.0f, 0.5f, 1.0f}, y[] = {1, 0, 0, 1};
	struct evidence_facts fx = {.n = 2};
	struct diag_anomaly a = origin("BCE", 1, 0, 0);
	struct diagnosis g;

	(void)state;
	scan_f32(&fx.t[0], y, 4, 1, "input[1]", EVIDENCE_INPUT);
	scan_f32(&fx.t[1], p, 4, 1, "input[0]", EVIDENCE_INPUT);
	/* neg mean add(mul log [p], mul log rsub [p]) */
	with_ops(&fx, (const char *const[]){"neg", "mean", "add", "mul", "mul", "log", "log",
					    "rsub", NULL});
	with_edges(&fx, (const int[]){-1, 0, 1, 2, 2, 3, 4, 6});
	assert_string_equal(conclude_with(&g, &a, &fx), "loss_log_zero");
	assert_true(said(&g, "takes log of 1 minus a value it received, and input[0]"));
	assert_true(said(&g, "a target of 0 times it"));
	assert_true(strstr(g.fixes[0], "F.logsigmoid(-x)") != NULL);
	/* +Inf: the same */
	a.nan = 0;
	a.posinf = 1;
	assert_string_equal(conclude_with(&g, &a, &fx), "loss_log_zero");
	/* no value reaches 1: the subtraction's rounding below 0 stays the domain's */
	a.nan = 1;
	a.posinf = 0;
	fx.t[1].max = 0.75;
	assert_string_equal(conclude_with(&g, &a, &fx), "invalid_domain");
}

/*
 * torch.log(x) of the batch (no autograd node: the code names log, and nothing dividing), a
 * zero in it: -Inf alone is log(0). With a division named, the division's zero as before.
 */
static void test_log_of_zero_input(void **state)
{
	const float x[] = {0.3f, 0, 2, 0.8f};
	struct evidence_facts fx = {.n = 1};
	struct diag_anomaly a = origin("LogTransform", 0, 0, 1);
	struct diagnosis g;

	(void)state;
	scan_f32(&fx.t[0], x, 2, 2, "input[0]", EVIDENCE_INPUT);
	with_code(&fx, (const char *const[]){"torch", "log", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "loss_log_zero");
	assert_true(said(&g, "takes log (and divides by nothing), and input[0] holds 1 "
			     "zeros: log(0) = -Inf"));
	with_code(&fx, (const char *const[]){"torch", "log", "div", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "division_by_zero");
	/* +Inf beside it: not a log's alone */
	with_code(&fx, (const char *const[]){"torch", "log", NULL});
	a.posinf = 1;
	assert_string_equal(conclude_with(&g, &a, &fx), "division_by_zero");
}

/*
 * log1p of data scaled into [-1, 1]: -Inf alone where the input reaches exactly -1 (log1p's
 * 0), with no zero; a value above -1 alone, or a division beside it, is no log1p's.
 */
static void test_log1p_of_minus_one(void **state)
{
	const float x[] = {0.3f, -1, 0.5f, 0.8f}, above[] = {0.3f, -0.5f, 0.5f, 0.8f};
	struct evidence_facts fx = {.n = 1};
	struct diag_anomaly a = origin("LogPatches", 0, 0, 1);
	struct diagnosis g;

	(void)state;
	scan_f32(&fx.t[0], x, 2, 2, "input[0]", EVIDENCE_INPUT);
	with_code(&fx, (const char *const[]){"torch", "log1p", "unfold", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "loss_log_zero");
	assert_true(said(&g, "takes log1p (and divides by nothing), and input[0] reaches exactly "
			     "-1: log1p(-1) = log(0) = -Inf"));
	with_code(&fx, (const char *const[]){"torch", "log1p", "div", NULL});
	assert_string_not_equal(conclude_with(&g, &a, &fx), "loss_log_zero");
	with_code(&fx, (const char *const[]){"torch", "log1p", "unfold", NULL});
	scan_f32(&fx.t[0], above, 2, 2, "input[0]", EVIDENCE_INPUT);
	assert_string_not_equal(conclude_with(&g, &a, &fx), "loss_log_zero");
}

/*
 * A contrastive loss by hand: the log of a sum of exps is no root or log of a negative (the
 * negatives are the features'); the NaN is the division of a sum over positives by their
 * count. A log of a difference, or of an op whose inputs the walk did not reach, stays a
 * domain.
 */
static void test_log_of_exps(void **state)
{
	const float x[] = {0.3f, -1.1f, 2, 0.8f};
	struct evidence_facts fx = {.n = 1};
	struct diag_anomaly a = origin("SupConLoss", 1, 0, 0);
	struct diagnosis g;

	(void)state;
	scan_f32(&fx.t[0], x, 2, 2, "input[0]", EVIDENCE_INPUT);
	/* neg mean div(sum mul sub(div, log sum mul exp div)) */
	with_ops(&fx, (const char *const[]){"neg", "mean", "div", "sum", "mul", "sub", "div", "log",
					    "sum", "mul", "exp", NULL});
	with_edges(&fx, (const int[]){-1, 0, 1, 2, 3, 4, 5, 5, 7, 8, 9});
	assert_string_equal(conclude_with(&g, &a, &fx), "division_by_zero");
	assert_false(said(&g, "outside its domain"));
	/* log of a sub: a difference can be negative */
	with_ops(&fx, (const char *const[]){"neg", "mean", "div", "sum", "mul", "sub", "div", "log",
					    "sub", "mul", "exp", NULL});
	with_edges(&fx, (const int[]){-1, 0, 1, 2, 3, 4, 5, 5, 7, 8, 9});
	assert_string_equal(conclude_with(&g, &a, &fx), "invalid_domain");
	/* the walk stopped at the sum: what it sums is not known */
	with_ops(&fx, (const char *const[]){"neg", "mean", "div", "sum", "mul", "sub", "div", "log",
					    "sum", NULL});
	with_edges(&fx, (const int[]){-1, 0, 1, 2, 3, 4, 5, 5, 7});
	assert_string_equal(conclude_with(&g, &a, &fx), "invalid_domain");
}

/*
 * A division by a sum of what an exp, softplus or sigmoid made (weights that underflow to 0),
 * or by a matrix product whose operands the walk did not reach in a call that takes an exp (a
 * Sinkhorn iteration), before a pow whose exponent is not known; not a softmax by hand.
 */
static void test_underflow_divisor(void **state)
{
	const float x[] = {0.3f, -1.1f, 2, 0.8f};
	struct evidence_facts fx = {.n = 1};
	struct diag_anomaly a = origin("WeightedPool", 1, 0, 0);
	struct diagnosis g;

	(void)state;
	scan_f32(&fx.t[0], x, 2, 2, "input[0]", EVIDENCE_INPUT);
	/* div(sum(mul(softplus, x)), sum(softplus(view(addmm)))) */
	with_ops(&fx, (const char *const[]){"div", "sum", "sum", "mul", "softplus", "view", "addmm",
					    NULL});
	with_edges(&fx, (const int[]){-1, 0, 0, 1, 2, 4, 5});
	assert_string_equal(conclude_with(&g, &a, &fx), "division_by_zero");
	assert_true(said(&g, "by a sum of what softplus made"));
	assert_true(g.confidence > 0.7);
	/* mul(mul(u, exp(div(neg(pow)))), v), u = reciprocal(mv(...)): the walk ends at mv */
	a = origin("Sinkhorn", 16, 0, 0);
	with_ops(&fx, (const char *const[]){"mul", "mul", "unsqueeze", "exp", "unsqueeze", "div",
					    "mul", "neg", "reciprocal", "pow", "mv", NULL});
	with_edges(&fx, (const int[]){-1, 0, 0, 1, 1, 3, 2, 5, 6, 7, 8});
	fx.ops_more = 1;
	assert_string_equal(conclude_with(&g, &a, &fx), "division_by_zero");
	assert_true(said(&g, "divides (reciprocal) by a mv, and takes exp"));
	/* torch 2's walk reaches mv's operands (t, mul), the exp by another op first */
	with_ops(&fx,
		 (const char *const[]){"mul", "mul", "unsqueeze", "unsqueeze", "exp", "mul", "div",
				       "reciprocal", "neg", "mv", "pow", "t", "mul", NULL});
	with_edges(&fx, (const int[]){-1, 0, 0, 1, 1, 2, 4, 5, 6, 7, 8, 9, 9});
	assert_string_equal(conclude_with(&g, &a, &fx), "division_by_zero");
	assert_true(said(&g, "divides (reciprocal) by a mv, and takes exp"));
	assert_false(said(&g, "outside its domain"));
	/* a div of a matrix product by a number (logits = f @ f.t() / t): the mm is no divisor */
	with_ops(&fx, (const char *const[]){"neg", "mean", "div", "sum", "mul", "sub", "sub", "log",
					    "div", "sum", "mm", "mul", "div", "t", "exp", NULL});
	with_edges(&fx, (const int[]){-1, 0, 1, 2, 3, 4, 5, 5, 6, 7, 8, 9, 10, 10, 11});
	assert_string_equal(conclude_with(&g, &a, &fx), "division_by_zero");
	assert_false(said(&g, "and takes exp"));
	/* a softmax by hand divides an exp by a sum of exps: its overflow comes first */
	fx.ops_more = 0;
	with_ops(&fx, (const char *const[]){"div", "exp", "sum", "exp", NULL});
	with_edges(&fx, (const int[]){-1, 0, 0, 2});
	assert_string_equal(conclude_with(&g, &a, &fx), "exp_overflow");
}

/*
 * acosh's domain is [1, Inf): a Poincare distance whose point left the unit ball (1 - |u|^2
 * by an rsub) is below 1; no variance by hand is named.
 */
static void test_acosh_below_one(void **state)
{
	const float x[] = {0.3f, -1.1f, 2, 0.8f};
	struct evidence_facts fx = {.n = 1};
	struct diag_anomaly a = origin("Poincare", 2, 0, 0);
	struct diagnosis g;
	int i;

	(void)state;
	scan_f32(&fx.t[0], x, 2, 2, "input[0]", EVIDENCE_INPUT);
	with_ops(&fx, (const char *const[]){"acosh", "add", "div", "mul", "sum", "rsub", "pow",
					    "sum", NULL});
	with_edges(&fx, (const int[]){-1, 0, 1, 2, 2, 3, 4, 5});
	assert_string_equal(conclude_with(&g, &a, &fx), "invalid_domain");
	assert_true(said(&g, "acosh of a value below 1 is NaN"));
	assert_true(said(&g, "leaves the unit ball"));
	assert_non_null(strstr(g.fixes[0], "x.clamp_min(1 + 1e-7)"));
	for (i = 0; i < g.nfixes; i++)
		assert_null(strstr(g.fixes[i], "E[x^2] - E[x]^2"));
}

/*
 * +Inf from a call with no autograd ops and a value past exp's threshold: where the forward's
 * code was read and names no exp, a power of the value overflows (unknown, with the power);
 * where the code was not read, the exp stays the likelier.
 */
static void test_power_not_exp(void **state)
{
	const float x[] = {0.3f, 3.2e10f, 0.5f, 0.8f};
	struct evidence_facts fx = {.n = 1};
	struct diag_anomaly a = origin("Poly", 0, 1, 0);
	struct diagnosis g;

	(void)state;
	scan_f32(&fx.t[0], x, 2, 2, "input[0]", EVIDENCE_INPUT);
	fx.code_read = 1;
	assert_string_equal(conclude_with(&g, &a, &fx), "unknown");
	assert_true(said(&g, "the layer's code names no exp"));
	assert_true(said(&g, "its fourth power is past 3.4e+38"));
	fx.code_read = 0;
	assert_string_equal(conclude_with(&g, &a, &fx), "exp_overflow");
	/* the code names exp: the overflow it takes */
	fx.code_read = 1;
	with_code(&fx, (const char *const[]){"exp", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "exp_overflow");
}

/*
 * +Inf from a call whose code names logit, given probabilities that reach exactly 1 (a
 * sigmoid rounded): log(0) of 1 - p; without a 0 or a 1 among them, no such verdict.
 */
static void test_logit_of_one(void **state)
{
	const float pred[] = {0.3f, -1.1f, 2, 0.8f};
	const float p[] = {0.2f, 1.0f, 0.5f, 0.9f};
	struct evidence_facts fx = {.n = 2};
	struct diag_anomaly a = origin("Distill", 0, 1, 0);
	struct diagnosis g;

	(void)state;
	scan_f32(&fx.t[0], pred, 2, 2, "input[0]", EVIDENCE_INPUT);
	scan_f32(&fx.t[1], p, 2, 2, "input[1]", EVIDENCE_INPUT);
	with_ops(&fx, (const char *const[]){"mse_loss", NULL});
	fx.ops_partial = 1;
	with_code(&fx, (const char *const[]){"mse_loss", "logit", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "loss_log_zero");
	assert_true(said(&g, "input[1] holds values in [0, 1] that reach exactly 1"));
	assert_non_null(strstr(g.fixes[0], "torch.logit(p, eps=1e-6)"));
	scan_f32(&fx.t[1], (const float[]){0.2f, 0.7f, 0.5f, 0.9f}, 2, 2, "input[1]",
		 EVIDENCE_INPUT);
	conclude_with(&g, &a, &fx);
	assert_false(said(&g, "takes logit"));
}

/*
 * torch.logdet of a matrix whose determinant turned negative: slogdet, then where's NaN for
 * a negative sign; the input's negatives are not the log's argument.
 */
static void test_logdet_sign(void **state)
{
	const float x[] = {0.3f, -1.1f, 2, 0.8f};
	struct evidence_facts fx = {.n = 1};
	struct diag_anomaly a = origin("LinearFlow", 64, 0, 0);
	struct diagnosis g;

	(void)state;
	scan_f32(&fx.t[0], x, 2, 2, "input[0]", EVIDENCE_INPUT);
	with_ops(&fx, (const char *const[]){"expand", "where", "linalg_slogdet", NULL});
	with_edges(&fx, (const int[]){-1, 0, 1});
	fx.ops_partial = 1;
	assert_string_equal(conclude_with(&g, &a, &fx), "invalid_domain");
	assert_true(said(&g, "then where: torch.logdet's NaN for a negative sign"));
	assert_false(said(&g, "negative values reach it"));
	assert_non_null(strstr(g.fixes[0], "slogdet(W).logabsdet"));
}

/*
 * A group standardised by hand, (x - m) / (x.std(0) + eps) over rows taken by index: the
 * epsilon after the std rules out a 0/0; a group of one makes the std NaN itself. Without the
 * add, a spread of 0 is the 0/0.
 */
static void test_spread_with_epsilon(void **state)
{
	const float x[] = {0.3f, -1.1f, 2, 0.8f};
	struct evidence_facts fx = {.n = 1};
	struct diag_anomaly a = origin("GroupStandardize", 8, 0, 0);
	struct diagnosis g;

	(void)state;
	scan_f32(&fx.t[0], x, 2, 2, "input[0]", EVIDENCE_INPUT);
	/* div(sub(index, mean ^index), add std ^index) */
	with_ops(&fx, (const char *const[]){"div", "sub", "add", "index", "mean", "std", NULL});
	with_edges(&fx, (const int[]){-1, 0, 0, 1, 1, 2});
	assert_string_equal(conclude_with(&g, &a, &fx), "norm_zero_variance");
	assert_true(said(&g, "adds to its spread before dividing (std, then add)"));
	assert_true(said(&g, "divides by n - 1 = 0"));
	assert_true(said(&g, "takes rows by index (index)"));
	assert_false(said(&g, "0/0 is NaN"));
	assert_true(strstr(g.fixes[0], "correction=0") != NULL);
	/* div(sub, std): the std goes straight to the division */
	with_ops(&fx, (const char *const[]){"div", "sub", "std", "index", "mean", NULL});
	with_edges(&fx, (const int[]){-1, 0, 0, 1, 1});
	assert_string_equal(conclude_with(&g, &a, &fx), "norm_zero_variance");
	assert_true(said(&g, "over values that are all equal it is 0, and 0/0 is NaN"));
}

/* A mean of rows selected by index, of none: 0/0, told before the zero rows of the mask. */
static void test_mean_of_selection(void **state)
{
	const float x[] = {0.3f, -1.1f, 2, 0.8f}, labels[] = {0, 0, 0, 0};
	struct evidence_facts fx = {.n = 2};
	struct diag_anomaly a = origin("Prototype", 8, 0, 0);
	struct diagnosis g;

	(void)state;
	scan_f32(&fx.t[0], x, 2, 2, "input[0]", EVIDENCE_INPUT);
	scan_f32(&fx.t[1], labels, 1, 4, "input[1]", EVIDENCE_INPUT);
	with_ops(&fx, (const char *const[]){"sub", "mean", "index", NULL});
	with_edges(&fx, (const int[]){-1, 0, 1});
	assert_string_equal(conclude_with(&g, &a, &fx), "division_by_zero");
	assert_true(said(&g, "takes a mean (mean) of what it selected by index (index"));
	assert_true(
		said(&g, "input[1] (float32): 1 of 1 rows along the last dimension are all zero"));
	assert_true(strstr(g.fixes[0], "clamp_min(1)") != NULL);
	/* a mean of the whole input */
	with_ops(&fx, (const char *const[]){"sub", "mean", NULL});
	with_edges(&fx, (const int[]){-1, 0});
	assert_string_equal(conclude_with(&g, &a, &fx), "division_by_zero");
	assert_false(said(&g, "selected by index"));
}

/*
 * CTC's +Inf: its input lengths (input[2]) below its target lengths (input[3]) are no
 * alignment, a log of 0; the lengths are integers, whose range the facts keep.
 */
static void test_ctc_lengths(void **state)
{
	const float lp[] = {-0.3f, -1.1f, -2, -0.8f};
	const int64_t targets[] = {3, 4, 5, 6}, frames[] = {7, 7}, labels[] = {10, 9};
	__u64 ts[2] = {2, 2}, ls[1] = {2};
	struct evidence_facts fx = {.n = 4};
	struct diag_anomaly a = origin("CTCLoss", 0, 1, 0);
	struct diagnosis g;

	(void)state;
	scan_f32(&fx.t[0], lp, 2, 2, "input[0]", EVIDENCE_INPUT);
	assert_int_equal(evidence__scan(targets, sizeof(targets), "int64", ts, 2, &fx.t[1]), 0);
	snprintf(fx.t[1].name, sizeof(fx.t[1].name), "input[1]");
	assert_int_equal(evidence__scan(frames, sizeof(frames), "int64", ls, 1, &fx.t[2]), 0);
	snprintf(fx.t[2].name, sizeof(fx.t[2].name), "input[2]");
	assert_int_equal(evidence__scan(labels, sizeof(labels), "int64", ls, 1, &fx.t[3]), 0);
	snprintf(fx.t[3].name, sizeof(fx.t[3].name), "input[3]");
	assert_true(fx.t[3].kind == EVIDENCE_INT && fx.t[3].min == 9 && fx.t[3].max == 10);
	with_ops(&fx, (const char *const[]){"mean", "div", "ctc_loss", NULL});
	with_edges(&fx, (const int[]){-1, 0, 1});
	assert_string_equal(conclude_with(&g, &a, &fx), "loss_log_zero");
	assert_true(said(&g, "from 7 to 7 frames, target lengths (input[3]) from 9 to 10 labels: "
			     "a sample may have fewer frames"));
	assert_true(g.confidence >= 0.75);
	/* frames enough for every target: the rule, without the lengths' verdict */
	fx.t[2].min = fx.t[2].max = 12;
	assert_string_equal(conclude_with(&g, &a, &fx), "loss_log_zero");
	assert_false(said(&g, "a sample may have fewer frames"));
	assert_true(g.confidence < 0.75);
}

/*
 * +Inf beside finite values at the range, from inputs with no zero and nothing above exp's
 * threshold: the values grew inside the call; relu repeated in the walk is a recurrence. Small
 * finite values beside the Inf say nothing of growth.
 */
static void test_grew_inside(void **state)
{
	const float x[] = {0.3f, -1.1f, 2, 0.8f};
	struct evidence_facts fx = {.n = 1};
	struct diag_anomaly a = origin("RNN", 8, 4, 0);
	struct diagnosis g;

	(void)state;
	a.finite_max_abs = 3.2e38;
	scan_f32(&fx.t[0], x, 2, 2, "input[0]", EVIDENCE_INPUT);
	with_ops(&fx, (const char *const[]){"transpose", "stack", "relu", "relu", "relu", "relu",
					    "relu", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "unknown");
	assert_true(said(&g, "the values grew past it inside the call"));
	assert_true(said(&g, "the call repeats relu (5 times in a row"));
	assert_true(strstr(g.fixes[0], "gain at most 1") != NULL);
	/* no repeated op: the growth, less sure */
	with_ops(&fx, (const char *const[]){"addmm", "relu", "addmm", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "unknown");
	assert_true(said(&g, "the values grew past it inside the call"));
	assert_false(said(&g, "the call repeats"));
	/* finite values far from the range */
	a.finite_max_abs = 2.5;
	assert_string_equal(conclude_with(&g, &a, &fx), "unknown");
	assert_false(said(&g, "grew past it"));
}

/*
 * A graph convolution's deg.pow(-0.5) of a node with no edge: an all-zero row of the
 * adjacency, and the code's pow: Inf times the row's 0. Without the pow, the 0/0 alone.
 */
static void test_degree_power(void **state)
{
	const float x[] = {0.3f, -1.1f, 2, 0.8f}, adj[] = {1, 1, 0, 1, 1, 0, 0, 0, 0};
	struct evidence_facts fx = {.n = 2};
	struct diag_anomaly a = origin("GraphConv", 8, 0, 0);
	struct diagnosis g;

	(void)state;
	scan_f32(&fx.t[0], x, 2, 2, "input[0]", EVIDENCE_INPUT);
	scan_f32(&fx.t[1], adj, 3, 3, "input[1]", EVIDENCE_INPUT);
	with_ops(&fx, (const char *const[]){"mm", "addmm", "t", NULL});
	fx.ops_partial = 1;
	with_code(&fx, (const char *const[]){"sum", "pow", "lin", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "division_by_zero");
	assert_true(said(&g, "the call takes pow: a negative power of a sum over an all-zero row"));
	assert_true(g.nfixes >= 2 && strstr(g.fixes[1], "add self-loops") != NULL);
	with_code(&fx, (const char *const[]){"sum", "lin", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "division_by_zero");
	assert_false(said(&g, "negative power"));
}

/* A mean over an input with no values: 0/0, named from the empty input and the call's mean. */
static void test_empty_input(void **state)
{
	struct evidence_facts fx = {.n = 1};
	struct diag_anomaly a = origin("MeanPool", 32, 0, 0);
	struct diagnosis g;
	__u64 shape[3] = {4, 0, 8};

	(void)state;
	memset(&fx.t[0], 0, sizeof(fx.t[0]));
	assert_int_equal(evidence__scan("", 0, "float32", shape, 3, &fx.t[0]), 0);
	snprintf(fx.t[0].name, sizeof(fx.t[0].name), "input[0]");
	with_ops(&fx, (const char *const[]){"mean", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "division_by_zero");
	assert_true(said(&g, "input[0] (float32) holds no values"));
	assert_true(said(&g, "the call takes mean"));
	assert_true(g.confidence >= 0.75);
}

/*
 * A smooth max by hand over what a bool mask keeps: masked_fill with -inf, then max; a row the
 * mask keeps nothing of is -Inf - (-Inf). No softmax: the masked rows' verdict all the same,
 * not a 0/0 of the all-false row.
 */
static void test_masked_max(void **state)
{
	const float h[] = {0.3f, -1.1f, 2, 0.8f};
	const unsigned char keep[] = {1, 1, 0, 0};
	struct evidence_facts fx = {.n = 2};
	struct diag_anomaly a = origin("LSEPool", 4, 0, 0);
	struct diagnosis g;
	__u64 ks[2] = {2, 2};

	(void)state;
	scan_f32(&fx.t[0], h, 2, 2, "input[0]", EVIDENCE_INPUT);
	memset(&fx.t[1], 0, sizeof(fx.t[1]));
	assert_int_equal(evidence__scan(keep, sizeof(keep), "bool", ks, 2, &fx.t[1]), 0);
	snprintf(fx.t[1].name, sizeof(fx.t[1].name), "input[1]");
	with_ops(&fx, (const char *const[]){"squeeze", "add", "max", "log", "masked_fill", "sum",
					    "exp", "sub", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "attention_fully_masked");
	assert_true(said(&g, "takes their max: over a row whose every position is filled"));
	assert_false(said(&g, "0/0"));
	/* a mask that keeps part of every row: no row is filled whole */
	{
		const unsigned char part[] = {1, 0, 0, 1};

		memset(&fx.t[1], 0, sizeof(fx.t[1]));
		assert_int_equal(evidence__scan(part, sizeof(part), "bool", ks, 2, &fx.t[1]), 0);
		snprintf(fx.t[1].name, sizeof(fx.t[1].name), "input[1]");
		assert_string_not_equal(conclude_with(&g, &a, &fx), "attention_fully_masked");
		assert_false(said(&g, "takes their max"));
	}
}

/*
 * A model computing its own loss, 1 - a correlation by hand: sqrt(sum((p - mean p) ** 2)) is
 * no root of a negative, the division by it 0/0 for a constant prediction. The sqrt of a sub
 * (E[x^2] - E[x]^2) stays a domain.
 */
static void test_root_of_squares(void **state)
{
	const float x[] = {0.3f, -1.1f, 2, 0.8f};
	struct evidence_facts fx = {.n = 1};
	struct diag_anomaly a = origin("Model", 1, 0, 0);
	struct diagnosis g;

	(void)state;
	scan_f32(&fx.t[0], x, 2, 2, "input[0]", EVIDENCE_INPUT);
	/* rsub div(sum mul sub(addmm, mean), mul sqrt sum pow [the sub, found first]) */
	with_ops(&fx, (const char *const[]){"rsub", "div", "sum", "mul", "mul", "sqrt", "sub",
					    "sum", "mean", "pow", "addmm", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "invalid_domain");
	with_edges(&fx, (const int[]){-1, 0, 1, 1, 2, 3, 4, 5, 6, 7, 6});
	assert_string_equal(conclude_with(&g, &a, &fx), "division_by_zero");
	assert_true(said(
		&g, "divides (div) by a sqrt of a sum of squares it made (a norm, or a spread"));
	assert_true(strstr(g.fixes[0], "1e-8") != NULL);
	/* the squares of a sub: a spread by hand */
	with_ops(&fx, (const char *const[]){"div", "addmm", "sqrt", "mean", "pow", "sub", NULL});
	with_edges(&fx, (const int[]){-1, 0, 0, 2, 3, 4});
	assert_string_equal(conclude_with(&g, &a, &fx), "division_by_zero");
	assert_true(said(&g, "of deviations from a mean: a spread by hand"));
	/* a log beside it: the domain rule */
	with_ops(&fx, (const char *const[]){"div", "log", "sqrt", "sum", "pow", "addmm", NULL});
	with_edges(&fx, (const int[]){-1, 0, 0, 2, 3, 4});
	assert_string_equal(conclude_with(&g, &a, &fx), "invalid_domain");
	/* E[x^2] - E[x]^2 under the sqrt: a difference rounded below 0 */
	with_ops(&fx, (const char *const[]){"div", "sqrt", "sub", "mean", "pow", "pow", "mean",
					    "addmm", NULL});
	with_edges(&fx, (const int[]){-1, 0, 1, 2, 3, 2, 5, 0});
	assert_string_equal(conclude_with(&g, &a, &fx), "invalid_domain");
	assert_true(said(&g, "sqrt's argument comes from a subtraction"));
}

/*
 * log(relu(Linear(x))): the relu is 0 wherever its argument is at or below 0, and log(0) is
 * -Inf; no input holds a zero (the relu made it). Without the walk's edges: unknown.
 */
static void test_log_of_relu(void **state)
{
	const float x[] = {0.3f, -1.1f, 2, 0.8f};
	struct evidence_facts fx = {.n = 1};
	struct diag_anomaly a = origin("LogFeat", 0, 0, 32);
	struct diagnosis g;

	(void)state;
	scan_f32(&fx.t[0], x, 2, 2, "input[0]", EVIDENCE_INPUT);
	with_ops(&fx, (const char *const[]){"log", "relu", "addmm", "t", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "unknown");
	with_edges(&fx, (const int[]){-1, 0, 1, 2});
	assert_string_equal(conclude_with(&g, &a, &fx), "loss_log_zero");
	assert_true(said(&g, "takes log of what relu made: relu is 0 wherever"));
	assert_true(strstr(g.fixes[0], "F.softplus(x)") != NULL);
	/* log1p(relu(x)) is 0 there, finite: no fact */
	with_ops(&fx, (const char *const[]){"log1p", "relu", "addmm", "t", NULL});
	with_edges(&fx, (const int[]){-1, 0, 1, 2});
	assert_string_equal(conclude_with(&g, &a, &fx), "unknown");
}

/*
 * A bool mask of positions to keep (True: valid; every position of a full row kept) into a
 * call whose ops and code have no softmax: its all-true rows are no fully masked attention;
 * the log of a negative length is the fault. With a softmax in the code, they decide again.
 */
static void test_keep_mask_without_softmax(void **state)
{
	const uint8_t keep[] = {1, 1, 1, 1, 1, 0};
	const float len[] = {3, -1};
	const float h[] = {0.1f, -0.2f, 0.3f, 0.4f};
	struct evidence_facts fx = {.n = 3};
	struct diag_anomaly a = origin("LengthPool", 8, 0, 0);
	__u64 ks[2] = {2, 3}, ls[1] = {2};
	struct diagnosis g;

	(void)state;
	scan_f32(&fx.t[0], h, 2, 2, "input[0]", EVIDENCE_INPUT);
	assert_int_equal(evidence__scan(keep, sizeof(keep), "bool", ks, 2, &fx.t[1]), 0);
	snprintf(fx.t[1].name, sizeof(fx.t[1].name), "input[1]");
	assert_int_equal(evidence__scan(len, sizeof(len), "float32", ls, 1, &fx.t[2]), 0);
	snprintf(fx.t[2].name, sizeof(fx.t[2].name), "input[2]");
	with_ops(&fx, (const char *const[]){"mul", "div", "sum", "mul", NULL});
	fx.ops_partial = 1;
	with_code(&fx, (const char *const[]){"log", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "invalid_domain");
	assert_true(said(&g, "no softmax takes them"));
	with_code(&fx, (const char *const[]){"log", "softmax", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "attention_fully_masked");
	with_code(&fx, (const char *const[]){"scaled_dot_product_attention", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "attention_fully_masked");
}

/*
 * nn.utils.weight_norm with a row of weight_v all zero: the weight's normalization divides it
 * by its norm, 0. A zero row of a parameter is no sign without that op (a zero-initialised
 * layer is an ordinary start), and then the negatives decide nothing better than weakly.
 */
static void test_weight_norm_zero_row(void **state)
{
	const float x[] = {0.5f, -0.2f, 0.3f, -0.4f};
	const float v[] = {0.3f, -0.1f, 0, 0};
	const float gain[] = {1.2f, 0.8f};
	struct evidence_facts fx = {.n = 3};
	struct diag_anomaly a = origin("Linear", 4, 0, 0);
	struct diagnosis g;

	(void)state;
	scan_f32(&fx.t[0], x, 2, 2, "input[0]", EVIDENCE_INPUT);
	scan_f32(&fx.t[1], gain, 1, 2, "weight_g", EVIDENCE_PARAM);
	scan_f32(&fx.t[2], v, 2, 2, "weight_v", EVIDENCE_PARAM);
	with_ops(&fx, (const char *const[]){"addmm", "t", "weight_norm_interface", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "division_by_zero");
	assert_true(said(&g, "parameter weight_v (float32): 1 of 2 rows"));
	assert_true(said(&g, "divided by its norm"));
	with_ops(&fx, (const char *const[]){"addmm", "t", NULL});
	assert_string_not_equal(conclude_with(&g, &a, &fx), "division_by_zero");
	assert_false(said(&g, "divided by its norm"));
}

/*
 * A cross-entropy over targets all ignored (-100): 0/0 of its mean. nll_loss making the output
 * decides it; the code's name alone only with the targets negative throughout.
 */
static void test_empty_mean(void **state)
{
	const float logits[] = {0.5f, -1.2f, 0.3f, -0.4f, 2.0f, -3.0f};
	const int64_t all_ignored[] = {-100, -100};
	const int64_t some[] = {-100, 2};
	struct evidence_facts fx = {.n = 2};
	struct diag_anomaly a = origin("CrossEntropyLoss", 1, 0, 0);
	__u64 ts[1] = {2};
	struct diagnosis g;

	(void)state;
	scan_f32(&fx.t[0], logits, 2, 3, "input[0]", EVIDENCE_INPUT);
	assert_int_equal(evidence__scan(all_ignored, sizeof(all_ignored), "int64", ts, 1, &fx.t[1]),
			 0);
	snprintf(fx.t[1].name, sizeof(fx.t[1].name), "input[1]");
	with_ops(&fx, (const char *const[]){"nll_loss", "log_softmax", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "division_by_zero");
	assert_true(said(&g, "input[1] (int64): all 2 values are negative"));
	assert_true(said(&g, "0/0 is NaN"));
	/* no autograd: the code names cross_entropy; the targets decide */
	with_ops(&fx, (const char *const[]){NULL});
	with_code(&fx, (const char *const[]){"cross_entropy", "flatten", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "division_by_zero");
	assert_int_equal(evidence__scan(some, sizeof(some), "int64", ts, 1, &fx.t[1]), 0);
	snprintf(fx.t[1].name, sizeof(fx.t[1].name), "input[1]");
	conclude_with(&g, &a, &fx);
	assert_false(said(&g, "reduction='mean'"));
	/* a sum the loss made after nll_loss: the NaN may be another term's */
	with_ops(&fx, (const char *const[]){"add", "nll_loss", "log_softmax", "log", NULL});
	conclude_with(&g, &a, &fx);
	assert_false(said(&g, "reduction='mean'"));
}

static void test_ops_mask_and_cast(void **state)
{
	/* a 0/1 integer mask (1: attend) with a sample of no tokens, filled before a softmax */
	const int64_t mask[] = {1, 1, 1, 0, 0, 0};
	const float big[] = {70000, 2, -3, 1};
	__u64 ms[2] = {2, 3};
	struct evidence_facts fx = {.n = 1};
	struct diag_anomaly a = origin("SelfAttention", 6, 0, 0);
	struct diagnosis g;

	(void)state;
	memset(&fx.t[0], 0, sizeof(fx.t[0]));
	assert_int_equal(evidence__scan(mask, sizeof(mask), "int64", ms, 2, &fx.t[0]), 0);
	snprintf(fx.t[0].name, sizeof(fx.t[0].name), "attention_mask");
	assert_string_equal(conclude_with(&g, &a, &fx), "attention_fully_masked");
	with_ops(&fx, (const char *const[]){"view", "bmm", "softmax", "masked_fill", "div", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "attention_fully_masked");
	assert_true(said(&g, "masked_fill) before a softmax"));
	assert_true(said(&g, "all 0 (every position masked where 0 masks)"));
	/* a float16 cast of a float32 value past 65504, after a loss that rose for steps */
	a = origin("HalfStore", 0, 1, 0);
	a.dtype = "float16";
	scan_f32(&fx.t[0], big, 1, 4, "input[0]", EVIDENCE_INPUT);
	with_ops(&fx, (const char *const[]){"to_copy", NULL});
	assert_string_equal(conclude_with(&g, &a, &fx), "fp16_overflow");
	assert_true(said(&g, "casts input[0] (float32, largest |value| 7e+04) to float16"));
	/* not a cast: the value rules judge */
	with_ops(&fx, (const char *const[]){"mul", NULL});
	assert_string_not_equal(conclude_with(&g, &a, &fx), "unknown");
}

static void test_loss_jump_two_points(void **state)
{
	/* the loss grew x1e10 in one step, then +Inf: fewer than three finite points */
	struct diag_anomaly loss = {.step = 2,
				    .iteration = 2,
				    .posinf = 1,
				    .phase = "loss",
				    .dtype = "float32",
				    .inputs_finite = -1,
				    .params_finite = -1};
	struct diag_anomaly next = origin("Linear", 1, 0, 0);
	struct diagnosis g;
	struct diag d;
	double small[] = {2.0, 30.0};
	double jump[] = {2.0, 2e10};
	int k, i;

	(void)state;
	for (k = 0; k < 2; k++) {
		diagnose__init(&d);
		for (i = 0; i < 2; i++)
			diagnose__loss(&d, i, FINDING_STEP_ATTACH, i, k ? jump[i] : small[i]);
		diagnose__observe(&d, &loss);
		next.iteration = 3;
		diagnose__observe(&d, &next);
		assert_int_equal(diagnose__conclude(&d, &g), 0);
		assert_string_equal(g.cause, k ? "lr_too_high" : "loss_log_zero");
	}
	assert_int_equal(g.origin_step, 0);
	assert_true(said(&g, "2 at step 0, 2e+10 at step 1"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_scan_float),
		cmocka_unit_test(test_scan_half_and_mask),
		cmocka_unit_test(test_zero_norm_in_a_norm_class),
		cmocka_unit_test(test_softmax_exp_overflow_in_attention_class),
		cmocka_unit_test(test_exp_of_learned_scale),
		cmocka_unit_test(test_masked_average_zero_over_zero),
		cmocka_unit_test(test_constant_rows_and_the_name),
		cmocka_unit_test(test_mask_rows_decide_attention),
		cmocka_unit_test(test_attention_name_alone),
		cmocka_unit_test(test_mask_buffer_row_all_neginf),
		cmocka_unit_test(test_inf_zero_parameter_or_large_one),
		cmocka_unit_test(test_scan_probability_rows),
		cmocka_unit_test(test_inf_from_zero_probability),
		cmocka_unit_test(test_fp16_from_values),
		cmocka_unit_test(test_negatives),
		cmocka_unit_test(test_nothing_or_another_call),
		cmocka_unit_test(test_loss_jump_two_points),
		cmocka_unit_test(test_scan_constant_columns),
		cmocka_unit_test(test_ops_log_of_underflow),
		cmocka_unit_test(test_ops_nan),
		cmocka_unit_test(test_nan_zero_scalar),
		cmocka_unit_test(test_nan_std_of_one_row),
		cmocka_unit_test(test_nan_entropy_of_zero_probability),
		cmocka_unit_test(test_nan_acos_and_log_sigmoid),
		cmocka_unit_test(test_ops_mask_and_cast),
		cmocka_unit_test(test_code_op_names),
		cmocka_unit_test(test_softmax_by_hand),
		cmocka_unit_test(test_masked_fill_inf),
		cmocka_unit_test(test_one_under_log),
		cmocka_unit_test(test_log_of_zero_input),
		cmocka_unit_test(test_code_ops_of_a_first_layer),
		cmocka_unit_test(test_keep_mask_without_softmax),
		cmocka_unit_test(test_weight_norm_zero_row),
		cmocka_unit_test(test_empty_mean),
		cmocka_unit_test(test_saturated_log_bounded_exp),
		cmocka_unit_test(test_log_of_relu),
		cmocka_unit_test(test_div_made),
		cmocka_unit_test(test_root_of_squares),
		cmocka_unit_test(test_log1p_of_minus_one),
		cmocka_unit_test(test_log_of_exps),
		cmocka_unit_test(test_spread_with_epsilon),
		cmocka_unit_test(test_underflow_divisor),
		cmocka_unit_test(test_logdet_sign),
		cmocka_unit_test(test_acosh_below_one),
		cmocka_unit_test(test_power_not_exp),
		cmocka_unit_test(test_logit_of_one),
		cmocka_unit_test(test_mean_of_selection),
		cmocka_unit_test(test_ctc_lengths),
		cmocka_unit_test(test_grew_inside),
		cmocka_unit_test(test_degree_power),
		cmocka_unit_test(test_empty_input),
		cmocka_unit_test(test_masked_max),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
