// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* GPU scan results into findings: held for their gated results, judged, written in order. */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <linux/types.h>
#include "explain/explain.h"
#include "explain/decode.h"
#include "explain/gpures.h"
#include "resolve/names.h"
#include "util/dtype.h"
#include "util/fpconv.h"
#include "util/tpath.h"
#include "nwfloat.h"

static const struct nw_gpu_ctx *ctx_of(const struct nw_gpu_req *req)
{
	return (const struct nw_gpu_ctx *)req->ctx;
}

void gpures__init(struct gpures *g, struct explain *x, struct names *names, const char *kind)
{
	memset(g, 0, sizeof(*g));
	g->x = x;
	g->names = names;
	g->kind = kind;
	g->write = explain__finding;
}

static uint64_t nonfinite(const struct nw_gpu_result *r)
{
	return r->nan + r->posinf + r->neginf;
}

static void tensor_name(const struct nw_gpu_req *req, char *buf, size_t len)
{
	tpath__format(buf, len, req->role == NW_GPU_LOSS ? "loss" : "output", req->index0,
		      req->index1, NULL, 0);
}

static double max_abs(const struct finding *f)
{
	double lo, hi;

	if (!f->has_finite)
		return 0;
	lo = fabs(nw_bits_to_double(f->finite_min_bits, f->dtype));
	hi = fabs(nw_bits_to_double(f->finite_max_bits, f->dtype));
	return lo > hi ? lo : hi;
}

static void class_of(const struct nw_gpu_ctx *c, struct finding *f)
{
	const char *dot;

	memcpy(f->class_buf, c->class_name, NW_NAME_LEN);
	f->class_buf[NW_NAME_LEN] = 0;
	/* static types carry their module: "torch.nn.X" -> "X" */
	dot = strrchr(f->class_buf, '.');
	f->module_class = dot ? dot + 1 : f->class_buf;
}

/* Inputs and parameters: 1 all finite, 0 some not, -1 not all known. */
static void verdicts(const struct nw_gpu_ctx *c, const struct gpures_gated *g, struct finding *f)
{
	int all = g && c->gating && g->got >= c->ngated;

	f->inputs_finite = -1;
	f->params_finite = -1;
	if (f->phase != FINDING_FORWARD)
		return;
	if (g && g->inputs_bad)
		f->inputs_finite = 0;
	else if (all && !g->inputs_unknown && !c->inputs_unknown)
		f->inputs_finite = 1;
	if (g && g->params_bad)
		f->params_finite = 0;
	else if (all && c->params_known && !g->params_unknown && !c->params_unknown)
		f->params_finite = 1;
}

void gpures__finding(const struct nw_gpu_req *req, const struct nw_gpu_result *r,
		     const struct gpures_gated *g, const char *kind, struct names *names,
		     char *devbuf, size_t devlen, struct finding *f)
{
	const struct nw_gpu_ctx *c = ctx_of(req);
	__u32 i;

	memset(f, 0, sizeof(*f));
	f->kind = FINDING_ANOMALY;
	f->phase = req->role == NW_GPU_LOSS ? FINDING_PHASE_LOSS : FINDING_FORWARD;
	if (req->device >= 0)
		snprintf(devbuf, devlen, "%s:%d", kind, req->device);
	else
		snprintf(devbuf, devlen, "%s", kind);
	f->device = devbuf;
	f->tid = req->tid;
	f->step = c->step & NW_STEP_MASK;
	f->step_source = decode__step_source(c->step);
	f->iteration = c->iteration;
	/* parameters were requested with the output: none are read late from the CPU side */
	f->params_known = 1;
	f->nested_unchecked = !!(c->flags & NW_FLAG_DEEPER);
	if (f->phase == FINDING_FORWARD) {
		f->root = c->root;
		f->module = c->module;
		f->depth = c->depth;
		f->layer = names ? names__path(names, c->root, c->module) : NULL;
		class_of(c, f);
	}
	tensor_name(req, f->tensor, sizeof(f->tensor));
	f->dtype = req->dtype;
	f->dtype_name = dtype__name(req->dtype);
	f->ndim = c->ndim < NW_MAX_DIMS ? c->ndim : NW_MAX_DIMS;
	for (i = 0; i < f->ndim; i++)
		f->shape[i] = c->shape[i];
	f->numel = req->numel;
	f->scanned = r->scanned;
	f->nan = r->nan;
	f->posinf = r->posinf;
	f->neginf = r->neginf;
	f->has_finite = r->min_key != ~0ULL && r->min_key <= r->max_key;
	if (f->has_finite) {
		f->finite_min_bits = nw_key_bits(r->min_key, req->dtype);
		f->finite_max_bits = nw_key_bits(r->max_key, req->dtype);
	}
	f->max_abs = max_abs(f);
	verdicts(c, g, f);
}

