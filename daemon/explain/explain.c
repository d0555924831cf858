// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Findings explained: late parameter checks, origin, the diagnosis fed, the lines written. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "explain/backward.h"
#include "util/dtype.h"
#include "output/emit.h"
#include "explain/explain.h"
#include "explain/decode.h"
#include "resolve/names.h"
#include "output/event.h"
#include "resolve/params.h"

static void note_params(struct explain *x, uint64_t root, uint64_t module)
{
	struct nw_params np;

	/* listed even when empty: a module without parameters has none non-finite */
	if (x->set_params && !params__list(x->remote, module, &np)) {
		x->set_params(x->params_ctx, module, &np);
		backward__note_params(x->bwd, root, module, &np);
	}
}

/*
 * A gradient's inputs were finite where every gradient the engine handed on before it was
 * checked (--backward on); with the parameters' alone, not known.
 */
static int inputs_finite(const struct explain *x, const struct finding *f)
{
	if (f->phase == FINDING_BACKWARD && !x->grads_all)
		return -1;
	return f->inputs_finite;
}

static void observe(struct explain *x, const struct finding *f, int params)
{
	int loss = f->phase == FINDING_PHASE_LOSS, bwd = f->phase == FINDING_BACKWARD;
	uint64_t model = !loss && f->layer && !*f->layer && x->model ? x->model(x->params_ctx) : 0;
	struct diag_anomaly a = {
		.step = f->step,
		.step_source = f->step_source,
		.iteration = f->iteration,
		.nan = f->nan,
		.posinf = f->posinf,
		.neginf = f->neginf,
		.finite_max_abs = f->max_abs,
		.phase = loss  ? "loss"
			 : bwd ? "backward"
			       : "forward",
		.dtype = f->dtype_name ? f->dtype_name : "",
		/* a call nested too deep to be checked may have made it: not this layer's */
		.inputs_finite = loss || f->nested_unchecked ? -1 : inputs_finite(x, f),
		.params_finite = loss || bwd ? -1 : params,
		.depth = loss || bwd ? 0 : f->depth,
		.module_id = loss || bwd ? 0 : f->module,
		.node = bwd ? f->node : NULL,
		.op = bwd || loss ? f->op : NULL,
		.upstream = bwd ? f->upstream : NULL,
		.loss = loss && f->loss.n ? &f->loss : NULL,
		.layer = f->module_class ? f->layer : NULL,
		.module = f->module_class,
		.outside_model = model && f->module && f->module != model,
	};

	if (diagnose__observe(&x->diag, &a))
		explain__diagnose(x, f->iteration);
}

/* The gradient norms of the last backward passes, as diagnosis evidence. */
static void feed_grads(struct explain *x)
{
	struct grad_norm gn[DIAG_MAX_GRADS];
	struct diag_grad dg[DIAG_MAX_GRADS];
	int i, n = explain__grad_norms(x, gn, DIAG_MAX_GRADS);

	for (i = 0; i < n; i++) {
		int source = FINDING_STEP_ATTACH;

		dg[i].step = explain__step(x, gn[i].step, &source);
		dg[i].iteration = gn[i].iteration;
		dg[i].norm = gn[i].nonfinite ? NAN : gn[i].norm;
	}
	diagnose__grads(&x->diag, dg, n);
}

int explain__diagnose(struct explain *x, uint64_t iteration)
{
	struct diagnosis g;

	if (!x->diag.open || x->diag.done || iteration <= x->diag.first.iteration)
		return 0;
	/*
	 * Called while an event is handled, its ring read before the gradients': the passes
	 * it closes may have gradients still queued, which would each start a pass of its own.
	 */
	if (x->bwd && x->take_grads)
		x->take_grads(x->params_ctx);
	backward__settle(x->bwd, iteration);
	feed_grads(x);
	/* a module whose own code made the first anomaly's input: what its forward names */
	if (x->code_names && diagnose__maker(&x->diag))
		x->code_names(x->params_ctx, diagnose__maker(&x->diag), diagnose__maker_name,
			      &x->diag);
	if (diagnose__conclude(&x->diag, &g))
		return 0;
	x->cause = g.cause;
	x->cause_step = g.step;
	snprintf(x->cause_layer, sizeof(x->cause_layer), "%s", g.layer);
	x->undiagnosed = x->anomalies;
	return output__diagnosis(x->e, &g, x->diag.first.step_source, !!x->diag.first.layer,
				 !!x->diag.first.module, x->capture);
}

