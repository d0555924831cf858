// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Named events from raw ones: module paths, tensor names, origin, first. */
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "backward.h"
#include "dtype.h"
#include "emit.h"
#include "fpconv.h"
#include "names.h"
#include "params.h"
#include "probe.h"
#include "nwfloat.h"
#include "report.h"
#include "sink.h"

void report__tensor_name(const struct nw_event *ev, char *buf, size_t len)
{
	const char *base = ev->phase == NW_PHASE_LOSS ? "loss" : "output";

	if (ev->phase == NW_PHASE_BACKWARD) {
		if (ev->index0 == NW_NO_INDEX)
			snprintf(buf, len, "grad");
		else
			snprintf(buf, len, "grad[%u]", ev->index0);
		return;
	}
	if (ev->phase == NW_PHASE_LOSS) {
		if (ev->index0 == NW_NO_INDEX)
			snprintf(buf, len, "%s", base);
		else
			snprintf(buf, len, "%s[%u]", base, ev->index0);
		return;
	}
	if (ev->index0 == NW_PARAMS_INDEX)
		snprintf(buf, len, "parameters");
	else if (ev->index0 == NW_NO_INDEX)
		snprintf(buf, len, "output");
	else if (ev->index1 == NW_NO_INDEX)
		snprintf(buf, len, "output[%u]", ev->index0);
	else
		snprintf(buf, len, "output[%u][%u]", ev->index0, ev->index1);
}

int report__inputs_finite(const struct nw_event *ev)
{
	if (ev->inputs_nonfinite)
		return 0;
	return ev->inputs_skipped ? -1 : 1;
}

int report__params_finite(const struct nw_event *ev)
{
	if (ev->params_nonfinite)
		return 0;
	return !ev->params_known || ev->params_skipped ? -1 : 1;
}

static void tristate(struct json *j, const char *key, int v)
{
	if (v < 0)
		json__null(j, key);
	else
		json__bool(j, key, v);
}

/* The module's class as type(m).__name__; buf holds NW_NAME_LEN + 1 bytes. */
static const char *class_of(const struct nw_event *ev, char *buf)
{
	const char *dot;

	memcpy(buf, ev->class_name, NW_NAME_LEN);
	buf[NW_NAME_LEN] = 0;
	/* static types carry their module: "torch.nn.X" -> "X" */
	dot = strrchr(buf, '.');
	return dot ? dot + 1 : buf;
}

static void tensor_fields(struct json *j, const struct nw_event *ev)
{
	char tensor[32];
	__u32 i;

	report__tensor_name(ev, tensor, sizeof(tensor));
	json__string(j, "tensor", tensor);
	json__string(j, "dtype", dtype__name(ev->dtype));
	json__array_begin(j, "shape");
	for (i = 0; i < ev->ndim && i < NW_MAX_DIMS; i++)
		json__uint(j, NULL, ev->shape[i]);
	json__array_end(j);
	json__uint(j, "numel", ev->numel);
	json__uint(j, "nan", ev->nan);
	json__uint(j, "posinf", ev->posinf);
	json__uint(j, "neginf", ev->neginf);
	if (ev->min_key == ~0ULL)
		json__null(j, "finite_min");
	else
		json__element(j, "finite_min", nw_key_bits(ev->min_key, ev->dtype), ev->dtype);
	if (ev->min_key == ~0ULL)
		json__null(j, "finite_max");
	else
		json__element(j, "finite_max", nw_key_bits(ev->max_key, ev->dtype), ev->dtype);
}

/* The fields every anomaly ends with; writes the line. */
static int finish(struct report *r, struct json *j, const struct nw_event *ev)
{
	json__bool(j, "first", r->anomalies == 0);
	json__null(j, "cause");
	json__uint(j, "depth", ev->depth);
	json__uint(j, "scanned", ev->scanned);
	json__string(j, "skipped", ev->flags & NW_SKIP_TRUNCATED ? "truncated" : NULL);
	r->anomalies++;
	r->reported[ev->phase < REPORT_PHASES ? ev->phase : NW_PHASE_FORWARD]++;
	return emit__end(r->e);
}

