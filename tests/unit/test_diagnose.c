// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Diagnosis rules: one incident per cause, from the anomalies a run would report. */
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

static struct diag_anomaly fwd(const char *layer, const char *module, uint32_t depth, int in)
{
	struct diag_anomaly a = {
		.step = 4,
		.iteration = 4,
		.nan = 3,
		.finite_max_abs = 2.5,
		.phase = "forward",
		.layer = layer,
		.module = module,
		.dtype = "float32",
		.inputs_finite = in,
		.params_finite = 1,
		.depth = depth,
	};

	return a;
}

/* Feed anomalies of iteration 4, then one of iteration 5, and conclude. */
/* cause_of's mode: every gradient checked (--backward on), not only the parameters' */
#define ALL_GRADS 2

/* mode: 1 (top_only, mode sample), ALL_GRADS */
static const char *cause_of(struct diagnosis *g, struct diag_anomaly *as, int n, int mode)
{
	struct diag_anomaly next = fwd("x", "Linear", 2, 1);
	struct diag d;
	int i;

	diagnose__init(&d);
	d.top_only = mode & 1;
	d.grads_all = !!(mode & ALL_GRADS);
	for (i = 0; i < n; i++)
		assert_int_equal(diagnose__observe(&d, &as[i]), 0);
	next.iteration = 5;
	assert_int_equal(diagnose__observe(&d, &next), 1);
	assert_int_equal(diagnose__conclude(&d, g), 0);
	assert_true(g->nevidence > 0);
	assert_true(g->confidence > 0 && g->confidence <= 1);
	assert_int_equal(diagnose__conclude(&d, g), -ENOENT); /* once per incident */
	return g->cause;
}

static int evidence_has(const struct diagnosis *g, const char *text)
{
	int i;

	for (i = 0; i < g->nevidence; i++)
		if (strstr(g->evidence[i], text))
			return 1;
	return 0;
}

static int fix_has(const struct diagnosis *g, const char *text)
{
	int i;

	for (i = 0; i < g->nfixes; i++)
		if (strstr(g->fixes[i], text))
			return 1;
	return 0;
}

static void test_bad_input(void **state)
{
	/* the first layer gets NaN inputs; the model (first depth-1 return) too; then the loss */
	struct diag_anomaly as[] = {fwd("encoder.0", "Linear", 3, 0), fwd("", "Net", 1, 0),
				    fwd("", "MSELoss", 1, 0)};
	struct diagnosis g;

	(void)state;
	assert_string_equal(cause_of(&g, as, 3, 0), "bad_input_data");
	assert_string_equal(g.layer, "encoder.0");
	assert_int_equal(g.step, 4);
	assert_true(g.nfixes > 0);
}

static void test_model_inputs_decide_not_the_loss_module(void **state)
{
	/* the loss module returns after the model with NaN inputs: that is not the batch */
	struct diag_anomaly as[] = {fwd("blocks.0.norm", "RMSNorm", 3, 1), fwd("", "TinyLM", 1, 1),
				    fwd("", "CrossEntropyLoss", 1, 0)};
	struct diagnosis g;

	(void)state;
	/* finite inputs to the model: not the batch; nothing captured: no name decides */
	assert_string_equal(cause_of(&g, as, 3, 0), "unknown");
}

static void test_attention(void **state)
{
	struct diag_anomaly as[] = {fwd("layers.0.attn", "MultiheadAttention", 3, 1)};
	struct diagnosis g;

	(void)state;
	/* a class name alone, nothing captured: not enough to name a cause */
	assert_string_equal(cause_of(&g, as, 1, 0), "unknown");
}

static void test_fp16(void **state)
{
	struct diag_anomaly as[] = {fwd("amp.square", "SignedSquare", 3, 1)};
	struct diagnosis g;

	(void)state;
	as[0].dtype = "float16";
	as[0].nan = 0;
	as[0].posinf = 1;
	as[0].finite_max_abs = 50400;
	assert_string_equal(cause_of(&g, as, 1, 0), "fp16_overflow");
	assert_non_null(strstr(g.evidence[1], "65504"));
}

static void test_division_exp_domain(void **state)
{
	struct diag_anomaly as[] = {fwd("scale", "TempScale", 2, 1)};
	struct diagnosis g;

	(void)state;
	as[0].posinf = 19;
	as[0].neginf = 11;
	as[0].nan = 0;
	assert_string_equal(cause_of(&g, as, 1, 0), "division_by_zero");
	as[0].finite_max_abs = 3e37; /* Inf next to values near the float32 range */
	assert_string_equal(cause_of(&g, as, 1, 0), "exp_overflow");
	as[0].posinf = as[0].neginf = 0;
	as[0].nan = 2;
	as[0].finite_max_abs = 1;
	/* NaN from finite inputs, nothing captured: 0/0, Inf-Inf and sqrt(-1) look the same */
	assert_string_equal(cause_of(&g, as, 1, 0), "unknown");
}

/* A NaN gradient: the masked torch.where pattern only when WhereBackward0 fed the node. */
static void test_backward_masked_where(void **state)
{
	struct diag_anomaly as[] = {fwd("blocks.1.gate", "MaskedGate", 0, 1)};
	struct diagnosis g;
	int i, named = 0, fixed = 0;

	(void)state;
	as[0].phase = "backward";
	as[0].params_finite = -1;
	as[0].node = "SqrtBackward0";
	as[0].op = "sqrt";
	as[0].upstream = "WhereBackward0";
	assert_string_equal(cause_of(&g, as, 1, ALL_GRADS), "invalid_domain");
	assert_string_equal(g.layer, "blocks.1.gate");
	for (i = 0; i < g.nevidence; i++)
		named += strstr(g.evidence[i], "WhereBackward0") != NULL;
	for (i = 0; i < g.nfixes; i++)
		fixed += strstr(g.fixes[i], "before the op") != NULL;
	assert_int_equal(named, 1);
	assert_int_equal(fixed, 1);
	assert_true(g.confidence > 0.7);
	/* the same node fed by another: the general rule, without the pattern */
	as[0].upstream = "MulBackward0";
	assert_string_equal(cause_of(&g, as, 1, 0), "invalid_domain");
	for (i = 0; i < g.nevidence; i++)
		assert_null(strstr(g.evidence[i], "WhereBackward0"));
	assert_true(g.confidence < 0.7);
	/* fed by where, but an op whose derivative is finite everywhere */
	as[0].upstream = "WhereBackward0";
	as[0].op = "mul";
	assert_string_equal(cause_of(&g, as, 1, 0), "invalid_domain");
	assert_true(g.confidence < 0.7);
	/* Inf only, no NaN: not the 0 * Inf of a discarded branch */
	as[0].op = "sqrt";
	as[0].nan = 0;
	as[0].posinf = 4;
	assert_string_equal(cause_of(&g, as, 1, ALL_GRADS), "division_by_zero");
	assert_true(g.confidence >= 0.6);
	assert_true(evidence_has(&g, "gradients from finite ones"));
	/* --backward norms: a parameter's gradient, whose node may not have made the value */
	as[0].layer = NULL;
	as[0].node = "AddmmBackward0";
	as[0].op = "addmm";
	as[0].upstream = "ViewBackward0";
	as[0].nan = 8;
	as[0].posinf = 0;
	assert_string_equal(cause_of(&g, as, 1, 0), "invalid_domain");
	assert_true(g.confidence < 0.6);
	assert_true(evidence_has(&g, "made in a layer not known) returned 8 NaN"));
	assert_true(evidence_has(&g, "gradients for a parameter"));
	assert_true(evidence_has(&g, "--backward norms checks the parameters' gradients alone"));
	assert_false(evidence_has(&g, "from finite ones"));
	for (i = fixed = 0; i < g.nfixes; i++)
		fixed += strstr(g.fixes[i], "--backward on") != NULL;
	assert_int_equal(fixed, 1);
	/* every gradient checked: a node made outside any module call */
	assert_string_equal(cause_of(&g, as, 1, ALL_GRADS), "invalid_domain");
	assert_true(evidence_has(&g, "made outside any module) returned 8 NaN"));
}

