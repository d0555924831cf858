// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Facts about a captured tensor: one pass over its values, row by row along the last
 * dimension, integer and double arithmetic only (no allocation).
 */
#include <errno.h>
#include <float.h>
#include <math.h>
#include <string.h>
#include "explain/evidence.h"
#include "nanwatch.h"
#include "util/fpconv.h"

struct elem {
	const char *name;
	uint32_t size;
	int kind;
	__u32 nw;	/* our code, for floating types */
	int is_signed;	/* integer types */
	double largest; /* floating types */
	double eps;	/* floating types: the spacing of values at 1 */
};

static const struct elem elems[] = {
	{"float16", 2, EVIDENCE_FLOAT, NW_DT_F16, 0, 65504.0, 0x1p-10},
	{"bfloat16", 2, EVIDENCE_FLOAT, NW_DT_BF16, 0, 3.3895313892515355e38, 0x1p-7},
	{"float32", 4, EVIDENCE_FLOAT, NW_DT_F32, 0, FLT_MAX, FLT_EPSILON},
	{"float64", 8, EVIDENCE_FLOAT, NW_DT_F64, 0, DBL_MAX, DBL_EPSILON},
	{"bool", 1, EVIDENCE_BOOL, 0, 0, 0, 0},
	{"uint8", 1, EVIDENCE_BOOL, 0, 0, 0, 0},
	{"int8", 1, EVIDENCE_BOOL, 0, 1, 0, 0},
	{"int16", 2, EVIDENCE_BOOL, 0, 1, 0, 0},
	{"int32", 4, EVIDENCE_BOOL, 0, 1, 0, 0},
	{"int64", 8, EVIDENCE_BOOL, 0, 1, 0, 0},
};

static const struct elem *elem_of(const char *dtype)
{
	size_t i;

	for (i = 0; dtype && i < sizeof(elems) / sizeof(elems[0]); i++)
		if (!strcmp(elems[i].name, dtype))
			return &elems[i];
	return NULL;
}

double evidence__exp_limit(const char *dtype)
{
	const struct elem *e = elem_of(dtype);

	return e && e->kind == EVIDENCE_FLOAT ? log(e->largest) : 0;
}

double evidence__eps(const char *dtype)
{
	const struct elem *e = elem_of(dtype);

	return e && e->kind == EVIDENCE_FLOAT ? e->eps : 0;
}

double evidence__exp_floor(const char *dtype)
{
	const struct elem *e = elem_of(dtype);

	/* the least normal is 4 / largest (IEEE, emin = 1 - emax), the least subnormal eps of it */
	return e && e->kind == EVIDENCE_FLOAT ? log(4 * e->eps / e->largest) : 0;
}

static uint64_t bits_at(const unsigned char *p, uint32_t size)
{
	uint64_t v = 0;

	memcpy(&v, p, size); /* little-endian host, right-aligned bits */
	return v;
}

/* What one row says; folded into the tensor's facts by the caller. */
struct row {
	uint64_t zeros, neginf, trues;
	int constant; /* every value equal to the first, which is finite and non-zero */
	int unit;     /* every value finite and in [0, 1] */
	double first, sum;
};

static void float_value(struct tensor_facts *f, struct row *r, double v, uint64_t i)
{
	if (isnan(v)) {
		f->nan++;
		r->constant = r->unit = 0;
		return;
	}
	if (isinf(v)) {
		if (v > 0)
			f->posinf++;
		else
			f->neginf++, r->neginf++;
		r->constant = r->unit = 0;
		return;
	}
	if (v < 0 || v > 1)
		r->unit = 0;
	r->sum += v;
	if (!f->has_finite) {
		f->min = f->max = v;
		f->has_finite = 1;
	}
	f->min = v < f->min ? v : f->min;
	f->max = v > f->max ? v : f->max;
	if (fabs(v) > f->max_abs)
		f->max_abs = fabs(v);
	if (v == 0)
		f->zeros++, r->zeros++;
	else if (v < 0)
		f->negatives++;
	if (i == 0)
		r->first = v;
	else if (v != r->first)
		r->constant = 0;
}

