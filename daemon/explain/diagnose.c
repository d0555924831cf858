// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Diagnosis: from the anomalies of the first bad iteration, pick a cause from
 * the fixed vocabulary, say which facts led there and what to change. Rules
 * run from the most specific fact to the most generic one.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "explain/diagnose.h"
#include "util/dtype.h"

#define NEAR_OVERFLOW 1e30 /* float32 values this large overflow at the next multiply */

void diagnose__init(struct diag *d)
{
	memset(d, 0, sizeof(*d));
	d->root_inputs_finite = -1;
}

static void copy(char *dst, size_t len, const char *src)
{
	snprintf(dst, len, "%s", src ? src : "");
}

/* The slot to write next in a ring of cap entries: a free one, or the oldest. */
static unsigned int ring_next(unsigned int *head, unsigned int *n, unsigned int cap)
{
	unsigned int i;

	if (*n < cap)
		return (*head + (*n)++) % cap;
	i = *head;
	*head = (*head + 1) % cap;
	return i;
}

static const struct diag_loss *loss_at(const struct diag *d, unsigned int i);

/*
 * Losses counted by backward passes (no optimizer step seen yet) before the first
 * optimizer step were its micro-batches (gradient accumulation): they belong to the
 * step before the one that follows it, and are numbered so once it is seen.
 */
static void renumber_micro_batches(struct diag *d, uint64_t step)
{
	unsigned int i;

	for (i = d->nlosses; i-- > 0;) {
		struct diag_loss *l = (struct diag_loss *)loss_at(d, i);

		if (l->step_source != FINDING_STEP_BACKWARD)
			break;
		l->step = step ? step - 1 : 0;
		l->step_source = FINDING_STEP_ATTACH;
	}
	for (i = d->nearly; i-- > 0;) {
		if (d->early[i].step_source != FINDING_STEP_BACKWARD)
			break;
		d->early[i].step = step ? step - 1 : 0;
		d->early[i].step_source = FINDING_STEP_ATTACH;
	}
}

static int counted_since_attach(int source)
{
	return source == FINDING_STEP_ATTACH || source == FINDING_STEP_BACKWARD;
}

/*
 * The watch's first finite losses, kept past the ring: where a long divergence began. Those
 * counted from the attach go once the target's own step is known, so that all are numbered
 * alike.
 */
static void note_early(struct diag *d, const struct diag_loss *l)
{
	unsigned int i, j;

	if (!counted_since_attach(l->step_source)) {
		for (i = j = 0; i < d->nearly; i++)
			if (!counted_since_attach(d->early[i].step_source))
				d->early[j++] = d->early[i];
		d->nearly = j;
	}
	if (d->nearly && d->early[d->nearly - 1].iteration == l->iteration) {
		d->early[d->nearly - 1] = *l;
		if (!isfinite(l->value))
			d->nearly--;
		return;
	}
	if (d->nearly < DIAG_WINDOW && isfinite(l->value))
		d->early[d->nearly++] = *l;
}

void diagnose__loss(struct diag *d, uint64_t step, int step_source, uint64_t iteration,
		    double value)
{
	struct diag_loss *l;

	if (d->nlosses) {
		l = &d->losses[(d->loss_head + d->nlosses - 1) % DIAG_MAX_LOSSES];
		if (l->iteration == iteration) {
			l->step = step;
			l->step_source = step_source;
			l->value = value;
			note_early(d, l);
			return;
		}
		if (l->step_source == FINDING_STEP_BACKWARD && step_source != FINDING_STEP_BACKWARD)
			renumber_micro_batches(d, step);
	}
	l = &d->losses[ring_next(&d->loss_head, &d->nlosses, DIAG_MAX_LOSSES)];
	l->step = step;
	l->step_source = step_source;
	l->iteration = iteration;
	l->value = value;
	note_early(d, l);
}

static const struct diag_loss *loss_at(const struct diag *d, unsigned int i)
{
	return &d->losses[(d->loss_head + i) % DIAG_MAX_LOSSES];
}

static const struct diag_mark *mark_at(const struct diag *d, unsigned int i)
{
	return &d->marks[(d->mark_head + i) % DIAG_MAX_MARKS];
}

/* The module's latest mark, NULL if none. */
static const struct diag_mark *last_mark(const struct diag *d, uint64_t module)
{
	unsigned int i;

	for (i = d->nmarks; i-- > 0;)
		if (mark_at(d, i)->module == module)
			return mark_at(d, i);
	return NULL;
}

static struct diag_module *module_state(struct diag *d, uint64_t module)
{
	unsigned int i;

	for (i = 0; i < d->nmodules; i++)
		if (d->modules[i].module == module)
			return &d->modules[i];
	if (d->nmodules >= DIAG_MAX_MODULES)
		return NULL;
	d->modules[d->nmodules].module = module;
	return &d->modules[d->nmodules++];
}

int diagnose__mark(struct diag *d, uint64_t module, const char *layer, uint64_t step,
		   uint64_t iteration, double value, double limit, struct diag_warning *w)
{
	const struct diag_mark *prev = last_mark(d, module);
	struct diag_module *m = module_state(d, module);
	struct diag_mark *k;
	double growth = 0;
	int left = -1;

	memset(w, 0, sizeof(*w));
	if (prev && iteration > prev->iteration && prev->value > 0 && value > prev->value) {
		growth = pow(value / prev->value, 1.0 / (double)(iteration - prev->iteration));
		if (growth >= DIAG_GROWTH && value < limit)
			left = (int)ceil(log(limit / value) / log(growth));
	}
	k = &d->marks[ring_next(&d->mark_head, &d->nmarks, DIAG_MAX_MARKS)];
	k->module = module;
	k->step = step;
	k->iteration = iteration;
	k->value = value;
	copy(k->layer, sizeof(k->layer), layer ? layer : "?");
	if (!m)
		return 0;
	w->value = value;
	w->limit = limit;
	w->growth = growth;
	w->iterations_left = left;
	if (left >= 0 && left <= DIAG_HORIZON && !m->warned_growth) {
		m->warned_growth = 1;
		w->reason = "growth";
		return 1;
	}
	/* x * x overflows past the square root of the range: a variance, a dot product */
	if (value >= sqrt(limit) && !m->warned_range) {
		m->warned_range = 1;
		w->reason = "near_range";
		return 1;
	}
	return 0;
}

/* Is outer the path of a module that holds the module at inner ("" holds every other)? */
static int holds(const char *outer, const char *inner)
{
	size_t n = strlen(outer);

	if (!strcmp(outer, inner))
		return 0;
	return !n || (!strncmp(outer, inner, n) && inner[n] == '.');
}

/* A later anomaly of the iteration that made the first's non-finite input: struct diag_maker. */
static void note_maker(struct diag *d, const struct diag_anomaly *a)
{
	const struct diag_anomaly *f = &d->first;
	struct diag_maker *m = &d->maker;

	if (m->known || f->inputs_finite != 0 || !f->layer || !a->layer || !a->phase ||
	    strcmp(a->phase, "forward") || strcmp(f->phase, "forward") || a->inputs_finite != 1 ||
	    a->params_finite != 1 || a->depth >= f->depth || !holds(a->layer, f->layer))
		return;
	m->known = 1;
	m->module_id = a->module_id;
	m->outside_model = a->outside_model;
	copy(m->layer, sizeof(m->layer), a->layer);
	copy(m->module, sizeof(m->module), a->module);
	m->nan = a->nan;
	m->posinf = a->posinf;
	m->neginf = a->neginf;
}

uint64_t diagnose__maker(const struct diag *d)
{
	return d->maker.known ? d->maker.module_id : 0;
}

void diagnose__add_code_op(char ops[][EVIDENCE_OP_LEN], int *n, const char *name)
{
	char op[EVIDENCE_OP_LEN];
	int i;

	if (*n >= EVIDENCE_MAX_OPS || !diagnose__code_op(name, op, sizeof(op)))
		return;
	for (i = 0; i < *n; i++)
		if (!strcmp(ops[i], op))
			return;
	memcpy(ops[(*n)++], op, sizeof(op));
}

/*
 * Names a module's own code may divide by, with "/" (which names no op): a sum into groups or
 * a count (0 for a group nothing reached), a distance (0 between equal points). Not "norm",
 * "dist" nor "mean": attributes (self.norm) and modules go by those names too.
 */
static const char *const group_names[] = {"index_add",	  "scatter_add",    "scatter_reduce",
					  "index_reduce", "segment_reduce", "bincount",
					  "sum",	  "count_nonzero",  NULL};
static const char *const distance_names[] = {"cdist",	    "pdist",	   "pairwise_distance",
					     "vector_norm", "matrix_norm", NULL};

static int in_set(const char *op, const char *const *set);

static int code_base(const char *name, char base[EVIDENCE_OP_LEN]);

/* name, as an op (code_base), into op if it is in set and op is still empty */
static void keep_name(char *op, size_t len, const char *name, const char *const *set)
{
	char base[EVIDENCE_OP_LEN];

	if (!op[0] && code_base(name, base) && in_set(base, set))
		snprintf(op, len, "%s", base);
}

int diagnose__maker_name(const char *name, void *ctx)
{
	struct diag_maker *m = &((struct diag *)ctx)->maker;

	diagnose__add_code_op(m->code_ops, &m->ncode, name);
	keep_name(m->group_op, sizeof(m->group_op), name, group_names);
	keep_name(m->distance_op, sizeof(m->distance_op), name, distance_names);
	return 0;
}

int diagnose__observe(struct diag *d, const struct diag_anomaly *a)
{
	if (d->done)
		return 0;
	if (!d->open) {
		d->open = 1;
		d->first = *a;
		copy(d->first_layer, sizeof(d->first_layer), a->layer);
		copy(d->first_module, sizeof(d->first_module), a->module);
		copy(d->first_phase, sizeof(d->first_phase), a->phase);
		copy(d->first_dtype, sizeof(d->first_dtype), a->dtype);
		d->first.layer = a->layer ? d->first_layer : NULL;
		d->first.module = a->module ? d->first_module : NULL;
		d->first.phase = d->first_phase;
		d->first.dtype = d->first_dtype;
		copy(d->first_node, sizeof(d->first_node), a->node);
		d->first.node = a->node ? d->first_node : NULL;
		copy(d->first_op, sizeof(d->first_op), a->op);
		d->first.op = a->op ? d->first_op : NULL;
		copy(d->first_upstream, sizeof(d->first_upstream), a->upstream);
		d->first.upstream = a->upstream ? d->first_upstream : NULL;
		if (a->loss)
			d->first_loss = *a->loss;
		d->first.loss = a->loss ? &d->first_loss : NULL;
	}
	if (a->iteration != d->first.iteration)
		return 1; /* the incident's iteration is over */
	note_maker(d, a);
	/*
	 * The first outermost module to return is the model (a loss module returns
	 * after it): its inputs are the batch itself.
	 */
	if (!d->root_seen && a->depth == 1 && a->phase && !strcmp(a->phase, "forward")) {
		d->root_seen = 1;
		d->root_inputs_finite = a->inputs_finite;
	}
	return 0;
}

__attribute__((format(printf, 2, 3))) static void evidence(struct diagnosis *g, const char *fmt,
							   ...)
{
	va_list ap;

	if (g->nevidence >= DIAG_MAX_EVIDENCE)
		return;
	va_start(ap, fmt);
	vsnprintf(g->evidence[g->nevidence++], sizeof(g->evidence[0]), fmt, ap);
	va_end(ap);
}

/*
 * An evidence line "label: item, item, ...", sent if it has items; an item that does not fit
 * whole is left out, with those after it, and the line ends " ...".
 */
#define LIST_MORE " ..."

struct listing {
	char buf[sizeof(((struct diagnosis *)0)->evidence[0])];
	int len, n, cut;
};

__attribute__((format(printf, 2, 3))) static void list_begin(struct listing *l, const char *fmt,
							     ...)
{
	va_list ap;

	memset(l, 0, sizeof(*l));
	va_start(ap, fmt);
	l->len = vsnprintf(l->buf, sizeof(l->buf), fmt, ap);
	va_end(ap);
}

__attribute__((format(printf, 2, 3))) static void list_add(struct listing *l, const char *fmt, ...)
{
	char item[sizeof(l->buf)];
	va_list ap;
	int n;

	if (l->cut)
		return;
	va_start(ap, fmt);
	n = vsnprintf(item, sizeof(item), fmt, ap);
	va_end(ap);
	/* the separator, the item and room for LIST_MORE after it, and the NUL */
	if (n < 0 || l->len + !!l->n + n + (int)sizeof(LIST_MORE) > (int)sizeof(l->buf)) {
		l->cut = 1;
		return;
	}
	l->len += snprintf(l->buf + l->len, sizeof(l->buf) - l->len, "%s%s", l->n ? "," : "", item);
	l->n++;
}

static void list_send(const struct listing *l, struct diagnosis *g)
{
	if (l->n)
		evidence(g, "%s%s", l->buf, l->cut ? LIST_MORE : "");
}

/* The anomaly's module in words: its path, or what an outermost one is. */
static const char *name(const struct diag_anomaly *a)
{
	if (!a->layer)
		return "an unnamed module";
	if (*a->layer)
		return a->layer;
	return a->outside_model ? "a module called outside the model" : "the model";
}

static void fix(struct diagnosis *g, const char *text)
{
	if (g->nfixes < DIAG_MAX_FIXES)
		g->fixes[g->nfixes++] = text;
}

/* The fixes of a cause that more than one rule names, written once. */
static void log_fixes(struct diagnosis *g)
{
	fix(g, "compute log-probabilities with log_softmax (or F.cross_entropy / F.nll_loss) "
	       "instead of log(softmax(x))");
	fix(g, "clamp before the log: torch.log(p.clamp_min(1e-12))");
}

/* log of a sum of exps in log space, with each term's log taken as such */
static void log_space_fixes(struct diagnosis *g)
{
	fix(g, "compute the log of the sum in log space: torch.logsumexp(log_w + log_terms, "
	       "dim=-1), each term's log taken directly (a Gaussian's is -z**2 / 2 - log(sigma) - "
	       "log(2 * pi) / 2), never log(exp(...)); a mixture density: "
	       "torch.distributions.MixtureSameFamily(...).log_prob(y)");
	fix(g, "for a recurrence over a sequence (an HMM's or CRF's forward algorithm): carry "
	       "log-alphas, log_alpha = torch.logsumexp(log_alpha[:, :, None] + log_T, 1) + "
	       "log_emit, or rescale alpha to sum 1 at each step and add the log of the scale");
}

static void masked_fixes(struct diagnosis *g)
{
	fix(g, "handle rows whose keys are all masked (drop them, or unmask one position)");
	fix(g, "mask with a large negative finite value instead of -inf");
}

static void exp_fixes(struct diagnosis *g)
{
	fix(g, "subtract the row maximum before exp (as torch.softmax does), or use logsumexp");
	fix(g, "clamp the exponent: torch.exp(x.clamp(max=80))");
}

static void domain_fix(struct diagnosis *g)
{
	fix(g, "clamp the argument into the op's domain (x.clamp_min(0) before sqrt, "
	       "x.clamp_min(1e-12) before log)");
}

/* acos, asin, atanh (op): the domain is [-1, 1] */
static void unit_fix(struct diagnosis *g, const char *op)
{
	if (!strcmp(op, "atanh"))
		fix(g, "clamp the argument into the domain first (x.clamp(-1 + 1e-7, 1 - 1e-7)); "
		       "where it is a tanh's output, keep the value from before the tanh instead");
	else
		fix(g, "clamp the argument into the domain first (x.clamp(-1 + 1e-7, 1 - 1e-7)), "
		       "or take the angle with torch.atan2 of the sine and the cosine");
}

static void denominator_fix(struct diagnosis *g)
{
	fix(g,
	    "add an epsilon to the denominator, or clamp it away from 0 (x / n.clamp_min(1e-12))");
}

/* One kind of fact the cause rests on (struct diagnosis' basis), once. */
static void rests(struct diagnosis *g, const char *kind)
{
	int i;

	for (i = 0; i < g->nbasis; i++)
		if (!strcmp(g->basis[i], kind))
			return;
	if (g->nbasis < DIAG_MAX_BASIS)
		g->basis[g->nbasis++] = kind;
}

static void conclude(struct diagnosis *g, const char *cause, double confidence)
{
	g->cause = cause;
	g->confidence = confidence;
}

static int has(const char *s, const char *part)
{
	return s && strstr(s, part);
}

void diagnose__grads(struct diag *d, const struct diag_grad *g, int n)
{
	if (n > DIAG_MAX_GRADS)
		n = DIAG_MAX_GRADS;
	if (n < 0)
		n = 0;
	memcpy(d->grads, g, n * sizeof(*g));
	d->ngrads = n;
}

/* The gradient norm of the pass at step, NULL if none was measured. */
static const struct diag_grad *grad_at(const struct diag *d, uint64_t step)
{
	int i;

	for (i = d->ngrads; i-- > 0;)
		if (d->grads[i].step == step)
			return &d->grads[i];
	return NULL;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, n, sizeof(v[0]), cmp_double);
	return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Median of the finite gradient norms of the passes before step; 0 if none. */
static double grad_median_before(const struct diag *d, uint64_t step)
{
	double v[DIAG_MAX_GRADS];
	int i, n = 0;

	for (i = 0; i < d->ngrads; i++)
		if (d->grads[i].step < step && isfinite(d->grads[i].norm))
			v[n++] = d->grads[i].norm;
	return n ? median(v, n) : 0;
}

/* "gradient norm by step: s: n, ..." for steps from..to, if any was measured. */
static void grad_evidence(const struct diag *d, uint64_t from, uint64_t to, struct diagnosis *g)
{
	struct listing l;
	int i;

	list_begin(&l, "gradient norm by step:");
	for (i = 0; i < d->ngrads; i++)
		if (d->grads[i].step >= from && d->grads[i].step <= to)
			list_add(&l, " %llu: %.3g", (unsigned long long)d->grads[i].step,
				 d->grads[i].norm);
	list_send(&l, g);
}

/* "clip_grad_norm_(..., max_norm=X)" with X the typical norm before step, when known. */
static void clip_fix(const struct diag *d, uint64_t step, struct diagnosis *g, int slot)
{
	double med = grad_median_before(d, step);

	if (med > 0)
		snprintf(g->fix_buf[slot], sizeof(g->fix_buf[0]),
			 "clip gradients near their typical norm before step %llu: "
			 "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=%.2g)",
			 (unsigned long long)step, med);
	else
		snprintf(g->fix_buf[slot], sizeof(g->fix_buf[0]),
			 "clip gradients: torch.nn.utils.clip_grad_norm_(model.parameters(), "
			 "max_norm=1.0)");
	fix(g, g->fix_buf[slot]);
}

/* The loss of the last iteration before `iteration`, NULL if none. */
static const struct diag_loss *loss_before(const struct diag *d, uint64_t iteration)
{
	unsigned int i;

	for (i = d->nlosses; i-- > 0;)
		if (loss_at(d, i)->iteration < iteration)
			return loss_at(d, i);
	return NULL;
}

/*
 * Divergence: the losses just before `iteration` rose at every step, for at
 * least two steps and by DIAG_GROWTH overall, or in one step by DIAG_JUMP. Returns the index of the lowest
 * one (where it began) and sets *end to the last, or -1.
 */
static int diverging(const struct diag *d, uint64_t iteration, int *end)
{
	int i, last = -1;

	for (i = (int)d->nlosses; i-- > 0;)
		if (loss_at(d, i)->iteration < iteration && isfinite(loss_at(d, i)->value)) {
			last = i;
			break;
		}
	if (last < 1)
		return -1;
	for (i = last; i > 0; i--) {
		const struct diag_loss *a = loss_at(d, i - 1), *b = loss_at(d, i);

		if (!isfinite(a->value) || !(a->value < b->value) ||
		    b->iteration != a->iteration + 1)
			break;
	}
	if (last - i < 1 || !(loss_at(d, i)->value > 0))
		return -1;
	/* two points suffice when the growth alone is beyond any noise */
	if (loss_at(d, last)->value <
	    (last - i < 2 ? DIAG_JUMP : DIAG_GROWTH) * loss_at(d, i)->value)
		return -1;
	*end = last;
	return i;
}

/*
 * A divergence through noise (SGD with momentum: the loss rises by fits and starts): among the
 * last DIAG_WINDOW finite losses before `iteration`, at least DIAG_WINDOW_MIN of them, the last
 * is the largest and DIAG_ROUGH times the smallest, which came before it. Returns the index of
 * the smallest (where it began) and sets *end to the last, or -1.
 */
static int diverging_rough(const struct diag *d, uint64_t iteration, int *end)
{
	int i, last = -1, lo = -1, n = 0;

	for (i = (int)d->nlosses; i-- > 0 && n < DIAG_WINDOW;) {
		const struct diag_loss *l = loss_at(d, i);

		if (l->iteration >= iteration)
			continue;
		if (!isfinite(l->value))
			break;
		if (last < 0)
			last = i;
		else if (l->value >= loss_at(d, last)->value)
			return -1; /* the last is not the largest */
		if (lo < 0 || l->value < loss_at(d, lo)->value)
			lo = i;
		n++;
	}
	if (n < DIAG_WINDOW_MIN || lo < 0 || lo == last || !(loss_at(d, lo)->value > 0) ||
	    loss_at(d, last)->value < DIAG_ROUGH * loss_at(d, lo)->value)
		return -1;
	*end = last;
	return lo;
}

/* The long run's two ends: the watch's first losses, and its last before an iteration. */
struct long_run {
	double early, recent; /* medians */
	const struct diag_loss *from, *to;
};

/*
 * A divergence over the long run (a learning rate too high climbs for hundreds of steps, each
 * step's rise lost in the noise): the median of the last DIAG_WINDOW finite losses before
 * `iteration` (DIAG_WINDOW_MIN * 2 at least) is DIAG_ROUGH times the median of the watch's
 * first ones (DIAG_WINDOW_MIN at least, all before them), and the newer half of the last ones
 * is no lower than the older half: still rising, not a plateau reached and left.
 */
