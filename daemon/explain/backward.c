// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Backward passes in user space: parameters mapped to their modules, and gradient norms
 * per pass from histograms of |g| with 4 buckets per power of two, so each element is
 * known within a factor 1.25.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "explain/backward.h"
#include "util/htab.h"
#include "resolve/remote.h"
#include "resolve/vtable.h"

#define PARAM_SLOTS 4096 /* parameters mapped to modules */
#define PASS_MODULES 256 /* modules summed in one pass */

/* Where a parameter (keyed by its TensorImpl) belongs. */
struct param_slot {
	uint64_t root, module;
};

struct pass {
	int open;
	uint64_t lost_ref;  /* histograms dropped as the previous pass ended */
	uint64_t lost_last; /* ... as this pass's last one arrived */
	struct grad_norm n;
	double lo2, hi2;
	int nmod;
	struct grad_module mod[PASS_MODULES];
};

struct backward {
	struct vtable_names *vt; /* node classes */
	const struct remote *r;
	int64_t var_tensor;
	struct htab *params; /* TensorImpl -> struct param_slot */
	struct pass cur;
	struct grad_norm hist[BWD_HISTORY];
	int nhist;	   /* total completed passes (ring index = n % BWD_HISTORY) */
	uint64_t lost_end; /* histograms dropped as the last completed pass ended */
};

struct backward *backward__new(struct vtable_names *vt, const struct remote *r, int64_t var_tensor)
{
	struct backward *b;

	if (!vt) {
		errno = EINVAL;
		return NULL;
	}
	b = calloc(1, sizeof(*b));
	if (b && !(b->params = htab__new(sizeof(struct param_slot), PARAM_SLOTS))) {
		free(b);
		b = NULL;
	}
	if (!b) {
		vtable__free(vt);
		errno = ENOMEM;
		return NULL;
	}
	b->vt = vt;
	b->r = r;
	b->var_tensor = var_tensor;
	return b;
}

void backward__free(struct backward *b)
{
	if (!b)
		return;
	vtable__free(b->vt);
	htab__free(b->params);
	free(b);
}

const char *backward__class(struct backward *b, uint64_t vptr)
{
	return b ? vtable__class(b->vt, vptr) : NULL;
}

int backward__op_name(const char *name, char *out, size_t len)
{
	const char *end, *p;
	size_t o = 0;

	if (!name || !len)
		return -EINVAL;
	end = strstr(name, "Backward");
	if (!end || end == name || !(name[0] >= 'A' && name[0] <= 'Z'))
		return -EINVAL;
	for (p = end + strlen("Backward"); *p; p++) /* "Backward0", "Backward1", ... */
		if (*p < '0' || *p > '9')
			return -EINVAL;
	/*
	 * torch names a node by title-casing its op's words, which also capitalises a letter
	 * after a digit: log1p is Log1P, max_pool2d_with_indices MaxPool2DWithIndices, but
	 * smooth_l1_loss SmoothL1Loss. A capital starts a word after a small letter; after a
	 * digit, where a small letter follows it (L1Loss); after a capital that came after a
	 * digit (2DWith). (im2col's Im2Col reads as im2_col: no op a rule knows.)
	 */
	for (p = name; p < end; p++) {
		const unsigned char *u = (const unsigned char *)p;
		int upper = isupper(u[0]), after_lower = 0;

		if (p > name && upper) {
			if (islower(u[-1]))
				after_lower = 1;
			else if (isdigit(u[-1]))
				after_lower = p + 1 < end && islower(u[1]);
			else
				after_lower = p - 1 > name && isupper(u[-1]) && isdigit(u[-2]);
		}
		if (o + 2 + (upper && after_lower) > len)
			return -EINVAL;
		if (upper && after_lower)
			out[o++] = '_';
		out[o++] = upper ? (char)(*p - 'A' + 'a') : *p;
	}
	out[o] = 0;
	return 0;
}

void backward__note_params(struct backward *b, uint64_t root, uint64_t module,
			   const struct nw_params *np)
{
	uint32_t i;

	if (!b)
		return;
	for (i = 0; i < np->n && i < (uint32_t)NW_MAX_PARAMS; i++) {
		struct param_slot *s;
		uint64_t impl;
		int added;

		if (remote__u64(b->r, np->tensors[i] + b->var_tensor, &impl) || !impl)
			continue;
		s = htab__get(b->params, impl, &added);
		if (s && added) {
			s->root = root;
			s->module = module;
		}
	}
}