/*
 * The tensor backward() started from. Its inputs are unknown (it may be
 * computed outside any module); it created the bad value when no module
 * output of the same iteration was reported non-finite before it.
 */
const char *report__step_source(int source)
{
	return source == NW_STEP_OPTIMIZER ? "optimizer_state" : "attach";
}

/* step and iteration, and where each comes from: iteration always counts from the attach */
static void step_fields(struct json *j, uint64_t step, int step_source, uint64_t iteration)
{
	json__uint(j, "step", step);
	json__string(j, "step_source", report__step_source(step_source));
	json__uint(j, "iteration", iteration);
	json__string(j, "iteration_source", "attach");
}

static int loss(struct report *r, const struct nw_event *ev, struct json *j)
{
	json__uint(j, "tid", ev->tid);
	step_fields(j, ev->step, ev->step_source, ev->iteration);
	json__string(j, "phase", "loss");
	json__null(j, "layer");
	json__null(j, "module");
	tensor_fields(j, ev);
	json__null(j, "inputs_finite");
	json__null(j, "params_finite");
	json__null(j, "params_late");
	if (r->loss_only)
		json__null(j, "origin");	/* module outputs were not checked */
	else
		json__bool(j, "origin", r->forward_iter_p1 != ev->iteration + 1);
	return finish(r, j, ev);
}

/*
 * A gradient an autograd node produced (the first non-finite one of its backward pass,
 * whose forward and loss were finite). layer/module: the forward module whose output
 * carried that node as grad_fn, null when the node was made outside any module output.
 */
static int backward(struct report *r, const struct nw_event *ev, struct json *j)
{
	char cls[NW_NAME_LEN + 1];
	const char *path = ev->module ? names__path(r->names, ev->modules[0], ev->module) : NULL;

	json__uint(j, "tid", ev->tid);
	step_fields(j, ev->step, ev->step_source, ev->iteration);
	json__string(j, "phase", "backward");
	json__string(j, "layer", path);
	json__string(j, "module", ev->module ? class_of(ev, cls) : NULL);
	json__string(j, "node", backward__class(r->bwd, ev->node_vptr));
	json__string(j, "consumer", backward__class(r->bwd, ev->consumer_vptr));
	json__uint(j, "input_nr", ev->input_nr);
	json__uint(j, "producers", ev->producers);
	tensor_fields(j, ev);
	/* every gradient the engine handed to a node before this one was finite */
	json__bool(j, "inputs_finite", ev->producers > 0);
	json__null(j, "params_finite");
	json__null(j, "params_late");
	json__bool(j, "origin", ev->producers > 0 && r->forward_iter_p1 != ev->iteration + 1);
	return finish(r, j, ev);
}

/* params: the verdict on the module's own parameters; late: the daemon took it. */
static int anomaly(struct report *r, const struct nw_event *ev, int params, int late)
{
	struct json *j = emit__begin(r->e, "anomaly", ev->time_ns);
	char cls[NW_NAME_LEN + 1];
	const char *path;
	int inputs;

	if (ev->phase == NW_PHASE_LOSS)
		return loss(r, ev, j);
	if (ev->phase == NW_PHASE_BACKWARD)
		return backward(r, ev, j);
	path = names__path(r->names, ev->modules[0], ev->module);
	inputs = report__inputs_finite(ev);
	if (!path)
		r->unnamed++;
	json__uint(j, "tid", ev->tid);
	step_fields(j, ev->step, ev->step_source, ev->iteration);
	json__string(j, "phase", "forward");
	json__string(j, "layer", path);
	json__string(j, "module", class_of(ev, cls));
	tensor_fields(j, ev);
	tristate(j, "inputs_finite", inputs);
	tristate(j, "params_finite", params);
	json__bool(j, "params_late", late);
	/* created here: finite inputs, and no parameter known to be bad */
	if (ev->flags & NW_FLAG_DEEPER)
		json__null(j, "origin");	/* an unchecked call nested in it may have */
	else
		json__bool(j, "origin", inputs == 1 && params != 0);
	json__bool(j, "nested_unchecked", ev->flags & NW_FLAG_DEEPER);
	r->forward_iter_p1 = ev->iteration + 1;
	return finish(r, j, ev);
}