static int diverging_long(const struct diag *d, uint64_t iteration, struct long_run *r)
{
	double v[DIAG_WINDOW], older[DIAG_WINDOW / 2], newer[DIAG_WINDOW / 2];
	int i, n = 0;
	unsigned int k;

	if (d->nearly < DIAG_WINDOW_MIN)
		return 0;
	for (k = d->nlosses; k-- > 0 && n < DIAG_WINDOW;) {
		const struct diag_loss *l = loss_at(d, k);

		if (l->iteration >= iteration)
			continue;
		if (!isfinite(l->value) || l->iteration <= d->early[d->nearly - 1].iteration)
			break;
		if (!n)
			r->to = l;
		v[n++] = l->value;
	}
	if (n < DIAG_WINDOW_MIN * 2)
		return 0;
	/* v is newest first: its first half the newer */
	for (i = 0; i < n / 2; i++) {
		newer[i] = v[i];
		older[i] = v[n - 1 - i];
	}
	if (median(newer, n / 2) < median(older, n / 2))
		return 0;
	r->recent = median(v, n);
	for (k = 0; k < d->nearly; k++)
		v[k] = d->early[k].value;
	r->early = median(v, (int)d->nearly);
	r->from = &d->early[0];
	return r->early > 0 && r->recent >= DIAG_ROUGH * r->early;
}

/*
 * Growth of the gradient norms before step (the daemon attached too late to see the losses
 * rise): at least three passes, each norm DIAG_RUNUP times the one before or more, the last
 * DIAG_GROWTH times the first. Returns the index of the first and sets *end to the last, or -1.
 */
static int grads_growing(const struct diag *d, uint64_t step, int *end)
{
	int i, last = -1, first;

	for (i = d->ngrads; i-- > 0;)
		if (d->grads[i].step < step && isfinite(d->grads[i].norm)) {
			last = i;
			break;
		}
	if (last < 2)
		return -1;
	for (first = last; first > 0; first--) {
		const struct diag_grad *a = &d->grads[first - 1], *b = &d->grads[first];

		if (!isfinite(a->norm) || !(a->norm > 0) || !(b->norm >= DIAG_RUNUP * a->norm))
			break;
	}
	if (last - first < 2 || d->grads[last].norm < DIAG_GROWTH * d->grads[first].norm)
		return -1;
	*end = last;
	return first;
}

/* "max |what| of X: v at step s, ..." from the marks under key, if there are some. */
static void mark_evidence(const struct diag *d, const struct diag_anomaly *a, uint64_t key,
			  const char *what, struct diagnosis *g)
{
	struct listing l;
	unsigned int i;

	list_begin(&l, "max |%s| of %s (sampled) before the overflow:", what, name(a));
	for (i = 0; i < d->nmarks; i++) {
		const struct diag_mark *k = mark_at(d, i);

		if (k->module == key && k->iteration <= a->iteration)
			list_add(&l, " %.3g at step %llu", k->value, (unsigned long long)k->step);
	}
	list_send(&l, g);
}

/* The updates' and the learning rate's share, once a divergence is seen: the fixes. */
static void lr_fixes(const struct diag *d, uint64_t from, double rate, const char *what,
		     struct diagnosis *g)
{
	g->origin_step = (int64_t)from;
	conclude(g, "lr_too_high", 0.8);
	snprintf(g->fix_buf[0], sizeof(g->fix_buf[0]),
		 "lower the learning rate (the %s grew x%.3g per step from step %llu): try a "
		 "tenth of it, or add warmup",
		 what, rate, (unsigned long long)from);
	fix(g, g->fix_buf[0]);
	clip_fix(d, from, g, 1);
}

/* Few or no losses seen: the gradient norms grew step over step before the first bad value. */
static int rule_lr_grads(const struct diag *d, const struct diag_anomaly *a, struct diagnosis *g)
{
	const struct diag_grad *lo, *hi;
	int start, end;
	double rate;

	start = grads_growing(d, a->step, &end);
	if (start < 0)
		return 0;
	lo = &d->grads[start];
	hi = &d->grads[end];
	rests(g, "gradient_norms");
	rate = pow(hi->norm / lo->norm,
		   1.0 / (double)(hi->step - lo->step ? hi->step - lo->step : 1));
	evidence(g,
		 "the gradient norm grew at every step before the first non-finite value: %.3g "
		 "at step %llu, %.3g at step %llu (x%.3g per step)",
		 lo->norm, (unsigned long long)lo->step, hi->norm, (unsigned long long)hi->step,
		 rate);
	grad_evidence(d, lo->step, hi->step, g);
	mark_evidence(d, a, a->module_id, "output", g);
	mark_evidence(d, a, a->module_id | NW_PARAMS_KEY, "parameters", g);
	lr_fixes(d, lo->step, rate, "gradient norm", g);
	return 1;
}

/* The loss climbed over the watch, too slowly or too noisily for the window's rules. */
static int rule_lr_long(const struct diag *d, const struct diag_anomaly *a, struct diagnosis *g)
{
	struct long_run r = {};
	double rate;
	uint64_t span;

	if (!diverging_long(d, a->iteration, &r))
		return 0;
	rests(g, "loss_trend");
	span = r.to->step > r.from->step ? r.to->step - r.from->step : 1;
	rate = pow(r.recent / r.early, 1.0 / (double)span);
	evidence(g,
		 "the loss climbed over the watch: median %.3g of its first %u (from step %llu), "
		 "%.3g of its last (to step %llu), still rising: x%.3g in %llu steps",
		 r.early, d->nearly, (unsigned long long)r.from->step, r.recent,
		 (unsigned long long)r.to->step, r.recent / r.early, (unsigned long long)span);
	grad_evidence(d, r.from->step, r.to->step, g);
	mark_evidence(d, a, a->module_id, "output", g);
	mark_evidence(d, a, a->module_id | NW_PARAMS_KEY, "parameters", g);
	lr_fixes(d, r.from->step, rate, "loss", g);
	return 1;
}

static int rule_lr(const struct diag *d, const struct diag_anomaly *a, struct diagnosis *g)
{
	const struct diag_loss *lo, *hi;
	struct listing l;
	int start, end, i;
	double rate;

	start = diverging(d, a->iteration, &end);
	if (start < 0)
		start = diverging_rough(d, a->iteration, &end);
	if (start < 0)
		return rule_lr_long(d, a, g) || rule_lr_grads(d, a, g);
	lo = loss_at(d, start);
	hi = loss_at(d, end);
	rests(g, "loss_trend");
	rate = pow(hi->value / lo->value, 1.0 / (double)(end - start));
	evidence(g,
		 "the loss diverged before the first non-finite value: %.3g at step %llu, "
		 "%.3g at step %llu (x%.3g per step)",
		 lo->value, (unsigned long long)lo->step, hi->value, (unsigned long long)hi->step,
		 rate);
	list_begin(&l, "loss by step:");
	for (i = start; i <= end; i++)
		list_add(&l, " %llu: %.3g", (unsigned long long)loss_at(d, i)->step,
			 loss_at(d, i)->value);
	list_send(&l, g);
	grad_evidence(d, lo->step, hi->step, g);
	mark_evidence(d, a, a->module_id, "output", g);
	mark_evidence(d, a, a->module_id | NW_PARAMS_KEY, "parameters", g);
	if (a->params_finite == 0)
		evidence(g,
			 "the parameters of %s were non-finite by then: the updates since step "
			 "%llu grew them past the range",
			 name(a), (unsigned long long)lo->step);
	else if (a->phase && !strcmp(a->phase, "forward"))
		evidence(g,
			 "%s overflowed on finite inputs and parameters grown by the updates "
			 "since step %llu",
			 name(a), (unsigned long long)lo->step);
	lr_fixes(d, lo->step, rate, "loss", g);
	return 1;
}

/* Ops whose derivative is infinite or undefined at points where the op itself is finite. */
static int singular_op(const char *op)
{
	static const char *const ops[] = {
		"sqrt", "rsqrt",      "log",  "log2", "log10", "log1p", "pow",
		"div",	"reciprocal", "acos", "asin", "atanh", "norm",	"linalg_vector_norm",
		"cdist"};
	size_t i;

	for (i = 0; op && i < sizeof(ops) / sizeof(ops[0]); i++)
		if (!strcmp(op, ops[i]))
			return 1;
	return 0;
}

/*
 * torch.where(mask, op(z), 0): the forward keeps only the finite side, but the gradient of
 * the discarded branch is 0 * op'(z), NaN where op'(z) is infinite or NaN. Seen as the
 * node of such an op fed by WhereBackward0 and returning NaN.
 */
static int rule_masked_where(const struct diag_anomaly *a, struct diagnosis *g)
{
	const char *op = a->op;

	if (!a->nan || !singular_op(op) || !a->upstream || strcmp(a->upstream, "WhereBackward0"))
		return 0;
	evidence(g,
		 "%s got its gradient from WhereBackward0: torch.where discarded %s's value there, "
		 "but its gradient is 0 * %s'(z): NaN",
		 a->node, op, op);
	conclude(g, "invalid_domain", 0.8);
	fix(g, "a masked branch of torch.where: mask or clamp the argument before the op, not "
	       "after: torch.where(m, op(torch.where(m, z, safe)), 0) with a safe value in its "
	       "domain, or op(z.clamp_min(eps))");
	fix(g, "reproduce with torch.autograd.detect_anomaly() around this step");
	return 1;
}

/* Forward and loss finite, a gradient not: the derivative left its domain. */
static int rule_backward(const struct diag *d, const struct diag_anomaly *a, struct diagnosis *g)
{
	const char *node = a->node ? a->node : "an autograd node";
	/* --backward norms: only the parameters' gradients were checked */
	double sure = d->grads_all ? 0.6 : 0.4;

	if (!a->phase || strcmp(a->phase, "backward"))
		return 0;
	rests(g, "autograd_node");
	evidence(g,
		 "the forward pass and the loss of this iteration (step %llu) were finite; %s "
		 "(%s%smade %s%s) returned %llu NaN, %llu +Inf, %llu -Inf gradients%s",
		 (unsigned long long)a->step, node, a->op ? a->op : "", a->op ? ", " : "",
		 a->layer	? "in "
		 : d->grads_all ? "outside any module"
				: "in a layer not known",
		 a->layer ? name(a) : "", (unsigned long long)a->nan, (unsigned long long)a->posinf,
		 (unsigned long long)a->neginf,
		 d->grads_all ? " from finite ones" : " for a parameter");
	if (!d->grads_all)
		evidence(g, "--backward norms checks the parameters' gradients alone: an earlier "
			    "node of this pass may have made the value (a sqrt or a norm at 0 in "
			    "the loss or a later layer); --backward on names that node and its "
			    "layer");
	if (rule_masked_where(a, g))
		return 1;
	if (a->posinf + a->neginf && !a->nan) {
		conclude(g, "division_by_zero", sure);
		fix(g, "the derivative is infinite where the forward value is finite (sqrt at 0, "
		       "pow with exponent < 1 at 0): add an epsilon inside the op");
	} else {
		if (a->op && d->grads_all && (!strcmp(a->op, "pow") || !strcmp(a->op, "sqrt"))) {
			/* the node's own NaN from finite gradients: Inf (its derivative) times 0 */
			evidence(
				g,
				"the derivative of %s at 0 is infinite for an exponent below 1 "
				"(sqrt; a focal loss's (1 - p) ** gamma, gamma < 1, where p rounds "
				"to 1), and an infinite derivative times a gradient of 0 is NaN",
				a->op);
			fix(g, "keep the base of the power away from 0: (1 - p).clamp_min(1e-6) ** "
			       "gamma, or sqrt(x + 1e-12)");
		}
		conclude(g, "invalid_domain", sure);
		fix(g, "an op evaluated where its derivative does not exist (sqrt/log/norm at 0, "
		       "a power below 1 at 0, a masked branch of torch.where): clamp its argument "
		       "or mask before the op");
	}
	if (!d->grads_all)
		fix(g, "attach with --backward on to name the node that made the gradient "
		       "non-finite, and its layer");
	fix(g, "reproduce with torch.autograd.detect_anomaly() around this step");
	return 1;
}

/*
 * torch's Embedding reads only the rows its indices select: a non-finite row was written by
 * some update since it was last looked up, not by the last one alone. A row looked up for the
 * first time in a while had gradients of 0 at every step between: Adam's moments of 0, and an
 * eps of 0 (or one that is 0 in float16), make its update 0/0.
 */
static int rule_params_rows(const struct diag *d, const struct diag_anomaly *a, struct diagnosis *g)
{
	const struct diag_loss *before = loss_before(d, a->iteration);

	if (!a->module || (strcmp(a->module, "Embedding") && strcmp(a->module, "EmbeddingBag")))
		return 0;
	evidence(g,
		 "the parameters of %s were non-finite at step %llu; %s (%s) reads only the rows "
		 "its indices select, so any update since a row was last looked up may have "
		 "written it%s",
		 name(a), (unsigned long long)a->step, name(a), a->module,
		 before && before->step < a->step ? ", not only the last" : "");
	if (before)
		evidence(g, "the loss of step %llu was %.4g", (unsigned long long)before->step,
			 before->value);
	evidence(g, "a row whose gradient was 0 at every step (a token absent so far) has Adam's "
		    "moments 0: with eps 0, or an eps that is 0 in float16, its update is 0/0");
	conclude(g, "nonfinite_params", 0.5);
	fix(g, "check the optimizer's eps: Adam's 1e-8 is 0 in float16 state; keep the "
	       "optimizer state in float32 or take eps=1e-6 or more");
	fix(g, "look for the update that wrote the row: check the embedding weight with "
	       "torch.isfinite(emb.weight).all(1) after each optimizer step");
	return 1;
}

static int rule_params(const struct diag *d, const struct diag_anomaly *a, struct diagnosis *g)
{
	const struct diag_loss *before;
	const struct diag_grad *gr;
	double med;
	int ordinary = 0, zero = 0;

	if (a->params_finite != 0)
		return 0;
	rests(g, "parameters");
	if (rule_params_rows(d, a, g))
		return 1;
	before = loss_before(d, a->iteration);
	if (before && before->step < a->step) {
		/* every output of that iteration was finite (this is the first anomaly) */
		g->origin_step = (int64_t)before->step;
		evidence(g,
			 "every output was finite at step %llu; at step %llu the parameters of %s "
			 "were non-finite: the optimizer update of step %llu wrote them",
			 (unsigned long long)before->step, (unsigned long long)a->step, name(a),
			 (unsigned long long)before->step);
		gr = grad_at(d, before->step);
		med = grad_median_before(d, before->step);
		evidence(g, "the loss of step %llu was %.4g, %s", (unsigned long long)before->step,
			 before->value,
			 !isfinite(before->value) ? "not finite: its gradients were"
			 : gr && gr->norm == 0	  ? "finite"
						  : "finite: the gradients or the step size of "
						    "that update were too large");
		rests(g, "loss_trend");
		if (gr)
			rests(g, "gradient_norms");
		if (gr && gr->norm == 0) {
			/* nothing to scale: the update divided by the gradient's size, or by 0 */
			zero = 1;
			evidence(
				g,
				"every gradient of step %llu was 0 (median norm %.3g before): an "
				"update of a zero gradient is non-finite only by a division by the "
				"gradient's own size",
				(unsigned long long)before->step, med);
			evidence(g,
				 "that is a gradient scaled by hand by its norm (g / g.norm(), a "
				 "clipping max_norm / total_norm: 0/0, Inf * 0), Adam or RMSprop "
				 "with eps 0 (0/sqrt(0)), or a learning rate of Inf or NaN");
		} else if (gr && !isfinite(gr->norm))
			evidence(g,
				 "the gradients of step %llu were not finite: the update applied "
				 "NaN/Inf",
				 (unsigned long long)before->step);
		else if (gr && med > 0 && gr->norm > 10 * med)
			evidence(g,
				 "the gradient norm of step %llu was %.3g, %.3gx its median %.3g "
				 "before: an exploding gradient",
				 (unsigned long long)before->step, gr->norm, gr->norm / med, med);
		else if (gr) {
			ordinary = 1;
			evidence(g,
				 "the gradient norm of step %llu was an ordinary %.3g (median %.3g "
				 "before): it takes a finite parameter past the range only by the "
				 "update's own arithmetic",
				 (unsigned long long)before->step, gr->norm, med);
			evidence(g,
				 "that is a learning rate of Inf, NaN or near the range, a "
				 "division by 0 in the optimizer (a bias correction 1 - beta**t at "
				 "t = 0, an eps of 0), or its state already non-finite");
		}
	} else {
		evidence(g,
			 "the parameters of %s were already non-finite: an earlier optimizer "
			 "update wrote them",
			 name(a));
	}
	conclude(g, "nonfinite_params", 0.7);
	if (zero) {
		fix(g, "guard a clipping or normalisation by hand: g * (max_norm / "
		       "total_norm.clamp_min(1e-6)), or torch.nn.utils.clip_grad_norm_ (it adds "
		       "1e-6 to the norm)");
		fix(g, "skip the update of a step whose gradients are all 0 (a loss weighted to 0, "
		       "an empty batch), and keep the optimizer's eps above 0");
		return 1;
	}
	if (ordinary) {
		/* clipping an ordinary gradient changes nothing: the update itself is at fault */
		fix(g,
		    "check the learning rate that update used (a schedule that returned Inf, NaN "
		    "or a huge value) and the optimizer's state after it");
		fix(g, "in an optimizer written by hand or restarted: count its steps from 1 (a "
		       "bias correction 1 - beta**t is 0 at t = 0) and keep eps above 0");
		return 1;
	}
	clip_fix(d, g->origin_step >= 0 ? (uint64_t)g->origin_step : a->step, g, 0);
	fix(g, "lower the learning rate or add warmup");
	return 1;
}

static int rule_input(const struct diag *d, struct diagnosis *g)
{
	if (d->root_inputs_finite != 0)
		return 0;
	rests(g, "model_inputs");
	evidence(g, "the model's own inputs held NaN/Inf at step %llu",
		 (unsigned long long)d->first.step);
	evidence(g, "first non-finite output: %s, which received them", name(&d->first));
	conclude(g, "bad_input_data", 0.9);
	fix(g, "check each batch before the forward: assert torch.isfinite(x).all()");
	fix(g, "clean or drop corrupt samples in the data pipeline");
	return 1;
}

void diagnose__facts(struct diag *d, const struct evidence_facts *f)
{
	if (!f || d->facts_known)
		return;
	d->facts = *f;
	d->facts_known = 1;
}

/* The captured call's facts when they are of the first anomaly's call, else NULL. */
static const struct evidence_facts *facts_of(const struct diag *d, const struct diag_anomaly *a)
{
	if (!d->facts_known || !a->module_id || d->facts.module != a->module_id ||
	    d->facts.iteration != a->iteration)
		return NULL;
	return &d->facts;
}

/*
 * The operations of the call (its autograd nodes, from the output back), in sets by what they
 * can do to finite values. Without autograd (no_grad, eval) none are known, and the rules
 * judge by the values alone.
 */
static const char *const exp_ops[] = {"exp", "exp2", "expm1", "sinh", "cosh", NULL};
static const char *const log_ops[] = {"log", "log2", "log10", "log1p", NULL};
/* exact zeros out of finite values: a probability, or an exp of a very negative number */
static const char *const underflow_ops[] = {"softmax", "exp", "exp2", "sigmoid", NULL};
static const char *const div_ops[] = {"div", "reciprocal", "rsqrt", NULL};
/* NaN or Inf outside a domain: sqrt, log, fractional powers of negatives, acos of 2 */
static const char *const domain_ops[] = {"sqrt", "rsqrt", "log",  "log2",  "log10", "log1p",
					 "pow",	 "acos",  "asin", "atanh", "acosh", NULL};
/* a division by a spread: 0 for a constant feature */
static const char *const spread_ops[] = {"std",
					 "var",
					 "std_mean",
					 "var_mean",
					 "native_layer_norm",
					 "native_batch_norm",
					 "native_group_norm",
					 NULL};
static const char *const mask_ops[] = {"masked_fill", NULL};
/* what takes some rows of a tensor: x[mask], x[idx] */
static const char *const select_ops[] = {"index", "masked_select", "index_select", NULL};
/* connectionist temporal classification: -log of the probability of every alignment */
static const char *const ctc_ops[] = {"ctc_loss", NULL};
static const char *const softmax_ops[] = {"softmax", NULL};
/* what takes a mask's rows into a softmax: the softmax, or attention fused in one op */
static const char *const attention_ops[] = {"softmax", "scaled_dot_product_attention", NULL};
/* a mean over the targets it counts: of none (all ignore_index, weights of 0), 0/0 */
static const char *const target_ops[] = {"nll_loss", "nll_loss2d", "nll_loss2_d", "cross_entropy",
					 NULL};
/* weight normalization: each slice of weight_v divided by its norm (nn.utils.weight_norm) */
static const char *const vnorm_ops[] = {"weight_norm_interface", NULL};
static const char *const sub_ops[] = {"sub", "rsub", NULL};
static const char *const root_ops[] = {"sqrt", "rsqrt", NULL};
static const char *const mean_ops[] = {"mean", NULL};
static const char *const mul_ops[] = {"mul", NULL};
/* what sums its operand's terms (or products of them): 0 where every term is */
static const char *const summing_ops[] = {"sum", "mv", "mm", "bmm", "matmul", "addmm", "dot", NULL};
/* a domain of [-1, 1]: the argument is a cosine, a sine or a correlation */
static const char *const unit_ops[] = {"acos", "asin", "atanh", NULL};
/*
 * what bounds its output from above: an exp of it cannot overflow from a large argument
 * (clamp only where it has a max: x.clamp(min=-5) is a ClampBackward1 too, see exp_bounded())
 */
static const char *const bound_ops[] = {"clamp",       "clamp_max",  "tanh", "sigmoid",
					"log_softmax", "logsigmoid", NULL};
/* what rounds to exactly 1 in magnitude once its argument is large: 1 - it is 0 */
static const char *const saturate_ops[] = {"tanh", "sigmoid", "softmax", NULL};
/* what carries a saturated value on to the subtraction: 1 - tanh(u)^2 */
static const char *const carry_ops[] = {"pow", "mul", "abs", NULL};
static const char *const neg_ops[] = {"neg", NULL};
/* what divides by a temperature it is given: (logits + gumbel) / tau, then a softmax */
static const char *const temperature_ops[] = {"gumbel_softmax", NULL};
/* log(p / (1 - p)): ±Inf at p = 0 and 1 */
static const char *const logit_ops[] = {"logit", NULL};
/* the normaliser of a distribution's log density (Beta, Dirichlet, Gamma) */
static const char *const lgamma_ops[] = {"lgamma", NULL};

/* Every op a rule looks for: what a layer's code names is kept when it is one of them. */
static const char *const *const rule_sets[] = {
	exp_ops,  log_ops,	   underflow_ops, div_ops,  domain_ops,	   spread_ops,
	mask_ops, softmax_ops,	   sub_ops,	  mean_ops, attention_ops, target_ops,
	ctc_ops,  temperature_ops, logit_ops,	  NULL,
};

