/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * IEEE-754 classification on raw bits, integer work only: used by the BPF
 * scanner and by the daemon and unit tests, so both sides share one truth.
 */
#ifndef __NWFLOAT_H
#define __NWFLOAT_H

#include "nanwatch.h"

#ifndef NW_INLINE
#define NW_INLINE static inline __attribute__((always_inline))
#endif

enum nw_class {
	NW_FINITE = 0,
	NW_NAN = 1,
	NW_POSINF = 2,
	NW_NEGINF = 3,
};

/*
 * c10::ScalarType codes of the types that hold no NaN/±Inf: the integers and bool (uint8 0,
 * int8 1, int16 2, int32 3, int64 4, bool 11; uint16 27, uint32 28, uint64 29 from torch 2.3).
 * Any other type the scanner does not read (complex, float8, quantized, ...) may hold them: it
 * is never taken for finite.
 */
#define NW_EXACT_DTYPES                                                                       \
	((1ULL << 0) | (1ULL << 1) | (1ULL << 2) | (1ULL << 3) | (1ULL << 4) | (1ULL << 11) | \
	 (1ULL << 27) | (1ULL << 28) | (1ULL << 29))

NW_INLINE int nw_exact_dtype(__u32 st)
{
	return st < 64 && ((NW_EXACT_DTYPES >> st) & 1);
}

/* Element size in bytes of one of our dtypes; 0 for none. */
NW_INLINE __u32 nw_dtype_size(__u32 dt)
{
	switch (dt) {
	case NW_DT_F16:
	case NW_DT_BF16:
		return 2;
	case NW_DT_F32:
		return 4;
	case NW_DT_F64:
		return 8;
	}
	return 0;
}

/* Exponent mask, sign bit and width (bits) of one element. */
NW_INLINE void nw_dtype_bits(__u32 dt, __u64 *exp, __u64 *sign, __u32 *width)
{
	switch (dt) {
	case NW_DT_F16:
		*exp = 0x7c00;
		*sign = 0x8000;
		*width = 16;
		break;
	case NW_DT_BF16:
		*exp = 0x7f80;
		*sign = 0x8000;
		*width = 16;
		break;
	case NW_DT_F32:
		*exp = 0x7f800000ULL;
		*sign = 0x80000000ULL;
		*width = 32;
		break;
	default:
		*exp = 0x7ff0000000000000ULL;
		*sign = 0x8000000000000000ULL;
		*width = 64;
		break;
	}
}

/* Classify one element given as its bits (right-aligned). */
NW_INLINE int nw_classify(__u64 bits, __u32 dt)
{
	__u64 exp, sign;
	__u32 width;

	nw_dtype_bits(dt, &exp, &sign, &width);
	if ((bits & exp) != exp)
		return NW_FINITE;
	if (bits & ~(exp | sign) & (width == 64 ? ~0ULL : ((1ULL << width) - 1)))
		return NW_NAN;
	return (bits & sign) ? NW_NEGINF : NW_POSINF;
}

/*
 * Map element bits to an unsigned key whose order is the numeric order of
 * finite values (-0 sorts just below +0): negatives are inverted, positives
 * get the sign bit set. nw_key_bits() undoes it.
 */
NW_INLINE __u64 nw_order_key(__u64 bits, __u32 dt)
{
	__u64 exp, sign;
	__u32 width;

	nw_dtype_bits(dt, &exp, &sign, &width);
	if (bits & sign)
		return ~bits & (sign | (sign - 1));
	return bits | sign;
}

NW_INLINE __u64 nw_key_bits(__u64 key, __u32 dt)
{
	__u64 exp, sign;
	__u32 width;

	nw_dtype_bits(dt, &exp, &sign, &width);
	if (key & sign)
		return key & ~sign;
	return ~key & (sign | (sign - 1));
}

/* One dtype's bit fields, computed once per tensor for the scan loops. */
struct nw_fmt {
	__u64 exp;  /* exponent mask */
	__u64 sign; /* sign bit */
	__u64 mant; /* mantissa mask */
	__u64 all;  /* every bit of one element */
};

