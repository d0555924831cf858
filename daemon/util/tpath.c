// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* A tensor's path in what a call returned. */
#include <stdio.h>
#include <string.h>
#include "util/tpath.h"

/* The key's length if it is plain (see tpath.h), else 0. */
static size_t plain_key(const char *key, size_t key_len)
{
	size_t n, i;

	if (!key)
		return 0;
	n = strnlen(key, key_len);
	if (n == key_len) /* not terminated */
		return 0;
	for (i = 0; i < n; i++)
		if (key[i] < 0x20 || key[i] > 0x7e || key[i] == '\'' || key[i] == '\\')
			return 0;
	return n;
}

/* The key's length if it is an ASCII identifier, else 0. */
static size_t ident_key(const char *key, size_t key_len)
{
	size_t n = plain_key(key, key_len), i;

	for (i = 0; i < n; i++) {
		char c = key[i];

		if (!(c >= 'a' && c <= 'z') && !(c >= 'A' && c <= 'Z') && c != '_' &&
		    (!i || !(c >= '0' && c <= '9')))
			return 0;
	}
	return n;
}

void tpath__format(char *buf, size_t len, const char *base, unsigned int idx0, unsigned int idx1,
		   const char *key, size_t key_len)
{
	int attr = idx0 != TPATH_NONE && idx0 >= TPATH_ATTR && idx0 < 0xfe;
	size_t n = idx0 == TPATH_NONE ? 0
		   : attr	      ? ident_key(key, key_len)
				      : plain_key(key, key_len);
	int at;

	if (idx0 == TPATH_NONE)
		at = snprintf(buf, len, "%s", base);
	else if (attr && n)
		at = snprintf(buf, len, "%s.%.*s", base, (int)n, key);
	else if (attr)
		at = snprintf(buf, len, "%s.<%u>", base, idx0 & ~TPATH_ATTR);
	else if (n)
		at = snprintf(buf, len, "%s['%.*s']", base, (int)n, key);
	else
		at = snprintf(buf, len, "%s[%u]", base, idx0);
	if (idx0 != TPATH_NONE && idx1 != TPATH_NONE && at >= 0 && (size_t)at < len)
		snprintf(buf + at, len - at, "[%u]", idx1);
}