void backward__hist_bounds(const uint32_t *hist, double *lo2, double *hi2, double *max_lo,
			   double *max_hi, uint64_t *nonfinite)
{
	int i;

	*lo2 = *hi2 = *max_lo = *max_hi = 0;
	*nonfinite = 0;
	for (i = 0; i < NW_HIST_BUCKETS; i++) {
		int e = i >> 2, m = i & 3;
		double lo, hi;

		if (!hist[i])
			continue;
		if (i >= NW_HIST_NONFINITE) {
			*nonfinite += hist[i];
			continue;
		}
		/* exponent 0: zeros and subnormals, below the smallest normal */
		lo = e ? ldexp(1.0 + m / 4.0, e - 127) : 0;
		hi = e ? ldexp(1.0 + (m + 1) / 4.0, e - 127) : ldexp(1.0, -126);
		*lo2 += hist[i] * lo * lo;
		*hi2 += hist[i] * hi * hi;
		*max_lo = lo;
		*max_hi = hi;
	}
}

static void finish_pass(struct backward *b)
{
	struct pass *p = &b->cur;
	struct grad_norm *n = &p->n;
	int i, j;

	if (!p->open)
		return;
	b->lost_end = p->lost_last;
	n->low = sqrt(p->lo2);
	n->high = sqrt(p->hi2);
	n->norm = sqrt(n->low * n->high);
	/* the largest per-module sums of squares, by their geometric mean */
	n->ntop = 0;
	for (i = 0; i < p->nmod; i++) {
		struct grad_module m = p->mod[i];
		double v = sqrt(m.lo2 * m.hi2);

		for (j = n->ntop; j > 0 && sqrt(n->top[j - 1].lo2 * n->top[j - 1].hi2) < v; j--)
			if (j < BWD_MAX_TOP)
				n->top[j] = n->top[j - 1];
		if (j < BWD_MAX_TOP) {
			n->top[j] = m;
			if (n->ntop < BWD_MAX_TOP)
				n->ntop++;
		}
	}
	b->hist[b->nhist % BWD_HISTORY] = *n;
	b->nhist++;
	memset(p, 0, sizeof(*p));
}

void backward__flush(struct backward *b, uint64_t missed)
{
	if (!b)
		return;
	if (missed > b->cur.lost_last) /* its last gradients, maybe */
		b->cur.lost_last = missed;
	b->cur.n.complete = b->cur.lost_ref == b->cur.lost_last;
	finish_pass(b);
}

void backward__settle(struct backward *b, uint64_t iteration)
{
	if (b && b->cur.open && b->cur.n.iteration < iteration)
		backward__flush(b, 0);
}

static void add_module(struct pass *p, uint64_t root, uint64_t module, double lo2, double hi2)
{
	int i;

	for (i = 0; i < p->nmod; i++) {
		if (p->mod[i].module == module && p->mod[i].root == root) {
			p->mod[i].lo2 += lo2;
			p->mod[i].hi2 += hi2;
			return;
		}
	}
	if (p->nmod < PASS_MODULES)
		p->mod[p->nmod++] = (struct grad_module){root, module, lo2, hi2};
}

int backward__grad(struct backward *b, const struct nw_grad *g)
{
	struct pass *p;
	double lo2, hi2, mlo, mhi;
	struct param_slot *s;
	uint64_t nonfinite;
	int done = 0;

	if (!b)
		return 0;
	p = &b->cur;
	if (p->open && p->n.iteration != g->iteration) {
		/* a drop between two passes may have been either's: both are incomplete */
		p->n.complete = p->lost_ref == g->lost;
		finish_pass(b);
		done = 1;
	}
	if (!p->open) {
		p->open = 1;
		p->n.iteration = g->iteration;
		p->n.step = g->step;
		p->lost_ref = b->lost_end;
	}
	p->lost_last = g->lost;
	backward__hist_bounds(g->hist, &lo2, &hi2, &mlo, &mhi, &nonfinite);
	p->lo2 += lo2;
	p->hi2 += hi2;
	if (mhi > p->n.max_abs_high) {
		p->n.max_abs_low = mlo;
		p->n.max_abs_high = mhi;
	}
	p->n.params++;
	p->n.elements += g->scanned;
	p->n.nonfinite += nonfinite;
	s = htab__find(b->params, g->param);
	if (s)
		add_module(p, s->root, s->module, lo2, hi2);
	return done;
}

int backward__norms(const struct backward *b, struct grad_norm *out, int max)
{
	int n, first, i;

	if (!b || max <= 0)
		return 0;
	n = b->nhist < BWD_HISTORY ? b->nhist : BWD_HISTORY;
	if (n > max)
		n = max;
	first = b->nhist - n;
	for (i = 0; i < n; i++)
		out[i] = b->hist[(first + i) % BWD_HISTORY];
	return n;
}