static void note_params(struct report *r, uint64_t root, uint64_t module)
{
	struct nw_params np;

	/* listed even when empty: a module without parameters has none non-finite */
	if (r->set_params && !params__list(r->remote, module, &np)) {
		r->set_params(r->params_ctx, module, &np);
		backward__note_params(r->bwd, root, module, &np);
	}
}

static double max_abs(const struct nw_event *ev)
{
	double lo, hi;

	if (ev->min_key == ~0ULL)
		return 0;
	lo = nw_bits_to_double(nw_key_bits(ev->min_key, ev->dtype), ev->dtype);
	hi = nw_bits_to_double(nw_key_bits(ev->max_key, ev->dtype), ev->dtype);
	lo = lo < 0 ? -lo : lo;
	hi = hi < 0 ? -hi : hi;
	return lo > hi ? lo : hi;
}

static void observe(struct report *r, const struct nw_event *ev, int params)
{
	int loss = ev->phase == NW_PHASE_LOSS, bwd = ev->phase == NW_PHASE_BACKWARD;
	char cls[NW_NAME_LEN + 1];
	struct diag_anomaly a = {
		.step = ev->step, .step_source = ev->step_source, .iteration = ev->iteration,
		.nan = ev->nan,
		.posinf = ev->posinf, .neginf = ev->neginf, .finite_max_abs = max_abs(ev),
		.phase = loss ? "loss" : bwd ? "backward" : "forward",
		.dtype = dtype__name(ev->dtype),
		/* a call nested too deep to be checked may have made it: not this layer's */
		.inputs_finite = loss || (ev->flags & NW_FLAG_DEEPER) ? -1 :
				 bwd ? ev->producers > 0 : report__inputs_finite(ev),
		.params_finite = loss || bwd ? -1 : params,
		.depth = loss || bwd ? 0 : ev->depth,
		.module_id = loss || bwd ? 0 : ev->module,
	};

	if (bwd) {
		a.node = backward__class(r->bwd, ev->node_vptr);
		if (ev->module) {
			a.layer = names__path(r->names, ev->modules[0], ev->module);
			a.module = class_of(ev, cls);
		}
	} else if (!loss) {
		a.layer = names__path(r->names, ev->modules[0], ev->module);
		a.module = class_of(ev, cls);
	}
	if (!a.dtype)
		a.dtype = "";
	if (diagnose__observe(&r->diag, &a))
		report__diagnose(r, ev->iteration);
}

/* The gradient norms of the last backward passes, as diagnosis evidence. */
static void feed_grads(struct report *r)
{
	struct grad_norm gn[DIAG_MAX_GRADS];
	struct diag_grad dg[DIAG_MAX_GRADS];
	int i, n = report__grad_norms(r, gn, DIAG_MAX_GRADS);

	for (i = 0; i < n; i++) {
		dg[i].step = gn[i].step;
		dg[i].iteration = gn[i].iteration;
		dg[i].norm = gn[i].nonfinite ? NAN : gn[i].norm;
	}
	diagnose__grads(&r->diag, dg, n);
}