/* The functional and spelled-out names of ops, as autograd names them. */
static const char *const code_alias[][2] = {
	{"true_divide", "div"},
	{"divide", "div"},
	{"subtract", "sub"},
	{"float_power", "pow"},
	{"layer_norm", "native_layer_norm"},
	{"batch_norm", "native_batch_norm"},
	{"instance_norm", "native_batch_norm"},
	{"group_norm", "native_group_norm"},
};

static int in_set(const char *op, const char *const *set)
{
	int j;

	for (j = 0; set[j]; j++)
		if (!strcmp(op, set[j]))
			return 1;
	return 0;
}

/*
 * A name of a forward's code as an op, into base: an in-place variant (sqrt_, masked_fill_) is
 * the op; 0 for a private name ("_x"), an empty or a long one.
 */
static int code_base(const char *name, char base[EVIDENCE_OP_LEN])
{
	size_t n = strlen(name);

	if (n && name[n - 1] == '_')
		n--;
	if (!n || n >= EVIDENCE_OP_LEN || name[0] == '_')
		return 0;
	memcpy(base, name, n);
	base[n] = 0;
	return 1;
}

int diagnose__code_op(const char *name, char *op, size_t len)
{
	char base[EVIDENCE_OP_LEN];
	size_t i;
	int j;

	if (!code_base(name, base))
		return 0;
	for (i = 0; i < sizeof(code_alias) / sizeof(code_alias[0]); i++)
		if (!strcmp(base, code_alias[i][0]))
			snprintf(base, sizeof(base), "%s", code_alias[i][1]);
	for (j = 0; rule_sets[j]; j++)
		if (in_set(base, rule_sets[j]))
			return snprintf(op, len, "%s", base) < (int)len;
	return 0;
}

/* A mean over class targets of which none counted. */
static void ignored_fixes(struct diagnosis *g)
{
	fix(g, "skip a batch whose targets are all ignored ((y != ignore_index).any()), or take "
	       "reduction='sum' and divide by the number of counted targets clamped to at least 1");
	fix(g, "look for what left a batch without labels (all padding, a filter, truncation)");
}

/*
 * Ops that make no NaN from finite operands, and ±Inf only by overflow (a square, a product, a
 * sum): what a regression loss is made of, with target_loss_ops. log_softmax of finite logits
 * is finite.
 */
static const char *const plain_ops[] = {
	"mean",	       "sum",		"pow",	   "sub",	  "rsub",    "add",
	"mul",	       "neg",		"abs",	   "clone",	  "to_copy", "view",
	"unsafe_view", "reshape_alias", "squeeze", "unsqueeze",	  "expand",  "t",
	"transpose",   "permute",	"select",  "slice",	  "index",   "addmm",
	"mm",	       "bmm",		"linear",  "log_softmax", NULL};
/* a loss of a prediction against a target that needs no gradient */
static const char *const target_loss_ops[] = {
	"mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "binary_cross_entropy_with_logits",
	NULL};
/*
 * Where the walk stops, having passed every node of one input that needs a gradient: a node
 * of several, which these make in a module (its output, checked finite), and the loss's own
 * code seldom (there a sub or a mul of two such values: what feeds the other is not known).
 */
static const char *const module_end_ops[] = {"addmm",
					     "embedding",
					     "mm",
					     "bmm",
					     "linear",
					     "convolution",
					     "native_layer_norm",
					     "native_batch_norm",
					     "native_group_norm",
					     NULL};
/* what takes a second operand (passed by the walk, that operand needed no gradient) */
static const char *const operand_ops[] = {"sub", "rsub", "add", "mul", NULL};

/*
 * The loss's line of single inputs (a->loss): how many, and where those sets first show
 * among the ops the walk passed (it went on to the next: the op's other operands, if any,
 * needed no gradient). -1 where none.
 */
struct loss_chain {
	const char *ops[FINDING_LOSS_NODES];
	int n;
	int plain; /* every op is in plain_ops, or a div, down to a module's output */
	int target, div, operand; /* passed: a target loss, a div of a sum, an op of operand_ops */
};

static void loss_chain(const struct finding_loss *l, struct loss_chain *c)
{
	int i;

	memset(c, 0, sizeof(*c));
	for (i = 0; l && i < (int)l->line && i < FINDING_LOSS_NODES; i++)
		c->ops[c->n++] = l->op[i];
	c->plain = c->n > 0 && in_set(c->ops[c->n - 1], module_end_ops);
	c->target = c->div = c->operand = -1;
	for (i = 0; i < c->n; i++) {
		int passed = i < c->n - 1;

		if (!in_set(c->ops[i], plain_ops) && !in_set(c->ops[i], target_loss_ops) &&
		    strcmp(c->ops[i], "div"))
			c->plain = 0;
		if (passed && c->target < 0 && in_set(c->ops[i], target_loss_ops))
			c->target = i;
		/* sum / count: a mean by hand (a mean over a constant is a scale: loss / 2) */
		if (passed && c->div < 0 && !strcmp(c->ops[i], "div") &&
		    !strcmp(c->ops[i + 1], "sum"))
			c->div = i;
		if (passed && c->operand < 0 && in_set(c->ops[i], operand_ops))
			c->operand = i;
	}
}

/*
 * The module outputs sampled at the anomaly's iteration (parameters apart), in the order they
 * returned: the first whose magnitude passed root, and the largest (NULL where none passed).
 */
static const struct diag_mark *past_root(const struct diag *d, const struct diag_anomaly *a,
					 double root, const struct diag_mark **largest)
{
	const struct diag_mark *first = NULL;
	unsigned int i;

	*largest = NULL;
	for (i = 0; root > 0 && i < d->nmarks; i++) {
		const struct diag_mark *k = mark_at(d, i);

		if (k->iteration != a->iteration || (k->module & NW_PARAMS_KEY) || k->value < root)
			continue;
		if (!first)
			first = k;
		if (!*largest || k->value > (*largest)->value)
			*largest = k;
	}
	return first;
}

/* A mark's module in words. */
static const char *mark_name(const struct diag_mark *k)
{
	if (!strcmp(k->layer, "?"))
		return "a module";
	return *k->layer ? k->layer : "the model";
}

static void target_fixes(struct diagnosis *g)
{
	fix(g, "check the targets with each batch before the loss: assert torch.isfinite(y).all()");
	fix(g, "clean or drop samples whose labels are missing or corrupt (a NaN read from the "
	       "dataset)");
}

/* A mean of what a mask selected, of nothing. */
static void empty_selection_fixes(struct diagnosis *g)
{
	fix(g, "guard the mean of a selection: x[mask].sum() / mask.sum().clamp_min(1), or skip "
	       "the term when mask.any() is False");
	fix(g, "look for batches where the mask selects nothing (no positive sample, a class "
	       "absent from the batch)");
}

/*
 * ctc_loss is -log of the probability of every alignment of the target in the input's frames:
 * 0 where none fits, so +Inf.
 */
static void ctc_verdict(const struct evidence_facts *x, struct diagnosis *g)
{
	const struct tensor_facts *in = NULL, *tg = NULL;
	int i;

	/* nn.CTCLoss(log_probs, targets, input_lengths, target_lengths), positional */
	for (i = 0; x && i < x->n; i++) {
		const struct tensor_facts *t = &x->t[i];

		if (t->role != EVIDENCE_INPUT || t->kind != EVIDENCE_INT || t->ndim != 1 ||
		    !t->has_finite)
			continue;
		if (!strcmp(t->name, "input[2]"))
			in = t;
		if (!strcmp(t->name, "input[3]"))
			tg = t;
	}
	evidence(g,
		 "ctc_loss is -log of the probability of every alignment of a target in its "
		 "input's frames: where none fits (fewer frames than the target's labels, plus a "
		 "blank between each repeated pair) that is log(0), +Inf");
	if (in && tg && in->numel == tg->numel)
		evidence(g,
			 "input lengths (input[2]) run from %.0f to %.0f frames, target lengths "
			 "(input[3]) from %.0f to %.0f labels%s",
			 in->min, in->max, tg->min, tg->max,
			 in->min < tg->max ? ": a sample may have fewer frames than labels" : "");
	conclude(g, "loss_log_zero", in && tg && in->min < tg->max ? 0.75 : 0.55);
	fix(g, "keep every input at least as long as its target after the model's downsampling "
	       "(a stride or pooling shortens the frames): drop or pad the short utterances");
	fix(g, "pass zero_infinity=True to nn.CTCLoss / F.ctc_loss: an impossible sample then adds "
	       "0 and no gradient");
}

/*
 * Whether the chain passed log-probabilities (a log_softmax) under a product and a sum or
 * difference, each with an operand that needs no gradient: t * (t.log() - logp), a KL
 * divergence by hand, whose target's log the walk does not see.
 */
static int log_ratio_by_hand(const struct loss_chain *c)
{
	static const char *const diff_ops[] = {"sub", "rsub", "add", NULL};
	int i, mul = 0, diff = 0;

	for (i = 0; i < c->n - 1; i++) {
		if (!strcmp(c->ops[i], "log_softmax"))
			return mul && diff;
		mul |= !strcmp(c->ops[i], "mul");
		diff |= in_set(c->ops[i], diff_ops);
	}
	return 0;
}

/* NaN from a log ratio by hand (log_ratio_by_hand()): 0 * log 0 where a target is 0. */
static void verdict_log_ratio(struct diagnosis *g)
{
	evidence(g, "it multiplies by a tensor that needs no gradient a difference of the "
		    "log-probabilities (log_softmax) and another such tensor: the shape of a KL "
		    "divergence by hand, t * (t.log() - logp), whose target's log leaves no node");
	evidence(g, "where a target is 0 its log is -Inf and 0 * -Inf is NaN (hard or one-hot "
		    "targets where soft ones were meant); or NaN came in the targets");
	conclude(g, "loss_log_zero", 0.55);
	fix(g, "take t * log(t) as torch.xlogy(t, t), which is 0 where t is 0, or use "
	       "F.kl_div(logp, t, reduction=\"batchmean\"): both are 0 for a target of 0");
	fix(g, "or clamp the target inside its log: t * (t.clamp_min(1e-12).log() - logp)");
	target_fixes(g);
}

/* A sum divided by a count of what a mask selected. */
static void count_fix(struct diagnosis *g)
{
	fix(g, "divide by the count clamped to at least 1 (x.sum() / mask.sum().clamp_min(1)), or "
	       "skip a batch that selects nothing");
}

/*
 * A loss made from finite module outputs by ops that make no NaN from finite values (a
 * regression loss, arithmetic, a reshape; the walk's nodes from the loss): the non-finite
 * value came in with what needed no gradient (the targets, a divisor or mask of the batch),
 * or is an overflow. 0 where the ops say nothing of it (a log among them, or none named).
 */
static int rule_loss_plain(const struct diag *d, const struct diag_anomaly *a, struct diagnosis *g)
{
	struct loss_chain c;
	char listed[FINDING_LOSS_NODES * FINDING_LOSS_OP_LEN + 16];
	const struct diag_mark *first, *largest;
	double root;
	int i, used = 0;

	loss_chain(a->loss, &c);
	if (!c.plain)
		return 0;
	/* NaN: only where something taking what needs no gradient was passed; else ±Inf */
	if (a->nan ? c.target < 0 && c.div < 0 && c.operand < 0 : !(a->posinf + a->neginf))
		return 0;
	listed[0] = 0;
	for (i = 0; i < c.n && used < (int)sizeof(listed); i++)
		used += snprintf(listed + used, sizeof(listed) - (size_t)used, "%s%s",
				 i ? ", " : "", c.ops[i]);
	rests(g, "operations");
	evidence(g, "ops from the loss down to a module's output: %s (no log, root or exp)",
		 listed);
	if (a->nan) {
		if (c.target >= 0) {
			evidence(g,
				 "%s compares what it takes with a target that needs no gradient: "
				 "NaN in the target makes the loss NaN",
				 c.ops[c.target]);
			if (c.div >= 0)
				evidence(g, "or the loss's division of a sum by a count divided 0 "
					    "by 0");
			conclude(g, "bad_input_data", c.div >= 0 ? 0.45 : 0.6);
			target_fixes(g);
			return 1;
		}
		if (c.div >= 0) {
			evidence(g, "the loss divides a sum by a tensor that needs no gradient "
				    "(a count, a mask's sum): 0/0 where it is 0, a mean over "
				    "nothing selected");
			conclude(g, "division_by_zero", 0.5);
			count_fix(g);
			return 1;
		}
		if (log_ratio_by_hand(&c)) {
			verdict_log_ratio(g);
			return 1;
		}
		evidence(g,
			 "%s takes a tensor that needs no gradient (a target, a weight or mask of "
			 "the batch): NaN in it makes the loss NaN",
			 c.ops[c.operand]);
		conclude(g, "bad_input_data", 0.45);
		target_fixes(g);
		return 1;
	}
	if (c.div >= 0) {
		evidence(g, "the loss divides a sum by a tensor that needs no gradient (a count, a "
			    "mask's sum): ±Inf where it is 0");
		conclude(g, "division_by_zero", 0.5);
		count_fix(g);
		return 1;
	}
	root = exp(evidence__exp_limit(a->dtype) / 2);
	first = past_root(d, a, root, &largest);
	for (i = 0; i < c.n - 1 && !first; i++) {
		if (strcmp(c.ops[i], "div"))
			continue;
		/* no output near the range: the divisor, a number or what needs no gradient */
		evidence(g,
			 "no module output of this iteration came near the range's square root "
			 "(%.3g); the loss divides by what it did not compute from them (a number: "
			 "accumulation steps, a count), ±Inf where it is 0",
			 root);
		conclude(g, "division_by_zero", 0.45);
		fix(g, "check what the loss is divided by where it is set (gradient accumulation "
		       "steps, a count of samples or tokens): it must not be 0");
		fix(g, "divide by a count clamped to at least 1 (loss / max(n, 1))");
		return 1;
	}
	if (first) {
		evidence(g,
			 "first output past the square root of the %s range (%.3g) at this "
			 "iteration: %s, %.3g (sampled)",
			 a->dtype, root, mark_name(first), first->value);
		evidence(g, "largest: %s, %.3g: a square or a product of it overflows",
			 mark_name(largest), largest->value);
	} else {
		evidence(
			g,
			"±Inf from finite values is an overflow of a square, a product or a "
			"sum%s",
			c.target >= 0 || c.operand >= 0
				? ", or an Inf that came with a tensor that needs no gradient (the "
				  "targets)"
				: "");
	}
	conclude(g, "unknown", first ? 0.45 : 0.35);
	fix(g, "find the layer whose outputs grow past the range (the warning events name each, "
	       "with its magnitude): an initialisation or a recurrence whose gain is above 1, or "
	       "updates too large (lower the learning rate, clip gradients)");
	fix(g, "normalise the targets (and so the outputs) to unit scale, or compute the loss in "
	       "float64");
	if (c.target >= 0 || c.operand >= 0)
		target_fixes(g);
	return 1;
}

/*
 * What an exp among the loss's nodes does to the loss: where its value goes, through ops that
 * carry a 0 or an Inf on (a power, a product, a reshape).
 */
enum exp_use {
	EXP_NONE,
	EXP_OVER,    /* summed, subtracted, multiplied: an Inf past exp's threshold is the loss's */
	EXP_SOFTMAX, /* divided by a sum of exps, or that sum (a softmax by hand): Inf/Inf NaN */
	EXP_UNDER,   /* a divisor, or a log's argument: 0 below exp's floor gives ±Inf */
	EXP_SATURATE, /* 1 minus it a divisor or a log's argument: a sigmoid rounded to 1 */
};

/*
 * what the loss's exp rule reads: exp; the cosh or sinh that overflow as it does; the softplus
 * or sigmoid that are 0 where it is (a divisor, a log's argument)
 */
static const char *const exp_rule_ops[] = {"exp", "cosh", "sinh", "softplus", "sigmoid", NULL};
static const char *const overflow_only_ops[] = {"cosh", "sinh", NULL};
/* ops that carry an exp's 0 or Inf on to what uses it */
static const char *const exp_carry_ops[] = {
	"pow",		 "mul",	  "neg",	 "abs",	   "sqrt",	"clone",
	"to_copy",	 "view",  "unsafe_view", "expand", "squeeze",	"unsqueeze",
	"select",	 "slice", "index",	 "t",	   "transpose", "permute",
	"reshape_alias", "cat",	  "stack",	 NULL};
/* a value the op cannot take past exp's range: an exp of it neither overflows nor is 0 */
static const char *const exp_safe_ops[] = {"clamp",   "clamp_min", "clamp_max", "tanh",
					   "sigmoid", "softplus",  NULL};

/* Does node i of l lie under the loss's own code: no module's output between it and the loss? */
static int loss_own(const struct finding_loss *l, unsigned int i)
{
	unsigned int j = l->parent[i], hops;

	for (hops = 0; j != FINDING_LOSS_ROOT && j < l->n && hops < FINDING_LOSS_NODES; hops++) {
		if (in_set(l->op[j], module_end_ops))
			return 0;
		j = l->parent[j];
	}
	return 1;
}

/* Is node j under node i (found through it, by its edges, however deep)? */
static int found_under(const struct finding_loss *l, unsigned int i, unsigned int j)
{
	unsigned int hops;

	for (hops = 0; j != FINDING_LOSS_ROOT && j < l->n && hops < FINDING_LOSS_NODES; hops++) {
		if (j == i)
			return 1;
		j = l->parent[j];
	}
	return 0;
}

/* Is an exp's value among the nodes under node i (its input side)? */
static int exp_under(const struct finding_loss *l, unsigned int i)
{
	unsigned int k;

	for (k = i + 1; k < l->n; k++)
		if (in_set(l->op[k], exp_ops) && found_under(l, i, l->parent[k]))
			return 1;
	return 0;
}

/*
 * The node that uses a value node j takes as its operand *input, past ops that carry it on
 * (*input: as which operand); -1 where the loss is it.
 */
static int value_use(const struct finding_loss *l, unsigned int j, unsigned int *input)
{
	unsigned int hops;

	for (hops = 0; j != FINDING_LOSS_ROOT && j < l->n && hops < FINDING_LOSS_NODES; hops++) {
		if (!in_set(l->op[j], exp_carry_ops))
			return (int)j;
		*input = l->input[j];
		j = l->parent[j];
	}
	return -1;
}

/* Node i's operand k (the node its edge k found), -1 if none was walked. */
static int operand(const struct finding_loss *l, unsigned int i, unsigned int k)
{
	unsigned int j;

	for (j = i + 1; j < l->n; j++)
		if (l->parent[j] == i && l->input[j] == k)
			return (int)j;
	return -1;
}

/* Is node i an exp, or a sum of exps (a softmax's or a logsumexp's normaliser)? */
static int exps_of(const struct finding_loss *l, int i)
{
	if (i < 0)
		return 0;
	if (in_set(l->op[i], exp_ops))
		return 1;
	return !strcmp(l->op[i], "sum") && exp_under(l, (unsigned int)i);
}

/* Is node j a division by its operand input, or a log of it: what an exp's 0 makes ±Inf? */
static int zero_hurts(const struct finding_loss *l, int j, unsigned int input)
{
	if (j < 0)
		return 0;
	return (!strcmp(l->op[j], "div") && input == 1) || !strcmp(l->op[j], "reciprocal") ||
	       (in_set(l->op[j], log_ops) && strcmp(l->op[j], "log1p"));
}

/* An exp's value that node j takes as its operand input: what its overflow or 0 does there. */
static enum exp_use exp_use_at(const struct finding_loss *l, unsigned int j, unsigned int input,
			       int *at)
{
	int k = value_use(l, j, &input);
	unsigned int hops;

	/* a numerator carries the exp's 0 or Inf on (a density by hand, exp(-z**2 / 2) / s) */
	for (hops = 0; k >= 0 && hops < FINDING_LOSS_NODES && !strcmp(l->op[k], "div") &&
		       input == 0 && !exps_of(l, operand(l, (unsigned int)k, 1));
	     hops++) {
		input = l->input[k];
		k = value_use(l, l->parent[k], &input);
	}
	*at = k;
	if (k >= 0 && !strcmp(l->op[k], "sum")) {
		/* a sum of exps dividing or under a log: a softmax or a logsumexp by hand */
		unsigned int in = l->input[k];
		int m = value_use(l, l->parent[k], &in);

		if (zero_hurts(l, m, in) && strcmp(l->op[m], "reciprocal")) {
			*at = m;
			return EXP_SOFTMAX;
		}
	}
	if (k < 0)
		return EXP_OVER;
	if (!strcmp(l->op[k], "rsub")) {
		/* 1 - it, dividing or under a log (log(1 - sigmoid(x)), a cross-entropy by hand) */
		unsigned int in = l->input[k];
		int m = value_use(l, l->parent[k], &in);

		if (zero_hurts(l, m, in)) {
			*at = m;
			return EXP_SATURATE;
		}
	}
	if (!strcmp(l->op[k], "div") && input == 0 && exps_of(l, operand(l, (unsigned int)k, 1)))
		return EXP_SOFTMAX;
	return zero_hurts(l, k, input) ? EXP_UNDER : EXP_OVER;
}

/* Is use u at node at stronger than use at node before: a softmax, a divisor, an Inf? */
static int stronger(const struct finding_loss *l, enum exp_use u, int at, enum exp_use before,
		    int at_before)
{
	if (u != before)
		return u > before;
	/* of two divisors or logs, the division (the log's -Inf comes with it) */
	return u == EXP_UNDER && at >= 0 && !strcmp(l->op[at], "div") &&
	       (at_before < 0 || strcmp(l->op[at_before], "div"));
}

/* what adds an exp's value to others: its Inf stays Inf there, or meets another (Inf - Inf) */
static const char *const exp_add_ops[] = {"add", "sub", "rsub", "sum", "mean", NULL};

/*
 * An exp whose value goes both to a log and to a sum or difference, in a NaN loss (a Poisson
 * loss by hand, rate - y * log(rate)): its overflow makes both Inf, and Inf - Inf NaN; its
 * 0 would make the log -Inf and the difference +Inf, NaN only beside a target of 0.
 */
static int over_beside_log(const struct finding_loss *l, enum exp_use u, int at, enum exp_use v,
			   int at_v)
{
	if (u == EXP_UNDER && v == EXP_OVER) /* the sum or difference first */
		return over_beside_log(l, v, at_v, u, at);
	return u == EXP_OVER && at >= 0 && in_set(l->op[at], exp_add_ops) && v == EXP_UNDER &&
	       at_v >= 0 && in_set(l->op[at_v], log_ops);
}

/*
 * How node e, an exp, reaches the loss, by the node that found it and by another that uses
 * it too; *at: the node that uses it (-1: the loss is it). nan: the loss is NaN.
 */
