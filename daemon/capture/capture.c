// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Capture records assembled. The BPF side copied the tensors of the first origin anomaly's
 * call while the call was on the stack (bpf/capture.bpf.h) and sends them on the capture
 * ring: one NW_EV_CAP_TENSOR per tensor, its NW_EV_CAP_DATA chunks, one NW_EV_CAP_END.
 * This file collects them, within the byte budget, and hands the whole to files.c.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <bpf/libbpf.h>
#include "capture/capture_priv.h"
#include "util/dtype.h"
#include "resolve/pyobject.h"
#include "capture/npy.h"

__attribute__((format(printf, 2, 3))) static void fail(struct capture *c, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(c->error, sizeof(c->error), fmt, ap);
	va_end(ap);
	c->error_pending = 1;
}

struct capture *capture__new(const struct capture_opts *o, char *err, size_t errlen)
{
	struct capture *c = calloc(1, sizeof(*c));
	int ret;

	if (!c) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	c->o = *o;
	c->dirfd = -1;
	snprintf(c->dir, sizeof(c->dir), "%s", o->dir ? o->dir : "");
	ret = o->dir ? capture_output__open_dir(c, err, errlen) : 0;
	if (ret) {
		capture__free(c);
		errno = -ret;
		return NULL;
	}
	return c;
}

void capture__free(struct capture *c)
{
	int i;

	if (!c)
		return;
	ring_buffer__free(c->rb);
	for (i = 0; i < NW_CAP_MAX_TENSORS; i++)
		free(c->t[i].buf);
	if (c->dirfd >= 0)
		close(c->dirfd);
	free(c);
}

const char *capture__path(const struct capture *c)
{
	return c && c->path[0] ? c->path : NULL;
}

const struct evidence_facts *capture__facts(const struct capture *c)
{
	return c && c->have_facts ? &c->facts : NULL;
}

const char *capture__error(struct capture *c)
{
	if (!c || !c->error_pending)
		return NULL;
	c->error_pending = 0;
	return c->error;
}

uint32_t capture__ring_bytes(uint64_t max_bytes)
{
	/* ring records carry an 8-byte header; a tensor may end in a part-filled chunk */
	uint64_t rec = (sizeof(struct nw_cap_data) + 8 + 7) / 8 * 8;
	uint64_t need = (max_bytes / NW_CAP_CHUNK + NW_CAP_MAX_TENSORS) * rec +
			NW_CAP_MAX_TENSORS * (sizeof(struct nw_cap_tensor) + 8) +
			sizeof(struct nw_cap_end) + 8;
	uint64_t size = 4096;

	while (size < need) {
		size <<= 1;
		if (size > CAPTURE_MAX_RING)
			return 0;
	}
	return size;
}

int capture__buffers(const struct remote *r, uint64_t module, struct nw_params *out)
{
	return pyobject__list_dict(r, module, "_buffers", out, NULL);
}

/* ---------------------------------------------------------------- records */

static void reset(struct capture *c)
{
	int i;

	for (i = 0; i < NW_CAP_MAX_TENSORS; i++) {
		free(c->t[i].buf);
		memset(&c->t[i], 0, sizeof(c->t[i]));
	}
	c->allocated = 0;
}

static void on_tensor(struct capture *c, const struct nw_cap_tensor *d)
{
	struct pending *p;

	if (d->index >= NW_CAP_MAX_TENSORS)
		return;
	p = &c->t[d->index];
	if (p->buf)
		c->allocated -= p->d.bytes;
	free(p->buf);
	memset(p, 0, sizeof(*p));
	p->d = *d;
	p->have = 1;
	if (d->ndim > NW_MAX_DIMS)
		p->d.ndim = NW_MAX_DIMS, p->d.flags |= NW_SKIP_DIMS;
	/* data follows only for a tensor within the budget; the budget bounds the allocations */
	if (!d->flags && d->bytes && d->elem_size && d->bytes % d->elem_size == 0 &&
	    d->bytes / d->elem_size == d->numel && d->bytes <= c->o.max_bytes - c->allocated) {
		p->buf = malloc(d->bytes);
		if (p->buf)
			c->allocated += d->bytes;
	}
}

static void on_data(struct capture *c, const struct nw_cap_data *r)
{
	struct pending *p;

	if (r->index >= NW_CAP_MAX_TENSORS)
		return;
	p = &c->t[r->index];
	if (!p->have || !p->buf || r->len > NW_CAP_CHUNK || r->offset > p->d.bytes ||
	    r->len > p->d.bytes - r->offset)
		return;
	memcpy(p->buf + r->offset, r->data, r->len);
	p->received += r->len;
}

