/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Element bits of our dtypes (enum nw_dtype) to numbers. */
#ifndef __FPCONV_H
#define __FPCONV_H

#include <linux/types.h>

/* Value of one element given as its right-aligned bits; NaN for an unknown dtype. */
double nw_bits_to_double(__u64 bits, __u32 dtype);

#endif /* __FPCONV_H */