static void test_params_and_loss(void **state)
{
	struct diag_anomaly as[] = {fwd("embed", "Embedding", 2, 1)};
	struct diag_anomaly loss = {.step = 4,
				    .iteration = 4,
				    .posinf = 1,
				    .phase = "loss",
				    .dtype = "float32",
				    .inputs_finite = -1,
				    .params_finite = -1};
	struct diagnosis g;

	(void)state;
	as[0].params_finite = 0;
	assert_string_equal(cause_of(&g, as, 1, 0), "nonfinite_params");
	/* an Embedding reads the rows it looks up: no last update named, Adam's eps said */
	assert_true(evidence_has(&g, "reads only the rows its indices select"));
	assert_true(evidence_has(&g, "with eps 0"));
	assert_int_equal(g.origin_step, -1);
	assert_true(g.nfixes > 0 && strstr(g.fixes[0], "eps"));
	assert_string_equal(cause_of(&g, &loss, 1, 0), "loss_log_zero");
	assert_string_equal(g.layer, "");
	/* a NaN loss nll_loss made: a mean over targets all ignored, not a log of 0 */
	loss.posinf = 0;
	loss.nan = 1;
	loss.op = "nll_loss";
	assert_string_equal(cause_of(&g, &loss, 1, 0), "division_by_zero");
	/* +Inf from nll_loss is a log-probability of -Inf: a log of 0 */
	loss.nan = 0;
	loss.posinf = 1;
	assert_string_equal(cause_of(&g, &loss, 1, 0), "loss_log_zero");
	loss.nan = 1;
	loss.posinf = 0;
	loss.op = "sum";
	assert_string_equal(cause_of(&g, &loss, 1, 0), "loss_log_zero");
	loss.op = "log";
	assert_string_equal(cause_of(&g, &loss, 1, 0), "loss_log_zero");
}

/*
 * A loss's nodes as BPF walks them (breadth first), from the ops written from the loss down:
 * "mean pow addmm" is a line (each the next's only operand), "div(exp mm, sum exp mm)" a node
 * with operands, one line each, in their order, and "^exp" the node written before as "exp"
 * (a value used twice: found once, the other use kept as its also).
 */
struct tree {
	char op[FINDING_LOSS_NODES][FINDING_LOSS_OP_LEN];
	int kid[FINDING_LOSS_NODES][4], nkids[FINDING_LOSS_NODES], n;
};

static int parse_line(struct tree *t, const char **p);

static int parse_node(struct tree *t, const char **p)
{
	int i, ref = **p == '^';
	size_t len;

	*p += ref;
	len = strcspn(*p, " (),");
	assert_true(len > 0 && len < FINDING_LOSS_OP_LEN);
	if (ref) {
		for (i = t->n - 1; i >= 0; i--)
			if (strlen(t->op[i]) == len && !memcmp(t->op[i], *p, len))
				break;
		assert_true(i >= 0);
		*p += len;
		return i;
	}
	i = t->n++;
	assert_true(i < FINDING_LOSS_NODES);
	memcpy(t->op[i], *p, len);
	t->op[i][len] = 0;
	t->nkids[i] = 0;
	*p += len;
	if (**p == '(') {
		do {
			(*p)++;
			*p += strspn(*p, " ");
			t->kid[i][t->nkids[i]++] = parse_line(t, p);
		} while (**p == ',');
		assert_true(**p == ')');
		(*p)++;
	}
	return i;
}

static int parse_line(struct tree *t, const char **p)
{
	int head = parse_node(t, p), last = head;

	while (**p == ' ' && t->nkids[last] == 0) {
		int next;

		*p += strspn(*p, " ");
		next = parse_node(t, p);
		t->kid[last][0] = next;
		t->nkids[last] = 1;
		last = next;
	}
	return head;
}

static void loss_of(const char *ops, struct finding_loss *l)
{
	struct tree t = {.n = 0};
	int order[FINDING_LOSS_NODES], place[FINDING_LOSS_NODES], i, k;
	const char *p = ops;

	memset(l, 0, sizeof(*l));
	memset(l->also, FINDING_LOSS_ROOT, sizeof(l->also));
	parse_line(&t, &p);
	assert_true(*p == 0);
	for (i = 0; i < t.n; i++)
		place[i] = -1;
	order[0] = 0;
	place[0] = 0;
	l->parent[0] = FINDING_LOSS_ROOT;
	l->n = 1;
	for (i = 0; i < (int)l->n; i++) {
		snprintf(l->op[i], sizeof(l->op[i]), "%s", t.op[order[i]]);
		for (k = 0; k < t.nkids[order[i]]; k++) {
			int kid = t.kid[order[i]][k];

			if (place[kid] >= 0) {
				if (l->also[place[kid]] == FINDING_LOSS_ROOT) {
					l->also[place[kid]] = (unsigned char)i;
					l->also_input[place[kid]] = (unsigned char)k;
				}
				continue;
			}
			place[kid] = (int)l->n;
			l->parent[l->n] = (unsigned char)i;
			l->input[l->n] = (unsigned char)k;
			order[l->n++] = kid;
		}
	}
	/* the line: each node of one operand, then the next, as far as a node is named */
	for (i = 0; i < (int)l->n; i++) {
		l->line = (unsigned int)i + 1;
		if (t.nkids[order[i]] != 1 || !strcmp(l->op[i], "?"))
			break;
	}
}

