/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * A tensor's path in what a call returned: "output", "output[1][0]", "output['logits']",
 * "output.logits".
 */
#ifndef __TPATH_H
#define __TPATH_H

#include <stddef.h>

#define TPATH_NONE 0xff /* an index not used (the events' NW_NO_INDEX) */
#define TPATH_ATTR 0x80 /* or-ed into idx0: an object's attribute (the events' NW_ATTR_INDEX) */

/*
 * base, base[idx0] or base[idx0][idx1] into buf (len bytes). With a dict's key (key_len
 * bytes, NUL-terminated or not; NULL: none), base['key'] takes the place of base[idx0] when
 * the key is plain: 1 to key_len - 1 printable ASCII characters, no quote, no backslash.
 * An idx0 with TPATH_ATTR (below 0xfe) is the place among an object's attributes: base.key
 * when the key is an identifier (ASCII letters, digits and _, not led by a digit), else
 * base.<place>.
 */
void tpath__format(char *buf, size_t len, const char *base, unsigned int idx0, unsigned int idx1,
		   const char *key, size_t key_len);

#endif /* __TPATH_H */
