// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The stream's event lines from findings: anomaly, warning, diagnosis, stats, lost, error. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <linux/types.h>
#include "output/emit.h"
#include "util/fpconv.h"
#include "nanwatch.h"
#include "output/event.h"
#include "attach/probe.h"
#include "output/sink.h"

const char *output__step_source(int source)
{
	switch (source) {
	case FINDING_STEP_OPTIMIZER:
		return "optimizer_state";
	case FINDING_STEP_BACKWARD:
		return "backward_passes";
	case FINDING_STEP_LOOP:
		return "loop_variable";
	default:
		return "attach";
	}
}

static void tristate(struct json *j, const char *key, int v)
{
	if (v < 0)
		json__null(j, key);
	else
		json__bool(j, key, v);
}

/* step and iteration, and where each comes from: iteration always counts from the attach */
/* step_source, and the loop counter's name when it is one */
static void source_fields(const struct emitter *e, struct json *j, int step_source)
{
	json__string(j, "step_source", output__step_source(step_source));
	if (step_source == FINDING_STEP_LOOP)
		json__string(j, "step_variable", e->step_variable);
}

static void step_fields(const struct emitter *e, struct json *j, uint64_t step, int step_source,
			uint64_t iteration)
{
	json__uint(j, "step", step);
	source_fields(e, j, step_source);
	json__uint(j, "iteration", iteration);
	json__string(j, "iteration_source", "attach");
}

static void tensor_fields(struct json *j, const struct finding *f)
{
	uint32_t i;

	json__string(j, "tensor", f->tensor);
	json__string(j, "dtype", f->dtype_name);
	json__array_begin(j, "shape");
	for (i = 0; i < f->ndim; i++)
		json__uint(j, NULL, f->shape[i]);
	json__array_end(j);
	json__uint(j, "numel", f->numel);
	json__uint(j, "nan", f->nan);
	json__uint(j, "posinf", f->posinf);
	json__uint(j, "neginf", f->neginf);
	if (!f->has_finite)
		json__null(j, "finite_min");
	else
		json__element(j, "finite_min", f->finite_min_bits, f->dtype);
	if (!f->has_finite)
		json__null(j, "finite_max");
	else
		json__element(j, "finite_max", f->finite_max_bits, f->dtype);
}

/* phase loss: no module; origin null when module outputs were not checked */
static void loss_fields(struct json *j, const struct finding *f)
{
	json__string(j, "phase", "loss");
	json__null(j, "layer");
	json__null(j, "module");
	tensor_fields(j, f);
}

/*
 * A gradient an autograd node produced (the first non-finite one of its backward pass,
 * whose forward and loss were finite). layer/module: the innermost forward module call that
 * made the node (bpf/backward.bpf.h), null when it was made outside any module call; op:
 * the forward op it differentiates; upstream: the node that fed it its gradient.
 */
static void backward_fields(struct json *j, const struct finding *f)
{
	json__string(j, "phase", "backward");
	json__string(j, "layer", f->layer);
	json__string(j, "module", f->module_class);
	json__string(j, "node", f->node);
	json__string(j, "op", f->op);
	json__string(j, "upstream", f->upstream);
	json__string(j, "consumer", f->consumer);
	json__uint(j, "input_nr", f->input_nr);
	json__uint(j, "producers", f->producers);
	tensor_fields(j, f);
}

int output__anomaly(struct emitter *e, const struct finding *f, const struct output_verdict *v)
{
	struct json *j = emit__begin(e, "anomaly", f->time_ns);
	int fwd = f->phase == FINDING_FORWARD;

	json__uint(j, "tid", f->tid);
	step_fields(e, j, f->step, f->step_source, f->iteration);
	if (f->phase == FINDING_PHASE_LOSS) {
		loss_fields(j, f);
	} else if (f->phase == FINDING_BACKWARD) {
		backward_fields(j, f);
	} else {
		json__string(j, "phase", "forward");
		json__string(j, "layer", f->layer);
		json__string(j, "module", f->module_class);
		tensor_fields(j, f);
	}
	tristate(j, "inputs_finite", v->inputs_finite);
	tristate(j, "params_finite", v->params_finite);
	tristate(j, "params_late", fwd ? v->params_late : -1);
	tristate(j, "origin", v->origin);
	if (fwd)
		json__bool(j, "nested_unchecked", f->nested_unchecked);
	json__bool(j, "first", v->first);
	if (f->device && strcmp(f->device, "cpu"))
		json__string(j, "device", f->device);
	json__null(j, "cause");
	json__uint(j, "depth", f->depth);
	json__uint(j, "scanned", f->scanned);
	json__string(j, "skipped", f->truncated ? "truncated" : NULL);
	return emit__end(e);
}