static enum exp_use exp_use(const struct finding_loss *l, unsigned int e, int nan, int *at)
{
	enum exp_use u;
	int j = operand(l, e, 0), k;

	*at = -1;
	if (j >= 0 && in_set(l->op[j], exp_safe_ops))
		return EXP_NONE; /* the exp of a bounded value */
	u = exp_use_at(l, l->parent[e], l->input[e], at);
	if (l->also[e] != FINDING_LOSS_ROOT) {
		enum exp_use v = exp_use_at(l, l->also[e], l->also_input[e], &k);

		if (nan && over_beside_log(l, u, *at, v, k)) {
			if (u != EXP_OVER) {
				u = v;
				*at = k;
			}
		} else if (stronger(l, v, k, u, *at)) {
			u = v;
			*at = k;
		}
	}
	return u;
}

/* A log of a sigmoid, or of 1 minus it, written out. */
static void sigmoid_fixes(struct diagnosis *g)
{
	fix(g, "take F.logsigmoid(x) for log(sigmoid(x)) and F.logsigmoid(-x) for "
	       "log(1 - sigmoid(x)), or F.binary_cross_entropy_with_logits on the logits");
	fix(g, "clamp before the log: torch.log(p.clamp_min(1e-12))");
}

/*
 * A loss made from finite module outputs through an exp the loss takes (the walk's nodes,
 * breadth first): where the exp's value goes tells whether its overflow (past the threshold,
 * summed or subtracted; Inf/Inf in a softmax by hand) or its underflow to 0 (a divisor, a
 * log's argument: a scale parameterised as exp of a log-scale) made the loss non-finite.
 * 0 where no exp of the loss's own explains it.
 */
/*
 * ±Inf of one sign from a loss that takes log at node k of a sum of exps: the log's -Inf
 * (every term below exp's floor) where the negations above it, counted, turn it into the
 * loss's sign; else its +Inf, an overflow.
 */
static int log_sum_underflow(const struct diag_anomaly *a, const struct finding_loss *l, int k)
{
	unsigned int j = (unsigned int)k, hops, negs = 0;

	if (!a->posinf == !a->neginf)
		return 0;
	for (hops = 0; j != FINDING_LOSS_ROOT && j < l->n && hops < FINDING_LOSS_NODES; hops++) {
		negs += !strcmp(l->op[j], "neg");
		j = l->parent[j];
	}
	return (negs % 2 == 1) == (a->posinf > 0);
}

/* The loss's log of a sum of exps, each below exp's floor: log(0). */
static void verdict_log_sum(const struct diag_anomaly *a, double floor, struct diagnosis *g)
{
	rests(g, "operations");
	evidence(g,
		 "the loss takes the log of a sum of exps (a mixture's likelihood by hand, the "
		 "sum of w * exp(-z**2 / 2) / sigma, or a logsumexp by hand): exp(x) is 0 for x "
		 "below %.4g in %s, so where every term is (a sample far from every component), "
		 "the sum is 0 and log(0) -Inf",
		 floor, a->dtype);
	conclude(g, "loss_log_zero", 0.55);
	log_space_fixes(g);
}

static int rule_loss_exp(const struct diag_anomaly *a, struct diagnosis *g)
{
	const struct finding_loss *l = a->loss;
	enum exp_use use = EXP_NONE;
	unsigned int i;
	int at = -1, e = -1, sum_log = -1;
	double limit = evidence__exp_limit(a->dtype), floor = evidence__exp_floor(a->dtype);

	for (i = 0; l && i < l->n; i++) {
		int k;
		unsigned int in = l->input[i];
		enum exp_use u;

		/* exp, whose floor and threshold are said (not exp2's, expm1's) */
		if (!in_set(l->op[i], exp_rule_ops) || !loss_own(l, i))
			continue;
		u = exp_use(l, i, a->nan > 0, &k);
		if (u != EXP_NONE && in_set(l->op[i], overflow_only_ops)) {
			u = EXP_OVER; /* past exp's threshold by log 2, and never 0 */
			k = value_use(l, l->parent[i], &in);
		} else if (u == EXP_SATURATE && strcmp(l->op[i], "sigmoid")) {
			u = EXP_OVER; /* 1 - exp(x): its Inf (a sigmoid's 1 alone is 1 minus 0) */
		} else if (u != EXP_UNDER && u != EXP_SATURATE && strcmp(l->op[i], "exp")) {
			u = EXP_NONE; /* a softplus or sigmoid is finite: only its 0 tells */
		}
		if (u == EXP_SOFTMAX && k >= 0 && in_set(l->op[k], log_ops) &&
		    !strcmp(l->op[i], "exp"))
			sum_log = k; /* log(sum(exp(...))): a logsumexp or a mixture by hand */
		/* a softmax first: its NaN is Inf/Inf; then a divisor's 0, then an Inf */
		if (stronger(l, u, k, use, at)) {
			use = u;
			at = k;
			e = (int)i;
		}
	}
	if (!a->nan && sum_log >= 0 && log_sum_underflow(a, l, sum_log)) {
		verdict_log_sum(a, floor, g);
		return 1;
	}
	/* +Inf through a softmax by hand: a probability's 0 under the log (the rule after) */
	if (use == EXP_NONE || (use == EXP_SOFTMAX && !a->nan) || limit <= 0)
		return 0;
	rests(g, "operations");
	if (use == EXP_SATURATE) {
		int div = at >= 0 && !in_set(l->op[at], log_ops);
		double eps = evidence__eps(a->dtype);

		evidence(g,
			 "the loss %s 1 - sigmoid: sigmoid(x) rounds to 1 for x above %.4g in %s, "
			 "and %s",
			 div ? "divides by" : "takes the log of", eps > 0 ? log(2 / eps) : 0,
			 a->dtype, div ? "x/0 is ±Inf" : "log(0) is -Inf");
		conclude(g, div ? "division_by_zero" : "loss_log_zero", 0.6);
		sigmoid_fixes(g);
		return 1;
	}
	if (use == EXP_UNDER) {
		int div = at >= 0 && !in_set(l->op[at], log_ops);

		evidence(g, "the loss %s a%s %s: %s(x) is 0 for x below %.4g in %s, %s",
			 div ? "divides by" : "takes the log of",
			 strcmp(l->op[e], "exp") ? "" : "n", l->op[e], l->op[e], floor, a->dtype,
			 div ? "x/0 is ±Inf, and Inf - Inf NaN" : "and log(0) is -Inf");
		conclude(g, div ? "division_by_zero" : "loss_log_zero", 0.5);
		if (!strcmp(l->op[e], "sigmoid") && !div) {
			sigmoid_fixes(g);
			return 1;
		}
		if (strcmp(l->op[e], "exp")) {
			fix(g,
			    "add an epsilon to it: F.softplus(x) + 1e-6, or clamp it away from 0 "
			    "(.clamp_min(1e-6))");
			return 1;
		}
		fix(g, "keep the scale in log space: where its log is taken, take the log-scale s "
		       "itself, and multiply by torch.exp(-s) rather than divide by torch.exp(s)");
		fix(g, "bound the log-scale before the exp (s.clamp(-10, 10)), or make the scale "
		       "F.softplus(x) + 1e-6");
		return 1;
	}
	if (use == EXP_SOFTMAX)
		evidence(g,
			 "the loss takes a sum of exps (a softmax or a logsumexp by hand): exp(x) "
			 "is Inf for x above %.4g in %s, and Inf/Inf or Inf - Inf NaN",
			 limit, a->dtype);
	else
		evidence(g, "the loss takes a%s %s%s%s: %s(x) is Inf for %s above %.4g in %s",
			 strcmp(l->op[e], "exp") ? "" : "n", l->op[e],
			 at >= 0 ? " and uses it in " : "", at >= 0 ? l->op[at] : "", l->op[e],
			 strcmp(l->op[e], "exp") ? "|x|" : "x",
			 strcmp(l->op[e], "exp") ? limit + log(2) : limit, a->dtype);
	/* an Inf made NaN only beside another (Inf - Inf) or a 0 (0 * Inf): less sure */
	if (use == EXP_OVER && a->nan)
		evidence(g, "the loss is NaN: an Inf of the exp met another (Inf - Inf) or a 0");
	conclude(g, "exp_overflow", use == EXP_OVER && a->nan ? 0.4 : 0.55);
	if (use == EXP_SOFTMAX) {
		fix(g, "take log-probabilities with log_softmax or logsumexp (F.cross_entropy for "
		       "an InfoNCE or a classifier): they subtract the row maximum first");
		fix(g, "where the probabilities themselves are needed: torch.softmax, not exp over "
		       "a sum of exps");
		return 1;
	}
	if (strcmp(l->op[e], "exp"))
		fix(g,
		    "compute log(cosh(x)) as |x| + F.softplus(-2 * |x|) - log(2), which does not "
		    "overflow, or take F.huber_loss");
	else
		fix(g, "bound the exponent: torch.exp(x.clamp(max=20)) (a count model: predict the "
		       "log-rate and clamp it), or keep the value in log space");
	fix(g, "find what made the exp's argument large at this step (the warning events name "
	       "outputs that grew): lower the learning rate, or clip gradients");
	return 1;
}

/* what a loss's divisor may be 0 from: a root, a norm, a spread, a sum it computed */
static const char *const zero_divisor_ops[] = {"sqrt", "rsqrt", "norm",	    "linalg_vector_norm",
					       "std",  "var",	"std_mean", "var_mean",
					       "sum",  NULL};
/* log|det| of a singular matrix: -Inf */
static const char *const logdet_ops[] = {"linalg_slogdet", "logdet", "slogdet", NULL};

static void logdet_fix(struct diagnosis *g)
{
	fix(g, "keep the matrix invertible: parameterise it so (an LU decomposition with an "
	       "exp'd diagonal, as Glow's invertible 1x1 convolution), or add eps * I");
}

/* The first of the loss's own nodes (no module output between it and the loss) in set; -1. */
static int own_op(const struct finding_loss *l, const char *const *set)
{
	unsigned int i;

	for (i = 0; l && i < l->n; i++)
		if (in_set(l->op[i], set) && loss_own(l, i))
			return (int)i;
	return -1;
}

/* Node i's operand k, found by its edge or as a node another found first; -1 if neither. */
static int operand_seen(const struct finding_loss *l, unsigned int i, unsigned int k)
{
	int j = operand(l, i, k);
	unsigned int m;

	for (m = 0; j < 0 && m < l->n; m++)
		if (l->also[m] == i && l->also_input[m] == k)
			j = (int)m;
	return j;
}

/* Is node r a sqrt of a sum (or mean) of squares of a difference: a spread by hand? */
static int centred_root(const struct finding_loss *l, int r)
{
	static const char *const sums[] = {"sum", "mean", NULL};
	int k = r >= 0 && !strcmp(l->op[r], "sqrt") ? operand_seen(l, (unsigned int)r, 0) : -1;
	int p = k >= 0 && in_set(l->op[k], sums) ? operand_seen(l, (unsigned int)k, 0) : -1;
	int c = p >= 0 && !strcmp(l->op[p], "pow") ? operand_seen(l, (unsigned int)p, 0) : -1;

	return c >= 0 && in_set(l->op[c], sub_ops);
}

/* How many of node i's edges the walk followed. */
static unsigned int walked_edges(const struct finding_loss *l, unsigned int i)
{
	unsigned int j, n = 0;

	for (j = i + 1; j < l->n; j++)
		n += l->parent[j] == i;
	return n;
}

/*
 * Is the divisor node d kept away from 0 on its way from what it divides by: a clamp (as
 * F.normalize clamps a norm), or an add of a value that needs no gradient (an epsilon)?
 */
static int guarded(const struct finding_loss *l, unsigned int d)
{
	static const char *const clamps[] = {"clamp", "clamp_min", NULL};
	unsigned int j;

	for (j = d; j < l->n; j++) {
		if (!found_under(l, d, j))
			continue;
		if (in_set(l->op[j], clamps))
			return 1;
		if (!strcmp(l->op[j], "add") && walked_edges(l, j) == 1)
			return 1;
	}
	return 0;
}

/*
 * A div of the loss's own whose divisor it computed from what needs a gradient (a norm, a
 * spread, a sum: what is 0 where the predictions are constant or zero); *zero: the node of
 * zero_divisor_ops under it, -1 where none was walked. -1 where no div has such a divisor.
 */
static int own_divisor(const struct finding_loss *l, int *zero)
{
	unsigned int i, j;
	int best = -1;

	*zero = -1;
	for (i = 0; l && i < l->n; i++) {
		int d;

		if (strcmp(l->op[i], "div") || !loss_own(l, i))
			continue;
		d = operand(l, i, 1);
		if (d < 0)
			continue; /* a divisor that needs no gradient: rule_loss_plain's */
		if (guarded(l, (unsigned int)d))
			continue; /* kept from 0: F.normalize's clamp_min, an epsilon added */
		if (best < 0)
			best = (int)i;
		for (j = (unsigned int)d; j < l->n; j++)
			if (in_set(l->op[j], zero_divisor_ops) &&
			    found_under(l, (unsigned int)d, j) && loss_own(l, j)) {
				*zero = (int)j;
				return (int)i;
			}
	}
	return best;
}

/* The loss's own ops the walk named, from the loss down, as evidence. */
static void own_ops_evidence(const struct finding_loss *l, struct diagnosis *g)
{
	char listed[FINDING_LOSS_NODES * FINDING_LOSS_OP_LEN + 16];
	unsigned int i;
	int used = 0, any = 0;

	listed[0] = 0;
	for (i = 0; l && i < l->n && used < (int)sizeof(listed); i++) {
		if (!strcmp(l->op[i], "?") || !loss_own(l, i))
			continue;
		used += snprintf(listed + used, sizeof(listed) - (size_t)used, "%s%s",
				 any ? ", " : "", l->op[i]);
		any = 1;
	}
	if (any)
		evidence(g, "ops the loss took, from the loss down (autograd, breadth first): %s%s",
			 listed, l->n >= FINDING_LOSS_NODES ? " ..." : "");
}

/*
 * A loss that takes an op with a domain or a divisor of its own (no exp explains it): acos
 * or asin past ±1 (a cosine that rounded past 1), atanh at ±1, log|det| of a singular matrix,
 * a division by a norm or spread it computed (a correlation or a cosine by hand over
 * constant predictions), a root of a negative. 0 where none of those, or a log, explains it.
 */
static int rule_loss_domain(const struct diag_anomaly *a, struct diagnosis *g)
{
	const struct finding_loss *l = a->loss;
	int u = own_op(l, unit_ops), det = own_op(l, logdet_ops), zero, div, root, arg;
	int infs = a->posinf + a->neginf > 0, logged = own_op(l, log_ops) >= 0, zero_div;

	if (!l || !l->n)
		return 0;
	div = own_divisor(l, &zero);
	root = own_op(l, root_ops);
	/* a NaN the unit op may have been given: 0/0 of a norm it divides by */
	zero_div = a->nan && div >= 0 && zero >= 0;
	if (u >= 0 && (a->nan || !strcmp(l->op[u], "atanh"))) {
		int cosine = own_op(l, div_ops) >= 0 || own_op(l, zero_divisor_ops) >= 0;

		rests(g, "operations");
		own_ops_evidence(l, g);
		if (!strcmp(l->op[u], "atanh"))
			evidence(g,
				 "the loss takes atanh: atanh(x) is ±Inf at ±1 and NaN past it "
				 "(a norm or a tanh's output that reached 1, a clamp to max=1.0)");
		else
			evidence(g, "the loss takes %s: NaN for |x| above 1%s", l->op[u],
				 cosine ? ", and a cosine as a dot product over norms rounds just "
					  "past 1"
					: "");
		if (zero_div)
			evidence(g,
				 "or the %s the cosine divides by was 0 (a prediction of zeros): "
				 "0/0 gave it NaN",
				 l->op[zero]);
		conclude(g, "invalid_domain", (cosine || infs) && !zero_div ? 0.65 : 0.55);
		unit_fix(g, l->op[u]);
		if (zero_div)
			denominator_fix(g);
		return 1;
	}
	if (det >= 0 && a->neginf + a->posinf) {
		rests(g, "operations");
		own_ops_evidence(l, g);
		evidence(g, "the loss takes %s: log|det| of a singular matrix is -Inf", l->op[det]);
		conclude(g, "loss_log_zero", 0.5);
		logdet_fix(g);
		return 1;
	}
	if (div >= 0 && !logged) {
		int spread =
			zero >= 0 && (centred_root(l, zero) || in_set(l->op[zero], spread_ops));

		rests(g, "operations");
		own_ops_evidence(l, g);
		if (spread)
			evidence(
				g,
				"the loss divides by a spread it computed (a %s of deviations from "
				"a mean: a correlation or a standardisation by hand): 0 where the "
				"values are all equal (a constant prediction), and %s",
				l->op[zero], a->nan ? "0/0 is NaN" : "x/0 is ±Inf");
		else if (zero >= 0)
			evidence(g,
				 "the loss divides by a %s it computed (a cosine by hand): 0 where "
				 "the values under it are all zero (a prediction of zeros), and %s",
				 l->op[zero], a->nan ? "0/0 is NaN" : "x/0 is ±Inf");
		else
			evidence(g, "the loss divides by a value it computed: %s where that is 0",
				 a->nan ? "0/0 is NaN" : "x/0 is ±Inf");
		conclude(g, "division_by_zero", zero >= 0 ? 0.55 : 0.45);
		fix(g, "add an epsilon to the denominator: a / (b + 1e-8), or b.clamp_min(1e-8) "
		       "(F.cosine_similarity and torch.corrcoef guard it)");
		fix(g, "look for what made the values under it constant: a collapsed output (all "
		       "predictions equal), a batch of one, or a dead layer");
		return 1;
	}
	if (root >= 0 && a->nan && !logged && (arg = operand(l, (unsigned int)root, 0)) >= 0 &&
	    in_set(l->op[arg], sub_ops)) {
		rests(g, "operations");
		own_ops_evidence(l, g);
		evidence(g,
			 "the loss takes %s of a %s: NaN of a negative, and a difference of close "
			 "values (E[x^2] - E[x]^2, a variance by hand) can round below 0",
			 l->op[root], l->op[arg]);
		conclude(g, "invalid_domain", 0.45);
		domain_fix(g);
		return 1;
	}
	return 0;
}

/*
 * The loss's own nodes: +Inf from ctc_loss (no alignment fits), or NaN from a mean of what
 * it selected by index (x[mask].mean() over an empty mask).
 */
static int rule_loss_ctc_select(const struct diag_anomaly *a, struct diagnosis *g)
{
	const struct finding_loss *l = a->loss;
	unsigned int i;
	int sel;

	for (i = 0; l && i < l->n && i < FINDING_LOSS_NODES; i++) {
		if (a->posinf && !a->neginf && in_set(l->op[i], ctc_ops)) {
			rests(g, "operations");
			own_ops_evidence(l, g);
			ctc_verdict(NULL, g);
			return 1;
		}
		if (!a->nan || strcmp(l->op[i], "mean") || (sel = operand(l, i, 0)) < 0 ||
		    !in_set(l->op[sel], select_ops))
			continue;
		rests(g, "operations");
		own_ops_evidence(l, g);
		evidence(g,
			 "the loss takes a mean of what it selected by index (%s, as "
			 "loss[mask].mean()): of an empty selection it is 0/0, NaN",
			 l->op[sel]);
		conclude(g, "division_by_zero", 0.55);
		empty_selection_fixes(g);
		return 1;
	}
	return 0;
}

/*
 * lgamma among the loss's nodes: a distribution's log density (Beta, Dirichlet, Gamma) takes
 * the log of the value it is given, which needs no gradient (an action, a target).
 */
static void support_log(struct diagnosis *g)
{
	evidence(g,
		 "the loss takes lgamma: a distribution's log_prob (Beta, Dirichlet, Gamma) "
		 "takes the log of its value, which needs no gradient and leaves no node; at the "
		 "edge of the support (0, or 1 for a Beta: an action clipped to its bound) that "
		 "log is -Inf");
	fix(g, "keep the values inside the open support before log_prob: a.clamp(1e-6, 1 - "
	       "1e-6) for a Beta (store the unclipped action), a.clamp_min(1e-6) for a Gamma");
	fix(g, "clamp before the log: torch.log(p.clamp_min(1e-12))");
}

static int rule_loss(const struct diag *d, const struct diag_anomaly *a, struct diagnosis *g)
{
	/* in mode loss no module output was checked: a NaN from any layer looks the same */
	if (!a->phase || strcmp(a->phase, "loss") || d->loss_only)
		return 0;
	rests(g, "loss_value");
	evidence(g,
		 "every module output of this iteration (step %llu) was finite; the loss was not",
		 (unsigned long long)a->step);
	evidence(g, "loss: %llu NaN, %llu +Inf, %llu -Inf", (unsigned long long)a->nan,
		 (unsigned long long)a->posinf, (unsigned long long)a->neginf);
	if (a->op && in_set(a->op, target_ops) && a->nan && !a->posinf && !a->neginf) {
		/* log-probabilities of finite logits are finite: NaN only from an empty mean */
		rests(g, "operations");
		evidence(g,
			 "%s made the loss (its autograd graph): over finite log-probabilities it "
			 "is NaN only as a mean over no counted target (every target "
			 "ignore_index, -100 by default), 0/0",
			 a->op);
		conclude(g, "division_by_zero", 0.7);
		ignored_fixes(g);
		return 1;
	}
	if (rule_loss_plain(d, a, g) || rule_loss_exp(a, g) || rule_loss_domain(a, g) ||
	    rule_loss_ctc_select(a, g))
		return 1;
	/* a log of what needs no gradient (a target's) leaves no node: the rule of old */
	own_ops_evidence(a->loss, g);
	conclude(g, "loss_log_zero", a->posinf + a->neginf ? 0.8 : 0.5);
	if (own_op(a->loss, lgamma_ops) >= 0) {
		support_log(g);
		return 1;
	}
	log_fixes(g);
	return 1;
}

static int ops_known(const struct evidence_facts *x)
{
	return x && x->nops > 0;
}

/* Every op of the call is in the list: an op missing from it did not run. */
static int ops_whole(const struct evidence_facts *x)
{
	return ops_known(x) && !x->ops_partial && !x->ops_more;
}

/* Index of an op of set farther from the output than index after (its input side), -1 if none. */
static int op_before(const struct evidence_facts *x, const char *const *set, int after)
{
	int i;

	for (i = after + 1; x && i < x->nops && i < EVIDENCE_MAX_OPS; i++)
		if (in_set(x->ops[i], set))
			return i;
	return -1;
}

