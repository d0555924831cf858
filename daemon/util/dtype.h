/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Element types, in one place for the daemon: torch's names, numpy's spelling,
 * sizes and ranges, keyed by c10::ScalarType code, and our own codes
 * (enum nw_dtype in nanwatch.h, shared with BPF) for the floating types BPF scans.
 */
#ifndef __DTYPE_H
#define __DTYPE_H

#include <stdint.h>
#include <linux/types.h>

#include "nanwatch.h"

struct dtype {
	const char *name;     /* torch's: "float32", "bfloat16", "int64", "bool" */
	const char *descr;    /* numpy's: "<f4"; bfloat16 is stored as its raw "<u2" bits */
	uint32_t size;	      /* bytes per element */
	__u32 nw;	      /* enum nw_dtype; NW_DT_NONE for types BPF does not scan */
	uint32_t scalar_type; /* c10::ScalarType code */
	double max;	      /* largest finite value (floating types) */
};

/* The type of a c10::ScalarType code (Byte 0 ... BFloat16 15); NULL for others. */
const struct dtype *dtype__scalar(uint32_t scalar_type);

/* The type of one of our codes; NULL for NW_DT_NONE and unknown codes. */
const struct dtype *dtype__nw(__u32 nw);

/* torch's name of one of our codes ("float32"); NULL for none or unknown. */
const char *dtype__name(__u32 nw);

/* Bytes per element of one of our codes; 0 for none or unknown. */
__u32 dtype__size(__u32 nw);

/* Largest finite value of one of our codes; DBL_MAX when unknown. */
double dtype__max(__u32 nw);

/* Our code for the target's scalar type code st (the layout table's dtype_*); NW_DT_NONE. */
__u32 dtype__from_layout(const struct nw_layout *l, uint32_t st);

/* 1 when the layout's scalar type codes are c10's own (those dtype__scalar knows), else 0. */
int dtype__c10_codes(const struct nw_layout *l);

#endif /* __DTYPE_H */