/* A module's output reached a new magnitude: remember it, and warn of a run-up. */
static int magnitude(struct explain *x, const struct finding *f)
{
	uint64_t key = f->module | (f->parameters ? NW_PARAMS_KEY : 0);
	struct diag_warning w;

	if (!diagnose__mark(&x->diag, key, f->layer, f->step, f->iteration, f->value,
			    dtype__max(f->dtype), &w))
		return 0;
	x->warnings++;
	return output__warning(x->e, f, &w);
}

/*
 * A forward anomaly of a module whose parameters BPF did not have yet (its
 * first call, or its registration record still queued): list them now, read
 * and scan them, and only then look whether an optimizer step has begun since
 * the anomaly (see params__late_verdict). BPF gets the list for the next time.
 */
static int late_params(struct explain *x, const struct finding *f)
{
	struct params_reader pr = {.r = x->remote, .l = x->layout, .tensor_type = x->tensor_type};
	struct params_check pc;
	struct nw_params np;
	int read, stepped;

	x->params_late++;
	if (!x->layout || !x->remote || params__list(x->remote, f->module, &np))
		return -1;
	params__check(&pr, &np, &pc);
	read = pc.nonfinite ? 0 : pc.skipped ? -1 : 1;
	stepped = !x->step_starts || (uint32_t)x->step_starts(x->params_ctx) != f->step_starts;
	if (x->set_params && !x->set_params(x->params_ctx, f->module, &np))
		backward__note_params(x->bwd, f->root, f->module, &np);
	return params__late_verdict(read, stepped);
}

/*
 * Whether the anomaly created the bad value: a module output with finite inputs and no
 * parameter known bad (null when an unchecked nested call may have); the loss or a gradient
 * when no module output of the same iteration was reported non-finite before it.
 */
static int origin(const struct explain *x, const struct finding *f, int params)
{
	int fresh = x->forward_iter_p1 != f->iteration + 1;

	if (f->phase == FINDING_PHASE_LOSS)
		return x->loss_only ? -1 : fresh; /* module outputs were not checked */
	if (f->phase == FINDING_BACKWARD)	  /* with the parameters' alone, not known */
		return x->grads_all ? f->producers > 0 && fresh : -1;
	if (f->nested_unchecked)
		return -1;
	return f->inputs_finite == 1 && params != 0;
}

static int anomaly(struct explain *x, const struct finding *f)
{
	int late = f->phase == FINDING_FORWARD && f->module && !f->params_known;
	int params = late ? late_params(x, f) : f->params_finite;
	struct output_verdict v = {
		.inputs_finite = inputs_finite(x, f), .params_finite = params, .params_late = late};

	observe(x, f, params);
	v.origin = origin(x, f, params);
	v.first = x->anomalies == 0;
	if (f->phase == FINDING_FORWARD) {
		if (!f->layer)
			x->unnamed++;
		x->forward_iter_p1 = f->iteration + 1;
	}
	/*
	 * The time the target's thread met it, as the line says: not when this daemon got to
	 * it, which a loaded node delays (across a job, the first rank is the earliest)
	 */
	if (!x->anomalies)
		x->first_time = emit__real_time(x->e, f->time_ns) / 1e9;
	x->anomalies++;
	x->reported[f->phase]++;
	return output__anomaly(x->e, f, &v);
}