/* The cause of a loss anomaly whose ops from the loss down are ops (loss_of). */
static const char *loss_cause(struct diagnosis *g, const char *ops, int nan, double peak)
{
	struct finding_loss l;
	struct diag_anomaly loss = {.step = 9,
				    .iteration = 4,
				    .nan = nan,
				    .posinf = !nan,
				    .phase = "loss",
				    .dtype = "float32",
				    .inputs_finite = -1,
				    .params_finite = -1};
	struct diag_anomaly next = fwd("x", "Linear", 2, 1);
	struct diag_warning w;
	struct diag d;

	if (ops) {
		loss_of(ops, &l);
		loss.loss = &l;
	}
	diagnose__init(&d);
	/* module outputs' magnitudes at the loss's iteration, in the order they returned, and
	 * one of the iteration before */
	diagnose__mark(&d, 0x30, "prev", 8, 3, 1e30, 3.4e38, &w);
	diagnose__mark(&d, 0x40, "body", 9, 4, 2.0, 3.4e38, &w);
	if (peak > 0) {
		diagnose__mark(&d, 0x20, "cell.w", 9, 4, peak / 1e16, 3.4e38, &w);
		diagnose__mark(&d, 0x20 | 1, "cell.w", 9, 4, peak, 3.4e38, &w); /* its params */
		diagnose__mark(&d, 0x50, "out", 9, 4, peak, 3.4e38, &w);
	}
	assert_int_equal(diagnose__observe(&d, &loss), 0);
	next.iteration = 5;
	assert_int_equal(diagnose__observe(&d, &next), 1);
	assert_int_equal(diagnose__conclude(&d, g), 0);
	assert_true(g->confidence > 0 && g->confidence <= 1);
	return g->cause;
}

/*
 * Every module output finite, the loss not: the ops from the loss down (the walk's chain)
 * tell a NaN target, a sum divided by a count of 0 and an overflow from a log of 0.
 */
static void test_loss_chain(void **state)
{
	struct diagnosis g;

	(void)state;
	/* a regression loss passed by the walk: its target needed no gradient */
	assert_string_equal(loss_cause(&g, "smooth_l1_loss addmm", 1, 0), "bad_input_data");
	assert_true(g.confidence >= 0.6);
	assert_true(evidence_has(&g, "smooth_l1_loss compares"));
	assert_true(evidence_has(&g, "(step 9)"));
	/* the walk stopped there: its target needed a gradient, nothing known of it */
	assert_string_equal(loss_cause(&g, "mse_loss", 1, 0), "loss_log_zero");
	/* by hand: (pred - y) ** 2, its mean scaled by 2 (a mean over a constant) */
	assert_string_equal(loss_cause(&g, "div mean pow sub addmm", 1, 0), "bad_input_data");
	assert_true(evidence_has(&g, "sub takes a tensor"));
	/* a sum over a mask divided by the mask's sum: 0/0 */
	assert_string_equal(loss_cause(&g, "div sum mul pow sub addmm", 1, 0), "division_by_zero");
	assert_string_equal(loss_cause(&g, "div sum mul pow sub addmm", 0, 0), "division_by_zero");
	/* a regression loss under that division: the target, or the 0/0, both said */
	assert_string_equal(loss_cause(&g, "div sum mse_loss addmm", 1, 0), "bad_input_data");
	assert_true(g.confidence < 0.6);
	assert_true(evidence_has(&g, "0 by 0"));
	assert_string_equal(loss_cause(&g, "binary_cross_entropy_with_logits addmm", 1, 0),
			    "bad_input_data");
	/* KL by hand, t * (t.log() - logp): the target's log leaves no node, 0 * -Inf */
	assert_string_equal(loss_cause(&g, "mean sum mul sub log_softmax addmm", 1, 0),
			    "loss_log_zero");
	assert_true(evidence_has(&g, "KL divergence by hand"));
	assert_true(fix_has(&g, "torch.xlogy(t, t)"));
	assert_true(fix_has(&g, "isfinite(y)"));
	/* t * t.log() - t * logp: the same terms, the difference first */
	assert_string_equal(loss_cause(&g, "sum sub mul log_softmax addmm", 1, 0), "loss_log_zero");
	/* a cross-entropy against soft targets, -(t * logp): 0 * a finite log-probability is
	 * 0, NaN only from the targets */
	assert_string_equal(loss_cause(&g, "mean neg sum mul log_softmax addmm", 1, 0),
			    "bad_input_data");
	assert_false(evidence_has(&g, "KL divergence"));
	/* a Beta's log_prob by hand or torch's: lgamma, the log of the value leaves no node */
	assert_string_equal(loss_cause(&g,
				       "neg mean mul sub(add(lgamma addmm, lgamma addmm), "
				       "lgamma add(addmm, addmm))",
				       0, 0),
			    "loss_log_zero");
	assert_true(evidence_has(&g, "a distribution's log_prob"));
	assert_true(fix_has(&g, "inside the open support"));
	/* a node with no op's name (a Python Function's) where the walk went on */
	assert_string_equal(loss_cause(&g, "mean pow ?", 0, 4.6e36), "loss_log_zero");
	assert_string_equal(loss_cause(&g, "smooth_l1_loss ?", 1, 0), "loss_log_zero");
	/* the walk stopped at a sub of two values the loss's code made (exp(x) - y * x): what
	 * fed the other is not known, an exp may have overflowed there */
	assert_string_equal(loss_cause(&g, "mean sub", 0, 0), "loss_log_zero");
	assert_string_equal(loss_cause(&g, "div mean pow sub addmm mul", 1, 0), "loss_log_zero");
	/* NaN with nothing that takes a second operand: no fact against a log */
	assert_string_equal(loss_cause(&g, "mean pow addmm", 1, 0), "loss_log_zero");
	/* a log, a logsumexp, an op not known: as before */
	assert_string_equal(loss_cause(&g, "mean neg log sub", 1, 0), "loss_log_zero");
	assert_string_equal(loss_cause(&g, "neg mean logsumexp sub", 1, 0), "loss_log_zero");
	assert_string_equal(loss_cause(&g, NULL, 1, 0), "loss_log_zero");
	assert_string_equal(loss_cause(&g, "mean neg log sub", 0, 0), "loss_log_zero");
	/* +Inf from a square, an output past the range's root at that iteration: an overflow */
	assert_string_equal(loss_cause(&g, "mean pow addmm", 0, 4.6e36), "unknown");
	assert_true(evidence_has(&g, "range (1.84e+19) at this iteration: cell.w, 4.6e+20"));
	assert_true(evidence_has(&g, "largest: out, 4.6e+36"));
	assert_true(g.confidence >= 0.45);
	/* a magnitude of another iteration is no fact for it */
	assert_string_equal(loss_cause(&g, "mean pow addmm", 0, 0), "unknown");
	assert_false(evidence_has(&g, "largest"));
	assert_false(evidence_has(&g, "prev"));
	assert_true(evidence_has(&g, "overflow of a square"));
	assert_true(
		g.confidence <
		0.45); /* loss / accum_steps with accum_steps 0: no output near the range, the divisor */
	assert_string_equal(loss_cause(&g, "div mse_loss addmm", 0, 0), "division_by_zero");
	assert_true(evidence_has(&g, "divides by what it did not compute from them"));
	assert_string_equal(loss_cause(&g, "div mse_loss addmm", 0, 4.6e36), "unknown");
}

