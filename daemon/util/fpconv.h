/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Element bits of our dtypes (enum nw_dtype) to numbers and JSON. */
#ifndef __FPCONV_H
#define __FPCONV_H

#include <linux/types.h>

#include "output/json.h"

/* Value of one element given as its right-aligned bits; NaN for an unknown dtype. */
double nw_bits_to_double(__u64 bits, __u32 dtype);

/* One element as a JSON number at its own precision; null when not finite. */
void json__element(struct json *j, const char *key, __u64 bits, __u32 dtype);

#endif /* __FPCONV_H */
