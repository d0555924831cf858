/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* .npy files (format 1.0) of captured tensors (their dtypes: dtype.h). */
#ifndef __NPY_H
#define __NPY_H

#include <stddef.h>
#include <stdint.h>
#include <linux/types.h>

#define NPY_MAX_DIMS 8
#define NPY_HEADER_MAX 256 /* a header for NPY_MAX_DIMS 20-digit dims fits */

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