/* *dst = *src, with what src points to in its own buffers pointed to in dst's. */
static void finding_copy(struct finding *dst, const struct finding *src)
{
	const char *c = src->module_class;

	*dst = *src;
	if (c && c >= src->class_buf && c < src->class_buf + sizeof(src->class_buf))
		dst->module_class = dst->class_buf + (c - src->class_buf);
	if (src->op && src->op == src->op_buf)
		dst->op = dst->op_buf;
}

static int raw_source(int source)
{
	return source == FINDING_STEP_ATTACH || source == FINDING_STEP_BACKWARD;
}

uint64_t explain__step(const struct explain *x, uint64_t step, int *source)
{
	if (!x->loop_on || !raw_source(*source) || (int64_t)step + x->loop_offset < 0)
		return step;
	*source = FINDING_STEP_LOOP;
	return (uint64_t)((int64_t)step + x->loop_offset);
}

void explain__set_loop(struct explain *x, int on, int64_t offset)
{
	x->loop_on = on;
	x->loop_offset = offset;
	if (on)
		diagnose__shift(&x->diag, offset, FINDING_STEP_LOOP);
}

/* Point a held finding at its own copies again (after it was copied or moved). */
static struct finding *held_finding(struct explain_held *h)
{
	if (h->class_off >= 0)
		h->f.module_class = h->f.class_buf + h->class_off;
	if (h->op_own)
		h->f.op = h->f.op_buf;
	if (h->layer_own)
		h->f.layer = h->layer;
	return &h->f;
}

/* Keep f, and what it points to that a later record may change. */
static void hold_copy(struct explain_held *h, const struct finding *f)
{
	const char *c = f->module_class;

	h->f = *f;
	h->class_off = c && c >= f->class_buf && c < f->class_buf + sizeof(f->class_buf)
			       ? (int)(c - f->class_buf)
			       : -1;
	h->op_own = f->op && f->op == f->op_buf;
	h->layer_own = !!f->layer;
	if (f->layer)
		snprintf(h->layer, sizeof(h->layer), "%s", f->layer);
	held_finding(h);
}

/* Held anomaly i reported after all, as it would have been when it came. */
static int release(struct explain *x, int i)
{
	struct explain_scaler *sc = &x->sc;
	struct explain_held h = sc->held[i];

	memmove(&sc->held[i], &sc->held[i + 1], (sc->nheld - i - 1) * sizeof(sc->held[0]));
	sc->nheld--;
	return anomaly(x, held_finding(&h));
}

void explain__release(struct explain *x, uint64_t iteration)
{
	struct explain_scaler *sc = &x->sc;
	uint64_t hold = sc->updates ? EXPLAIN_HOLD_ITERS : 0;

	/* oldest first: the order they came in */
	while (sc->nheld && sc->held[0].f.iteration + hold < iteration)
		release(x, 0);
}

void explain__release_all(struct explain *x)
{
	while (x->sc.nheld)
		release(x, 0);
}

/*
 * A gradient that went non-finite: until the step's end it may be the overflow a
 * gradient scaler looks for (its update then says the step was skipped). Held till
 * then; the oldest is reported when there is no room.
 */
static int hold(struct explain *x, const struct finding *f)
{
	struct explain_scaler *sc = &x->sc;

	if (sc->nheld == EXPLAIN_HELD)
		release(x, 0);
	hold_copy(&sc->held[sc->nheld++], f);
	return 0;
}

/* Persistent skipping: its first anomaly reported, the incident's cause told why. */
static int skips_persist(struct explain *x)
{
	struct explain_scaler *sc = &x->sc;
	struct explain_held h = sc->run_first;

	sc->incident = 1;
	diagnose__scaler(&x->diag, sc->run, sc->run_start_step, sc->scale);
	if (!sc->has_run_first)
		return 0;
	sc->folded[h.f.phase]--; /* reported after all */
	return anomaly(x, held_finding(&h));
}

