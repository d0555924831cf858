/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* .npy files (format 1.0) of captured tensors, and the dtypes they can hold. */
#ifndef __NPY_H
#define __NPY_H

#include <stddef.h>
#include <stdint.h>
#include <linux/types.h>

#define NPY_MAX_DIMS   8
#define NPY_HEADER_MAX 256	/* a header for NPY_MAX_DIMS 20-digit dims fits */

struct npy_dtype {
	const char *name;	/* torch's name: "float32", "bfloat16", "int64", "bool" */
	const char *descr;	/* numpy's: "<f4"; bfloat16 is stored as its raw "<u2" bits */
	uint32_t size;
};

/* The dtype of a c10::ScalarType code (Byte 0 ... BFloat16 15); NULL for others. */
const struct npy_dtype *npy__dtype(uint32_t scalar_type);

/*
 * The header (magic, version 1.0, length, dict, padding to a multiple of 64, newline)
 * of a C-order array; returns its length, or -E2BIG if len is too small, -EINVAL
 * for more than NPY_MAX_DIMS dimensions.
 */
int npy__header(char *buf, size_t len, const char *descr, const __u64 *shape, uint32_t ndim);

/*
 * Gather the numel elements (elem bytes each) of a dense block with the given
 * strides (in elements, non-negative) into C order. -EINVAL if some index would
 * fall outside the block (not dense), or the shape does not multiply to numel.
 */
int npy__c_order(void *dst, const void *src, size_t elem, uint32_t ndim, const __u64 *shape,
		 const __u64 *strides, uint64_t numel);

#endif /* __NPY_H */