static void warning_message(const struct finding *f, const struct diag_warning *w, char *msg,
			    size_t len)
{
	const char *who = f->layer && *f->layer ? f->layer : f->module_class;

	if (!strcmp(w->reason, "growth"))
		snprintf(msg, len,
			 "max |%s| of %s grew x%.3g per iteration to %.3g: at this "
			 "rate %s overflows in %d iteration%s",
			 f->tensor, who, w->growth, w->value, f->dtype_name, w->iterations_left,
			 w->iterations_left == 1 ? "" : "s");
	else
		snprintf(msg, len,
			 "max |%s| of %s reached %.3g, past the square root of "
			 "the %s range (%.3g): squaring it overflows",
			 f->tensor, who, w->value, f->dtype_name, sqrt(w->limit));
}

int output__warning(struct emitter *e, const struct finding *f, const struct diag_warning *w)
{
	struct json *j;
	char msg[200];

	warning_message(f, w, msg, sizeof(msg));
	j = emit__begin(e, "warning", f->time_ns);
	json__uint(j, "tid", f->tid);
	step_fields(e, j, f->step, f->step_source, f->iteration);
	json__string(j, "layer", f->layer);
	json__string(j, "module", f->module_class);
	json__string(j, "tensor", f->tensor);
	json__string(j, "dtype", f->dtype_name);
	json__string(j, "reason", w->reason);
	json__double(j, "max_abs", w->value);
	json__double(j, "dtype_max", w->limit);
	if (w->growth > 0)
		json__double(j, "growth_per_iteration", w->growth);
	else
		json__null(j, "growth_per_iteration");
	if (w->iterations_left >= 0)
		json__int(j, "iterations_to_overflow", w->iterations_left);
	else
		json__null(j, "iterations_to_overflow");
	json__uint(j, "sampled", f->scanned);
	json__string(j, "message", msg);
	return emit__end(e);
}

static void loss_trend(struct json *j, const struct diagnosis *g)
{
	int i;

	json__array_begin(j, "loss_trend");
	for (i = 0; i < g->ntrend; i++) {
		json__object_begin(j, NULL);
		json__uint(j, "step", g->trend[i].step);
		json__uint(j, "iteration", g->trend[i].iteration);
		if (isfinite(g->trend[i].value))
			json__double(j, "loss", g->trend[i].value);
		else
			json__null(j, "loss");
		json__object_end(j);
	}
	json__array_end(j);
}

int output__diagnosis(struct emitter *e, const struct diagnosis *g, int step_source, int has_layer,
		      int has_module, const char *capture)
{
	struct json *j = emit__begin(e, "diagnosis", 0);
	int i;

	step_fields(e, j, g->step, step_source, g->iteration);
	json__string(j, "layer", has_layer ? g->layer : NULL);
	json__string(j, "module", has_module ? g->module : NULL);
	json__string(j, "cause", g->cause);
	json__double(j, "confidence", g->confidence);
	json__array_begin(j, "evidence");
	for (i = 0; i < g->nevidence; i++)
		json__string(j, NULL, g->evidence[i]);
	json__array_end(j);
	json__array_begin(j, "fixes");
	for (i = 0; i < g->nfixes; i++)
		json__string(j, NULL, g->fixes[i]);
	json__array_end(j);
	if (g->origin_step >= 0)
		json__uint(j, "origin_step", (uint64_t)g->origin_step);
	else
		json__null(j, "origin_step");
	loss_trend(j, g);
	json__array_begin(j, "basis");
	for (i = 0; i < g->nbasis && i < DIAG_MAX_BASIS; i++)
		json__string(j, NULL, g->basis[i]);
	json__array_end(j);
	json__string(j, "capture", capture);
	return emit__end(e);
}

