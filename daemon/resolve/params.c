// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Parameters are checked in BPF when a module's output goes bad, while the
 * optimizer has not yet touched them; the daemon only says where they are.
 * nn.Parameter objects live as long as the module, and optimizers update
 * them in place, so the list read at the module's first call stays right.
 * When an anomaly comes before that list reached BPF, the daemon reads and
 * scans the parameters itself (params__check).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "util/dtype.h"
#include "resolve/params.h"
#include "nwfloat.h"
#include "resolve/remote.h"

#define SCAN_CHUNK (256 << 10)

struct list_ctx {
	const struct remote *r;
	struct nw_params *out;
};

static int param_cb(const char *key, uint64_t value, void *ctx)
{
	struct list_ctx *p = ctx;

	(void)key;
	if (value == p->r->none)
		return 0; /* a registered but unset parameter (bias=False) */
	if (p->out->n < NW_MAX_PARAMS)
		p->out->tensors[p->out->n++] = value;
	else
		p->out->more++;
	return 0;
}

int params__list(const struct remote *r, uint64_t module, struct nw_params *out)
{
	struct list_ctx ctx = {r, out};
	uint64_t dict;
	int err;

	memset(out, 0, sizeof(*out));
	err = remote__attr(r, module, "_parameters", &dict);
	if (err)
		return err;
	return remote__dict_each(r, dict, param_cb, &ctx);
}

static int is_tensor(const struct params_reader *pr, uint64_t obj)
{
	uint64_t type;
	int i;

	if (remote__u64(pr->r, obj + pr->l->obj_type, &type))
		return 0;
	for (i = 0; i < 4 && type; i++) {
		if (type == pr->tensor_type)
			return 1;
		if (remote__u64(pr->r, type + pr->l->type_base, &type))
			return 0;
	}
	return 0;
}

/* One block of memory without holes or overlaps in some order of the dims (BPF's tensor_dense). */
static int dense(const uint64_t *shape, const uint64_t *strides, uint64_t ndim)
{
	uint64_t d, e;

	for (d = 0; d < ndim; d++) {
		uint64_t prod = 1;

		if (shape[d] <= 1)
			continue;
		for (e = 0; e < ndim; e++) {
			if (e == d || shape[e] <= 1)
				continue;
			if (strides[e] == strides[d])
				return 0;
			if (strides[e] < strides[d])
				prod *= shape[e];
		}
		if (strides[d] != prod)
			return 0;
	}
	return 1;
}

/*
 * The TensorImpl's dense data block: *data, *bytes, *dt; 1 for a type that holds no NaN
 * (integers, bool), -EPROTONOSUPPORT for one that may and that is not read (complex, float8).
 */
static int impl_block(const struct params_reader *pr, uint64_t impl, uint64_t *data,
		      uint64_t *bytes, uint32_t *dt)
{
	const struct nw_layout *l = pr->l;
	uint64_t numel, ndim, p, storage, off, dims[2 * NW_MAX_DIMS] = {};
	uint16_t st;
	uint8_t device;

	if (pr->r->read(pr->r->ctx, impl + l->impl_dtype, &st, sizeof(st)))
		return -EFAULT;
	*dt = dtype__from_layout(l, st);
	if (*dt == NW_DT_NONE)
		return dtype__c10_codes(l) && nw_exact_dtype(st) ? 1 : -EPROTONOSUPPORT;
	if (remote__u64(pr->r, impl + l->impl_numel, &numel) ||
	    remote__u64(pr->r, impl + l->impl_ndim, &ndim))
		return -EFAULT;
	if (ndim > NW_MAX_DIMS)
		return -E2BIG;
	p = impl + l->impl_sizes;
	if (ndim > l->sizes_inline && remote__u64(pr->r, p, &p))
		return -EFAULT;
	if (ndim &&
	    (pr->r->read(pr->r->ctx, p, dims, 8 * ndim) ||
	     pr->r->read(pr->r->ctx, p + 8 * (ndim > l->sizes_inline ? ndim : l->sizes_inline),
			 dims + NW_MAX_DIMS, 8 * ndim)))
		return -EFAULT;
	if (!dense(dims, dims + NW_MAX_DIMS, ndim))
		return -EINVAL;
	if (l->impl_device >= 0 &&
	    (pr->r->read(pr->r->ctx, impl + l->impl_device, &device, 1) || device != l->device_cpu))
		return -ENODEV;
	if (remote__u64(pr->r, impl + l->impl_storage, &storage) ||
	    remote__u64(pr->r, storage + l->storage_data, data) ||
	    remote__u64(pr->r, impl + l->impl_storage_offset, &off))
		return -EFAULT;
	if (!*data)
		return numel ? -EFAULT : 1;
	if (numel > PARAMS_MAX_BYTES / dtype__size(*dt))
		return -E2BIG;
	*bytes = numel * dtype__size(*dt);
	*data += off * dtype__size(*dt);
	return 0;
}

/* Does [data, data + bytes) hold a NaN/±Inf element of dtype dt? */
static int block_nonfinite(const struct remote *r, uint64_t data, uint64_t bytes, uint32_t dt)
{
	uint64_t *buf = malloc(SCAN_CHUNK), off, acc = 0, i;
	struct nw_lanes lanes;
	int err = 0;

	if (!buf)
		return -ENOMEM;
	nw_lanes_for(dt, &lanes);
	for (off = 0; off < bytes && !err; off += SCAN_CHUNK) {
		uint64_t n = bytes - off < SCAN_CHUNK ? bytes - off : SCAN_CHUNK;

		memset(buf, 0, (n + 7) / 8 * 8); /* zeros (finite) past the data */
		err = r->read(r->ctx, data + off, buf, n);
		for (i = 0; !err && i < (n + 7) / 8; i++)
			acc |= nw_word_nonfinite(buf[i], &lanes);
	}
	free(buf);
	return err ? err : acc != 0;
}

int params__scan_tensor(const struct params_reader *pr, uint64_t obj)
{
	uint64_t impl, data = 0, bytes = 0;
	uint8_t borrowed = 0;
	uint32_t dt = NW_DT_NONE;
	int err;

	if (!obj || !is_tensor(pr, obj))
		return -EINVAL;
	/* var_borrowed -1: a plain at::Tensor (torch 2.11+), never borrowed */
	if ((pr->l->var_borrowed >= 0 &&
	     pr->r->read(pr->r->ctx, obj + pr->l->var_borrowed, &borrowed, 1)) ||
	    remote__u64(pr->r, obj + pr->l->var_tensor, &impl))
		return -EFAULT;
	if (borrowed && remote__u64(pr->r, impl, &impl))
		return -EFAULT; /* a borrowed at::Tensor: its first word is the TensorImpl */
	if (!impl)
		return -EFAULT;
	err = impl_block(pr, impl, &data, &bytes, &dt);
	if (err)
		return err > 0 ? 2 : err;
	return bytes ? block_nonfinite(pr->r, data, bytes, dt) : 0;
}

void params__check(const struct params_reader *pr, const struct nw_params *np,
		   struct params_check *out)
{
	uint32_t i;
	int r;

	memset(out, 0, sizeof(*out));
	out->skipped = np->more;
	for (i = 0; i < np->n && i < NW_MAX_PARAMS; i++) {
		r = params__scan_tensor(pr, np->tensors[i]);
		if (r == 2)
			continue;
		if (r < 0) {
			out->skipped++;
			continue;
		}
		out->checked++;
		if (r)
			out->nonfinite++;
	}
}

int params__late_verdict(int read, int stepped)
{
	if (!stepped)
		return read;
	return read == 1 ? 1 : -1;
}
