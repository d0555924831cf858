// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Element bits to values. BPF reports finite min/max as raw bits (it does no
 * floating point); this is where they become numbers for the event stream.
 */
#include <math.h>
#include <string.h>

#include "util/dtype.h"
#include "util/fpconv.h"
#include "nwfloat.h"

/*
 * IEEE binary16: 1 sign, 5 exponent (bias 15), 10 fraction bits. Built by
 * bit arithmetic and exact scaling so no libm is needed (the Makefile links none).
 */
static double nw_f16_to_double(__u64 bits)
{
	__u64 exp = (bits >> 10) & 0x1f, frac = bits & 0x3ff, d;
	double v;

	if (exp == 0x1f) {
		v = frac ? NAN : INFINITY;
	} else if (exp == 0) {
		v = frac * 0x1p-24; /* subnormal: frac * 2^-14 * 2^-10, exact */
	} else {
		d = (exp - 15 + 1023) << 52 | frac << 42;
		memcpy(&v, &d, sizeof(v));
	}
	return (bits & 0x8000) ? -v : v;
}

double nw_bits_to_double(__u64 bits, __u32 dtype)
{
	__u32 u32;
	float f;
	double d;

	switch (dtype) {
	case NW_DT_F16:
		return nw_f16_to_double(bits);
	case NW_DT_BF16:
		/* bfloat16 is the top half of a float32 */
		u32 = (__u32)(bits & 0xffff) << 16;
		memcpy(&f, &u32, sizeof(f));
		return f;
	case NW_DT_F32:
		u32 = (__u32)bits;
		memcpy(&f, &u32, sizeof(f));
		return f;
	case NW_DT_F64:
		memcpy(&d, &bits, sizeof(d));
		return d;
	}
	return NAN;
}