static void norm_top(struct json *j, const struct output_stats *s, const struct grad_norm *n)
{
	int i;

	json__array_begin(j, "top");
	for (i = 0; i < n->ntop; i++) {
		const struct grad_module *m = &n->top[i];

		json__object_begin(j, NULL);
		json__string(j, "layer", s->top_layer[i]);
		json__double(j, "norm", sqrt(sqrt(m->lo2 * m->hi2)));
		json__object_end(j);
	}
	json__array_end(j);
}

/* a norm over gradients with NaN/Inf in them is not a number: null */
static void norm_value(struct json *j, const char *key, const struct grad_norm *n, double v)
{
	if (n->nonfinite)
		json__null(j, key);
	else
		json__double(j, key, v);
}

static void norm_trend(struct json *j, const struct output_stats *s)
{
	const struct grad_norm *n = s->norms;
	int i;

	json__array_begin(j, "trend");
	for (i = 0; i < s->nnorms; i++) {
		json__object_begin(j, NULL);
		json__uint(j, "iteration", n[i].iteration);
		json__uint(j, "step", n[i].step);
		norm_value(j, "total", &n[i], n[i].norm);
		norm_value(j, "low", &n[i], n[i].low);
		norm_value(j, "high", &n[i], n[i].high);
		json__bool(j, "complete", n[i].complete);
		json__uint(j, "params", n[i].params);
		json__uint(j, "nonfinite", n[i].nonfinite);
		json__object_end(j);
	}
	json__array_end(j);
}

/* backward counters, the last pass's gradient norm and the trend of the last ones */
static void grad_stats(struct json *j, const struct output_stats *s)
{
	const struct grad_norm *last = s->nnorms ? &s->norms[s->nnorms - 1] : NULL;
	const uint64_t *c = s->c;

	json__object_begin(j, "backward");
	json__uint(j, "nodes", c[NW_C_BWD_NODES]);
	json__uint(j, "grads_scanned", c[NW_C_BWD_GRADS]);
	json__uint(j, "bytes_scanned", c[NW_C_BWD_BYTES]);
	json__uint(j, "copies", c[NW_C_BWD_COPIES]);
	json__uint(j, "anomalies", c[NW_C_BWD_ANOMALIES]);
	json__uint(j, "param_grads", c[NW_C_BWD_PARAM_GRADS]);
	json__uint(j, "norm_skipped", c[NW_C_BWD_NORM_SKIPPED]);
	json__uint(j, "grads_lost", c[NW_C_BWD_GRADS_LOST]);
	json__uint(j, "offloaded", c[NW_C_BWD_OFFLOADED]);
	json__uint(j, "seq_reads", c[NW_C_SEQ_READS]);
	json__object_end(j);
	if (!last) {
		json__null(j, "grad_norm");
		return;
	}
	json__object_begin(j, "grad_norm");
	json__uint(j, "iteration", last->iteration);
	json__uint(j, "step", last->step);
	norm_value(j, "total", last, last->norm);
	norm_value(j, "low", last, last->low);
	norm_value(j, "high", last, last->high);
	json__double(j, "max_abs_low", last->max_abs_low);
	json__double(j, "max_abs_high", last->max_abs_high);
	json__uint(j, "params", last->params);
	json__uint(j, "nonfinite", last->nonfinite);
	json__bool(j, "complete", last->complete);
	norm_top(j, s, last);
	norm_trend(j, s);
	json__object_end(j);
}

static void phase_fields(struct json *j, const char *key, const struct explain_phase *p)
{
	json__object_begin(j, key);
	json__uint(j, "found", p->found);
	json__uint(j, "reported", p->reported);
	json__uint(j, "suppressed", p->suppressed);
	json__uint(j, "lost", p->lost);
	json__uint(j, "in_skipped_steps", p->in_skipped_steps);
	json__object_end(j);
}