/*
 * Every module output finite, the loss not, no exp: an op with a domain, or a divisor, the
 * loss computed itself.
 */
static void test_loss_domain(void **state)
{
	/* 1 - r, r a correlation by hand: the prediction's spread over the target's */
	static const char *const pearson =
		"rsub div(sum mul sub(squeeze addmm, mean ^squeeze), mul sqrt sum pow ^sub)";
	struct diagnosis g;

	(void)state;
	assert_string_equal(loss_cause(&g, pearson, 1, 0), "division_by_zero");
	assert_true(evidence_has(&g, "divides by a spread it computed (a sqrt of deviations"));
	assert_true(evidence_has(&g, "0/0 is NaN"));
	assert_true(evidence_has(&g, "from the loss down (autograd, breadth first): rsub, div"));
	assert_true(g.nfixes > 0 && strstr(g.fixes[0], "1e-8"));
	/* a divisor of the loss's own that is no root, norm or sum: less sure */
	assert_string_equal(loss_cause(&g, "mean div(addmm, mul addmm)", 0, 0), "division_by_zero");
	assert_true(g.confidence < 0.55);
	/* a log beside the division: the log's rule */
	assert_string_equal(loss_cause(&g, "mean neg log div(addmm, sum addmm)", 0, 0),
			    "loss_log_zero");
	/* an angle by acos of a cosine made by hand: past 1 by rounding */
	assert_string_equal(
		loss_cause(&g, "mean acos sum mul div(addmm, clamp_min norm ^addmm)", 1, 0),
		"invalid_domain");
	assert_true(evidence_has(&g, "rounds just past 1"));
	assert_true(g.nfixes > 0 && strstr(g.fixes[0], "atan2"));
	assert_true(g.confidence >= 0.65);
	assert_false(evidence_has(&g, "0/0 gave it NaN")); /* F.normalize clamps the norm */
	/* normalised by hand: the norm of a zero prediction is 0, and 0/0 is said too */
	assert_string_equal(loss_cause(&g, "mean acos sum mul div(addmm, norm ^addmm)", 1, 0),
			    "invalid_domain");
	assert_true(evidence_has(&g, "or the norm the cosine divides by was 0"));
	assert_true(g.confidence < 0.65);
	/* a divisor kept from 0 (a clamp, an epsilon added) is no division by 0 */
	assert_string_equal(loss_cause(&g, "mean div(addmm, clamp_min norm ^addmm)", 1, 0),
			    "loss_log_zero");
	assert_string_equal(loss_cause(&g, "mean div(addmm, add sqrt sum pow ^addmm)", 1, 0),
			    "loss_log_zero");
	assert_string_equal(loss_cause(&g, "mean div(addmm, sqrt sum pow ^addmm)", 1, 0),
			    "division_by_zero");
	/* a Poincare distance: atanh of a norm clamped to 1 is +Inf */
	assert_string_equal(
		loss_cause(&g,
			   "mean add(mul atanh clamp norm embedding, mul atanh clamp norm "
			   "embedding)",
			   0, 0),
		"invalid_domain");
	assert_true(evidence_has(&g, "atanh(x) is ±Inf at ±1"));
	/* an embedding's output is a module's: what made its input is not the loss's */
	assert_string_equal(loss_cause(&g, "mean acos sum embedding acos addmm", 1, 0),
			    "invalid_domain");
	assert_true(evidence_has(&g, "breadth first): mean, acos, sum, embedding"));
	assert_false(evidence_has(&g, "embedding, acos"));
	/* a flow's log-determinant of a matrix that went singular */
	assert_string_equal(
		loss_cause(&g, "mean sub(mul sum pow addmm, linalg_slogdet addmm)", 0, 0),
		"loss_log_zero");
	assert_true(evidence_has(&g, "singular matrix"));
	/* a standard deviation by hand, E[x^2] - E[x]^2 under a sqrt */
	assert_string_equal(loss_cause(&g, "mean sqrt sub(mean pow addmm, pow mean ^addmm)", 1, 0),
			    "invalid_domain");
	assert_true(evidence_has(&g, "round below 0"));
	/* its +Inf is no NaN of a negative: the rules before */
	assert_string_equal(loss_cause(&g, "mean sqrt sub(mean pow addmm, pow mean ^addmm)", 0, 0),
			    "loss_log_zero");
}

/*
 * Every module output finite, the loss not, an exp among the loss's own nodes (the walk,
 * breadth first): where its value goes tells its overflow from its underflow to 0.
 */
/*
 * The loss's own nodes: a mean of what it selected by index (a class-balanced loss over a batch
 * with no positive) is 0/0; ctc_loss's +Inf is a log of a zero probability (no alignment fits),
 * not the division of its mean.
 */
static void test_loss_selection_and_ctc(void **state)
{
	struct diagnosis g;

	(void)state;
	assert_string_equal(
		loss_cause(&g,
			   "add(mean index binary_cross_entropy_with_logits squeeze addmm, "
			   "mean index ^binary_cross_entropy_with_logits)",
			   1, 0),
		"division_by_zero");
	assert_true(evidence_has(&g, "the loss takes a mean of what it selected by index (index"));
	assert_true(strstr(g.fixes[0], "mask.sum().clamp_min(1)") != NULL);
	/* a mean of the whole: no selection */
	assert_string_not_equal(
		loss_cause(&g,
			   "add(mean binary_cross_entropy_with_logits squeeze addmm, mean addmm)",
			   1, 0),
		"division_by_zero");
	assert_string_equal(loss_cause(&g, "mean div ctc_loss log_softmax addmm", 0, 0),
			    "loss_log_zero");
	assert_true(evidence_has(&g, "ctc_loss is -log of the probability of every alignment"));
	assert_true(strstr(g.fixes[1], "zero_infinity=True") != NULL);
}