/* Index of the call's first op (nearest the output) in set, -1 if none. */
static int op_in(const struct evidence_facts *x, const char *const *set)
{
	return op_before(x, set, -1);
}

/* The place of an op of set among the inputs of op i (the walk's edges), -1 if none. */
static int input_in(const struct evidence_facts *x, int i, const char *const *set)
{
	int j;

	for (j = i + 1; x && x->parents && j < x->nops && j < EVIDENCE_MAX_OPS; j++)
		if (x->op_parent[j] == i && in_set(x->ops[j], set))
			return j;
	return -1;
}

/*
 * Every exp the walk saw takes what an op of bound_ops made (one at least): the place of the
 * first one's bound, else -1.
 */
static int exps_bounded(const struct evidence_facts *x)
{
	int i, b, first = -1;

	for (i = 0; x && x->parents && i < x->nops && i < EVIDENCE_MAX_OPS; i++) {
		if (!in_set(x->ops[i], exp_ops))
			continue;
		b = input_in(x, i, bound_ops);
		if (b < 0)
			return -1;
		if (first < 0)
			first = b;
	}
	return first;
}

/*
 * A log of 1 - v where v is what a saturating op made, directly or through a power or a
 * product (1 - tanh(u)^2, log1p(-sigmoid(x))): the saturating op's place, the log's in
 * *log_at; -1 if none.
 */
static int saturated_log(const struct evidence_facts *x, int *log_at)
{
	int i, d, c, t;

	for (i = 0; x && x->parents && i < x->nops && i < EVIDENCE_MAX_OPS; i++) {
		if (!in_set(x->ops[i], log_ops))
			continue;
		d = input_in(x, i, strcmp(x->ops[i], "log1p") ? sub_ops : neg_ops);
		if (d < 0)
			continue;
		t = input_in(x, d, saturate_ops);
		c = t < 0 ? input_in(x, d, carry_ops) : -1;
		if (c >= 0)
			t = input_in(x, c, saturate_ops);
		if (t >= 0) {
			*log_at = i;
			return t;
		}
	}
	return -1;
}

/*
 * The call takes a log of 1 minus a value it received (log <- rsub, or log1p <- neg, by the
 * walk's edges: a cross-entropy by hand over probabilities a sigmoid made outside it), and an
 * input's finite values lie in (0, 1] and reach exactly 1 (a sigmoid rounded to 1; none is 0,
 * as 0/1 targets hold): that input, the log's place in *log_at; NULL if none.
 */
static const struct tensor_facts *one_under_log(const struct evidence_facts *x, int *log_at)
{
	static const char *const rsub[] = {"rsub", NULL};
	const struct tensor_facts *t, *found = NULL;
	int i, j;

	for (i = 0; x && x->parents && i < x->nops && i < EVIDENCE_MAX_OPS && !found; i++) {
		if (!in_set(x->ops[i], log_ops) ||
		    input_in(x, i, strcmp(x->ops[i], "log1p") ? rsub : neg_ops) < 0)
			continue;
		for (j = 0; j < x->n; j++) {
			t = &x->t[j];
			if (t->role != EVIDENCE_INPUT || t->kind != EVIDENCE_FLOAT ||
			    !t->has_finite || t->min < 0 || t->max != 1.0 || t->zeros)
				continue;
			found = t;
			break;
		}
		if (found)
			*log_at = i;
	}
	return found;
}

/* a norm the call takes: 0 for a row of zeros */
static const char *const norm_ops[] = {"norm", "linalg_vector_norm", "frobenius_norm", NULL};

/* what is exactly 0 for a range of finite arguments: a log of it is -Inf there */
static const char *const zero_ops[] = {"relu", "threshold", "hardtanh", NULL};

/* The call's log (not log1p) of what a zero_ops op made (the walk's edges): that op's index. */
static int zero_log(const struct evidence_facts *x, int *log_at)
{
	int i, z;

	for (i = 0; x && x->parents && i < x->nops && i < EVIDENCE_MAX_OPS; i++) {
		if (!in_set(x->ops[i], log_ops) || !strcmp(x->ops[i], "log1p"))
			continue;
		z = input_in(x, i, zero_ops);
		if (z >= 0) {
			*log_at = i;
			return z;
		}
	}
	return -1;
}

/*
 * Does a div of the call divide an exp by a sum of exps (the walk's edges: the div takes a sum
 * and an exp, or a sum of an exp): a softmax written by hand?
 */
static int softmax_by_hand(const struct evidence_facts *x)
{
	static const char *const sums[] = {"sum", NULL};
	int i, sum;

	for (i = 0; x && x->parents && i < x->nops && i < EVIDENCE_MAX_OPS; i++) {
		if (strcmp(x->ops[i], "div"))
			continue;
		sum = input_in(x, i, sums);
		if (sum >= 0 && (input_in(x, i, exp_ops) >= 0 || input_in(x, sum, exp_ops) >= 0))
			return 1;
	}
	return 0;
}

/* Does a div of the call take what a softmax's scores are (the walk's edges: softmax(x / t))? */
static int scaled_softmax(const struct evidence_facts *x)
{
	static const char *const softmaxes[] = {"softmax", "log_softmax", NULL};
	int i, p;

	for (i = 0; x && x->parents && i < x->nops && i < EVIDENCE_MAX_OPS; i++) {
		if (strcmp(x->ops[i], "div"))
			continue;
		p = x->op_parent[i];
		if (p >= 0 && p < x->nops && in_set(x->ops[p], softmaxes))
			return 1;
	}
	return 0;
}

/*
 * A sqrt of a sum or mean of a pow (the walk's edges): a norm or a spread by hand, whose
 * argument is no negative. Its index, -1 where none, or where another op with a domain is
 * among the call's ops.
 */
static int root_of_squares(const struct evidence_facts *x, int *centred)
{
	static const char *const sums[] = {"sum", "mean", NULL};
	static const char *const squares[] = {"pow", NULL};
	int i, r, sq = -1, root = -1;

	for (i = 0; x && x->parents && i < x->nops && i < EVIDENCE_MAX_OPS && root < 0; i++) {
		if (strcmp(x->ops[i], "sqrt"))
			continue;
		r = input_in(x, i, sums);
		sq = r >= 0 ? input_in(x, r, squares) : -1;
		if (sq >= 0)
			root = i;
	}
	/* the squares of deviations from a mean: a spread */
	*centred = sq >= 0 && input_in(x, sq, sub_ops) >= 0;
	/* no other op with a domain: a log, a second root, a pow that is not the square */
	for (i = 0; root >= 0 && i < x->nops && i < EVIDENCE_MAX_OPS; i++)
		if (in_set(x->ops[i], domain_ops) && i != root && i != sq)
			return -1;
	return root;
}

static int code_known(const struct evidence_facts *x)
{
	return x && x->ncode > 0;
}

/* An op of set the call ran (autograd) or, failing that, its code names; NULL if none. */
static const char *op_named(const struct evidence_facts *x, const char *const *set)
{
	int i = op_in(x, set), j;

	if (i >= 0)
		return x->ops[i];
	for (j = 0; x && j < x->ncode && j < EVIDENCE_MAX_OPS; j++)
		if (in_set(x->code_ops[j], set))
			return x->code_ops[j];
	return NULL;
}

/*
 * Neither the call's ops (autograd) nor its code's names have a softmax: a bool mask's
 * all-true row (True masks, as key_padding_mask) hides no softmax's whole row here. True may
 * as well mean "keep" (positions that are valid), and every position of a row kept is the
 * usual case. Not ruled out where either is not known.
 */
static int softmax_ruled_out(const struct evidence_facts *x)
{
	return ops_known(x) && code_known(x) && !op_named(x, attention_ops);
}

/* "operations of X, from its output back: log, gather, softmax" */
static void ops_evidence(const struct diag_anomaly *a, const struct evidence_facts *x,
			 struct diagnosis *g)
{
	struct listing l;
	int i;

	if (!ops_known(x))
		return;
	list_begin(&l, "operations of %s, from its output back (autograd):", name(a));
	for (i = 0; i < x->nops && i < EVIDENCE_MAX_OPS; i++)
		list_add(&l, " %s", x->ops[i][0] ? x->ops[i] : "?");
	if (x->ops_more)
		list_add(&l, " ...");
	if (x->ops_partial)
		list_add(&l, " and ops on tensors that need no gradient (no node)");
	list_send(&l, g);
}

/* "operations the code of X's forward names: mean, std" (where the walk is not whole) */
static void code_evidence(const struct diag_anomaly *a, const struct evidence_facts *x,
			  struct diagnosis *g)
{
	struct listing l;
	int i;

	if (!code_known(x))
		return;
	list_begin(&l,
		   "operations the code of %s (%s.forward) names, where autograd did not "
		   "record them all:",
		   name(a), a->module ? a->module : "?");
	for (i = 0; i < x->ncode && i < EVIDENCE_MAX_OPS; i++)
		list_add(&l, " %s", x->code_ops[i]);
	list_send(&l, g);
}

/* What the tensors the layer received say, one pointer per fact (the first that shows it). */
struct signs {
	const struct tensor_facts *exp;		  /* a value above exp's overflow threshold */
	const struct tensor_facts *zeros;	  /* a float 0 */
	const struct tensor_facts *zero_rows;	  /* all-zero rows (float), all-false rows (mask) */
	const struct tensor_facts *const_rows;	  /* constant non-zero rows */
	const struct tensor_facts *masked;	  /* all-true mask rows, all -Inf rows */
	const struct tensor_facts *negative;	  /* negative values */
	const struct tensor_facts *rare_negative; /* a parameter or buffer mostly >= 0 */
	const struct tensor_facts *prob_zeros;	  /* zeros in rows that are all distributions */
	const struct tensor_facts *other_zeros;	  /* zeros in a tensor that is not one */
	const struct tensor_facts *const_cols;	  /* a feature constant across the rows */
	const struct tensor_facts *mask_zero_rows; /* a 0/1 mask with rows all 0 */
	const struct tensor_facts *one_row;	   /* one row of several values, not constant */
	const struct tensor_facts *wide;	   /* finite values spread past exp's range twice */
	const struct tensor_facts *empty;	   /* an input with no values: a dimension of 0 */
	int n;					   /* tensors with facts */
};

static void read_signs(const struct evidence_facts *x, struct signs *s)
{
	int i;

	memset(s, 0, sizeof(*s));
	for (i = 0; x && i < x->n; i++) {
		const struct tensor_facts *t = &x->t[i];
		int flt = t->kind == EVIDENCE_FLOAT, in = t->role == EVIDENCE_INPUT;

		s->n++;
		if (flt && t->has_finite && t->max > t->exp_limit &&
		    (!s->exp || t->max > s->exp->max))
			s->exp = t;
		if (flt && t->zeros && !s->zeros)
			s->zeros = t;
		if (flt && t->zeros && t->rows && t->prob_rows == t->rows) {
			if (!s->prob_zeros)
				s->prob_zeros = t;
		} else if (flt && t->zeros && !s->other_zeros) {
			s->other_zeros = t;
		}
		/* rows are the data's: a parameter initialised to ones or zeros is no sign */
		if (in && t->zero_rows && !s->zero_rows)
			s->zero_rows = t;
		if (in && t->const_rows && !s->const_rows)
			s->const_rows = t;
		if (in && flt && t->const_cols && !s->const_cols)
			s->const_cols = t;
		/* exp(min - max) is 0 in any float type: a softmax of such a row has exact zeros */
		if (in && flt && t->has_finite && t->max - t->min > 2 * t->exp_limit && !s->wide)
			s->wide = t;
		if (in && flt && !t->numel && !s->empty)
			s->empty = t;
		/* 2-d or more: the one row is along the last dimension, the others are of 1 */
		if (in && flt && t->ndim >= 2 && t->rows == 1 && t->row_len > 1 && !t->const_rows &&
		    !t->zero_rows && !s->one_row)
			s->one_row = t;
		if (in && t->kind == EVIDENCE_BOOL && t->zero_rows && !s->mask_zero_rows)
			s->mask_zero_rows = t;
		/* a -Inf mask row counts in a buffer too (a registered mask is not checked) */
		if (((in && t->true_rows) || t->neginf_rows) && !s->masked)
			s->masked = t;
		if (flt && t->negatives && !s->negative)
			s->negative = t;
		if (flt && t->negatives && t->role != EVIDENCE_INPUT &&
		    t->negatives * 10 < t->numel && !s->rare_negative)
			s->rare_negative = t;
	}
}

/* A floating tensor of values in [0, 1] that reaches 0 or 1 exactly (a probability): its place. */
static int probability_edge(const struct evidence_facts *x)
{
	const struct tensor_facts *t;
	int i;

	for (i = 0; x && i < x->n && i < EVIDENCE_MAX_TENSORS; i++) {
		t = &x->t[i];
		if (t->kind == EVIDENCE_FLOAT && t->has_finite && t->min >= 0 && t->max <= 1 &&
		    (t->max == 1.0 || t->zeros))
			return i;
	}
	return -1;
}

/* The first tensor whose smallest finite value is exactly -1 (log1p's 0), or -1. */
static int minus_one(const struct evidence_facts *x)
{
	int i;

	for (i = 0; x && i < x->n && i < EVIDENCE_MAX_TENSORS; i++)
		if (x->t[i].kind == EVIDENCE_FLOAT && x->t[i].has_finite && x->t[i].min == -1.0)
			return i;
	return -1;
}

static const char *role_of(const struct tensor_facts *t)
{
	return t->role == EVIDENCE_INPUT   ? ""
	       : t->role == EVIDENCE_PARAM ? "parameter "
					   : "buffer ";
}

/* Confidence from the number of independent facts that agree, and whether the name does. */
static double agree(int facts, int name)
{
	double c = 0.35 + 0.2 * facts + (name ? 0.1 : 0);

	return c > 0.95 ? 0.95 : c;
}

static int named(const struct diag_anomaly *a, const char *w1, const char *w2)
{
	return has(a->module, w1) || (w2 && has(a->module, w2));
}

static void out_counts(const struct diag_anomaly *a, struct diagnosis *g)
{
	evidence(g,
		 "%s (%s) returned %llu NaN, %llu +Inf, %llu -Inf from finite inputs and "
		 "parameters",
		 name(a), a->module ? a->module : "?", (unsigned long long)a->nan,
		 (unsigned long long)a->posinf, (unsigned long long)a->neginf);
}

static void exp_fact(const struct signs *s, struct diagnosis *g)
{
	evidence(g,
		 "largest finite value of %s%s: %.4g, above exp's overflow threshold %.2f for %s",
		 role_of(s->exp), s->exp->name, s->exp->max, s->exp->exp_limit, s->exp->dtype);
}

static void rows_fact(const struct tensor_facts *t, uint64_t n, const char *what,
		      struct diagnosis *g)
{
	evidence(g, "%s%s (%s): %llu of %llu rows along the last dimension are %s", role_of(t),
		 t->name, t->dtype, (unsigned long long)n, (unsigned long long)t->rows, what);
}

static void zeros_fact(const struct tensor_facts *t, struct diagnosis *g)
{
	evidence(g, "%s%s holds %llu zeros of %llu values", role_of(t), t->name,
		 (unsigned long long)t->zeros, (unsigned long long)t->numel);
}

static void verdict_exp(const struct diag_anomaly *a, const struct signs *s, int facts,
			struct diagnosis *g)
{
	exp_fact(s, g);
	conclude(g, "exp_overflow", agree(facts, named(a, "Softmax", "Exp")));
	if (s->exp->role != EVIDENCE_PARAM || s->exp->numel > 16) {
		exp_fixes(g);
		return;
	}
	/* a learned log-scale or temperature that grew past the threshold: bound it */
	fix(g, "bound the learned log-scale (the parameter named) before its exp: "
	       "log_scale.clamp(max=4.6052).exp() (CLIP clamps its logit_scale to log(100)), or "
	       "clamp the parameter's data after each optimizer step");
	fix(g, "give it a lower learning rate (a parameter group of its own): a log-scale the "
	       "loss rewards for growing climbs a little at every step");
}

static void verdict_div(const struct diag_anomaly *a, const struct evidence_facts *x,
			const struct signs *s, int facts, struct diagnosis *g)
{
	static const char *const pow_ops[] = {"pow", "rsqrt", "reciprocal", NULL};
	const char *pw = op_named(x, pow_ops);

	if (s->zero_rows)
		rows_fact(s->zero_rows, s->zero_rows->zero_rows,
			  s->zero_rows->kind == EVIDENCE_BOOL ? "all false (nothing selected)"
							      : "all zero",
			  g);
	if (s->zeros && s->zeros != s->zero_rows)
		zeros_fact(s->zeros, g);
	evidence(g, "%s",
		 a->nan && s->zero_rows
			 ? "0/0: a sum, count, norm or variance over a row that is all zero "
			   "divides by 0"
			 : "a division by 0");
	/* a graph's degree normalisation: deg.pow(-0.5) of a node with no edges */
	if (pw && s->zero_rows)
		evidence(g,
			 "the call takes %s: a negative power of a sum over an all-zero row (a "
			 "degree of 0, deg.pow(-0.5) of a node with no edges) is Inf, and Inf "
			 "times the row's 0 is NaN",
			 pw);
	conclude(g, "division_by_zero", agree(facts + (pw && s->zero_rows), 0));
	denominator_fix(g);
	if (pw && s->zero_rows)
		fix(g,
		    "set the inverse of a zero degree or sum to 0 (d[d == float('inf')] = 0), or "
		    "add self-loops so that no row is empty");
	if (s->zero_rows)
		fix(g, "look for empty or all-padding rows reaching this layer");
}

/*
 * ±Inf and zeros that are probabilities: log(0) is -Inf (+Inf in a negative log-likelihood).
 * A division by a probability would give ±Inf as well; the replay names the operation.
 */
static void verdict_log(const struct signs *s, int facts, struct diagnosis *g)
{
	const struct tensor_facts *t = s->prob_zeros;

	evidence(g,
		 "%s%s (%s): all %llu rows along the last dimension are probability "
		 "distributions (in [0, 1], summing to 1), with %llu zeros",
		 role_of(t), t->name, t->dtype, (unsigned long long)t->rows,
		 (unsigned long long)t->zeros);
	evidence(g, "the log of a probability that is 0 is -Inf (+Inf once negated); a division "
		    "by one would be Inf too: the replay names the operation");
	conclude(g, "loss_log_zero", agree(facts, 0));
	log_fixes(g);
}

/*
 * The call's ops are all known and none is an exp: a value above exp's threshold is no sign
 * of an exp overflow (a logit, a reading, a sum of squares are often that large).
 */
static void no_exp_taken(const struct evidence_facts *x, struct signs *s, struct diagnosis *g)
{
	const char *other;

	if (!s->exp || op_named(x, exp_ops))
		return;
	if (ops_whole(x)) {
		evidence(g,
			 "%s%s reaches %.4g, above exp's overflow threshold, but the call takes no "
			 "exp",
			 role_of(s->exp), s->exp->name, s->exp->max);
		s->exp = NULL;
		return;
	}
	/* the walk missed ops: the code names none that exps, and one that explains a NaN */
	other = op_named(x, domain_ops);
	if (!other)
		other = op_named(x, spread_ops);
	if (!code_known(x) || !other)
		return;
	evidence(g,
		 "%s%s reaches %.4g, above exp's overflow threshold, but the layer's code names "
		 "no exp; it names %s",
		 role_of(s->exp), s->exp->name, s->exp->max, other);
	s->exp = NULL;
}

/*
 * The place of the bound every exp of the call takes (exps_bounded()) where it bounds: a
 * clamp's node does not say whether it had a max (the daemon does not read its saved
 * bounds), so a clamp counts only where another rule explains the output (other); -1 if none.
 */
static int exp_bound(const struct evidence_facts *x, int other)
{
	int b = exps_bounded(x);

	return b >= 0 && (other || strcmp(x->ops[b], "clamp")) ? b : -1;
}

/*
 * A value above exp's threshold reached the call, but every exp it takes is of a clamp's (or
 * another bounded op's) output (exp_bound()): that value is no fact for an overflow.
 */
static void exp_bounded(const struct evidence_facts *x, struct signs *s, int other,
			struct diagnosis *g)
{
	int b = s->exp ? exp_bound(x, other) : -1;

	if (b < 0)
		return;
	evidence(g,
		 "%s%s reaches %.4g, above exp's overflow threshold, but the call's exp takes "
		 "what %s made: a bounded exponent%s",
		 role_of(s->exp), s->exp->name, s->exp->max, x->ops[b],
		 x->ops_more || x->ops_partial ? " (of the ops seen)" : "");
	s->exp = NULL;
}

/* A log of 1 - what a saturating op made: tanh, sigmoid or a softmax rounded to 1, log(0). */
static void verdict_saturated_log(const struct diag_anomaly *a, const struct evidence_facts *x,
				  int log_at, int sat_at, struct diagnosis *g)
{
	const char *op = x->ops[sat_at];

	if (strcmp(x->ops[log_at], "log1p"))
		evidence(g, "%s takes %s of 1 minus what %s made", name(a), x->ops[log_at], op);
	else
		evidence(g, "%s takes log1p of minus what %s made: log(1 - it)", name(a), op);
	evidence(g,
		 "%s rounds to exactly 1 in magnitude for a large argument (tanh past about 9, "
		 "sigmoid past about 17 in float32): 1 minus it is 0, and %s(%s) = -Inf",
		 op, x->ops[log_at], strcmp(x->ops[log_at], "log1p") ? "0" : "-1");
	conclude(g, "loss_log_zero", agree(2, 0));
	if (!strcmp(op, "tanh"))
		fix(g, "compute log(1 - tanh(u)^2) from u: 2 * (math.log(2) - u - "
		       "F.softplus(-2 * u))");
	else if (!strcmp(op, "sigmoid"))
		fix(g, "compute log(1 - sigmoid(x)) as F.logsigmoid(-x)");
	else
		fix(g, "compute log(1 - p) from log-probabilities: torch.log(-torch.expm1(logp))");
	fix(g, "clamp before the log: torch.log((1 - a).clamp_min(1e-6))");
}

/*
 * A log of what an op of the call made: a probability or an exp that underflowed to 0. Where
 * the log takes a sum or matrix product (the walk's edges), of such probabilities: a
 * likelihood summed in probability space, each term 0.
 */