static void tally_fields(struct json *j, const struct explain_tally *t)
{
	json__object_begin(j, "phases");
	phase_fields(j, "forward", &t->phase[FINDING_FORWARD]);
	phase_fields(j, "loss", &t->phase[FINDING_PHASE_LOSS]);
	phase_fields(j, "backward", &t->phase[FINDING_BACKWARD]);
	json__object_end(j);
	json__object_begin(j, "lost_records");
	json__uint(j, "anomaly", t->lost_anomaly);
	json__uint(j, "module", t->lost_module);
	json__uint(j, "mark", t->lost_mark);
	json__uint(j, "loss", t->lost_loss);
	json__uint(j, "grad", t->lost_grad);
	json__uint(j, "capture", t->lost_capture);
	json__uint(j, "scaler", t->lost_scaler);
	json__object_end(j);
}

static void scan_fields(struct json *j, const uint64_t *c)
{
	json__object_begin(j, "skipped");
	json__uint(j, "noncontiguous", c[NW_C_SKIP_NONCONTIG]);
	json__uint(j, "device", c[NW_C_SKIP_DEVICE]);
	json__uint(j, "unreadable", c[NW_C_SKIP_UNREADABLE]);
	json__uint(j, "dims", c[NW_C_SKIP_DIMS]);
	json__uint(j, "truncated", c[NW_C_TRUNCATED]);
	json__uint(j, "items", c[NW_C_SKIP_ITEMS]);
	json__uint(j, "dtype", c[NW_C_SKIP_DTYPE]);
	json__object_end(j);
	json__uint(j, "stack_overflow", c[NW_C_STACK_OVERFLOW]);
	json__uint(j, "stack_healed", c[NW_C_STACK_HEALED]);
	json__uint(j, "unanchored", c[NW_C_UNANCHORED]);
	json__object_begin(j, "rescans_avoided");
	json__uint(j, "tensors", c[NW_C_RESCAN_SKIPPED]);
	json__uint(j, "bytes", c[NW_C_RESCAN_BYTES]);
	json__object_end(j);
	json__object_begin(j, "kept_finite");
	json__uint(j, "tensors", c[NW_C_KEPT_FINITE]);
	json__uint(j, "bytes", c[NW_C_KEPT_BYTES]);
	json__object_end(j);
	json__object_begin(j, "norm_checked");
	json__uint(j, "tensors", c[NW_C_NORM_CHECKED]);
	json__uint(j, "bytes", c[NW_C_NORM_BYTES]);
	json__object_end(j);
	json__object_begin(j, "views");
	json__uint(j, "tensors", c[NW_C_VIEWS]);
	json__uint(j, "exact", c[NW_C_VIEWS_EXACT]);
	json__object_end(j);
}

/* GB/s of bytes in ns; null when nothing was timed. */
static void rate_field(struct json *j, const char *key, uint64_t bytes, uint64_t ns)
{
	if (ns)
		json__double(j, key, (double)bytes / (double)ns);
	else
		json__null(j, key);
}

/*
 * How the scans went: the rate of every byte scanned (outputs and gradients: copy and test),
 * the rate of the copies alone where they were timed (each tensor's first chunk; every chunk
 * with --bpf-stats), and how the copies were made.
 */
static void scan_rate_fields(struct json *j, const struct output_stats *s)
{
	const uint64_t *c = s->c;

	json__object_begin(j, "scan");
	json__string(j, "read_method", s->read_method);
	json__uint(j, "bytes", c[NW_C_BYTES_SCANNED] + c[NW_C_BWD_BYTES]);
	json__uint(j, "ns", c[NW_C_SCAN_NS] + c[NW_C_BWD_SCAN_NS]);
	rate_field(j, "gbps", c[NW_C_BYTES_SCANNED] + c[NW_C_BWD_BYTES],
		   c[NW_C_SCAN_NS] + c[NW_C_BWD_SCAN_NS]);
	json__uint(j, "copy_bytes", c[NW_C_COPY_BYTES]);
	json__uint(j, "copy_ns", c[NW_C_COPY_NS]);
	rate_field(j, "copy_gbps", c[NW_C_COPY_BYTES], c[NW_C_COPY_NS]);
	json__uint(j, "task_copies", c[NW_C_TASK_COPIES]);
	json__uint(j, "scratch_taken", c[NW_C_SCRATCH_TAKEN]);
	json__object_end(j);
}

