// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * UTF-8 for strings read from the target (names, messages): its bytes are
 * untrusted, so every writer checks them here before they reach JSON or a
 * terminal.
 */
#include "util/utf8.h"

/* Second and later continuation bytes must be 80..BF. */
static int utf8__cont(unsigned char c)
{
	return (c & 0xc0) == 0x80;
}

int utf8__check(const unsigned char *s, size_t n)
{
	unsigned char c = s[0], lo = 0x80, hi = 0xbf;
	int want, i;

	if (c < 0x80)
		return 1;
	if (c < 0xc2 || c > 0xf4)
		return -1; /* stray continuation, overlong lead, beyond U+10FFFF */
	want = c < 0xe0 ? 2 : c < 0xf0 ? 3 : 4;
	/* second-byte ranges that exclude overlongs, surrogates and > U+10FFFF */
	if (c == 0xe0)
		lo = 0xa0;
	else if (c == 0xed)
		hi = 0x9f;
	else if (c == 0xf0)
		lo = 0x90;
	else if (c == 0xf4)
		hi = 0x8f;
	for (i = 1; i < want; i++) {
		if ((size_t)i >= n)
			return -i;
		if (i == 1 ? (s[i] < lo || s[i] > hi) : !utf8__cont(s[i]))
			return -i;
	}
	return want;
}

size_t utf8__encode(char *out, size_t room, uint32_t cp)
{
	if (cp >= 0xd800 && cp < 0xe000)
		cp = 0xfffd; /* lone surrogates are not valid UTF-8 */
	if (cp < 0x80 && room >= 1) {
		out[0] = cp;
		return 1;
	}
	if (cp < 0x800 && room >= 2) {
		out[0] = 0xc0 | (cp >> 6);
		out[1] = 0x80 | (cp & 0x3f);
		return 2;
	}
	if (cp < 0x10000 && room >= 3) {
		out[0] = 0xe0 | (cp >> 12);
		out[1] = 0x80 | ((cp >> 6) & 0x3f);
		out[2] = 0x80 | (cp & 0x3f);
		return 3;
	}
	if (cp < 0x110000 && room >= 4) {
		out[0] = 0xf0 | (cp >> 18);
		out[1] = 0x80 | ((cp >> 12) & 0x3f);
		out[2] = 0x80 | ((cp >> 6) & 0x3f);
		out[3] = 0x80 | (cp & 0x3f);
		return 4;
	}
	return 0;
}

/* Code point of the well-formed UTF-8 sequence of k bytes at u. */
static uint32_t utf8__decode(const unsigned char *u, int k)
{
	static const unsigned char lead[] = {0, 0x7f, 0x1f, 0x0f, 0x07};
	uint32_t cp = u[0] & lead[k];
	int i;

	for (i = 1; i < k; i++)
		cp = cp << 6 | (u[i] & 0x3f);
	return cp;
}

/*
 * Characters that act on the terminal instead of showing: C0 and C1 controls, DEL, and the
 * Unicode bidi controls (ALM, LRM/RLM, LRE..RLO, LRI..PDI), which reorder what follows.
 */
static int utf8__hidden(uint32_t cp)
{
	return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == 0x61c || cp == 0x200e ||
	       cp == 0x200f || (cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069);
}

/* Text with those characters and invalid UTF-8 replaced by '?': no escape reaches a terminal. */
void utf8__write_safe(FILE *out, const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0;
	int k;

	while (i < n) {
		k = utf8__check(u + i, n - i);
		if (k < 0) {
			fputc('?', out);
			i += -k;
		} else if (utf8__hidden(utf8__decode(u + i, k))) {
			fputc('?', out);
			i += k;
		} else {
			fwrite(u + i, 1, k, out);
			i += k;
		}
	}
}