/* Facts of one whole tensor of the call (not the output); 0 or a negative errno. */
static int tensor_facts(const struct pending *p, const char *name, struct tensor_facts *f)
{
	const struct nw_cap_tensor *d = &p->d;
	const struct dtype *dt = dtype__scalar(d->scalar_type);
	void *dense;
	int err;

	/* an empty tensor (a dimension of 0) has facts too: of no values */
	if (d->role == NW_CAP_OUTPUT || d->flags || !dt || dt->size != d->elem_size ||
	    !pending_whole(p) || d->ndim > NW_MAX_DIMS || d->bytes / dt->size != d->numel)
		return -ENODATA;
	dense = malloc(d->bytes ? d->bytes : 1);
	if (!dense)
		return -ENOMEM;
	memset(f, 0, sizeof(*f));
	err = npy__c_order(dense, p->buf, dt->size, d->ndim, d->shape, d->strides, d->numel);
	if (!err)
		err = evidence__scan(dense, d->bytes, dt->name, d->shape, d->ndim, f);
	free(dense);
	/* a keyword argument is an input like a positional one (a mask passed by keyword) */
	f->role = d->role == NW_CAP_INPUT || d->role == NW_CAP_KWARG ? EVIDENCE_INPUT
		  : d->role == NW_CAP_PARAM			     ? EVIDENCE_PARAM
								     : EVIDENCE_BUFFER;
	capture__tensor_name(f->name, sizeof(f->name), d, name);
	return err;
}

/* The evidence the diagnosis reads, from the tensors as they are before any is written. */
static void take_facts(struct capture *c, const struct nw_cap_end *e)
{
	struct py_named_list *l = calloc(2, sizeof(*l));
	struct evidence_facts *x = &c->facts;
	int i;

	memset(x, 0, sizeof(*x));
	x->module = e->module;
	x->root = e->root;
	x->iteration = e->iteration;
	for (i = 0; i < NW_CAP_OPS && i < EVIDENCE_MAX_OPS && (uint32_t)i < e->nops; i++) {
		/* a parent is found before its inputs: anything else is no edge */
		x->op_parent[i] = e->op_parent[i] < i ? e->op_parent[i] : -1;
		x->op_vptr[x->nops++] = e->ops[i];
	}
	x->parents = 1;
	x->ops_more = e->ops_more || (e->nops > EVIDENCE_MAX_OPS);
	x->ops_partial = e->ops_partial;
	if (l && c->o.remote) {
		pyobject__list_dict(c->o.remote, e->module, "_parameters", NULL, &l[0]);
		pyobject__list_dict(c->o.remote, e->module, "_buffers", NULL, &l[1]);
	}
	for (i = 0; i < NW_CAP_MAX_TENSORS && (uint32_t)i < e->ntensors; i++) {
		const struct pending *p = &c->t[i];
		const char *name = NULL;

		if (!p->have || x->n >= EVIDENCE_MAX_TENSORS)
			continue;
		if (l && p->d.role == NW_CAP_PARAM)
			name = pyobject__name_of(&l[0], p->d.obj);
		else if (l && p->d.role == NW_CAP_BUFFER)
			name = pyobject__name_of(&l[1], p->d.obj);
		if (!tensor_facts(p, name, &x->t[x->n]))
			x->n++;
	}
	free(l);
	c->have_facts = 1;
}

static int on_record(void *ctx, void *data, size_t size)
{
	return capture__record(ctx, data, size);
}

int capture__record(struct capture *c, const void *data, size_t size)
{
	/* the three record types have different sizes; each says its type too */
	if (size == sizeof(struct nw_cap_tensor) &&
	    ((const struct nw_cap_tensor *)data)->type == NW_EV_CAP_TENSOR) {
		on_tensor(c, data);
	} else if (size == sizeof(struct nw_cap_data) &&
		   ((const struct nw_cap_data *)data)->type == NW_EV_CAP_DATA) {
		on_data(c, data);
	} else if (size == sizeof(struct nw_cap_end) &&
		   ((const struct nw_cap_end *)data)->type == NW_EV_CAP_END) {
		if (!c->done) {
			int err = 0;

			take_facts(c, data);
			if (c->o.dir)
				err = capture_output__write(c, data);
			if (err)
				fail(c, "failed to write the capture into %.256s: %s", c->dir,
				     strerror(-err));
		}
		c->done = 1;
		reset(c);
	}
	return 0;
}

int capture__attach(struct capture *c, int ring_fd)
{
	c->rb = ring_buffer__new(ring_fd, on_record, c, NULL);
	return c->rb ? 0 : -errno;
}

int capture__consume(struct capture *c)
{
	int n;

	if (!c || !c->rb)
		return 0;
	n = ring_buffer__consume(c->rb);
	return n < 0 ? n : 0;
}