static void test_loss_exp(void **state)
{
	static const char *const infonce =
		"neg mean log div(exp div sum mul(addmm, addmm), sum exp div mm)";
	/* sigma = exp(log_sigma) once, logged and divided by: found under the log first */
	static const char *const mdn =
		"mean add(log exp slice addmm, mul pow div(sub slice addmm, ^exp))";
	static const char *const mixture =
		"neg log sum mul(addmm, div(exp mul pow div(sub addmm, exp addmm), mul ^exp))";
	struct diagnosis g;

	(void)state;
	/* a softmax by hand: NaN is Inf/Inf; +Inf a probability's 0 under the log */
	assert_string_equal(loss_cause(&g, infonce, 1, 0), "exp_overflow");
	assert_true(evidence_has(&g, "takes a sum of exps"));
	assert_true(evidence_has(&g, "above 88.72 in float32"));
	assert_true(g.nfixes > 0 && strstr(g.fixes[0], "log_softmax"));
	assert_string_equal(loss_cause(&g, infonce, 0, 0), "loss_log_zero");
	/* a logsumexp by hand */
	assert_string_equal(loss_cause(&g, "mean sub(log sum exp addmm, gather addmm)", 1, 0),
			    "exp_overflow");
	/* a scale as exp of a log-scale, divided by and logged: its 0 */
	assert_string_equal(loss_cause(&g, mdn, 1, 0), "division_by_zero");
	assert_true(evidence_has(&g, "divides by an exp"));
	assert_true(evidence_has(&g, "below -103.3 in float32"));
	assert_true(g.nfixes > 0 && strstr(g.fixes[0], "torch.exp(-s)"));
	/* a reciprocal of it divides too; an exp2's floor is not exp's: nothing said of it */
	assert_string_equal(loss_cause(&g, "mean mul(sub addmm, reciprocal exp addmm)", 1, 0),
			    "division_by_zero");
	assert_true(evidence_has(&g, "divides by an exp"));
	assert_string_equal(loss_cause(&g, "mean mul(sub addmm, reciprocal exp2 addmm)", 1, 0),
			    "loss_log_zero");
	assert_false(evidence_has(&g, "exp2(x)"));
	/* only its log */
	assert_string_equal(loss_cause(&g, "mean neg log exp addmm", 0, 0), "loss_log_zero");
	assert_true(evidence_has(&g, "takes the log of an exp"));
	/* exp(log_rate) - y * log_rate: an overflow, +Inf or Inf - Inf */
	assert_string_equal(loss_cause(&g, "mean sub(exp addmm, mul addmm)", 0, 0), "exp_overflow");
	assert_true(evidence_has(&g, "takes an exp and uses it in sub"));
	assert_string_equal(loss_cause(&g, "mean sub(exp addmm, mul addmm)", 1, 0), "exp_overflow");
	/*
	 * rate = exp(o); rate - y * log(rate), by hand: NaN is Inf - Inf of its overflow; +Inf
	 * the log's -Inf of its 0
	 */
	assert_string_equal(loss_cause(&g, "mean sub(exp addmm, mul log ^exp)", 1, 0),
			    "exp_overflow");
	assert_true(evidence_has(&g, "takes an exp and uses it in sub"));
	assert_string_equal(loss_cause(&g, "mean sub(exp addmm, mul log ^exp)", 0, 0),
			    "loss_log_zero");
	/* a log of it and a division by it stay its 0 */
	assert_string_equal(loss_cause(&g, mdn, 1, 0), "division_by_zero");
	/*
	 * a mixture's likelihood by hand, -log(sum(pi * exp(-z**2 / 2) / (sigma * c))), +Inf:
	 * the density's exp is the numerator, carried to the log through the sum (every term
	 * 0), not sigma's exp that divides
	 */
	assert_string_equal(loss_cause(&g, mixture, 0, 0), "loss_log_zero");
	assert_true(evidence_has(&g, "takes the log of a sum of exps"));
	assert_true(g.nfixes > 0 && strstr(g.fixes[0], "torch.logsumexp"));
	assert_false(evidence_has(&g, "divides by an exp"));
	/* a logsumexp by hand, +Inf with no negation above the log: its overflow, not log(0) */
	assert_string_equal(loss_cause(&g, "mean sub(log sum exp addmm, gather addmm)", 0, 0),
			    "loss_log_zero");
	assert_false(evidence_has(&g, "takes the log of a sum of exps"));
	/* a log-cosh loss by hand: cosh overflows past exp's threshold and log 2; never 0 */
	assert_string_equal(loss_cause(&g, "mean log cosh sub addmm", 0, 0), "exp_overflow");
	assert_true(evidence_has(
		&g, "takes a cosh and uses it in log: cosh(x) is Inf for |x| above 89.42"));
	assert_true(g.nfixes > 0 && strstr(g.fixes[0], "F.softplus(-2 * |x|)"));
	/* a softplus or sigmoid is 0 where exp is: a divisor or a log's argument alone */
	assert_string_equal(loss_cause(&g, "mean div(pow sub addmm, softplus addmm)", 1, 0),
			    "division_by_zero");
	assert_true(evidence_has(&g, "divides by a softplus: softplus(x) is 0 for x below -103.3"));
	assert_true(g.nfixes > 0 && strstr(g.fixes[0], "F.softplus(x) + 1e-6"));
	assert_string_equal(
		loss_cause(&g, "neg mean add(mul log sigmoid addmm, mul log rsub ^sigmoid)", 0, 0),
		"loss_log_zero");
	assert_true(evidence_has(&g, "takes the log of 1 - sigmoid: sigmoid(x) rounds to 1 for x "
				     "above 16.64 in float32"));
	assert_true(g.confidence >= 0.6);
	assert_true(g.nfixes > 0 && strstr(g.fixes[0], "F.logsigmoid(-x)"));
	assert_string_equal(loss_cause(&g, "neg mean log sigmoid addmm", 0, 0), "loss_log_zero");
	assert_true(evidence_has(&g, "takes the log of a sigmoid"));
	assert_true(g.confidence < 0.6);
	assert_string_equal(loss_cause(&g, "mean sub(softplus addmm, mul addmm)", 0, 0),
			    "loss_log_zero");
	assert_false(evidence_has(&g, "softplus(x)"));
	/* the exp of a bounded value, or one inside a module (under its output): no fact */
	assert_string_equal(loss_cause(&g, "mean sub(exp clamp addmm, mul addmm)", 0, 0),
			    "loss_log_zero");
	assert_string_equal(loss_cause(&g, "mean pow sub(addmm(exp mm, t), mul)", 1, 0),
			    "loss_log_zero");
}

/*
 * The first anomaly's input was made by the code of a module holding it (a later origin of
 * the iteration, its path a prefix): named, and the ops its forward names decide the cause
 * where they fit one; a sibling origin is no maker.
 */