int report__diagnose(struct report *r, uint64_t iteration)
{
	struct diagnosis g;
	struct json *j;
	int i;

	if (!r->diag.open || r->diag.done || iteration <= r->diag.first.iteration)
		return 0;
	backward__settle(r->bwd, iteration);
	feed_grads(r);
	if (diagnose__conclude(&r->diag, &g))
		return 0;
	j = emit__begin(r->e, "diagnosis", 0);
	step_fields(j, g.step, r->diag.first.step_source, g.iteration);
	json__string(j, "layer", r->diag.first.layer ? g.layer : NULL);
	json__string(j, "module", r->diag.first.module ? g.module : NULL);
	json__string(j, "cause", g.cause);
	json__double(j, "confidence", g.confidence);
	json__array_begin(j, "evidence");
	for (i = 0; i < g.nevidence; i++)
		json__string(j, NULL, g.evidence[i]);
	json__array_end(j);
	json__array_begin(j, "fixes");
	for (i = 0; i < g.nfixes; i++)
		json__string(j, NULL, g.fixes[i]);
	json__array_end(j);
	if (g.origin_step >= 0)
		json__uint(j, "origin_step", (uint64_t)g.origin_step);
	else
		json__null(j, "origin_step");
	json__array_begin(j, "loss_trend");
	for (i = 0; i < g.ntrend; i++) {
		json__object_begin(j, NULL);
		json__uint(j, "step", g.trend[i].step);
		json__uint(j, "iteration", g.trend[i].iteration);
		if (isfinite(g.trend[i].value))
			json__double(j, "loss", g.trend[i].value);
		else
			json__null(j, "loss");
		json__object_end(j);
	}
	json__array_end(j);
	json__string(j, "capture", r->capture);
	return emit__end(r->e);
}

/* A module's output reached a new magnitude: remember it, and warn of a run-up. */
static int magnitude(struct report *r, const struct nw_event *ev)
{
	double value = nw_bits_to_double(ev->max_key, ev->dtype);
	char cls[NW_NAME_LEN + 1], tensor[32], msg[200];
	struct diag_warning w;
	const char *path, *who;
	struct json *j;

	if (!diagnose__mark(&r->diag, ev->module | (ev->index0 == NW_PARAMS_INDEX ? NW_PARAMS_KEY : 0),
			    ev->step, ev->iteration, value, dtype__max(ev->dtype), &w))
		return 0;
	path = names__path(r->names, ev->modules[0], ev->module);
	who = path && *path ? path : class_of(ev, cls);
	report__tensor_name(ev, tensor, sizeof(tensor));
	if (!strcmp(w.reason, "growth"))
		snprintf(msg, sizeof(msg), "max |%s| of %s grew x%.3g per iteration to %.3g: at this "
			 "rate %s overflows in %d iteration%s", tensor, who,
			 w.growth, w.value, dtype__name(ev->dtype), w.iterations_left,
			 w.iterations_left == 1 ? "" : "s");
	else
		snprintf(msg, sizeof(msg), "max |%s| of %s reached %.3g, past the square root of "
			 "the %s range (%.3g): squaring it overflows", tensor, who, w.value, dtype__name(ev->dtype), sqrt(w.limit));
	j = emit__begin(r->e, "warning", ev->time_ns);
	json__uint(j, "tid", ev->tid);
	step_fields(j, ev->step, ev->step_source, ev->iteration);
	json__string(j, "layer", path);
	json__string(j, "module", class_of(ev, cls));
	json__string(j, "tensor", tensor);
	json__string(j, "dtype", dtype__name(ev->dtype));
	json__string(j, "reason", w.reason);
	json__double(j, "max_abs", w.value);
	json__double(j, "dtype_max", w.limit);
	if (w.growth > 0)
		json__double(j, "growth_per_iteration", w.growth);
	else
		json__null(j, "growth_per_iteration");
	if (w.iterations_left >= 0)
		json__int(j, "iterations_to_overflow", w.iterations_left);
	else
		json__null(j, "iterations_to_overflow");
	json__uint(j, "sampled", ev->scanned);
	json__string(j, "message", msg);
	r->warnings++;
	return emit__end(r->e);
}

/*
 * A forward anomaly of a module whose parameters BPF did not have yet (its
 * first call, or its registration record still queued): list them now, read
 * and scan them, and only then look whether an optimizer step has begun since
 * the anomaly (see params__late_verdict). BPF gets the list for the next time.
 */