static void int_value(struct tensor_facts *f, struct row *r, const struct elem *e, uint64_t bits)
{
	int64_t v = (int64_t)bits;

	if (e->is_signed && e->size < 8 && bits >> (e->size * 8 - 1) & 1)
		v = (int64_t)(bits | ~((1ULL << (e->size * 8)) - 1)); /* sign-extend */
	if (!v)
		f->zeros++, r->zeros++;
	else
		r->trues++;
	if (v < 0)
		f->negatives++;
	if (v && v != 1)
		f->kind = EVIDENCE_INT;
	/* lengths and counts: their range (max_abs stays the float values') */
	if (!f->has_finite || (double)v < f->min)
		f->min = (double)v;
	if (!f->has_finite || (double)v > f->max)
		f->max = (double)v;
	f->has_finite = 1;
}

static void end_row(struct tensor_facts *f, const struct row *r, uint64_t len, double eps)
{
	/* a softmax's row sums to 1 within a rounding error per value */
	if (f->kind == EVIDENCE_FLOAT && len > 1 && r->unit &&
	    fabs(r->sum - 1) <= 1e-3 + (double)len * eps)
		f->prob_rows++;
	if (len > 1 && r->zeros == len)
		f->zero_rows++;
	if (f->kind == EVIDENCE_FLOAT && r->neginf == len)
		f->neginf_rows++;
	if (f->kind == EVIDENCE_FLOAT && len > 1 && r->constant && r->first != 0)
		f->const_rows++;
	if (f->kind == EVIDENCE_BOOL && len > 1 && r->trues == len)
		f->true_rows++;
}

/*
 * Columns (one index of the last dimension) whose value is the same finite one in every row:
 * a feature constant across the samples, whose spread over the batch is 0.
 */
static uint64_t const_columns(const unsigned char *data, const struct elem *e, uint64_t rows,
			      uint64_t len)
{
	uint64_t j, i, n = 0;

	if (e->kind != EVIDENCE_FLOAT || rows < 2)
		return 0;
	for (j = 0; j < len; j++) {
		double first = nw_bits_to_double(bits_at(data + j * e->size, e->size), e->nw);

		if (!isfinite(first))
			continue;
		for (i = 1; i < rows; i++)
			if (nw_bits_to_double(bits_at(data + (i * len + j) * e->size, e->size),
					      e->nw) != first)
				break;
		n += i == rows;
	}
	return n;
}

int evidence__scan(const void *data, uint64_t bytes, const char *dtype, const __u64 *shape,
		   uint32_t ndim, struct tensor_facts *f)
{
	const struct elem *e = elem_of(dtype);
	const unsigned char *p = data;
	uint64_t numel = 1, i, k;
	uint32_t d;

	if (!e)
		return -EINVAL;
	for (d = 0; d < ndim; d++)
		if (__builtin_mul_overflow(numel, shape[d], &numel))
			return -EINVAL;
	if (numel > bytes / e->size || bytes != numel * e->size)
		return -EINVAL;
	f->kind = e->kind;
	f->dtype = e->name;
	f->exp_limit = evidence__exp_limit(dtype);
	f->numel = numel;
	f->ndim = ndim;
	f->row_len = ndim ? shape[ndim - 1] : 1;
	f->rows = f->row_len ? numel / f->row_len : 0;
	for (i = 0; i < f->rows; i++) {
		struct row r = {.constant = 1, .unit = 1};

		for (k = 0; k < f->row_len; k++, p += e->size) {
			uint64_t bits = bits_at(p, e->size);

			if (e->kind == EVIDENCE_FLOAT)
				float_value(f, &r, nw_bits_to_double(bits, e->nw), k);
			else
				int_value(f, &r, e, bits);
		}
		end_row(f, &r, f->row_len, e->eps);
	}
	if (ndim >= 2)
		f->const_cols = const_columns(data, e, f->rows, f->row_len);
	/* a row of token ids or indices all 0 (padding) or non-zero is no mask's row */
	if (f->kind == EVIDENCE_INT)
		f->zero_rows = f->true_rows = 0;
	return 0;
}