static void test_made_between_calls(void **state)
{
	struct diag_anomaly first = fwd("dec.0", "Linear", 3, 0), sib = fwd("head", "Linear", 2, 1);
	struct diag_anomaly vae = fwd("", "VAE", 1, 1), next = fwd("x", "Linear", 2, 1);
	/*
	 * A "/" names no op: a sum into groups or a count (a mean aggregation by hand, NaN
	 * alone), a distance (an inverse distance); "norm" may be an attribute (self.norm)
	 */
	static const char *const names[][3] = {{"torch", "exp", "randn_like"},
					       {"softmax", "masked_fill", "dec"},
					       {"exp", "sqrt", "enc"},
					       {"atanh", "cat", "q"},
					       {"atanh", "log", "q"},
					       {"zeros_like", "index_add_", "lin"},
					       {"cdist", "eye", "out"},
					       {"sum", "log", "lin"},
					       {"norm", "emb", "out"},
					       {"sum", "lin", "x"},
					       {"gumbel_softmax", "code", "logits"}};
	static const char *const want[] = {
		"exp_overflow",	    "attention_fully_masked", "unknown",
		"invalid_domain",   "invalid_domain",	      "division_by_zero",
		"division_by_zero", "invalid_domain",	      "unknown",
		"unknown",	    "division_by_zero"};
	struct diagnosis g;
	struct diag d;
	int k, i;

	(void)state;
	vae.module_id = 0x5000;
	sib.module_id = 0x6000;
	next.iteration = 5;
	for (k = 0; k < 11; k++) {
		/* the last: a sum, but an Inf beside the NaN is no 0/0 alone */
		vae.posinf = k == 9;
		diagnose__init(&d);
		assert_int_equal(diagnose__observe(&d, &first), 0);
		assert_int_equal(diagnose__observe(&d, &sib), 0);
		assert_int_equal(diagnose__maker(&d), 0);
		assert_int_equal(diagnose__observe(&d, &vae), 0);
		assert_int_equal(diagnose__maker(&d), 0x5000);
		for (i = 0; i < 3; i++)
			diagnose__maker_name(names[k][i], &d);
		assert_int_equal(diagnose__observe(&d, &next), 1);
		assert_int_equal(diagnose__conclude(&d, &g), 0);
		assert_string_equal(g.cause, want[k]);
		assert_string_equal(g.layer, "dec.0");
		assert_true(strstr(g.evidence[1], "the code of the model (VAE) made them") != NULL);
		/* atanh alone: its domain is [-1, 1], and the fix clamps into it */
		if (k == 3 || k == 4)
			assert_true((strstr(g.fixes[0], "keep the value from before the tanh") !=
				     NULL) == (k == 3));
		if (k == 5)
			assert_true(evidence_has(&g, "the code names index_add and returned NaN "
						     "alone") &&
				    strstr(g.fixes[0], "n.clamp_min(1)"));
		if (k == 6)
			assert_true(evidence_has(&g, "the code names cdist: a distance is 0") &&
				    strstr(g.fixes[0], "1 / (d + 1e-6)"));
		/* a Gumbel-softmax's temperature annealed to 0 */
		if (k == 10)
			assert_true(evidence_has(&g, "by its temperature tau: at tau = 0") &&
				    strstr(g.fixes[0], "tau = max(tau, 0.1)"));
	}
	/* no maker where the first anomaly's inputs were finite */
	first.inputs_finite = 1;
	diagnose__init(&d);
	assert_int_equal(diagnose__observe(&d, &first), 0);
	assert_int_equal(diagnose__observe(&d, &vae), 0);
	assert_int_equal(diagnose__maker(&d), 0);
}

static void test_unknown_and_sample_mode(void **state)
{
	struct diag_anomaly as[] = {fwd("mix", "Linear", 2, -1)};
	struct diag_anomaly root[] = {fwd("", "TinyLM", 1, 1)};
	struct diagnosis g;

	(void)state;
	assert_string_equal(cause_of(&g, as, 1, 0), "unknown");
	/* only the model's output seen: no layer-level rule may claim a cause */
	assert_string_equal(cause_of(&g, root, 1, 1), "unknown");
	assert_int_equal(g.nfixes, 0);
	root[0].inputs_finite = 0;
	assert_string_equal(cause_of(&g, root, 1, 1), "bad_input_data");
}

/* Losses of iterations 0..n-1 (one step each), then the anomalies of iteration n. */
static const char *with_losses(struct diagnosis *g, const double *losses, int n,
			       struct diag_anomaly *a)
{
	struct diag_anomaly next = fwd("x", "Linear", 2, 1);
	struct diag d;
	int i;

	diagnose__init(&d);
	for (i = 0; i < n; i++)
		diagnose__loss(&d, i, FINDING_STEP_ATTACH, i, losses[i]);
	a->step = a->iteration = n;
	assert_int_equal(diagnose__observe(&d, a), 0);
	next.iteration = n + 1;
	assert_int_equal(diagnose__observe(&d, &next), 1);
	assert_int_equal(diagnose__conclude(&d, g), 0);
	return g->cause;
}

/*
 * Losses of iterations 0..n-1 at step[i] from source[i] (NULL: FINDING_STEP_ATTACH), an
 * anomaly of iteration n - 1 at step a_step, shifted by shift (0: none) to the loop's
 * counter before the next iteration ends it; the diagnosis in g.
 */
static void trend_of(struct diagnosis *g, int n, const uint64_t *step, const int *source,
		     uint64_t a_step, int64_t shift)
{
	struct diag_anomaly a = fwd("x", "Linear", 2, 1), next = fwd("x", "Linear", 2, 1);
	struct diag d;
	int i;

	diagnose__init(&d);
	for (i = 0; i < n; i++)
		diagnose__loss(&d, step[i], source ? source[i] : FINDING_STEP_ATTACH, i, 1.0 + i);
	a.step = a_step;
	a.iteration = n - 1;
	next.iteration = n;
	assert_int_equal(diagnose__observe(&d, &a), 0);
	if (shift)
		diagnose__shift(&d, shift, FINDING_STEP_LOOP);
	assert_int_equal(diagnose__observe(&d, &next), 1);
	assert_int_equal(diagnose__conclude(&d, g), 0);
	assert_int_equal(g->ntrend, n);
}

/*
 * Accumulation of two micro-batches a step, attached before the first optimizer step:
 * the losses counted by backward passes until then are renumbered as step 0, the step
 * the first optimizer step ends.
 */
static void test_trend_micro_batches(void **state)
{
	static const int source[] = {FINDING_STEP_BACKWARD, FINDING_STEP_BACKWARD,
				     FINDING_STEP_ATTACH,   FINDING_STEP_ATTACH,
				     FINDING_STEP_ATTACH,   FINDING_STEP_ATTACH};
	static const uint64_t step[] = {0, 1, 1, 1, 2, 2};
	struct diagnosis g;
	int i;

	(void)state;
	trend_of(&g, 6, step, source, 2, 0);
	for (i = 0; i < 6; i++) {
		assert_int_equal(g.trend[i].iteration, i);
		assert_int_equal(g.trend[i].step, i / 2);
	}
}

/* A run updated by hand keeps its backward-pass steps. */
static void test_trend_backward_passes(void **state)
{
	static const int source[] = {FINDING_STEP_BACKWARD, FINDING_STEP_BACKWARD,
				     FINDING_STEP_BACKWARD, FINDING_STEP_BACKWARD};
	static const uint64_t step[] = {0, 1, 2, 3};
	struct diagnosis g;
	int i;

	(void)state;
	trend_of(&g, 4, step, source, 3, 0);
	for (i = 0; i < 4; i++)
		assert_int_equal(g.trend[i].step, i);
}

/* The loop's counter found: the incident's steps so far are renumbered by its offset. */
static void test_shift_to_loop_counter(void **state)
{
	static const uint64_t step[] = {0, 1, 2, 3};
	struct diagnosis g;
	int i;

	(void)state;
	trend_of(&g, 4, step, NULL, 3, 100);
	assert_int_equal(g.step, 103);
	for (i = 0; i < g.ntrend; i++)
		assert_int_equal(g.trend[i].step, 100 + g.trend[i].iteration);
}