static int late_params(struct report *r, const struct nw_event *ev)
{
	struct params_reader pr = {.r = r->remote, .l = r->layout, .tensor_type = r->tensor_type};
	struct params_check pc;
	struct nw_params np;
	int read, stepped;

	r->params_late++;
	if (!r->layout || !r->remote || params__list(r->remote, ev->module, &np))
		return -1;
	params__check(&pr, &np, &pc);
	read = pc.nonfinite ? 0 : pc.skipped ? -1 : 1;
	stepped = !r->step_starts || (uint32_t)r->step_starts(r->params_ctx) != ev->step_starts;
	if (r->set_params && !r->set_params(r->params_ctx, ev->module, &np))
		backward__note_params(r->bwd, ev->modules[0], ev->module, &np);
	return params__late_verdict(read, stepped);
}

static int anomaly_event(struct report *r, const struct nw_event *ev)
{
	int late = ev->phase == NW_PHASE_FORWARD && ev->module && !ev->params_known;
	int params = late ? late_params(r, ev) : report__params_finite(ev);

	observe(r, ev, params);
	return anomaly(r, ev, params, late);
}

int report__event(struct report *r, const struct nw_event *ev)
{
	switch (ev->type) {
	case NW_EV_ANOMALY:
		return anomaly_event(r, ev);
	case NW_EV_LOSS:
		diagnose__loss(&r->diag, ev->step, ev->iteration,
			       nw_bits_to_double(ev->min_key, ev->dtype));
		return 0;
	case NW_EV_MAGNITUDE:
		return magnitude(r, ev);
	case NW_EV_MODULE:
		/* name it now, while the target surely still exists */
		r->modules++;
		names__path(r->names, ev->modules[0], ev->module);
		note_params(r, ev->modules[0], ev->module);
		return 0;
	default:
		return 0;
	}
}

static void norm_top(struct report *r, struct json *j, const struct grad_norm *n)
{
	int i;

	json__array_begin(j, "top");
	for (i = 0; i < n->ntop; i++) {
		const struct grad_module *m = &n->top[i];

		json__object_begin(j, NULL);
		json__string(j, "layer", names__path(r->names, m->root, m->module));
		json__double(j, "norm", sqrt(sqrt(m->lo2 * m->hi2)));
		json__object_end(j);
	}
	json__array_end(j);
}

#define TREND 16	/* backward passes shown in stats.grad_norm.trend */

/* a norm over gradients with NaN/Inf in them is not a number: null */
static void norm_value(struct json *j, const char *key, const struct grad_norm *n, double v)
{
	if (n->nonfinite)
		json__null(j, key);
	else
		json__double(j, key, v);
}

