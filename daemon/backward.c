// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Backward pass, user-space side. A node's class comes from its vtable pointer: the
 * _ZTV symbol of libtorch_cpu that it points into (vtable_offset bytes past the symbol,
 * after the offset-to-top and typeinfo words). Gradient norms come from histograms of
 * |g| with 4 buckets per power of two, so each element is known within a factor 1.25.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "backward.h"
#include "elfsym.h"
#include "layout.h"
#include "remote.h"

#define CLASS_CACHE 64
#define PARAM_SLOTS 4096	/* parameters mapped to modules (open addressing) */
#define PASS_MODULES 256	/* modules summed in one pass */

struct class_entry {
	uint64_t vptr;
	char name[64];		/* "" : looked up, not found */
};

struct param_slot {
	uint64_t impl, root, module;
};

struct pass {
	int open;
	uint64_t lost_ref;	/* histograms dropped as the previous pass ended */
	uint64_t lost_last;	/* ... as this pass's last one arrived */
	struct grad_norm n;
	double lo2, hi2;
	int nmod;
	struct grad_module mod[PASS_MODULES];
};

struct backward {
	struct elfsym *elf;	/* libtorch_cpu, open from the attach: the target may be gone later */
	uint64_t bias;		/* runtime address - link-time address */
	int64_t vtable_offset;
	const struct remote *r;
	int64_t var_tensor;
	struct class_entry cls[CLASS_CACHE];
	int ncls;
	struct param_slot params[PARAM_SLOTS];
	struct pass cur;
	struct grad_norm hist[BWD_HISTORY];
	int nhist;		/* total completed passes (ring index = n % BWD_HISTORY) */
	uint64_t lost_end;	/* histograms dropped as the last completed pass ended */
};

int backward__layout(const struct layout *tl, const char *torch_cpu_file, uint64_t base,
		     struct nw_bwd_layout *out, char *sym, size_t symlen, char *err,
		     size_t errlen)
{
	const char *node = layout__str(tl, LK_node_symbol);
	const char *acc = layout__str(tl, LK_acc_vtable_symbol);
	struct nw_bwd_layout bl = {};
	long long voff = 0;
	uint64_t addr, first;
	struct elfsym *e;
	int ret;

	if (!node || !acc)
		return -ENOENT;
	ret = layout__fill_bwd(tl, &bl, err, errlen);
	if (!ret && layout__int(tl, LK_vtable_offset, &voff)) {
		snprintf(err, errlen, "key vtable_offset: missing");
		ret = -ENOENT;
	}
	if (ret)
		return ret;
	if (strlen(node) >= symlen) {
		snprintf(err, errlen, "node_symbol too long");
		return -ENAMETOOLONG;
	}
	e = torch_cpu_file[0] && base ? elfsym__open(torch_cpu_file) : NULL;
	if (!e) {
		snprintf(err, errlen, "failed to open the target's libtorch_cpu");
		return -ENOENT;
	}
	ret = elfsym__find(e, acc, &addr) ?: elfsym__first_load(e, &first);
	elfsym__close(e);
	if (ret) {
		snprintf(err, errlen, "no symbol %.80s in %.200s", acc, torch_cpu_file);
		return ret;
	}
	bl.acc_vptr = base - first + addr + voff;
	strcpy(sym, node);
	*out = bl;
	return 0;
}

struct backward *backward__new(const char *torch_cpu_file, uint64_t base, int64_t vtable_offset,
			       const struct remote *r, int64_t var_tensor)
{
	struct backward *b;
	struct elfsym *e;
	uint64_t first;

	e = elfsym__open(torch_cpu_file);
	if (!e)
		return NULL;
	if (elfsym__first_load(e, &first)) {
		elfsym__close(e);
		errno = ENOEXEC;
		return NULL;
	}
	b = calloc(1, sizeof(*b));
	if (!b) {
		elfsym__close(e);
		errno = ENOMEM;
		return NULL;
	}
	b->elf = e;
	b->bias = base - first;
	b->vtable_offset = vtable_offset;
	b->r = r;
	b->var_tensor = var_tensor;
	return b;
}

void backward__free(struct backward *b)
{
	if (!b)
		return;
	elfsym__close(b->elf);
	free(b);
}

/* <len><id>: the identifier at *p, advancing past it; NULL if malformed. */
static const char *source_name(const char **p, size_t *n)
{
	char *end;
	unsigned long len = strtoul(*p, &end, 10);
	const char *id = end;

	if (end == *p || !len || strlen(id) < len)
		return NULL;
	*n = len;
	*p = id + len;
	return id;
}

int backward__vtable_class(const char *sym, char *out, size_t len)
{
	const char *p = sym + 4, *id = NULL, *last = NULL;
	size_t n = 0, lastn = 0;

	if (strncmp(sym, "_ZTV", 4))
		return -EINVAL;
	if (*p == 'N') {
		p++;
		while (*p && *p != 'E') {
			id = source_name(&p, &n);
			if (!id)
				return -EINVAL;
			last = id;
			lastn = n;
		}
		if (*p != 'E')
			return -EINVAL;
	} else {
		last = source_name(&p, &lastn);
	}
	if (!last || lastn >= len)
		return -EINVAL;
	memcpy(out, last, lastn);
	out[lastn] = 0;
	return 0;
}

struct find_ctx {
	uint64_t want;
	char *out;
	size_t len;
};

static int find_cb(const char *name, uint64_t addr, void *ctx)
{
	struct find_ctx *f = ctx;

	if (addr != f->want)
		return 0;
	return backward__vtable_class(name, f->out, f->len) ? 0 : 1;
}

const char *backward__class(struct backward *b, uint64_t vptr)
{
	struct find_ctx f;
	struct class_entry *c;
	int i;

	if (!b || !vptr)
		return NULL;
	for (i = 0; i < b->ncls; i++)
		if (b->cls[i].vptr == vptr)
			return b->cls[i].name[0] ? b->cls[i].name : NULL;
	c = &b->cls[b->ncls < CLASS_CACHE ? b->ncls++ : CLASS_CACHE - 1];
	c->vptr = vptr;
	c->name[0] = 0;
	f.want = vptr - b->vtable_offset - b->bias;
	f.out = c->name;
	f.len = sizeof(c->name);
	if (elfsym__each(b->elf, "_ZTV", find_cb, &f) != 1)
		c->name[0] = 0;
	return c->name[0] ? c->name : NULL;
}

static struct param_slot *param_slot(struct backward *b, uint64_t impl, int insert)
{
	uint64_t h = (impl >> 4) * 0x9E3779B97F4A7C15ULL;
	int i;

	for (i = 0; i < PARAM_SLOTS; i++) {
		struct param_slot *s = &b->params[(h + i) % PARAM_SLOTS];

		if (s->impl == impl)
			return s;
		if (!s->impl)
			return insert ? s : NULL;
	}
	return NULL;
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

		if (remote__u64(b->r, np->tensors[i] + b->var_tensor, &impl) || !impl)
			continue;
		s = param_slot(b, impl, 1);
		if (s && !s->impl) {
			s->impl = impl;
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
		if (e == 255) {
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

void backward__flush(struct backward *b)
{
	if (!b)
		return;
	b->cur.n.complete = b->cur.lost_ref == b->cur.lost_last;
	finish_pass(b);
}

void backward__settle(struct backward *b, uint64_t iteration)
{
	if (b && b->cur.open && b->cur.n.iteration < iteration)
		backward__flush(b);
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
	s = param_slot(b, g->param, 0);
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