static void verdict_underflow_log(const struct diag_anomaly *a, const struct evidence_facts *x,
				  int log_at, int under_at, struct diagnosis *g)
{
	int sum_at = input_in(x, log_at, summing_ops);

	if (sum_at >= 0) {
		evidence(g,
			 "%s takes %s of a %s of what %s made: a likelihood summed in probability "
			 "space (a mixture's sum of weighted densities, an HMM's forward variable "
			 "over a long sequence) is 0 when every term underflows, and log(0) = -Inf",
			 name(a), x->ops[log_at], x->ops[sum_at], x->ops[under_at]);
		conclude(g, "loss_log_zero", agree(2, 0));
		log_space_fixes(g);
		return;
	}
	evidence(g,
		 "%s takes %s of what %s made: a probability that underflowed to 0 (a logit "
		 "far below its row's maximum) gives log(0) = -Inf",
		 name(a), x->ops[log_at], x->ops[under_at]);
	conclude(g, "loss_log_zero", agree(2, 0));
	log_fixes(g);
}

/* An input probability of exactly 1 under log(1 - p): see one_under_log. */
static void verdict_one_under_log(const struct diag_anomaly *a, const struct evidence_facts *x,
				  const struct tensor_facts *t, int log_at, struct diagnosis *g)
{
	evidence(g,
		 "%s takes %s of 1 minus a value it received, and %s%s (%s) lies in [0, 1] and "
		 "reaches exactly 1: a probability rounded to 1 (a sigmoid past about 17 in "
		 "float32)",
		 name(a), x->ops[log_at], role_of(t), t->name, t->dtype);
	evidence(g, "1 minus it is 0 and its log -Inf%s",
		 a->nan ? "; a target of 0 times it (y * log(1 - p) by hand) is NaN" : "");
	conclude(g, "loss_log_zero", agree(2, 0));
	sigmoid_fixes(g);
}

/*
 * -Inf alone, and the last op of the call fills a mask (masked_fill(mask, -inf) returned as it
 * is: masked scores or logits). The -Inf are meant; what reads them is what goes wrong: a
 * softmax over a row masked whole is NaN, and a loss that gives a masked class weight (label
 * smoothing, soft targets) takes its log-probability of -Inf.
 */
static void masked_fill_inf(const struct diag_anomaly *a, const struct signs *s,
			    struct diagnosis *g)
{
	evidence(g,
		 "%s's last op fills a mask (masked_fill) and it returned -Inf alone: the -Inf "
		 "are the fill, meant to give those positions a probability of 0",
		 name(a));
	if (s->masked) {
		evidence(g, "a row of %s%s hides every position: a softmax over it is NaN",
			 role_of(s->masked), s->masked->name);
		conclude(g, "attention_fully_masked", agree(2, 0));
		masked_fixes(g);
		return;
	}
	evidence(g, "what reads them next goes non-finite where it gives a masked position "
		    "weight: a log-probability of -Inf times a label-smoothing or soft target "
		    "(±Inf, or NaN times 0), a softmax over a row masked whole (NaN)");
	conclude(g, "loss_log_zero", 0.4);
	fix(g, "fill with a large finite negative instead of -inf "
	       "(torch.finfo(scores.dtype).min), or give masked classes no weight in the target "
	       "(spread label smoothing over the allowed classes alone)");
	fix(g, "handle rows whose positions are all masked (drop them, or unmask one)");
}

/*
 * ±Inf beside finite values near the range, from inputs with no zero and nothing above exp's
 * threshold: the values grew inside the call (a recurrence of gain above 1 over a long
 * sequence, a deep stack), no division or domain. An op the walk repeats is named.
 */
static void grew_inside(const struct evidence_facts *x, struct diagnosis *g)
{
	int i, run = 1, best = 1, at = -1;

	for (i = 1; x && i < x->nops && i < EVIDENCE_MAX_OPS; i++) {
		run = x->ops[i][0] && !strcmp(x->ops[i], x->ops[i - 1]) ? run + 1 : 1;
		if (run > best) {
			best = run;
			at = i;
		}
	}
	evidence(g, "finite values beside the Inf reach the range: the values grew past it inside "
		    "the call (products or sums compounding), not by a division or a domain");
	if (best >= 4)
		evidence(g,
			 "the call repeats %s (%d times in a row in its autograd walk%s): a "
			 "recurrence or a loop, whose gain above 1 compounds at every step",
			 x->ops[at], best, x->ops_more ? ", and more past it" : "");
	conclude(g, "unknown", best >= 4 ? 0.45 : 0.4);
	fix(g, "bound the growth: keep a recurrence's gain at most 1 (orthogonal or scaled-down "
	       "recurrent weights, tanh rather than relu), or normalise between steps or layers "
	       "(LayerNorm)");
	fix(g, "compare this batch with the usual ones: a sequence much longer than the rest "
	       "compounds further (truncate or split long sequences)");
}

/*
 * A value above exp's threshold into a call that ran no exp the walk saw, whose code names
 * none (a helper it calls could): a power or product of a value that large overflows too.
 */
static void power_overflow(const struct tensor_facts *t, struct diagnosis *g)
{
	/* exp's threshold is the log of the dtype's largest value */
	double v = t->max, limit = t->exp_limit;
	int k;

	evidence(g,
		 "%s%s reaches %.4g, above exp's overflow threshold, but the layer's code names "
		 "no exp (only a helper it calls could take one)",
		 role_of(t), t->name, v);
	for (k = 2; k <= 4 && v > 1 && log(v) * k <= limit; k++)
		;
	if (v > 1 && limit > 0 && k <= 4)
		evidence(g,
			 "a power or product of it overflows %s as well: its %s is past %.3g (as "
			 "x ** %d or a product of %d such values)",
			 t->dtype,
			 k == 2	  ? "square"
			 : k == 3 ? "cube"
				  : "fourth power",
			 exp(limit), k, k);
	conclude(g, "unknown", 0.4);
	fix(g, "find why the values are that large (a reading in another unit, a feature left "
	       "unnormalised): normalise or clip them before this layer");
	fix(g, "take powers of normalised values ((x / scale) ** k), or compute in log space");
}

/* Output with ±Inf from finite inputs: an exp past its threshold, or a division by 0. */
static int rule_inf(const struct diag_anomaly *a, const struct evidence_facts *x, struct signs *s,
		    struct diagnosis *g)
{
	int known = ops_known(x), e_op = op_in(x, exp_ops), l_op = op_in(x, log_ops);
	int d_op = op_in(x, div_ops), u_op = l_op >= 0 ? op_before(x, underflow_ops, l_op) : -1;
	int only_pos = a->posinf && !a->neginf, sat_log = -1, sat_at = saturated_log(x, &sat_log);
	int exp_n, div_n, log_n, z_op, z_log = -1, det = op_in(x, logdet_ops), one_log = -1, m1;
	int p_at;
	int log_alone;
	const struct tensor_facts *one;
	const char *lg = op_named(x, log_ops); /* the call's log, or its code's */

	if (!(a->posinf + a->neginf))
		return 0;
	out_counts(a, g);
	ops_evidence(a, x, g);
	code_evidence(a, x, g);
	no_exp_taken(x, s, g);
	exp_bounded(x, s, sat_at >= 0, g);
	exp_n = !!s->exp + (s->exp && only_pos) + (a->finite_max_abs > NEAR_OVERFLOW) +
		(s->exp && e_op >= 0);
	/* zero rows hold zeros: the two count once unless they are in different tensors */
	div_n = !!s->zeros + (s->zero_rows && s->zero_rows != s->zeros) + (a->posinf && a->neginf) +
		(known && d_op >= 0 && (s->zeros || s->zero_rows));
	/*
	 * a zero, and it is a probability: the argument of a log in a likelihood; a zero in
	 * another tensor, or Inf of both signs (log(0) has one), counts for the division
	 */
	log_n = s->prob_zeros ? 2 + (l_op >= 0) : 0;
	div_n += s->prob_zeros && s->other_zeros;
	if (ops_whole(x) && s->prob_zeros && l_op < 0 && d_op >= 0)
		log_n = 0; /* no log among the ops: the probability divides */
	if (a->neginf && !a->posinf && det >= 0) {
		/* -Inf alone where the call takes a log-determinant: a zero row or column is its
		 * singular matrix, no divisor */
		evidence(g, "the call takes %s: log|det| of a singular matrix is -Inf%s",
			 x->ops[det], s->zeros ? " (a zero row or column makes one)" : "");
		conclude(g, "loss_log_zero", agree(1 + !!s->zeros, 0));
		logdet_fix(g);
		return 1;
	}
	if (a->posinf && !a->neginf && op_named(x, ctc_ops)) {
		ctc_verdict(x, g);
		return 1;
	}
	if (op_named(x, logit_ops) && (p_at = probability_edge(x)) >= 0) {
		/* a probability of exactly 0 or 1 given to logit */
		const struct tensor_facts *p = &x->t[p_at];

		evidence(g,
			 "%s takes logit, log(p / (1 - p)): +Inf at p = 1, -Inf at p = 0; %s%s "
			 "holds values in [0, 1] that reach %s",
			 name(a), role_of(p), p->name,
			 p->max == 1.0 && p->zeros ? "both 0 and 1"
			 : p->max == 1.0	   ? "exactly 1"
						   : "exactly 0");
		conclude(g, "loss_log_zero", agree(2, 0));
		fix(g, "clamp the probability: torch.logit(p, eps=1e-6) clamps it into [eps, 1 - "
		       "eps] first");
		fix(g, "take the logits where the probabilities are made (a teacher's logits, not "
		       "sigmoid of them): a sigmoid rounds to exactly 1 past about 17 in float32");
		return 1;
	}
	if (a->neginf && !a->posinf && !a->nan && x->nops > 0 &&
	    !strcmp(x->ops[0], "masked_fill")) {
		/* -Inf alone, the fill of a mask the call returns as it is: the mask's own */
		masked_fill_inf(a, s, g);
		return 1;
	}
	if (s->exp && exp_n > div_n && exp_n > log_n && e_op < 0 && x && x->code_read &&
	    !op_named(x, exp_ops)) {
		power_overflow(s->exp, g);
		return 1;
	}
	if (s->exp && exp_n > div_n && exp_n > log_n) {
		verdict_exp(a, s, exp_n, g);
		return 1;
	}
	if (!s->prob_zeros && !s->zeros && sat_at >= 0) {
		verdict_saturated_log(a, x, sat_log, sat_at, g);
		return 1;
	}
	if (!s->prob_zeros && (one = one_under_log(x, &one_log))) {
		verdict_one_under_log(a, x, one, one_log, g);
		return 1;
	}
	if (!s->prob_zeros && a->neginf && (z_op = zero_log(x, &z_log)) >= 0) {
		evidence(g,
			 "%s takes %s of what %s made: %s is 0 wherever its argument is at or "
			 "below 0, and log(0) = -Inf",
			 name(a), x->ops[z_log], x->ops[z_op], x->ops[z_op]);
		conclude(g, "loss_log_zero", agree(2, 0));
		fix(g, "keep the log's argument above 0: torch.log(torch.relu(x) + 1e-6), or "
		       "F.softplus(x) in place of the relu (positive everywhere)");
		return 1;
	}
	if (!s->prob_zeros && !s->zeros && u_op >= 0) {
		verdict_underflow_log(a, x, l_op, u_op, g);
		return 1;
	}
	if (log_n > div_n) {
		verdict_log(s, log_n, g);
		return 1;
	}
	/* -Inf alone from a call that takes a log and divides by nothing */
	log_alone = a->neginf && !a->posinf && lg && !op_named(x, div_ops);
	if (log_alone && s->zeros) {
		/* ... and a zero received: log(0) */
		evidence(g,
			 "%s takes %s (and divides by nothing), and %s%s holds %llu zeros: "
			 "log(0) = -Inf",
			 name(a), lg, role_of(s->zeros), s->zeros->name,
			 (unsigned long long)s->zeros->zeros);
		conclude(g, "loss_log_zero", agree(1 + (l_op >= 0), 0));
		fix(g, "keep the log's argument above 0: torch.log(x + eps) or torch.log1p(x) for "
		       "counts, x.clamp_min(1e-12) otherwise");
		fix(g, "look for the zeros in the data (a count, a price or a length of 0) where "
		       "a log transform expects positive values");
		return 1;
	}
	if (log_alone && !strcmp(lg, "log1p") && (m1 = minus_one(x)) >= 0) {
		/* ... that log a log1p, and a value of exactly -1 */
		evidence(g,
			 "%s takes log1p (and divides by nothing), and %s%s reaches exactly -1: "
			 "log1p(-1) = log(0) = -Inf",
			 name(a), role_of(&x->t[m1]), x->t[m1].name);
		conclude(g, "loss_log_zero", agree(1 + (l_op >= 0), 0));
		fix(g, "keep log1p's argument above -1: torch.log1p(x.clamp_min(-1 + 1e-6)); "
		       "log1p is for counts and other values at or above 0, and data scaled "
		       "into [-1, 1] reaches -1");
		return 1;
	}
	if (s->zeros || s->zero_rows) {
		verdict_div(a, x, s, div_n, g);
		return 1;
	}
	if (e_op >= 0 && exp_bound(x, 0) >= 0)
		e_op = -1; /* its exponent is bounded: no overflow from inside the call either */
	if (e_op >= 0 || d_op >= 0) {
		evidence(g,
			 "no input, parameter or buffer holds a zero or a value above exp's "
			 "threshold: the %s's operand came from inside the call (or from outside "
			 "the captured tensors: a Python number, a global)",
			 x->ops[e_op >= 0 ? e_op : d_op]);
		if (e_op >= 0) {
			conclude(g, "exp_overflow", agree(1, 0));
			exp_fixes(g);
		} else {
			conclude(g, "division_by_zero", agree(1, 0));
			denominator_fix(g);
		}
		return 1;
	}
	evidence(g,
		 "no input, parameter or buffer holds a zero or a value above exp's "
		 "threshold; largest finite |output| %g",
		 a->finite_max_abs);
	if (a->finite_max_abs > NEAR_OVERFLOW) {
		grew_inside(x, g);
		return 1;
	}
	conclude(g, "unknown", 0.3);
	fix(g, "replay the capture with nanwatch-repro --explain to find the operation");
	return 1;
}

/* Rows of a mask or of scores with every position masked; ops: the mask is filled into a
 * softmax's scores by the call (a second fact). */
static void verdict_masked(const struct diag_anomaly *a, const struct signs *s, int ops,
			   struct diagnosis *g)
{
	if (s->masked)
		rows_fact(s->masked,
			  s->masked->true_rows ? s->masked->true_rows : s->masked->neginf_rows,
			  s->masked->true_rows ? "all true (every position masked)" : "all -Inf",
			  g);
	if (s->mask_zero_rows)
		rows_fact(s->mask_zero_rows, s->mask_zero_rows->zero_rows,
			  "all 0 (every position masked where 0 masks)", g);
	conclude(g, "attention_fully_masked", agree(1 + ops, named(a, "Attention", "Attn")));
	masked_fixes(g);
}

/* what is never negative: a root, a norm, an exp, a probability, an absolute value */
static const char *const nonneg_ops[] = {"exp",
					 "exp2",
					 "softmax",
					 "sigmoid",
					 "softplus",
					 "abs",
					 "relu",
					 "sqrt",
					 "norm",
					 "linalg_vector_norm",
					 "frobenius_norm",
					 "std",
					 "var",
					 NULL};
/* what keeps its inputs' sign: a sum, a product or a mean of non-negatives, a reshape */
static const char *const sign_keeping_ops[] = {
	"sum",		 "mean",    "mul",	 "add",	    "expand",  "view",	 "unsafe_view",
	"reshape_alias", "squeeze", "unsqueeze", "clone",   "to_copy", "select", "slice",
	"index",	 "t",	    "transpose", "permute", NULL};
/* what a negative argument takes outside the domain (NaN); not acos's [-1, 1] */
static const char *const negative_domain_ops[] = {"sqrt",  "rsqrt", "log", "log2",
						  "log10", "pow",   NULL};

/*
 * Is op i's output never negative, by what made it (the walk's edges, depth levels down)?
 * Operands that need no gradient (a mask, a Python number) are not in the walk: a product with
 * one is taken as keeping the sign, as masks of 0 and 1 do.
 */
static int nonneg_made(const struct evidence_facts *x, int i, int depth)
{
	int j, inputs = 0;

	if (in_set(x->ops[i], nonneg_ops))
		return 1;
	if (depth <= 0 || !in_set(x->ops[i], sign_keeping_ops))
		return 0;
	for (j = i + 1; j < x->nops && j < EVIDENCE_MAX_OPS; j++) {
		if (x->op_parent[j] != i)
			continue;
		if (!nonneg_made(x, j, depth - 1))
			return 0;
		inputs++;
	}
	/* the walk stopped before this op's inputs: not known */
	return inputs > 0;
}

/*
 * The call's first op with a domain that its argument can leave: where autograd recorded
 * domain ops, one that is not a root or log of what is never negative (log(sum(exp(x))):
 * -Inf at 0 at worst, no NaN); else the code's name of one. NULL where none.
 */
static const char *domain_at_risk(const struct evidence_facts *x)
{
	int i, j, seen = 0;

	if (!x || !x->parents || op_in(x, domain_ops) < 0)
		return op_named(x, domain_ops);
	for (i = 0; i < x->nops && i < EVIDENCE_MAX_OPS; i++) {
		int safe = 0;

		if (!in_set(x->ops[i], domain_ops))
			continue;
		seen++;
		for (j = i + 1;
		     in_set(x->ops[i], negative_domain_ops) && j < x->nops && j < EVIDENCE_MAX_OPS;
		     j++)
			if (x->op_parent[j] == i) {
				safe = nonneg_made(x, j, 6);
				break;
			}
		if (!safe)
			return x->ops[i];
	}
	return seen ? NULL : op_named(x, domain_ops);
}

/*
 * A mean the call takes of what it selected by index (x[mask].mean()): its place, or -1; *sel
 * the place of the selection.
 */
static int mean_of_selection(const struct evidence_facts *x, int *sel)
{
	int i;

	for (i = 0; x && x->parents && i < x->nops && i < EVIDENCE_MAX_OPS; i++)
		if (!strcmp(x->ops[i], "mean") && (*sel = input_in(x, i, select_ops)) >= 0)
			return i;
	return -1;
}

/*
 * A std or var the walk saw whose output goes into an add or a clamp (an epsilon before the
 * division), where every std and var it saw does: a spread of 0 is no 0/0 there. Its place,
 * -1 where none (or where one spread goes straight to the division).
 */
static int spread_guarded(const struct evidence_facts *x)
{
	static const char *const spreads[] = {"std", "var", NULL};
	static const char *const guards[] = {"add", "clamp", "clamp_min", NULL};
	int i, p, at = -1;

	for (i = 0; x && x->parents && i < x->nops && i < EVIDENCE_MAX_OPS; i++) {
		if (!in_set(x->ops[i], spreads))
			continue;
		p = x->op_parent[i];
		if (p < 0 || p >= i || !in_set(x->ops[p], guards))
			return -1;
		if (at < 0)
			at = i;
	}
	return at;
}

/* what is 0 where its exp underflows: exp(x) below about -104 in float32, softplus, sigmoid */
static const char *const vanish_ops[] = {"exp", "exp2", "softplus", "sigmoid", NULL};

/*
 * A division (a reciprocal, or a div whose two operands the walk saw: with one, the other
 * is what needs no gradient) of the call by a sum or matrix product of what an exp,
 * softplus or sigmoid made (the walk's edges, through sign-keeping ops), or by a matrix
 * product in a call that takes an exp or softplus the walk reached another way: where every
 * term underflows, that divisor is 0. 1 with *u filled where one is, else 0.
 * Not a softmax written by hand (exp over a sum of exps: Inf/Inf first), nor softmax(x / t).
 */
struct underflow {
	int div;    /* the division's place */
	int sum;    /* the sum or matrix product it divides by */
	int src;    /* the op whose 0 it sums (linked), or the exp the walk reached another way */
	int linked; /* the walk's edges go from the divisor down to src */
};

static int underflow_divisor(const struct evidence_facts *x, struct underflow *u)
{
	static const char *const divs[] = {"div", "reciprocal", NULL};
	static const char *const exps[] = {"exp", "exp2", "softplus", NULL};
	int i, j, k, under, e;

	if (!x || !x->parents || softmax_by_hand(x) || scaled_softmax(x))
		return 0;
	e = op_in(x, exps);
	u->div = -1;
	for (i = 0; i < x->nops && i < EVIDENCE_MAX_OPS; i++) {
		if (!in_set(x->ops[i], divs))
			continue;
		/* a div with one operand in the walk divides it by what needs no gradient */
		for (j = i + 1, k = 0; j < x->nops && j < EVIDENCE_MAX_OPS; j++)
			k += x->op_parent[j] == i;
		if (strcmp(x->ops[i], "reciprocal") && k < 2)
			continue;
		for (j = i + 1; j < x->nops && j < EVIDENCE_MAX_OPS; j++) {
			if (x->op_parent[j] != i || !in_set(x->ops[j], summing_ops))
				continue;
			for (k = j + 1; k < x->nops && k < EVIDENCE_MAX_OPS; k++) {
				if (x->op_parent[k] != j)
					continue;
				/* the term, or what a reshape or product of it keeps */
				under = in_set(x->ops[k], vanish_ops) ? k
					: in_set(x->ops[k], sign_keeping_ops)
						? input_in(x, k, vanish_ops)
						: -1;
				if (under >= 0) {
					*u = (struct underflow){i, j, under, 1};
					return 1;
				}
			}
			/*
			 * the walk names each node once, from the first op it reached it by: an
			 * exp it saw elsewhere may be what this matrix product takes (a plain sum
			 * of a count or a mask is more often what needs no gradient)
			 */
			if (u->div < 0 && e >= 0 && strcmp(x->ops[j], "sum"))
				*u = (struct underflow){i, j, e, 0};
		}
	}
	return u->div >= 0;
}

/* A divisor that the call's exps, softplus or sigmoid underflowed to 0 (underflow_divisor()). */
static void verdict_underflow(const struct diag_anomaly *a, const struct evidence_facts *x,
			      const struct underflow *u, struct diagnosis *g)
{
	const char *div = x->ops[u->div], *sum = x->ops[u->sum], *src = x->ops[u->src];

	if (u->linked)
		evidence(g, "the call divides (%s) by a %s of what %s made", div, sum, src);
	else
		evidence(g,
			 "the call divides (%s) by a %s, and takes %s: where that %s sums what "
			 "the %s made (a kernel exp(-C / eps) summed, as a Sinkhorn iteration "
			 "does), it is 0 when every term underflows",
			 div, sum, src, sum, src);
	evidence(g,
		 "%s is exactly 0 for an argument below about -%.4g in %s (exp underflows): a %s "
		 "whose every term is 0 is 0, x/0 is ±Inf, and 0/0 or Inf * 0 after it NaN",
		 src, -evidence__exp_floor(a->dtype), a->dtype, sum);
	conclude(g, "division_by_zero", agree(1 + u->linked, 0));
	if (u->linked)
		fix(g, "keep the divisor away from 0 (w.sum(dim).clamp_min(1e-12)), or weigh by "
		       "torch.softmax, which subtracts the row's maximum: no row underflows whole");
	else
		fix(g, "work in log space: a sum of exps as torch.logsumexp (a Sinkhorn iteration "
		       "as log u = log a - logsumexp(log K + log v)), or clamp the divisor "
		       "(.clamp_min(1e-30))");
	fix(g, "keep the exponent from falling that far: a larger temperature or epsilon, costs "
	       "or scores scaled down");
}

