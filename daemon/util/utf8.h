/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * UTF-8: checking bytes that come from another process, encoding code points,
 * and writing untrusted text where a person reads it.
 */
#ifndef __UTF8_H
#define __UTF8_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/*
 * Length of the well-formed UTF-8 sequence at s (1..4), or the negated length
 * of its maximal invalid prefix (-1..-3), the unit replaced by one U+FFFD.
 */
int utf8__check(const unsigned char *s, size_t n);

/*
 * Code point cp as UTF-8 into out (room bytes); a surrogate becomes U+FFFD.
 * Returns the bytes written, or 0 if it does not fit or cp is past U+10FFFF.
 */
size_t utf8__encode(char *out, size_t room, uint32_t cp);

/*
 * n bytes of text for a person: C0/C1 controls, DEL, Unicode bidi controls and
 * invalid UTF-8 written as '?', so nothing from the target acts on a terminal.
 */
void utf8__write_safe(FILE *out, const char *s, size_t n);

#endif /* __UTF8_H */
