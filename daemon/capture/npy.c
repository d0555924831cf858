// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * .npy writer pieces: the format 1.0 header numpy.load() and torch read, and
 * reordering a dense tensor (transposed, channels_last) into C order.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "capture/npy.h"

int npy__header(char *buf, size_t len, const char *descr, const __u64 *shape, uint32_t ndim)
{
	char dict[NPY_HEADER_MAX];
	size_t n, total;
	uint32_t i;
	int w;

	if (ndim > NPY_MAX_DIMS)
		return -EINVAL;
	w = snprintf(dict, sizeof(dict), "{'descr': '%s', 'fortran_order': False, 'shape': (",
		     descr);
	for (i = 0; i < ndim && w > 0 && (size_t)w < sizeof(dict); i++)
		w += snprintf(dict + w, sizeof(dict) - w, "%llu%s", (unsigned long long)shape[i],
			      ndim == 1	     ? ","
			      : i + 1 < ndim ? ", "
					     : "");
	if (w > 0 && (size_t)w < sizeof(dict))
		w += snprintf(dict + w, sizeof(dict) - w, "), }");
	if (w <= 0 || (size_t)w >= sizeof(dict))
		return -E2BIG;
	n = w;
	/* magic (6) + version (2) + length (2) + dict + spaces + newline: a multiple of 64 */
	total = (10 + n + 1 + 63) / 64 * 64;
	if (total > len || total - 10 > 0xffff)
		return -E2BIG;
	memcpy(buf, "\x93NUMPY\x01\x00", 8);
	buf[8] = (total - 10) & 0xff;
	buf[9] = (total - 10) >> 8;
	memcpy(buf + 10, dict, n);
	memset(buf + 10 + n, ' ', total - 10 - n - 1);
	buf[total - 1] = '\n';
	return total;
}

int npy__c_order(void *dst, const void *src, size_t elem, uint32_t ndim, const __u64 *shape,
		 const __u64 *strides, uint64_t numel)
{
	uint64_t idx[NPY_MAX_DIMS] = {}, count = 1, reach = 0, i;
	const char *s = src;
	char *d = dst;
	uint32_t k;

	if (ndim > NPY_MAX_DIMS)
		return -EINVAL;
	for (k = 0; k < ndim; k++) {
		if (shape[k] && count > UINT64_MAX / shape[k])
			return -EINVAL;
		count *= shape[k];
		if (shape[k] > 1) {
			if (strides[k] > UINT64_MAX / (shape[k] - 1) ||
			    reach > UINT64_MAX - strides[k] * (shape[k] - 1))
				return -EINVAL;
			reach += strides[k] * (shape[k] - 1);
		}
	}
	if (count != numel || (numel && reach >= numel))
		return -EINVAL;
	for (i = 0; i < numel; i++) {
		uint64_t off = 0;

		for (k = 0; k < ndim; k++)
			off += idx[k] * strides[k];
		memcpy(d + i * elem, s + off * elem, elem);
		for (k = ndim; k-- > 0;) {
			if (++idx[k] < shape[k])
				break;
			idx[k] = 0;
		}
	}
	return 0;
}