static void runtime_fields(struct json *j, const struct probe_runtime *rt)
{
	json__object_begin(j, "bpf");
	json__uint(j, "entry_ns", rt->entry_ns);
	json__uint(j, "entry_runs", rt->entry_runs);
	json__uint(j, "return_ns", rt->return_ns);
	json__uint(j, "return_runs", rt->return_runs);
	json__uint(j, "loss_ns", rt->loss_ns);
	json__uint(j, "loss_runs", rt->loss_runs);
	json__uint(j, "node_ns", rt->node_ns);
	json__uint(j, "node_runs", rt->node_runs);
	json__uint(j, "step_ns", rt->step_ns);
	json__uint(j, "step_runs", rt->step_runs);
	json__uint(j, "scaler_ns", rt->scaler_ns);
	json__uint(j, "scaler_runs", rt->scaler_runs);
	json__object_end(j);
}

/* The gradient scaler, null if no update of one was seen. */
static void scaler_fields(struct json *j, const struct output_stats *s)
{
	if (!s->scaler_updates) {
		json__null(j, "grad_scaler");
		return;
	}
	json__object_begin(j, "grad_scaler");
	json__uint(j, "updates", s->scaler_updates);
	json__uint(j, "skipped_steps", s->scaler_skipped);
	json__uint(j, "consecutive", s->scaler_run);
	if (isnan(s->scaler_scale))
		json__null(j, "scale");
	else
		json__double(j, "scale", s->scaler_scale);
	json__object_end(j);
}

int output__skipped_step(struct emitter *e, const struct finding *f, const struct output_skip *s)
{
	struct json *j = emit__begin(e, "skipped_step", f->time_ns);
	const struct finding *a = s->first;
	char msg[240], scale[40] = "";

	if (!isnan(f->value))
		snprintf(scale, sizeof(scale), " at scale %.6g", f->value);
	snprintf(msg, sizeof(msg),
		 "the gradient scaler skipped step %llu%s: its scaled gradients were not finite "
		 "(%llu skipped in a row, %llu of %llu updates)",
		 (unsigned long long)f->step, scale, (unsigned long long)s->consecutive,
		 (unsigned long long)s->skipped, (unsigned long long)s->updates);
	json__uint(j, "tid", f->tid);
	step_fields(e, j, f->step, f->step_source, f->iteration);
	if (isnan(f->value))
		json__null(j, "scale");
	else
		json__double(j, "scale", f->value);
	json__uint(j, "consecutive", s->consecutive);
	json__uint(j, "skipped_steps", s->skipped);
	json__uint(j, "anomalies", s->anomalies);
	if (a) {
		json__object_begin(j, "first_gradient");
		json__string(j, "phase", a->phase == FINDING_BACKWARD ? "backward" : "forward");
		json__string(j, "layer", a->layer);
		json__string(j, "module", a->module_class);
		json__string(j, "node", a->node);
		json__string(j, "tensor", a->tensor);
		json__uint(j, "nan", a->nan);
		json__uint(j, "posinf", a->posinf);
		json__uint(j, "neginf", a->neginf);
		json__object_end(j);
	} else {
		json__null(j, "first_gradient");
	}
	json__string(j, "message", msg);
	return emit__end(e);
}

