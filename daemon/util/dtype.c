// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The dtype table. c10::ScalarType codes have been stable since torch 1.x for
 * the types below (Half 5, Float 6, Double 7, BFloat16 15); a layout table
 * still names the floating ones, and dtype__c10_codes checks them.
 */
#include <float.h>
#include <stddef.h>

#include "util/dtype.h"

/* bfloat16's largest finite value: (2 - 2^-7) * 2^127 */
#define BF16_MAX 3.3895313892515355e38

static const struct dtype dtypes[] = {
	[0] = {"uint8", "|u1", 1, NW_DT_NONE, 0, 0},
	[1] = {"int8", "|i1", 1, NW_DT_NONE, 1, 0},
	[2] = {"int16", "<i2", 2, NW_DT_NONE, 2, 0},
	[3] = {"int32", "<i4", 4, NW_DT_NONE, 3, 0},
	[4] = {"int64", "<i8", 8, NW_DT_NONE, 4, 0},
	[5] = {"float16", "<f2", 2, NW_DT_F16, 5, 65504.0},
	[6] = {"float32", "<f4", 4, NW_DT_F32, 6, FLT_MAX},
	[7] = {"float64", "<f8", 8, NW_DT_F64, 7, DBL_MAX},
	[11] = {"bool", "|b1", 1, NW_DT_NONE, 11, 0},
	[15] = {"bfloat16", "<u2", 2, NW_DT_BF16, 15, BF16_MAX},
};

#define NDTYPES (sizeof(dtypes) / sizeof(dtypes[0]))

const struct dtype *dtype__scalar(uint32_t scalar_type)
{
	if (scalar_type >= NDTYPES || !dtypes[scalar_type].name)
		return NULL;
	return &dtypes[scalar_type];
}

const struct dtype *dtype__nw(__u32 nw)
{
	size_t i;

	if (nw == NW_DT_NONE)
		return NULL;
	for (i = 0; i < NDTYPES; i++)
		if (dtypes[i].name && dtypes[i].nw == nw)
			return &dtypes[i];
	return NULL;
}

const char *dtype__name(__u32 nw)
{
	const struct dtype *d = dtype__nw(nw);

	return d ? d->name : NULL;
}

__u32 dtype__size(__u32 nw)
{
	const struct dtype *d = dtype__nw(nw);

	return d ? d->size : 0;
}

double dtype__max(__u32 nw)
{
	const struct dtype *d = dtype__nw(nw);

	return d ? d->max : DBL_MAX;
}

__u32 dtype__from_layout(const struct nw_layout *l, uint32_t st)
{
	if (st == l->dtype_f32)
		return NW_DT_F32;
	if (st == l->dtype_f64)
		return NW_DT_F64;
	if (st == l->dtype_f16)
		return NW_DT_F16;
	if (st == l->dtype_bf16)
		return NW_DT_BF16;
	return NW_DT_NONE;
}

int dtype__c10_codes(const struct nw_layout *l)
{
	return l->dtype_f16 == dtype__nw(NW_DT_F16)->scalar_type &&
	       l->dtype_f32 == dtype__nw(NW_DT_F32)->scalar_type &&
	       l->dtype_f64 == dtype__nw(NW_DT_F64)->scalar_type &&
	       l->dtype_bf16 == dtype__nw(NW_DT_BF16)->scalar_type;
}