/*
 * A gradient scaler's update. A skipped step: the anomalies held were the overflow it
 * skipped (counted, not reported); a skip line; an incident once the skipping persists:
 * EXPLAIN_SKIP_RUN steps in a row, or a scale of 1 or less (the gradients are non-finite
 * unscaled: no scale helps). A step it let run: the anomalies held are reported.
 */
static int scaler_update(struct explain *x, const struct finding *f)
{
	struct explain_scaler *sc = &x->sc;
	struct output_skip o = {0};
	int i, ret = 0;

	sc->updates++;
	if (!f->skipped) {
		sc->run = 0;
		sc->has_run_first = 0;
		sc->scale = f->value;
		explain__release_all(x);
		return 0;
	}
	sc->skipped++;
	if (!sc->run++) {
		sc->run_start_step = f->step;
		sc->run_start_source = f->step_source;
	}
	sc->scale = f->value;
	for (i = 0; i < sc->nheld; i++)
		sc->folded[sc->held[i].f.phase]++;
	if (sc->nheld && !sc->has_run_first) {
		sc->run_first = sc->held[0];
		sc->has_run_first = 1;
	}
	o.anomalies = sc->nheld;
	o.first = sc->nheld ? held_finding(&sc->held[0]) : NULL;
	o.consecutive = sc->run;
	o.skipped = sc->skipped;
	o.updates = sc->updates;
	if (!sc->incident) {
		sc->events++;
		ret = output__skipped_step(x->e, f, &o);
	}
	sc->nheld = 0;
	if (!sc->incident && (sc->run >= EXPLAIN_SKIP_RUN || (!isnan(f->value) && f->value <= 1)))
		ret |= skips_persist(x);
	return ret;
}

int explain__finding(struct explain *x, const struct finding *raw)
{
	const struct finding *f = raw;
	struct finding t;

	if (x->loop_on && raw_source(raw->step_source)) {
		finding_copy(&t, raw);
		t.step = explain__step(x, raw->step, &t.step_source);
		f = &t;
	}
	if (f->kind != FINDING_SCALER && f->kind != FINDING_NONE)
		explain__release(x, f->iteration);
	switch (f->kind) {
	case FINDING_ANOMALY:
		if (f->phase == FINDING_BACKWARD)
			return hold(x, f);
		return anomaly(x, f);
	case FINDING_SCALER:
		return scaler_update(x, f);
	case FINDING_LOSS:
		diagnose__loss(&x->diag, f->step, f->step_source, f->iteration, f->value);
		return 0;
	case FINDING_MAGNITUDE:
		return magnitude(x, f);
	case FINDING_MODULE:
		/* named by the decode, while the target surely still exists */
		x->modules++;
		note_params(x, f->root, f->module);
		if (x->new_module)
			x->new_module(x->params_ctx, f->module);
		return 0;
	default:
		return 0;
	}
}

int explain__record(struct explain *x, const void *data, size_t size)
{
	struct finding f;

	if (explain__decode(data, size, x->names, x->bwd, &f))
		return 0; /* not ours: skip, never stop polling for it */
	return explain__finding(x, &f);
}

int explain__grad(struct explain *x, const struct nw_grad *g)
{
	backward__grad(x->bwd, g);
	return 0;
}

int explain__grad_norms(const struct explain *x, struct grad_norm *out, int max)
{
	return backward__norms(x->bwd, out, max);
}

/* a - b, 0 if the counters were read while a program was between its two increments */
static uint64_t minus(uint64_t a, uint64_t b)
{
	return a > b ? a - b : 0;
}

static void tally_lost(const uint64_t c[NW_C_MAX], struct explain_tally *t)
{
	t->lost_anomaly = t->all.lost;
	t->lost_module = c[NW_C_LOST_MODULE];
	t->lost_mark = c[NW_C_LOST_MARK];
	t->lost_loss = c[NW_C_LOST_LOSS_VALUE];
	t->lost_grad = c[NW_C_BWD_GRADS_LOST];
	t->lost_capture = c[NW_C_LOST_CAPTURE];
	t->lost_scaler = c[NW_C_LOST_SCALER];
	t->lost_for_good = t->lost_anomaly + t->lost_mark + t->lost_loss;
}