/* backward counters, the last pass's gradient norm and the trend of the last ones */
static void grad_stats(struct report *r, struct json *j, const uint64_t c[NW_C_MAX])
{
	struct grad_norm n[TREND];
	int k = backward__norms(r->bwd, n, TREND), i;

	json__object_begin(j, "backward");
	json__uint(j, "nodes", c[NW_C_BWD_NODES]);
	json__uint(j, "grads_scanned", c[NW_C_BWD_GRADS]);
	json__uint(j, "bytes_scanned", c[NW_C_BWD_BYTES]);
	json__uint(j, "anomalies", c[NW_C_BWD_ANOMALIES]);
	json__uint(j, "param_grads", c[NW_C_BWD_PARAM_GRADS]);
	json__uint(j, "norm_skipped", c[NW_C_BWD_NORM_SKIPPED]);
	json__uint(j, "grads_lost", c[NW_C_BWD_GRADS_LOST]);
	json__object_end(j);
	if (!k) {
		json__null(j, "grad_norm");
		return;
	}
	json__object_begin(j, "grad_norm");
	json__uint(j, "iteration", n[k - 1].iteration);
	json__uint(j, "step", n[k - 1].step);
	norm_value(j, "total", &n[k - 1], n[k - 1].norm);
	norm_value(j, "low", &n[k - 1], n[k - 1].low);
	norm_value(j, "high", &n[k - 1], n[k - 1].high);
	json__double(j, "max_abs_low", n[k - 1].max_abs_low);
	json__double(j, "max_abs_high", n[k - 1].max_abs_high);
	json__uint(j, "params", n[k - 1].params);
	json__uint(j, "nonfinite", n[k - 1].nonfinite);
	json__bool(j, "complete", n[k - 1].complete);
	norm_top(r, j, &n[k - 1]);
	json__array_begin(j, "trend");
	for (i = 0; i < k; i++) {
		json__object_begin(j, NULL);
		json__uint(j, "iteration", n[i].iteration);
		json__uint(j, "step", n[i].step);
		norm_value(j, "total", &n[i], n[i].norm);
		norm_value(j, "low", &n[i], n[i].low);
		norm_value(j, "high", &n[i], n[i].high);
		json__bool(j, "complete", n[i].complete);
		json__uint(j, "nonfinite", n[i].nonfinite);
		json__object_end(j);
	}
	json__array_end(j);
	json__object_end(j);
}

int report__grad(struct report *r, const struct nw_grad *g)
{
	backward__grad(r->bwd, g);
	return 0;
}

int report__grad_norms(const struct report *r, struct grad_norm *out, int max)
{
	return backward__norms(r->bwd, out, max);
}

/* a - b, 0 if the counters were read while a program was between its two increments */
static uint64_t minus(uint64_t a, uint64_t b)
{
	return a > b ? a - b : 0;
}

void report__tally(const uint64_t c[NW_C_MAX], const uint64_t reported[REPORT_PHASES],
		   struct report_tally *t)
{
	struct report_phase *f = &t->phase[NW_PHASE_FORWARD], *l = &t->phase[NW_PHASE_LOSS];
	struct report_phase *b = &t->phase[NW_PHASE_BACKWARD];
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
	for (i = 0; i < REPORT_PHASES; i++) {
		t->phase[i].reported = reported[i];
		t->all.found += t->phase[i].found;
		t->all.reported += t->phase[i].reported;
		t->all.suppressed += t->phase[i].suppressed;
		t->all.lost += t->phase[i].lost;
	}
	t->lost_anomaly = t->all.lost;
	t->lost_module = c[NW_C_LOST_MODULE];
	t->lost_mark = c[NW_C_LOST_MARK];
	t->lost_loss = c[NW_C_LOST_LOSS_VALUE];
	t->lost_grad = c[NW_C_BWD_GRADS_LOST];
	t->lost_capture = c[NW_C_LOST_CAPTURE];
	t->lost_for_good = t->lost_anomaly + t->lost_mark + t->lost_loss;
}

static void phase_fields(struct json *j, const char *key, const struct report_phase *p)
{
	json__object_begin(j, key);
	json__uint(j, "found", p->found);
	json__uint(j, "reported", p->reported);
	json__uint(j, "suppressed", p->suppressed);
	json__uint(j, "lost", p->lost);
	json__object_end(j);
}

static void tally_fields(struct json *j, const struct report_tally *t)
{
	json__object_begin(j, "phases");
	phase_fields(j, "forward", &t->phase[NW_PHASE_FORWARD]);
	phase_fields(j, "loss", &t->phase[NW_PHASE_LOSS]);
	phase_fields(j, "backward", &t->phase[NW_PHASE_BACKWARD]);
	json__object_end(j);
	json__object_begin(j, "lost_records");
	json__uint(j, "anomaly", t->lost_anomaly);
	json__uint(j, "module", t->lost_module);
	json__uint(j, "mark", t->lost_mark);
	json__uint(j, "loss", t->lost_loss);
	json__uint(j, "grad", t->lost_grad);
	json__uint(j, "capture", t->lost_capture);
	json__object_end(j);
}