static void test_lr_too_high(void **state)
{
	const double diverging[] = {170, 27.7, 1.2e4, 8.6e9, 1.2e29};
	const double stable[] = {3.1, 2.9, 2.8, 2.6, 2.5};
	const double noisy[] = {3.0, 2.0, 2.5, 2.4, 2.6};
	struct diag_anomaly a = fwd("2", "Linear", 2, 1);
	struct diagnosis g;

	(void)state;
	a.posinf = 8;
	a.finite_max_abs = 0;
	assert_string_equal(with_losses(&g, diverging, 5, &a), "lr_too_high");
	assert_int_equal(g.origin_step, 1); /* the lowest loss: its update began it */
	assert_int_equal(g.ntrend, 5);
	assert_true(g.trend[4].value == 1.2e29 && g.trend[4].step == 4);
	assert_true(g.nfixes == 2 && strstr(g.fixes[0], "learning rate"));
	/* params already non-finite after a divergence: still the learning rate */
	a.params_finite = 0;
	assert_string_equal(with_losses(&g, diverging, 5, &a), "lr_too_high");
	/* a stable loss: the update of the last clean step wrote the parameters */
	assert_string_equal(with_losses(&g, stable, 5, &a), "nonfinite_params");
	assert_int_equal(g.origin_step, 4);
	assert_false(evidence_has(&g, "reads only the rows"));
	/* an Embedding's row may have been written by any update since it was looked up */
	a.module = "Embedding";
	assert_string_equal(with_losses(&g, stable, 5, &a), "nonfinite_params");
	assert_int_equal(g.origin_step, -1);
	assert_true(evidence_has(&g, "not only the last"));
	a.module = "Linear";
	/* rising, but not two steps in a row by 100x: not a divergence */
	a.params_finite = 1;
	assert_string_equal(with_losses(&g, noisy, 5, &a), "division_by_zero");
	assert_int_equal(g.origin_step, -1);
}

/* SGD with momentum at a learning rate far too high: the loss rises by fits and starts. */
static void test_lr_through_noise(void **state)
{
	const double rough[] = {2.4, 2.3, 5.1, 3.2, 60, 41, 2e3, 9e2, 4e5, 1e5, 9e7};
	const double calm[] = {2.4, 2.3, 5.1, 3.2, 6.0, 4.1, 5.0, 4.9, 3.5, 3.0, 7.0};
	struct diag_anomaly a = fwd("layer2.0.downsample.1", "BatchNorm2d", 3, 1);
	struct diagnosis g;

	(void)state;
	a.nan = 4;
	assert_string_equal(with_losses(&g, rough, 11, &a), "lr_too_high");
	assert_int_equal(g.origin_step, 1); /* the smallest loss of the window */
	assert_non_null(strstr(g.evidence[0], "2.3 at step 1, 9e+07 at step 10"));
	/* whichever phase showed the first non-finite value: a gradient of the backward pass */
	a.phase = "backward";
	a.node = "NativeBatchNormBackward0";
	assert_string_equal(with_losses(&g, rough, 11, &a), "lr_too_high");
	/* ups and downs without a run-up: no divergence */
	a.phase = "forward";
	assert_string_not_equal(with_losses(&g, calm, 11, &a), "lr_too_high");
}

/*
 * A learning rate far too high under Adam (nanoGPT): the loss climbs for hundreds of steps,
 * x1.07 a step under noise of x5 either way, no run of rises long enough and the last loss not
 * the window's largest; a backward node the first to go NaN.
 */
static void test_lr_over_the_long_run(void **state)
{
	static const double noise[] = {0.4, 1.0, 2.2, 0.7, 1.5, 0.5, 1.9};
	struct diag_anomaly a = fwd(NULL, NULL, 0, 1);
	double climb[200], fall[200], calm[200];
	struct diag_grad grads[16];
	struct diagnosis g;
	const char *line;
	struct diag d;
	size_t n;
	int i;

	(void)state;
	for (i = 0; i < 200; i++) {
		double base = 150 * pow(1.07, i), k = noise[(199 - i) % 7];

		climb[i] = base * k;
		/* the same climb, then 30 steps of falling back: a peak left behind */
		fall[i] = (i < 170 ? base : 150 * pow(1.07, 170) * pow(0.8, i - 170)) * k;
		calm[i] = (4.0 - 3.0 * i / 200) * k;
	}
	a.phase = "backward";
	a.node = "TBackward0";
	a.op = "t";
	a.nan = 16384;
	assert_string_equal(with_losses(&g, climb, 200, &a), "lr_too_high");
	assert_non_null(strstr(g.evidence[0], "the loss climbed over the watch"));
	assert_int_equal(g.origin_step, 0); /* the watch's first loss */
	assert_true(g.nbasis == 1 && !strcmp(g.basis[0], "loss_trend"));
	assert_string_not_equal(with_losses(&g, fall, 200, &a), "lr_too_high");
	assert_string_not_equal(with_losses(&g, calm, 200, &a), "lr_too_high");
	/* too few losses in the watch to know where it began */
	assert_string_not_equal(with_losses(&g, climb + 190, 10, &a), "lr_too_high");
	/* the gradient norms of the passes: a line too long is cut between two of them */
	diagnose__init(&d);
	for (i = 0; i < 200; i++) {
		diagnose__loss(&d, i, FINDING_STEP_ATTACH, i, climb[i]);
		if (i >= 184) /* the last 16 passes, oldest first */
			grads[i - 184] = (struct diag_grad){i, i, 1.2345e14 * (i + 1)};
	}
	diagnose__grads(&d, grads, 16);
	a.step = a.iteration = 200;
	diagnose__observe(&d, &a);
	a.iteration = 201;
	diagnose__observe(&d, &a);
	assert_int_equal(diagnose__conclude(&d, &g), 0);
	assert_string_equal(g.cause, "lr_too_high");
	line = g.evidence[1];
	assert_non_null(strstr(line, "gradient norm by step: 184: 2.28e+16, 185: 2.3e+16,"));
	n = strlen(line);
	assert_string_equal(line + n - 8, "e+16 ...");
}

/* Attached late, one loss seen: the gradient norms grew at every step before the overflow. */
static void test_lr_from_gradient_norms(void **state)
{
	const double one[] = {7.5};
	struct diag_anomaly a = fwd("transformer.h.0.ln_2", "LayerNorm", 2, 1);
	struct diag_grad growing[] = {{3, 3, 2.0}, {4, 4, 40}, {5, 5, 900}, {6, 6, 3e4}};
	struct diag_grad spike[] = {{3, 3, 2.0}, {4, 4, 1.5}, {5, 5, 2.2}, {6, 6, 3e4}};
	struct diagnosis g;
	struct diag d;
	int k;

	(void)state;
	for (k = 0; k < 2; k++) {
		diagnose__init(&d);
		diagnose__loss(&d, 6, FINDING_STEP_ATTACH, 0, one[0]);
		diagnose__grads(&d, k ? spike : growing, 4);
		a.step = 7;
		a.iteration = 1;
		a.nan = 8;
		diagnose__observe(&d, &a);
		a.iteration = 2;
		diagnose__observe(&d, &a);
		a.iteration = 1;
		assert_int_equal(diagnose__conclude(&d, &g), 0);
		if (!k) {
			assert_string_equal(g.cause, "lr_too_high");
			assert_int_equal(g.origin_step, 3);
			assert_non_null(strstr(g.evidence[0], "gradient norm grew at every step"));
			assert_non_null(strstr(g.fixes[0], "the gradient norm grew"));
			assert_int_equal(g.nbasis, 1);
			assert_string_equal(g.basis[0], "gradient_norms");
		} else {
			/* one spike is no run-up */
			assert_string_not_equal(g.cause, "lr_too_high");
		}
	}
}