void explain__tally(const uint64_t c[NW_C_MAX], const uint64_t reported[FINDING_PHASES],
		    struct explain_tally *t)
{
	struct explain_phase *f = &t->phase[FINDING_FORWARD], *l = &t->phase[FINDING_PHASE_LOSS];
	struct explain_phase *b = &t->phase[FINDING_BACKWARD];
	int i;

	memset(t, 0, sizeof(*t));
	l->found = c[NW_C_LOSS_FOUND];
	l->suppressed = c[NW_C_LOSS_SUPPRESSED];
	l->lost = c[NW_C_LOST_LOSS];
	f->found = minus(c[NW_C_ANOMALIES], l->found);
	f->suppressed = minus(c[NW_C_SUPPRESSED], l->suppressed);
	f->lost = c[NW_C_LOST_FORWARD];
	b->found = c[NW_C_BWD_ANOMALIES];
	b->suppressed = c[NW_C_BWD_SUPPRESSED];
	b->lost = c[NW_C_LOST_BACKWARD];
	for (i = 0; i < FINDING_PHASES; i++) {
		t->phase[i].reported = reported[i];
		t->all.found += t->phase[i].found;
		t->all.reported += t->phase[i].reported;
		t->all.suppressed += t->phase[i].suppressed;
		t->all.lost += t->phase[i].lost;
	}
	tally_lost(c, t);
}

#define TREND 16 /* backward passes shown in stats.grad_norm.trend */

int explain__stats(struct explain *x, const uint64_t c[NW_C_MAX], uint64_t steps,
		   uint64_t iterations, uint64_t step, int step_source,
		   const struct probe_runtime *rt)
{
	struct grad_norm n[TREND];
	struct explain_tally t;
	struct output_stats s = {
		.c = c,
		.steps = steps,
		.iterations = iterations,
		.step = step,
		.step_source = step_source,
		.modules = x->modules,
		.warnings = x->warnings,
		.params_late = x->params_late,
		.t = &t,
		.backward = !!x->bwd,
		.norms = n,
		.rt = rt,
		.extra = x->stats_extra,
		.extra_ctx = x->stats_ctx,
		.read_method = x->read_method,
	};
	int i;

	explain__tally(c, x->reported, &t);
	for (i = 0; i < FINDING_PHASES; i++) {
		t.phase[i].in_skipped_steps = x->sc.folded[i];
		t.all.in_skipped_steps += x->sc.folded[i];
	}
	s.scaler_updates = x->sc.updates;
	s.scaler_skipped = x->sc.skipped;
	s.scaler_run = x->sc.run;
	s.scaler_scale = x->sc.scale;
	s.nnorms = x->bwd ? backward__norms(x->bwd, n, TREND) : 0;
	s.step = explain__step(x, step, &s.step_source);
	for (i = 0; i < s.nnorms; i++) {
		int source = FINDING_STEP_ATTACH;

		n[i].step = explain__step(x, n[i].step, &source);
	}
	for (i = 0; s.nnorms && i < n[s.nnorms - 1].ntop; i++)
		s.top_layer[i] = names__path(x->names, n[s.nnorms - 1].top[i].root,
					     n[s.nnorms - 1].top[i].module);
	return output__stats(x->e, &s);
}

int explain__lost(struct explain *x, const uint64_t c[NW_C_MAX])
{
	struct explain_tally t;
	uint64_t n;

	/* module records are sent again: only what is gone for good is a loss */
	explain__tally(c, x->reported, &t);
	if (t.lost_for_good <= x->lost_reported)
		return 0;
	n = t.lost_for_good - x->lost_reported;
	x->lost_reported = t.lost_for_good;
	return output__lost(x->e, n, "kernel", NULL);
}