/*
 * NaN from finite inputs, by the ops the call ran (known only with autograd): a division by
 * a spread, a log of a zero probability, an op outside its domain, a 0/0.
 */
static int rule_nan_ops(const struct diag_anomaly *a, const struct evidence_facts *x,
			const struct signs *s, struct diagnosis *g)
{
	const char *sp = op_named(x, spread_ops), *lg = op_named(x, log_ops);
	const char *dm = domain_at_risk(x), *dv = op_named(x, div_ops);
	const char *un = op_named(x, underflow_ops), *nm = op_named(x, norm_ops);
	const struct tensor_facts *bad_var = NULL;
	int dm_at = op_in(x, domain_ops), i, centred = 0, one_log = -1, guarded, sel;
	struct underflow under;
	int signed_det = 0;
	const char *det;
	const struct tensor_facts *one;
	/* a subtraction on the input side of the domain op, in the walk's order */
	int sub = dm_at >= 0 ? op_before(x, sub_ops, dm_at) : -1;

	if (!ops_known(x) && !code_known(x))
		return 0;
	if ((det = op_named(x, logdet_ops))) {
		/* torch.logdet: slogdet, then where(sign < 0, nan, logabsdet) */
		for (i = 0; i < x->nops && i < EVIDENCE_MAX_OPS && !signed_det; i++)
			signed_det = !strcmp(x->ops[i], "where") && input_in(x, i, logdet_ops) >= 0;
		evidence(g,
			 "the call takes the log of a determinant (%s%s): it is NaN for a matrix "
			 "whose determinant is negative (the log of a negative), -Inf for a "
			 "singular one",
			 det,
			 signed_det ? ", then where: torch.logdet's NaN for a negative sign" : "");
		evidence(g, "an update that takes a parameter matrix through a singular one turns "
			    "its determinant's sign");
		conclude(g, "invalid_domain", agree(1 + signed_det, 0));
		fix(g, "take log|det| as torch.linalg.slogdet(W).logabsdet, what a change of "
		       "variables needs (a flow's log-likelihood takes |det|)");
		logdet_fix(g);
		return 1;
	}
	/* torch's norms keep their statistics as buffers: running_var, running_mean */
	for (i = 0; i < x->n; i++)
		if (x->t[i].role == EVIDENCE_BUFFER && x->t[i].negatives &&
		    strstr(x->t[i].name, "var"))
			bad_var = &x->t[i];
	/* a norm over a running variance gone negative takes sqrt of it: a domain */
	if (sp && (bad_var || s->rare_negative)) {
		if (!bad_var)
			bad_var = s->rare_negative;
		evidence(g, "%s%s holds %llu negative values (min %.4g), where a variance is kept",
			 role_of(bad_var), bad_var->name, (unsigned long long)bad_var->negatives,
			 bad_var->min);
		evidence(g, "%s takes the square root of a variance: of a negative one it is NaN",
			 sp);
		conclude(g, "invalid_domain", agree(2, 0));
		domain_fix(g);
		fix(g, "look for what wrote the negative values into the statistics (a bad update "
		       "or load of the buffers)");
		return 1;
	}
	if (sp && s->one_row && (!strncmp(sp, "std", 3) || !strncmp(sp, "var", 3))) {
		/* its one row is not constant: a spread along it is no 0; along a dimension of 1 */
		evidence(g,
			 "%s%s (%s) is one row of %llu values that are not all equal: a spread "
			 "(%s) along that row is not 0",
			 role_of(s->one_row), s->one_row->name, s->one_row->dtype,
			 (unsigned long long)s->one_row->row_len, sp);
		evidence(g,
			 "along a dimension of one value, the unbiased %s divides by n - 1 = 0: "
			 "NaN, whatever epsilon is added after it",
			 sp);
		conclude(g, "norm_zero_variance", agree(2, 0));
		fix(g, "take the spread with correction=0 (unbiased=False) where its dimension may "
		       "hold one value, or skip the normalisation for a batch of one");
		fix(g, "keep batches of more than one sample (DataLoader drop_last=True)");
		return 1;
	}
	if (sp && (guarded = spread_guarded(x)) >= 0) {
		/* (x - m) / (x.std(0) + eps) is 0 over equal values: the NaN is the std's own */
		sel = op_in(x, select_ops);
		evidence(g,
			 "the call adds to its spread before dividing (%s, then %s): a spread of "
			 "0 gives 0 there, not 0/0",
			 x->ops[guarded], x->ops[x->op_parent[guarded]]);
		evidence(g,
			 "an unbiased %s over one value divides by n - 1 = 0: NaN itself, whatever "
			 "is added after it (torch warns \"degrees of freedom is <= 0\")",
			 x->ops[guarded]);
		if (sel >= 0)
			evidence(g,
				 "the call takes rows by index (%s): a group, class or mask that "
				 "selects one row gives a spread over one value",
				 x->ops[sel]);
		conclude(g, "norm_zero_variance", agree(1 + (sel >= 0), named(a, "Norm", "Std")));
		fix(g, "take the spread with correction=0 (unbiased=False) where its dimension may "
		       "hold one value, or skip the normalisation for a group of one");
		fix(g, "look for groups of one sample at this step (a class seen once in the "
		       "batch, a last batch of one: DataLoader drop_last=True)");
		return 1;
	}
	if (sp) {
		if (s->const_cols)
			evidence(g,
				 "%s%s (%s): %llu of its %llu features (last dimension) are the "
				 "same in every row",
				 role_of(s->const_cols), s->const_cols->name, s->const_cols->dtype,
				 (unsigned long long)s->const_cols->const_cols,
				 (unsigned long long)s->const_cols->row_len);
		evidence(g,
			 "the call divides by a spread (%s): over values that are all equal it is "
			 "0, and 0/0 is NaN",
			 sp);
		conclude(g, "norm_zero_variance",
			 agree(1 + !!s->const_cols, named(a, "Norm", "Standard")));
		fix(g, "add an epsilon to the variance (x.std(dim) + 1e-5, eps=1e-5 in a norm)");
		fix(g, "look for features or rows that are constant across what the norm "
		       "reduces over (a batch of one class, padding)");
		return 1;
	}
	if (lg && s->prob_zeros) {
		verdict_log(s, 2, g);
		evidence(g, "0 * log(0) is NaN");
		return 1;
	}
	if (lg && (one = one_under_log(x, &one_log))) {
		verdict_one_under_log(a, x, one, one_log, g);
		return 1;
	}
	/*
	 * p * log(p) of a p a softmax, exp or sigmoid of the call made (an entropy), from values
	 * so far apart that some p is exactly 0: 0 * log(0) is NaN. The negatives are the logits',
	 * not the log's argument. (Without autograd the code's names say no multiplication.)
	 */
	if (lg && un && s->wide && (op_named(x, mul_ops) || !ops_known(x))) {
		evidence(g,
			 "%s%s spans %.4g (from %.4g to %.4g): exp of its lowest relative to its "
			 "highest is 0 in %s, so %s makes probabilities that are exactly 0",
			 role_of(s->wide), s->wide->name, s->wide->max - s->wide->min, s->wide->min,
			 s->wide->max, s->wide->dtype, un);
		evidence(g,
			 "the call takes %s of what %s made, and multiplies: log(0) is -Inf, and 0 "
			 "times it (p * log p, a label of 0 times it) is NaN",
			 lg, un);
		conclude(g, "loss_log_zero", agree(2, 0));
		if (!strcmp(un, "sigmoid")) {
			fix(g, "take log(sigmoid(x)) as F.logsigmoid(x) and log(1 - sigmoid(x)) as "
			       "F.logsigmoid(-x), or use F.binary_cross_entropy_with_logits");
			fix(g, "use torch.xlogy(y, p), which takes 0 * log(0) as 0");
			return 1;
		}
		fix(g, "compute p * log(p) from log_softmax (p = logp.exp(); p * logp), or use "
		       "torch.special.entr / torch.xlogy, which take 0 * log(0) as 0");
		log_fixes(g);
		return 1;
	}
	if (dm && in_set(dm, unit_ops)) {
		/* negatives are in its domain: what leaves it is a ratio rounding past 1 */
		evidence(g, "%s of a value outside [-1, 1] is NaN (atanh: ±Inf at ±1)", dm);
		if (dv)
			evidence(g,
				 "its argument is a ratio the call made (%s): a cosine or a "
				 "correlation as a dot product over norms can round just past 1",
				 dv);
		conclude(g, "invalid_domain", agree(1 + !!dv, 0));
		unit_fix(g, dm);
		return 1;
	}
	if (dm && !strcmp(dm, "acosh")) {
		/* its domain is [1, Inf): negatives are no sign, a value just below 1 is */
		evidence(g, "acosh of a value below 1 is NaN (its domain is [1, Inf))");
		if (sub >= 0)
			evidence(g,
				 "its argument is made with a subtraction (%s): a hyperbolic "
				 "distance's 1 + 2|u - v|^2 / ((1 - |u|^2)(1 - |v|^2)) falls "
				 "below 1 where a point leaves the unit ball (1 - |u|^2 < 0)",
				 x->ops[sub]);
		conclude(g, "invalid_domain", agree(1 + (sub >= 0), 0));
		fix(g, "clamp the argument: torch.acosh(x.clamp_min(1 + 1e-7))");
		if (sub >= 0)
			fix(g,
			    "keep the points inside the ball: renormalise them after each update "
			    "(w.renorm_(2, 0, 1 - 1e-5)), or use a Riemannian optimizer that "
			    "projects");
		return 1;
	}
	if (dm && dv && root_of_squares(x, &centred) >= 0) {
		/* sqrt(sum(x ** 2)) is no NaN of a negative: the division by it is 0/0 */
		evidence(g,
			 "the call divides (%s) by a sqrt of a sum of squares it made (%s): 0 "
			 "where those values are all %s, and 0/0 is NaN",
			 dv,
			 centred ? "of deviations from a mean: a spread by hand"
				 : "a norm, or a spread by hand",
			 centred ? "equal" : "zero (all equal, if they were centred)");
		conclude(g, "division_by_zero", agree(1 + ops_whole(x), 0));
		fix(g, "add an epsilon to the denominator: a / (b + 1e-8), or b.clamp_min(1e-8) "
		       "(F.normalize and F.cosine_similarity guard it)");
		fix(g, "look for what made those values constant: a collapsed output, a dead "
		       "layer, an all-zero row");
		return 1;
	}
	/* a pow's exponent is not known (a square takes negatives): a divisor gone to 0 first */
	if ((!dm || !strcmp(dm, "pow")) && underflow_divisor(x, &under)) {
		verdict_underflow(a, x, &under, g);
		return 1;
	}
	if (dm) {
		if (s->negative)
			evidence(g, "negative values reach it (%s%s: %llu of %llu, min %.4g)",
				 role_of(s->negative), s->negative->name,
				 (unsigned long long)s->negative->negatives,
				 (unsigned long long)s->negative->numel, s->negative->min);
		if (sub >= 0)
			evidence(
				g,
				"%s's argument comes from a subtraction (%s) made inside the call: "
				"a difference of close large values can round below 0",
				dm, x->ops[sub]);
		evidence(g,
			 "%s of a value outside its domain (a negative under a sqrt or log, a "
			 "fractional power of a negative) is NaN",
			 dm);
		conclude(g, "invalid_domain", agree(1 + (s->negative || sub >= 0), 0));
		domain_fix(g);
		if (sub >= 0)
			fix(g, "compute a variance as the mean of squared deviations ((x - "
			       "x.mean()) ** 2).mean(), or torch.var, not E[x^2] - E[x]^2");
		return 1;
	}
	if (dv && softmax_by_hand(x)) {
		evidence(g,
			 "the call divides an exp by a sum of exps (a softmax by hand, with no "
			 "maximum subtracted): exp(x) is Inf above %.4g in %s, and Inf/Inf is NaN",
			 evidence__exp_limit(a->dtype), a->dtype);
		evidence(g,
			 "(a row whose exps all underflow to 0 gives 0/0 as well: its scores "
			 "are all below -%.4g)",
			 -evidence__exp_floor(a->dtype));
		conclude(g, "exp_overflow", agree(1 + ops_whole(x), 0));
		fix(g, "take torch.softmax(scores, dim) (or log_softmax), which subtracts the row "
		       "maximum first");
		fix(g, "find what made the scores large at this step (the warning events name "
		       "outputs that grew): scale them (by 1/sqrt(d) in attention), lower the "
		       "learning rate, or clip gradients");
		return 1;
	}
	if (dv && scaled_softmax(x)) {
		evidence(g,
			 "the call divides (%s) the scores of a softmax: a divisor of 0 (a "
			 "temperature annealed to 0; a Python number is not captured) makes them "
			 "±Inf, and a softmax of ±Inf is NaN",
			 dv);
		conclude(g, "division_by_zero", agree(ops_whole(x), 0));
		fix(g, "keep the temperature above a floor (tau = max(tau, 0.1)), or anneal "
		       "towards a positive value");
		denominator_fix(g);
		return 1;
	}
	if (dv && nm) {
		evidence(g,
			 "the call divides (%s) and takes a norm (%s): a norm is 0 for a row of "
			 "zeros (a dead ReLU's, padding), and 0/0 is NaN; F.normalize's eps=0 "
			 "leaves it",
			 dv, nm);
		conclude(g, "division_by_zero", agree(1 + ops_whole(x), 0));
		fix(g,
		    "keep the norm away from 0: x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12), "
		    "or F.normalize with its default eps=1e-12");
		fix(g, "look for rows that are all zero reaching it (a layer whose ReLU died, "
		       "padding)");
		return 1;
	}
	if (dv) {
		evidence(g,
			 "the call divides (%s) by a value it made itself: 0/0 (a sum or count "
			 "over nothing) is NaN",
			 dv);
		/* ops on tensors that need no gradient are not seen: one may have made the NaN */
		conclude(g, "division_by_zero", agree(ops_whole(x), 0));
		fix(g, "add an epsilon to the denominator, or clamp it away from 0 (x / "
		       "n.clamp_min(1))");
		fix(g,
		    "look for empty groups (a class missing from the batch, an all-padding row)");
		return 1;
	}
	if (s->prob_zeros) {
		verdict_log(s, 1, g);
		evidence(g, "0 * log(0) is NaN; a log of a tensor that needs no gradient leaves no "
			    "autograd node");
		return 1;
	}
	return 0;
}

/*
 * All-zero rows into a call that divides by a spread or a root mean square (sqrt or rsqrt of
 * a mean): the 0/0 is a norm's zero variance, as the replay calls it from the same ops.
 */
static int rule_zero_spread(const struct diag_anomaly *a, const struct evidence_facts *x,
			    const struct signs *s, struct diagnosis *g)
{
	const char *sp = op_named(x, spread_ops), *root = NULL, *mean = NULL;
	int at = op_in(x, root_ops), before = at >= 0 ? op_before(x, mean_ops, at) : -1;

	if (before >= 0) {
		root = x->ops[at];
		mean = x->ops[before];
	} else if (code_known(x)) {
		/* the code's names have no order, and a "/" is no name: both are taken as there */
		root = op_named(x, root_ops);
		mean = op_named(x, mean_ops);
	}
	if (!(root && mean) && !sp)
		return 0;
	if (op_in(x, div_ops) < 0 && !code_known(x))
		return 0;
	rows_fact(s->zero_rows, s->zero_rows->zero_rows, "all zero", g);
	if (sp)
		evidence(g,
			 "the call divides by a spread (%s): 0 over an all-zero row, and 0/0 is "
			 "NaN",
			 sp);
	else
		evidence(g,
			 "the call divides by a root mean square (%s of a %s): 0 over an all-zero "
			 "row, and 0/0 is NaN",
			 root, mean);
	conclude(g, "norm_zero_variance", agree(2, named(a, "Norm", NULL)));
	fix(g, "add an epsilon inside the norm (x.pow(2).mean(-1, keepdim=True) + 1e-6 under the "
	       "sqrt, eps=1e-5 in a norm)");
	fix(g, "look for empty or all-padding rows reaching this layer");
	return 1;
}

/*
 * A parameter or buffer of one value that is 0 (a temperature or a scale annealed to zero):
 * whatever divides by it is ±Inf, NaN where what it divides is 0, and a softmax or a
 * normalisation over ±Inf is NaN (Inf - Inf, Inf / Inf). Not where the call's whole graph is
 * known and holds no division: a zero scalar is also an ordinary start (a ReZero gate).
 */
static int rule_zero_scalar(const struct evidence_facts *x, struct diagnosis *g)
{
	const struct tensor_facts *t = NULL;
	const char *sm = op_named(x, softmax_ops);
	int i;

	if (ops_whole(x) && op_in(x, div_ops) < 0)
		return 0;
	for (i = 0; i < x->n && !t; i++)
		if (x->t[i].role != EVIDENCE_INPUT && x->t[i].kind == EVIDENCE_FLOAT &&
		    x->t[i].numel == 1 && x->t[i].zeros == 1)
			t = &x->t[i];
	if (!t)
		return 0;
	evidence(g,
		 "%s%s is a single value, 0: a division by it is ±Inf, or NaN where what it "
		 "divides is 0",
		 role_of(t), t->name);
	if (sm)
		evidence(g, "%s over ±Inf values is NaN (Inf - Inf, Inf / Inf)", sm);
	conclude(g, "division_by_zero", agree(1 + !!sm, 0));
	denominator_fix(g);
	fix(g, "give what sets that value (a temperature or scale schedule) a floor above 0");
	return 1;
}

/*
 * A loss over class targets (nll_loss, cross_entropy) made NaN from finite inputs: its mean
 * divides the sum over the targets it counts by their number, or their weights' sum, and over
 * none (every target ignore_index, -100 by default; only classes of weight 0) that is 0/0.
 * Log-probabilities of finite logits are finite, so where nll_loss made the output that is
 * the one way; where only the code names it, an integer input of negatives alone (every
 * target ignored) must say so.
 */
static int rule_empty_mean(const struct evidence_facts *x, struct diagnosis *g)
{
	const struct tensor_facts *t = NULL, *w = NULL;
	const char *op = op_named(x, target_ops);
	int i, made = op_in(x, target_ops) == 0;

	for (i = 0; op && i < x->n; i++) {
		const struct tensor_facts *f = &x->t[i];

		if (!t && f->role == EVIDENCE_INPUT && f->kind == EVIDENCE_INT && f->numel &&
		    f->negatives == f->numel)
			t = f;
		if (!w && f->role != EVIDENCE_INPUT && f->kind == EVIDENCE_FLOAT && f->zeros &&
		    strstr(f->name, "weight"))
			w = f;
	}
	if (!made && !t)
		return 0;
	if (t)
		evidence(g,
			 "%s%s (%s): all %llu values are negative: targets of ignore_index (-100 "
			 "by default), which count for nothing",
			 role_of(t), t->name, t->dtype, (unsigned long long)t->numel);
	if (w)
		zeros_fact(w, g);
	evidence(g,
		 "%s with reduction='mean' divides its sum over the targets it counts by their "
		 "number (or their class weights' sum): over none, 0/0 is NaN",
		 op);
	conclude(g, "division_by_zero", agree(1 + made + !!(t || w), 0));
	ignored_fixes(g);
	return 1;
}

/*
 * A parameter with all-zero rows into weight normalization (nn.utils.weight_norm computes the
 * weight in the call, as g * v / ||v||): the norm of an all-zero slice of v is 0, and 0/0 is
 * NaN. Rows of a parameter are no sign alone (zeros are an ordinary start), so only with the
 * op seen.
 */
static int rule_weight_norm(const struct evidence_facts *x, struct diagnosis *g)
{
	const struct tensor_facts *t = NULL;
	int i, at = op_in(x, vnorm_ops);

	for (i = 0; at >= 0 && i < x->n && !t; i++)
		if (x->t[i].role == EVIDENCE_PARAM && x->t[i].kind == EVIDENCE_FLOAT &&
		    x->t[i].zero_rows)
			t = &x->t[i];
	if (!t)
		return 0;
	rows_fact(t, t->zero_rows, "all zero", g);
	evidence(g,
		 "the call normalizes a weight (%s): each slice of it is divided by its norm, "
		 "which is 0 for an all-zero slice, and 0/0 is NaN",
		 x->ops[at]);
	conclude(g, "division_by_zero", agree(2, 0));
	fix(g, "keep every slice of the direction parameter (weight_v) away from all zero: "
	       "initialise it at random, and prune or zero the magnitude (weight_g) instead");
	fix(g, "where slices may be zero, normalize with an epsilon (v / v.norm(dim=1, "
	       "keepdim=True).clamp_min(1e-12)) in place of nn.utils.weight_norm");
	return 1;
}

/* Output with NaN (and no Inf) from finite inputs. */
/*
 * A mean the call takes of what it selected by index (x[mask].mean()): of nothing, 0/0. Before
 * the zero rows' 0/0: an all-zero mask row is what selects nothing.
 */
static int rule_selection_mean(const struct evidence_facts *x, const struct signs *s,
			       struct diagnosis *g)
{
	const struct tensor_facts *none = s->mask_zero_rows ? s->mask_zero_rows : s->zero_rows;
	int sel = -1, at = mean_of_selection(x, &sel);

	if (at < 0)
		return 0;
	if (none)
		rows_fact(none, none->zero_rows,
			  "all zero (all false as a mask: it selects nothing)", g);
	evidence(g,
		 "the call takes a mean (%s) of what it selected by index (%s, as x[mask].mean()): "
		 "of an empty selection it is 0/0, NaN",
		 x->ops[at], x->ops[sel]);
	conclude(g, "division_by_zero", agree(1 + !!none, 0));
	empty_selection_fixes(g);
	return 1;
}

/* An input with no values (a sequence or batch filtered to nothing): a mean over it is 0/0. */
static int rule_empty_input(const struct evidence_facts *x, const struct signs *s,
			    struct diagnosis *g)
{
	const char *mean = op_named(x, mean_ops);