/*
 * Five steps of losses and gradient norms, then the first Linear's parameters non-finite at
 * step 5: the update of step 4 wrote them.
 */
static void params_after(struct diagnosis *g, const double *losses, const struct diag_grad *grads)
{
	struct diag_anomaly a = fwd("0", "Linear", 2, 1);
	struct diag d;
	int i;

	a.params_finite = 0;
	diagnose__init(&d);
	for (i = 0; i < 5; i++)
		diagnose__loss(&d, i, FINDING_STEP_ATTACH, i, losses[i]);
	diagnose__grads(&d, grads, 5);
	a.step = a.iteration = 5;
	diagnose__observe(&d, &a);
	a.iteration = 6;
	diagnose__observe(&d, &a);
	assert_int_equal(diagnose__conclude(&d, g), 0);
	assert_string_equal(g->cause, "nonfinite_params");
	assert_int_equal(g->origin_step, 4);
}

static void test_gradient_evidence(void **state)
{
	const double stable[] = {3.1, 2.9, 2.8, 2.6, 2.5};
	struct diag_grad grads[] = {
		{0, 0, 2.0}, {1, 1, 1.5}, {2, 2, 2.5}, {3, 3, 2.1}, {4, 4, 900}};
	struct diagnosis g;
	int i, found = 0;

	(void)state;
	params_after(&g, stable, grads);
	assert_int_equal(g.nbasis, 3);
	assert_string_equal(g.basis[2], "gradient_norms");
	for (i = 0; i < g.nevidence; i++)
		found |= strstr(g.evidence[i], "exploding gradient") != NULL;
	assert_true(found);
	/* clip near the typical norm before step 4 (the median of 2.0, 1.5, 2.5, 2.1) */
	assert_non_null(strstr(g.fixes[0], "max_norm=2)"));
}

/*
 * Every gradient 0 (a loss weighted to 0) at the update that wrote non-finite parameters: no
 * gradient was too large, the update divided by its size (a clipping by hand, g / g.norm()).
 */
static void test_zero_gradient_update(void **state)
{
	const double losses[] = {3.1, 2.9, 2.8, 2.6, 0};
	struct diag_grad grads[] = {{0, 0, 2.0}, {1, 1, 1.5}, {2, 2, 2.5}, {3, 3, 2.1}, {4, 4, 0}};
	struct diagnosis g;
	int i, zero = 0, large = 0;

	(void)state;
	params_after(&g, losses, grads);
	for (i = 0; i < g.nevidence; i++) {
		zero |= strstr(g.evidence[i], "every gradient of step 4 was 0") != NULL;
		large |= strstr(g.evidence[i], "too large") != NULL;
	}
	assert_true(zero);
	assert_false(large);
	assert_non_null(strstr(g.fixes[0], "total_norm.clamp_min(1e-6)"));
	for (i = 0; i < g.nfixes; i++)
		assert_null(strstr(g.fixes[i], "max_norm=2)"));
}

static void test_warnings(void **state)
{
	struct diag_warning w;
	struct diag d;

	(void)state;
	diagnose__init(&d);
	/* the first mark of a module: nothing to compare with, far from the range */
	assert_int_equal(diagnose__mark(&d, 0x10, NULL, 3, 3, 2.4e5, 3.4e38, &w), 0);
	/* x3.8e9 in one iteration: overflows in 3 */
	assert_int_equal(diagnose__mark(&d, 0x10, NULL, 4, 4, 9.3e14, 3.4e38, &w), 1);
	assert_string_equal(w.reason, "growth");
	assert_int_equal(w.iterations_left, 3);
	assert_true(w.growth > 3e9 && w.growth < 4e9);
	/* once per module and reason; then the square root of the range */
	assert_int_equal(diagnose__mark(&d, 0x10, NULL, 5, 5, 1e17, 3.4e38, &w), 0);
	assert_int_equal(diagnose__mark(&d, 0x10, NULL, 6, 6, 2e19, 3.4e38, &w), 1);
	assert_string_equal(w.reason, "near_range");
	assert_int_equal(diagnose__mark(&d, 0x10, NULL, 7, 7, 2e21, 3.4e38, &w), 0);
	/* slow growth over many iterations is no run-up */
	assert_int_equal(diagnose__mark(&d, 0x20, NULL, 1, 1, 2e3, 3.4e38, &w), 0);
	assert_int_equal(diagnose__mark(&d, 0x20, NULL, 50, 50, 4e4, 3.4e38, &w), 0);
	/* float16: 300 is past sqrt(65504) */
	assert_int_equal(diagnose__mark(&d, 0x30, NULL, 1, 1, 300, 65504, &w), 1);
	assert_string_equal(w.reason, "near_range");
}

static void test_no_incident(void **state)
{
	struct diagnosis g;
	struct diag d;

	(void)state;
	diagnose__init(&d);
	assert_int_equal(diagnose__conclude(&d, &g), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_bad_input),
		cmocka_unit_test(test_model_inputs_decide_not_the_loss_module),
		cmocka_unit_test(test_attention),
		cmocka_unit_test(test_fp16),
		cmocka_unit_test(test_division_exp_domain),
		cmocka_unit_test(test_backward_masked_where),
		cmocka_unit_test(test_params_and_loss),
		cmocka_unit_test(test_loss_chain),
		cmocka_unit_test(test_loss_exp),
		cmocka_unit_test(test_loss_selection_and_ctc),
		cmocka_unit_test(test_loss_domain),
		cmocka_unit_test(test_unknown_and_sample_mode),
		cmocka_unit_test(test_made_between_calls),
		cmocka_unit_test(test_no_incident),
		cmocka_unit_test(test_trend_micro_batches),
		cmocka_unit_test(test_shift_to_loop_counter),
		cmocka_unit_test(test_trend_backward_passes),
		cmocka_unit_test(test_lr_too_high),
		cmocka_unit_test(test_lr_through_noise),
		cmocka_unit_test(test_lr_over_the_long_run),
		cmocka_unit_test(test_lr_from_gradient_norms),
		cmocka_unit_test(test_warnings),
		cmocka_unit_test(test_gradient_evidence),
		cmocka_unit_test(test_zero_gradient_update),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