NW_INLINE void nw_fmt_for(__u32 dt, struct nw_fmt *f)
{
	__u32 width;

	nw_dtype_bits(dt, &f->exp, &f->sign, &width);
	f->all = f->sign | (f->sign - 1);
	f->mant = f->all & ~(f->exp | f->sign);
}

NW_INLINE int nw_classify_f(__u64 bits, const struct nw_fmt *f)
{
	if ((bits & f->exp) != f->exp)
		return NW_FINITE;
	if (bits & f->mant)
		return NW_NAN;
	return (bits & f->sign) ? NW_NEGINF : NW_POSINF;
}

NW_INLINE __u64 nw_order_key_f(__u64 bits, const struct nw_fmt *f)
{
	return (bits & f->sign) ? (~bits & f->all) : (bits | f->sign);
}

/*
 * Word-wide detector: for every lane of a 64-bit word, (w & mask) + add sets
 * the lane's top bit exactly when the lane's exponent is all ones (NaN or
 * ±Inf). Lanes cannot carry into each other: the sum is at most the top bit.
 */
struct nw_lanes {
	__u64 mask;
	__u64 add;
	__u64 high;
};

NW_INLINE void nw_lanes_for(__u32 dt, struct nw_lanes *l)
{
	switch (dt) {
	case NW_DT_F16:
		l->mask = 0x7c007c007c007c00ULL;
		l->add = 0x0400040004000400ULL;
		l->high = 0x8000800080008000ULL;
		break;
	case NW_DT_BF16:
		l->mask = 0x7f807f807f807f80ULL;
		l->add = 0x0080008000800080ULL;
		l->high = 0x8000800080008000ULL;
		break;
	case NW_DT_F32:
		l->mask = 0x7f8000007f800000ULL;
		l->add = 0x0080000000800000ULL;
		l->high = 0x8000000080000000ULL;
		break;
	default:
		l->mask = 0x7ff0000000000000ULL;
		l->add = 0x0010000000000000ULL;
		l->high = 0x8000000000000000ULL;
		break;
	}
}

/* Non-zero when some lane of w is NaN or ±Inf. */
NW_INLINE __u64 nw_word_nonfinite(__u64 w, const struct nw_lanes *l)
{
	return ((w & l->mask) + l->add) & l->high;
}

/* Unbiased binary exponent of |x| given as bits with the sign cleared (x finite, non-zero). */
NW_INLINE int nw_exponent(__u64 abs_bits, __u32 dt)
{
	switch (dt) {
	case NW_DT_F16:
		return (int)(abs_bits >> 10) - 15;
	case NW_DT_BF16:
		return (int)(abs_bits >> 7) - 127;
	case NW_DT_F32:
		return (int)(abs_bits >> 23) - 127;
	default:
		return (int)(abs_bits >> 52) - 1023;
	}
}

/*
 * Magnitude mark of a largest |value|: 0 for NaN/±Inf, 0 below the floor (2^4 for float16,
 * 2^10 for the wider types: ordinary activations), then one more every
 * NW_MAG_BINADES binades (16x). A module's output is reported each time it
 * reaches a mark it has not reached before, so the run-up to an overflow
 * shows as a few events, and a healthy run shows none.
 */
NW_INLINE __u32 nw_mag_mark(__u64 abs_bits, __u32 dt)
{
	int floor = dt == NW_DT_F16 ? 4 : 10;
	__u64 exp, sign;
	__u32 width;
	int e;

	nw_dtype_bits(dt, &exp, &sign, &width);
	if (!abs_bits || (abs_bits & exp) == exp)
		return 0; /* zero, or not finite: no magnitude */
	e = nw_exponent(abs_bits, dt);
	if (e < floor)
		return 0;
	return (__u32)(e - floor) / NW_MAG_BINADES + 1;
}

#endif /* __NWFLOAT_H */