	if (!s->empty)
		return 0;
	evidence(g,
		 "%s%s (%s) holds no values: a dimension of it is 0 (a sequence, batch or "
		 "selection filtered to nothing)",
		 role_of(s->empty), s->empty->name, s->empty->dtype);
	evidence(g, "a mean over an empty dimension divides a sum of 0 by a count of 0: NaN%s%s",
		 mean ? "; the call takes " : "", mean ? mean : "");
	conclude(g, "division_by_zero", agree(1 + !!mean, 0));
	fix(g, "skip or pad an empty input before this layer (check x.shape[dim] > 0 where the "
	       "batch is built), or divide by the count clamped to 1");
	return 1;
}

static int rule_nan(const struct diag_anomaly *a, const struct evidence_facts *x, struct signs *s,
		    struct diagnosis *g)
{
	static const char *const max_ops[] = {"max", "amax", "logsumexp", NULL};
	int at;

	out_counts(a, g);
	ops_evidence(a, x, g);
	code_evidence(a, x, g);
	if (op_in(x, mask_ops) >= 0 && op_in(x, softmax_ops) >= 0 &&
	    (s->masked || s->mask_zero_rows)) {
		evidence(g, "the call fills a mask into the scores (masked_fill) before a softmax");
		verdict_masked(a, s, 1, g);
		return 1;
	}
	if (op_in(x, mask_ops) >= 0 && (at = op_in(x, max_ops)) >= 0 &&
	    (s->masked || s->mask_zero_rows)) {
		/* a pooling by hand: max or log-sum-exp over what the mask left, of nothing */
		evidence(g,
			 "the call fills a mask into its values (masked_fill) and takes their %s: "
			 "over a row whose every position is filled with -Inf that is -Inf, and "
			 "-Inf - (-Inf) is NaN",
			 x->ops[at]);
		verdict_masked(a, s, 1, g);
		return 1;
	}
	if (s->masked && (s->masked->neginf_rows || !softmax_ruled_out(x))) {
		verdict_masked(a, s, 0, g);
		return 1;
	}
	if (rule_empty_mean(x, g) || rule_selection_mean(x, s, g) || rule_empty_input(x, s, g))
		return 1;
	if (s->masked)
		rows_fact(s->masked, s->masked->true_rows,
			  "all true, but no softmax takes them (a mask of positions to keep, all "
			  "kept?)",
			  g);
	no_exp_taken(x, s, g);
	exp_bounded(x, s, 0, g);
	if (s->exp) {
		evidence(g, "exp of it is +Inf, and Inf/Inf or Inf-Inf after it is NaN");
		verdict_exp(a, s, 1 + (op_in(x, exp_ops) >= 0), g);
		return 1;
	}
	if (rule_weight_norm(x, g))
		return 1;
	if (s->zero_rows && rule_zero_spread(a, x, s, g))
		return 1;
	if (s->zero_rows) {
		verdict_div(a, x, s, 1 + (s->zeros && s->zeros != s->zero_rows), g);
		return 1;
	}
	if (s->const_rows) {
		rows_fact(s->const_rows, s->const_rows->const_rows, "constant (non-zero)", g);
		evidence(g, "a constant row has a variance of 0 but a norm that is not: the layer "
			    "divides by a variance or standard deviation");
		conclude(g, "norm_zero_variance", agree(1, named(a, "Norm", NULL)));
		fix(g, "add an epsilon to the variance (eps=1e-5 in the norm)");
		fix(g, "look for constant or all-zero rows (padding) reaching the norm");
		return 1;
	}
	return rule_nan_ops(a, x, s, g) || rule_zero_scalar(x, g);
}

/* Only weak facts: negatives (sqrt/log of them), or a class name with nothing against it. */
static int rule_weak(const struct diag_anomaly *a, const struct signs *s, struct diagnosis *g)
{
	if (named(a, "Attention", "Attn")) {
		/* a name alone decides nothing: said, with what would confirm it */
		evidence(g, "no zero, constant or above-threshold row among the captured tensors");
		evidence(
			g,
			"attention by its class name, no captured mask with a masked row: one made "
			"inside the layer can be neither seen nor ruled out");
		conclude(g, "unknown", 0.35);
		fix(g, "check the key and attention masks of that step for rows with every key "
		       "masked");
		return 1;
	}
	if (!s->negative)
		return 0;
	if (s->rare_negative)
		evidence(g, "%s%s, otherwise non-negative, holds %llu negative values (min %.4g)",
			 role_of(s->rare_negative), s->rare_negative->name,
			 (unsigned long long)s->rare_negative->negatives, s->rare_negative->min);
	evidence(g,
		 "negative values reach it (%s%s: %llu of %llu, min %.4g) and no zero or "
		 "overflow explains the NaN: sqrt/log/pow of a negative",
		 role_of(s->negative), s->negative->name,
		 (unsigned long long)s->negative->negatives, (unsigned long long)s->negative->numel,
		 s->negative->min);
	conclude(g, "invalid_domain", agree(!!s->rare_negative, 0));
	domain_fix(g);
	return 1;
}

/*
 * A float16 output that overflowed from finite inputs. float16's small range makes an
 * overflow likely, but the dtype alone does not decide: when the captured tensors hold a
 * zero and nothing in the output comes near the range, a log or a divisor is the likelier
 * cause and the value rules judge it.
 */
static int rule_fp16(const struct diag *d, const struct diag_anomaly *a, struct diagnosis *g)
{
	const struct evidence_facts *x = facts_of(d, a);
	double max = dtype__max(NW_DT_F16);
	int near = a->finite_max_abs >= max / 16;
	struct signs s;

	if (strcmp(a->dtype, "float16") || !(a->posinf + a->neginf) || a->inputs_finite != 1)
		return 0;
	read_signs(x, &s);
	if (s.zeros && !near)
		return 0;
	rests(g, "output_values");
	if (x)
		rests(g, "input_values");
	evidence(g, "float16 output of %s overflowed from finite inputs", name(a));
	if (a->finite_max_abs > 0)
		evidence(g, "largest finite |value| %g against the float16 maximum %g",
			 a->finite_max_abs, max);
	if (x && !s.zeros)
		evidence(g,
			 "no zero among the captured inputs: no division or log explains the Inf");
	conclude(g, "fp16_overflow", agree(near + (x && !s.zeros), 0));
	fix(g, "keep this op in float32 (exclude it from autocast, or .float() around it)");
	fix(g, "lower the loss scale (GradScaler init_scale) or scale the inputs down");
	return 1;
}

/* A forward origin: decided by what its captured inputs, parameters and buffers hold. */
static int rule_values(const struct diag *d, const struct diag_anomaly *a, struct diagnosis *g)
{
	const struct evidence_facts *x = facts_of(d, a);
	struct signs s;

	if (a->inputs_finite != 1 || !x)
		return 0;
	read_signs(x, &s);
	if (!s.n)
		return 0;
	rests(g, "input_values");
	/* some ops ran on tensors that need no gradient, unseen: a replay sees them all */
	if (ops_known(x))
		rests(g, ops_whole(x) ? "operations" : "operations_partial");
	if (code_known(x))
		rests(g, "operations_code");
	if (rule_inf(a, x, &s, g) || rule_nan(a, x, &s, g) || rule_weak(a, &s, g))
		return 1;
	evidence(g,
		 "none of its %d captured tensors holds a zero, a negative, a value above "
		 "exp's threshold or a masked row",
		 s.n);
	conclude(g, "unknown", 0.25);
	fix(g, "replay the capture with nanwatch-repro --explain to find the operation");
	return 1;
}

/*
 * A cast to a narrower float type (the op that made the output is to_copy) of a finite value
 * beyond that type's range: the cast is the overflow, whatever grew the value (the data, or
 * updates: a diverging loss is said beside it).
 */
static int rule_cast(const struct diag *d, const struct diag_anomaly *a, struct diagnosis *g)
{
	const struct evidence_facts *x = facts_of(d, a);
	const struct tensor_facts *big = NULL;
	double max;
	int i, start, end;

	if (!a->phase || strcmp(a->phase, "forward") || a->inputs_finite != 1 ||
	    !(a->posinf + a->neginf) || !ops_known(x) || strcmp(x->ops[0], "to_copy"))
		return 0;
	if (!strcmp(a->dtype, "float16"))
		max = dtype__max(NW_DT_F16);
	else if (!strcmp(a->dtype, "bfloat16"))
		max = dtype__max(NW_DT_BF16);
	else
		return 0;
	for (i = 0; i < x->n; i++) {
		const struct tensor_facts *t = &x->t[i];

		if (t->role == EVIDENCE_INPUT && t->kind == EVIDENCE_FLOAT && t->has_finite &&
		    t->max_abs > max && (!big || t->max_abs > big->max_abs))
			big = t;
	}
	if (!big)
		return 0;
	rests(g, "operations");
	rests(g, "input_values");
	out_counts(a, g);
	ops_evidence(a, x, g);
	code_evidence(a, x, g);
	evidence(g,
		 "%s casts %s (%s, largest |value| %.4g) to %s, whose largest finite value is "
		 "%g: the cast makes it Inf",
		 name(a), big->name, big->dtype, big->max_abs, a->dtype, max);
	start = diverging(d, a->iteration, &end);
	if (start >= 0)
		evidence(g,
			 "the loss rose from %.3g at step %llu to %.3g at step %llu: the cast's "
			 "input grew with it (the data or the updates)",
			 loss_at(d, start)->value, (unsigned long long)loss_at(d, start)->step,
			 loss_at(d, end)->value, (unsigned long long)loss_at(d, end)->step);
	conclude(g, "fp16_overflow", agree(2, 0));
	fix(g, "keep this tensor in float32 (no cast to a narrower type, or exclude the op "
	       "from autocast)");
	fix(g, "find what grows the cast's input (scale the data, normalise before the cast)");
	return 1;
}

/* No capture of the call: the output's own counts, and less said. */
static int rule_output(const struct diag_anomaly *a, struct diagnosis *g)
{
	if (a->inputs_finite != 1)
		return 0;
	rests(g, "output_values");
	out_counts(a, g);
	if (a->posinf + a->neginf && a->finite_max_abs > NEAR_OVERFLOW) {
		evidence(g, "finite values next to the Inf reach %g, near the float range",
			 a->finite_max_abs);
		conclude(g, "exp_overflow", 0.45);
		fix(g, "subtract the maximum before exp (as softmax does), or use logsumexp");
		return 1;
	}
	if (a->posinf + a->neginf) {
		evidence(g,
			 "finite values up to %g beside the Inf: not an overflow of large "
			 "values, most likely a division by 0",
			 a->finite_max_abs);
		conclude(g, "division_by_zero", 0.4);
		fix(g, "add an epsilon to the denominator, or clamp it away from 0");
		return 1;
	}
	evidence(g, "its inputs were not captured: 0/0, Inf-Inf and sqrt/log of a negative "
		    "all make NaN (run with --capture-dir and nanwatch-repro --explain)");
	conclude(g, "unknown", 0.25);
	return 1;
}

/* The last DIAG_TREND losses up to the first anomaly's iteration. */
static void trend(const struct diag *d, struct diagnosis *g)
{
	unsigned int i, n = 0, first = d->nlosses;

	for (i = d->nlosses; i-- > 0 && n < DIAG_TREND;) {
		if (loss_at(d, i)->iteration > d->first.iteration)
			continue;
		first = i;
		n++;
	}
	for (i = first; i < d->nlosses && g->ntrend < (int)n; i++)
		if (loss_at(d, i)->iteration <= d->first.iteration)
			g->trend[g->ntrend++] = *loss_at(d, i);
}

static void shift_losses(struct diag_loss *v, unsigned int n, int64_t offset, int source)
{
	unsigned int i;

	for (i = 0; i < n; i++)
		if (counted_since_attach(v[i].step_source) && (int64_t)v[i].step + offset >= 0) {
			v[i].step += offset;
			v[i].step_source = source;
		}
}

void diagnose__shift(struct diag *d, int64_t offset, int source)
{
	unsigned int i;

	shift_losses(d->losses, d->nlosses, offset, source);
	shift_losses(d->early, d->nearly, offset, source);
	/* magnitude marks carry no source: all were counted as the steps then were */
	for (i = 0; i < d->nmarks; i++)
		if ((int64_t)d->marks[i].step + offset >= 0)
			d->marks[i].step += offset;
	if (d->open && !d->done && counted_since_attach(d->first.step_source) &&
	    (int64_t)d->first.step + offset >= 0) {
		d->first.step += offset;
		d->first.step_source = source;
		if (d->scaler_skips)
			d->scaler_from_step += offset;
	}
}

void diagnose__scaler(struct diag *d, uint64_t skips, uint64_t from_step, double scale)
{
	d->scaler_skips = skips;
	d->scaler_from_step = from_step;
	d->scaler_scale = scale;
}

/* The cause each set of ops a code may name makes of finite values, in the order tried. */
static const struct {
	const char *const *ops;
	const char *cause;
} code_causes[] = {
	{exp_ops, "exp_overflow"},
	{div_ops, "division_by_zero"},
	{temperature_ops, "division_by_zero"},
	{spread_ops, "norm_zero_variance"},
	{domain_ops, "invalid_domain"},
	{mask_ops, "attention_fully_masked"},
};

/* The domain ops the maker's code names are all of [-1, 1] (acos, asin, atanh): one, else NULL. */
static const char *units_only(const struct diag_maker *m)
{
	const char *unit = NULL;
	int i;

	for (i = 0; i < m->ncode && i < EVIDENCE_MAX_OPS; i++) {
		if (in_set(m->code_ops[i], domain_ops) && !in_set(m->code_ops[i], unit_ops))
			return NULL;
		if (in_set(m->code_ops[i], unit_ops))
			unit = m->code_ops[i];
	}
	return unit;
}

/* Does the maker's code name an op of set? */
static int maker_named(const struct diag_maker *m, const char *const *set)
{
	int i;

	for (i = 0; i < m->ncode && i < EVIDENCE_MAX_OPS; i++)
		if (in_set(m->code_ops[i], set))
			return 1;
	return 0;
}

/* A Gumbel-softmax's temperature, the one thing of it that divides: what it says and fixes. */
static void verdict_temperature(struct diagnosis *g)
{
	evidence(g, "gumbel_softmax divides the logits plus Gumbel noise by its temperature tau: "
		    "at tau = 0 they are ±Inf (0/0 where they are 0), and the softmax of them NaN "
		    "(a Python number: not captured)");
	fix(g, "keep the temperature above a floor (tau = max(tau, 0.1)), or anneal towards a "
	       "positive value");
}

/*
 * The first anomaly's non-finite input was made by the code of a module holding it, between
 * its calls to its children (struct diag_maker): that module is named, and the ops its
 * forward's code names decide the cause where they fit one cause alone.
 */
static int rule_maker(const struct diag *d, const struct diag_anomaly *a, struct diagnosis *g)
{
	const struct diag_maker *m = &d->maker;
	struct diag_anomaly who = {.layer = m->layer, .outside_model = m->outside_model};
	const char *cause = NULL, *unit;
	struct listing l;
	size_t c;
	int i, fits = 0;

	if (!m->known)
		return 0;
	evidence(g,
		 "the first non-finite output, of %s (%s), had non-finite inputs that no "
		 "module returned",
		 name(a), a->module ? a->module : "?");
	evidence(g,
		 "the code of %s (%s) made them between its calls to its children: it was "
		 "given finite inputs and parameters, and returned %llu NaN, %llu +Inf, %llu -Inf",
		 name(&who), m->module, (unsigned long long)m->nan, (unsigned long long)m->posinf,
		 (unsigned long long)m->neginf);
	for (c = 0; c < sizeof(code_causes) / sizeof(code_causes[0]); c++) {
		int hit = 0;

		for (i = 0; i < m->ncode; i++)
			hit |= in_set(m->code_ops[i], code_causes[c].ops);
		if (hit) {
			fits++;
			cause = code_causes[c].cause;
		}
	}
	rests(g, "operations_code");
	list_begin(&l, "operations the code of %s.forward names:", m->module);
	for (i = 0; i < m->ncode && i < EVIDENCE_MAX_OPS; i++)
		list_add(&l, " %s", m->code_ops[i]);
	list_send(&l, g);
	if (!fits && m->distance_op[0]) {
		/* a "/" names no op: what the code divides by is its distance */
		evidence(g,
			 "the code names %s: a distance is 0 between equal points, and a division "
			 "by it (written with /, which names no op) is ±Inf there, 0/0 NaN",
			 m->distance_op);
		conclude(g, "division_by_zero", 0.4);
		fix(g, "keep the distance away from 0 before dividing by it: 1 / (d + 1e-6), or "
		       "d.clamp_min(1e-6)");
		fix(g, "look for points that coincide (duplicates, padding at the origin), and "
		       "mask a point's distance to itself");
	} else if (!fits && m->group_op[0] && m->nan && !m->posinf && !m->neginf) {
		/* NaN alone, and no op named that makes it: 0/0 of a sum over a count */
		evidence(g,
			 "the code names %s and returned NaN alone, with no op named that makes "
			 "NaN of finite values: a sum divided by a count (written with /, which "
			 "names no op) is 0/0 for a group nothing reached",
			 m->group_op);
		conclude(g, "division_by_zero", 0.35);
		fix(g, "divide by the count clamped to at least 1 (s / n.clamp_min(1)), or add an "
		       "epsilon to it");
		fix(g, "look for empty groups: a node with no neighbours, a segment or a sequence "
		       "with no element, an all-padding row");
	} else if (fits != 1) {
		conclude(g, "unknown", 0.3);
	} else {
		conclude(g, cause, 0.45);
		if (!strcmp(cause, "exp_overflow"))
			exp_fixes(g);
		else if (!strcmp(cause, "division_by_zero") && maker_named(m, temperature_ops))
			verdict_temperature(g);
		else if (!strcmp(cause, "division_by_zero"))
			denominator_fix(g);
		else if (!strcmp(cause, "invalid_domain") && (unit = units_only(m)))
			unit_fix(g, unit);
		else if (!strcmp(cause, "invalid_domain"))
			domain_fix(g);
		else if (!strcmp(cause, "attention_fully_masked"))
			masked_fixes(g);
	}
	fix(g, "look at what the forward of that module computes itself, between its calls to "
	       "its children: the value is made there, in no module of its own");
	return 1;
}

/*
 * A scaler that keeps skipping: the overflow it backs off from is not one of scale. The
 * other rules said what made the first gradient non-finite (their evidence and fixes
 * stay); the cause is that the run no longer trains.
 */
static void rule_scaler(const struct diag *d, struct diagnosis *g)
{
	char rules[DIAG_MAX_EVIDENCE][sizeof(g->evidence[0])];
	const char *mechanism = g->cause;
	int n = g->nevidence, i;

	if (!d->scaler_skips)
		return;
	/* these lines first, then the rules' own, as many as there is room for */
	memcpy(rules, g->evidence, sizeof(rules));
	g->nevidence = 0;
	if (!isnan(d->scaler_scale))
		evidence(g,
			 "the gradient scaler skipped %llu steps in a row from step %llu, its "
			 "scale down to %.3g: the gradients are non-finite at any scale",
			 (unsigned long long)d->scaler_skips,
			 (unsigned long long)d->scaler_from_step, d->scaler_scale);
	else
		evidence(g,
			 "the gradient scaler skipped %llu steps in a row from step %llu: "
			 "backing off does not make the gradients finite",
			 (unsigned long long)d->scaler_skips,
			 (unsigned long long)d->scaler_from_step);
	if (mechanism && strcmp(mechanism, "unknown"))
		evidence(g, "what makes the gradient non-finite: %s", mechanism);
	for (i = 0; i < n && g->nevidence < DIAG_MAX_EVIDENCE; i++)
		memcpy(g->evidence[g->nevidence++], rules[i], sizeof(rules[i]));
	rests(g, "gradient_scaler");
	conclude(g, "scaler_skips_persist", 0.9);
	fix(g, "no parameter is updated while every step is skipped: fix the op that makes "
	       "the gradient non-finite; a lower init_scale does not help");
}

static int conclude_rules(struct diag *d, struct diagnosis *out);

/*
 * The first bad output is a compiled model's (torch.compile: an fx GraphModule running its
 * layers, their parameters among its inputs, or the _orig_mod an OptimizedModule wraps): no
 * layer inside it can be named. Said, with the way to name one, whatever the rules concluded.
 */
static void compiled_note(const struct diag_anomaly *a, struct diagnosis *g)
{
	int graph = a->module && !strcmp(a->module, "GraphModule");

	/* the model an OptimizedModule wraps is its _orig_mod (torch 2.6 names it first) */
	if (!graph && !(a->layer && !strcmp(a->layer, "_orig_mod")))
		return;
	evidence(g,
		 "the model runs compiled (torch.compile): its layers run inside %s, not as "
		 "modules, so the layer inside it that made the value cannot be named",
		 graph ? "one graph (GraphModule) that takes their parameters as inputs"
		       : "the compiled code of _orig_mod");
	fix(g, "to name the layer, rerun without compiling: torch._dynamo.config.disable = True "
	       "(or TORCHDYNAMO_DISABLE=1 in the environment), or torch.compiler.disable on the "
	       "suspect block");
}

int diagnose__conclude(struct diag *d, struct diagnosis *out)
{
	int ret = conclude_rules(d, out);

	if (!ret) {
		compiled_note(&d->first, out);
		rule_scaler(d, out);
	}
	return ret;
}

static int conclude_rules(struct diag *d, struct diagnosis *out)
{
	const struct diag_anomaly *a = &d->first;

	if (!d->open || d->done)
		return -ENOENT;
	memset(out, 0, sizeof(*out));
	out->step = a->step;
	out->iteration = a->iteration;
	copy(out->layer, sizeof(out->layer), a->layer);
	copy(out->module, sizeof(out->module), a->module);
	d->done = 1;
	out->origin_step = -1;
	trend(d, out);
	if (rule_input(d, out) || rule_cast(d, a, out) || rule_lr(d, a, out) ||
	    rule_loss(d, a, out) || rule_backward(d, a, out) || rule_params(d, a, out))
		return 0;
	if (d->top_only) {
		evidence(out,
			 "mode %s checks only the %s: run with --mode full to find the "
			 "layer that made the value",
			 d->loss_only ? "loss" : "sample",
			 d->loss_only ? "loss" : "model's output");
		rests(out, "mode");
		conclude(out, "unknown", 0.2);
		return 0;
	}
	if (rule_fp16(d, a, out) || rule_values(d, a, out) || rule_output(a, out) ||
	    rule_maker(d, a, out))
		return 0;
	evidence(out,
		 "the first non-finite output, of %s, had inputs that were non-finite or "
		 "could not be read, from outside any module seen",
		 name(a));
	rests(out, "output_values");
	conclude(out, "unknown", 0.2);
	return 0;
}