int output__stats(struct emitter *e, const struct output_stats *s)
{
	struct json *j = emit__begin(e, "stats", 0);
	const uint64_t *c = s->c;

	json__uint(j, "steps", s->steps);
	json__uint(j, "iterations", s->iterations);
	json__uint(j, "step", s->step);
	source_fields(e, j, s->step_source);
	json__string(j, "iteration_source", "attach");
	json__uint(j, "modules", s->modules);
	json__uint(j, "module_calls", c[NW_C_MODULE_CALLS]);
	json__uint(j, "probe_hits", c[NW_C_PROBE_HITS]);
	json__uint(j, "return_hits", c[NW_C_RETURN_HITS]);
	json__uint(j, "unarmed", c[NW_C_UNARMED]);
	json__uint(j, "nested_backward", c[NW_C_BWD_NESTED]);
	json__uint(j, "forks", c[NW_C_FORKS]);
	json__uint(j, "forks_cleaned", c[NW_C_FORKS_CLEANED]);
	json__uint(j, "parked", c[NW_C_PARKED]);
	json__uint(j, "tensors_scanned", c[NW_C_TENSORS_SCANNED]);
	json__uint(j, "bytes_scanned", c[NW_C_BYTES_SCANNED]);
	json__uint(j, "scan_ns", c[NW_C_SCAN_NS]);
	json__uint(j, "scan_copies", c[NW_C_SCAN_COPIES]);
	json__uint(j, "anomalies", s->t->all.found);
	json__uint(j, "reported", s->t->all.reported);
	json__uint(j, "warnings", s->warnings);
	json__uint(j, "suppressed", s->t->all.suppressed);
	json__uint(j, "lost", s->t->all.lost);
	json__uint(j, "in_skipped_steps", s->t->all.in_skipped_steps);
	tally_fields(j, s->t);
	scaler_fields(j, s);
	json__uint(j, "params_late", s->params_late);
	scan_fields(j, c);
	scan_rate_fields(j, s);
	if (s->backward)
		grad_stats(j, s);
	if (s->rt)
		runtime_fields(j, s->rt);
	if (s->extra)
		s->extra(j, s->extra_ctx);
	if (e->sinks)
		sinks__json(e->sinks, j);
	return emit__end(e);
}

int output__lost(struct emitter *e, uint64_t count, const char *where, const char *sink)
{
	struct json *j = emit__begin(e, "lost", 0);

	json__uint(j, "count", count);
	json__string(j, "where", where);
	if (sink)
		json__string(j, "sink", sink);
	return emit__end(e);
}

int output__error(struct emitter *e, const char *message)
{
	return output__error_from(e, NULL, message);
}

int output__error_from(struct emitter *e, const char *source, const char *message)
{
	struct json *j = emit__begin(e, "error", 0);

	json__string(j, "message", message);
	if (source)
		json__string(j, "source", source);
	return emit__end(e);
}

int output__attach(struct emitter *e, const struct output_attach *a)
{
	struct json *j = emit__begin(e, "attach", 0);

	json__string(j, "python", a->python);
	json__string(j, "torch", a->torch);
	json__int(j, "probes", a->probes);
	json__string(j, "mode", a->mode);
	json__string(j, "backward", a->backward);
	json__string(j, "backward_layer", a->backward_layer);
	json__null(j, "config");
	json__string(j, "interpreter", a->interpreter);
	json__string(j, "torch_library", a->torch_library);
	json__int(j, "published_offsets", a->published_offsets);
	json__string(j, "gpu", a->gpu ? a->gpu : "none");
	if (a->gpu_message)
		json__string(j, "gpu_message", a->gpu_message);
	json__string(j, "read_method", a->read_method);
	json__string(j, "read_method_why", a->read_why);
	json__string(j, "return_probe", a->return_probe);
	return emit__end(e);
}

int output__detach(struct emitter *e, const struct output_detach *d)
{
	struct json *j = emit__begin(e, "detach", 0);

	json__string(j, "reason", d->reason);
	json__uint(j, "anomalies", d->anomalies);
	json__uint(j, "steps", d->steps);
	json__uint(j, "iterations", d->iterations);
	json__uint(j, "step", d->step);
	source_fields(e, j, d->step_source);
	json__string(j, "iteration_source", "attach");
	return emit__end(e);
}