int report__stats(struct report *r, const uint64_t c[NW_C_MAX], uint64_t steps,
		  uint64_t iterations, uint64_t step, int step_source,
		  const struct probe_runtime *rt)
{
	struct json *j = emit__begin(r->e, "stats", 0);
	struct report_tally t;

	json__uint(j, "steps", steps);
	json__uint(j, "iterations", iterations);
	json__uint(j, "step", step);
	json__string(j, "step_source", report__step_source(step_source));
	json__string(j, "iteration_source", "attach");
	json__uint(j, "modules", r->modules);
	json__uint(j, "module_calls", c[NW_C_MODULE_CALLS]);
	json__uint(j, "probe_hits", c[NW_C_PROBE_HITS]);
	json__uint(j, "tensors_scanned", c[NW_C_TENSORS_SCANNED]);
	json__uint(j, "bytes_scanned", c[NW_C_BYTES_SCANNED]);
	json__uint(j, "scan_ns", c[NW_C_SCAN_NS]);
	report__tally(c, r->reported, &t);
	json__uint(j, "anomalies", t.all.found);
	json__uint(j, "reported", t.all.reported);
	json__uint(j, "warnings", r->warnings);
	json__uint(j, "suppressed", t.all.suppressed);
	json__uint(j, "lost", t.all.lost);
	tally_fields(j, &t);
	json__uint(j, "params_late", r->params_late);
	json__object_begin(j, "skipped");
	json__uint(j, "noncontiguous", c[NW_C_SKIP_NONCONTIG]);
	json__uint(j, "device", c[NW_C_SKIP_DEVICE]);
	json__uint(j, "unreadable", c[NW_C_SKIP_UNREADABLE]);
	json__uint(j, "dims", c[NW_C_SKIP_DIMS]);
	json__uint(j, "truncated", c[NW_C_TRUNCATED]);
	json__uint(j, "items", c[NW_C_SKIP_ITEMS]);
	json__object_end(j);
	json__uint(j, "stack_overflow", c[NW_C_STACK_OVERFLOW]);
	json__uint(j, "stack_healed", c[NW_C_STACK_HEALED]);
	json__uint(j, "unanchored", c[NW_C_UNANCHORED]);
	json__object_begin(j, "rescans_avoided");
	json__uint(j, "tensors", c[NW_C_RESCAN_SKIPPED]);
	json__uint(j, "bytes", c[NW_C_RESCAN_BYTES]);
	json__object_end(j);
	if (r->bwd)
		grad_stats(r, j, c);
	if (rt) {
		json__object_begin(j, "bpf");
		json__uint(j, "entry_ns", rt->entry_ns);
		json__uint(j, "entry_runs", rt->entry_runs);
		json__uint(j, "return_ns", rt->return_ns);
		json__uint(j, "return_runs", rt->return_runs);
		json__object_end(j);
	}
	if (r->e->sinks)
		sinks__json(r->e->sinks, j);
	return emit__end(r->e);
}

int report__lost(struct report *r, const uint64_t c[NW_C_MAX])
{
	struct report_tally t;
	struct json *j;

	/* module records are sent again: only what is gone for good is a loss */
	report__tally(c, r->reported, &t);
	if (t.lost_for_good <= r->lost_reported)
		return 0;
	j = emit__begin(r->e, "lost", 0);
	json__uint(j, "count", t.lost_for_good - r->lost_reported);
	json__string(j, "where", "kernel");
	r->lost_reported = t.lost_for_good;
	return emit__end(r->e);
}

int report__record(struct report *r, const void *data, size_t size)
{
	struct nw_event ev;

	if (size < sizeof(ev))
		return 0;	/* not ours: skip, never stop polling for it */
	memcpy(&ev, data, sizeof(ev));
	/* the step word carries where the count came from in its top bits */
	ev.step_source = ev.step >> NW_STEP_SHIFT;
	ev.step &= NW_STEP_MASK;
	return report__event(r, &ev);
}