static int write_one(struct gpures *g, const struct gpures_pending *p)
{
	struct finding f;
	char dev[32];

	gpures__finding(&p->req, &p->res, &p->g, g->kind, g->names, dev, sizeof(dev), &f);
	return g->write(g->x, &f);
}

/* The BPF side's rule: every anomaly of the first bad iteration, then one per iteration. */
static int should_report(struct gpures *g, uint64_t iter, int loss)
{
	if (!g->first_iter_p1)
		g->first_iter_p1 = g->last_iter_p1 = iter + 1;
	if (g->first_iter_p1 == iter + 1)
		return 1;
	if (g->last_iter_p1 != iter + 1) {
		g->last_iter_p1 = iter + 1;
		return 1;
	}
	g->suppressed++;
	g->loss_suppressed += loss;
	return 0;
}

static struct gpures_pending *held(struct gpures *g, uint64_t seq)
{
	int i;

	for (i = 0; i < g->n; i++)
		if (g->p[i].req.seq == seq)
			return &g->p[i];
	return NULL;
}

/* A gated input's or parameter's result, for the output it is gated on. */
static void gated(struct gpures *g, const struct nw_gpu_req *req, const struct nw_gpu_result *r)
{
	struct gpures_pending *p = held(g, req->gate);
	int param = req->role == NW_GPU_PARAM;

	if (!p)
		return; /* its output was finite, or written already */
	p->g.got++;
	if (!(r->flags & NW_GPU_R_SCANNED)) {
		p->g.inputs_unknown += !param;
		p->g.params_unknown += param;
	} else if (nonfinite(r)) {
		p->g.inputs_bad += !param;
		p->g.params_bad += param;
	}
}

static int complete(const struct gpures *g, struct gpures_pending *p)
{
	struct nw_gpu_req again;

	if (!ctx_of(&p->req)->gating && g->reread && !g->reread(g->reread_ctx, p->req.seq, &again))
		p->req = again;
	return ctx_of(&p->req)->gating && p->g.got >= ctx_of(&p->req)->ngated;
}

static void drop_first(struct gpures *g)
{
	memmove(&g->p[0], &g->p[1], (g->n - 1) * sizeof(g->p[0]));
	g->n--;
}

int gpures__flush(struct gpures *g, double now)
{
	while (g->n && (complete(g, &g->p[0]) || now - g->p[0].since >= GPURES_WAIT_S)) {
		write_one(g, &g->p[0]);
		drop_first(g);
	}
	return 0;
}

int gpures__flush_all(struct gpures *g)
{
	return gpures__flush(g, INFINITY);
}

/*
 * The loss's value for the diagnosis's loss trend, as BPF's loss record gives it on the
 * CPU: the library answers every loss request, finite or not; a one-element loss's finite
 * value is its min.
 */
static int loss_value(struct gpures *g, const struct nw_gpu_req *req, const struct nw_gpu_result *r)
{
	const struct nw_gpu_ctx *c = ctx_of(req);
	struct finding f;

	if (req->numel != 1 || r->scanned != 1)
		return 0;
	memset(&f, 0, sizeof(f));
	f.kind = FINDING_LOSS;
	f.step = c->step & NW_STEP_MASK;
	f.iteration = c->iteration;
	if (r->nan)
		f.value = NAN;
	else if (r->posinf || r->neginf)
		f.value = r->posinf ? INFINITY : -INFINITY;
	else if (r->min_key != ~0ULL)
		f.value = nw_bits_to_double(nw_key_bits(r->min_key, req->dtype), req->dtype);
	else
		return 0;
	return g->write(g->x, &f);
}

int gpures__result(struct gpures *g, const struct nw_gpu_req *req, const struct nw_gpu_result *r,
		   double now)
{
	int loss, err;

	if (!req)
		return 0;
	if (req->role == NW_GPU_LOSS && (r->flags & NW_GPU_R_SCANNED)) {
		err = loss_value(g, req, r);
		if (err)
			return err;
	}
	if (req->role == NW_GPU_INPUT || req->role == NW_GPU_PARAM) {
		gated(g, req, r);
		return gpures__flush(g, now);
	}
	if (!(r->flags & NW_GPU_R_SCANNED)) {
		g->not_scanned++;
		return 0;
	}
	if (!nonfinite(r))
		return 0;
	loss = req->role == NW_GPU_LOSS;
	g->found++;
	g->loss_found += loss;
	if (!should_report(g, ctx_of(req)->iteration, loss))
		return 0;
	if (g->n == GPURES_PENDING) {
		write_one(g, &g->p[0]); /* no room to wait longer */
		drop_first(g);
	}
	g->p[g->n] = (struct gpures_pending){.req = *req, .res = *r, .since = now};
	g->n++;
	return gpures__flush(g, now);
}
