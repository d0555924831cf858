// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * CPython 3.13 publishes the offsets debuggers need at the start of
 * _PyRuntime (_Py_DebugOffsets: cookie "xdebugpy", PY_VERSION_HEX, then
 * uint64 fields). Where the layout table says which word holds which offset,
 * the target's own value wins over the table's measured one.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "resolve/layout.h"
#include "resolve/pyoffsets.h"
#include "resolve/remote.h"

#define COOKIE "xdebugpy"

int pyoffsets__apply_words(const uint64_t *words, size_t n, uint64_t py_version,
			   const struct layout *py, struct nw_layout *nl, struct remote_layout *rl,
			   char *err, size_t errlen)
{
	int taken = 0;
	int k;

	/* every key layout_keys.def marks published, where the table names its word */
	for (k = 0; k < LK__COUNT; k++) {
		long long idx;
		int64_t v;

		if (!layout_keys[k].published || layout__debug_word(py, k, &idx))
			continue;
		if (!taken) {
			/* only now is the table relying on them: check what we read */
			if (n < 2 || memcmp(&words[0], COOKIE, 8)) {
				snprintf(err, errlen,
					 "no _Py_DebugOffsets cookie in the target's "
					 "_PyRuntime");
				return -ENOENT;
			}
			if ((words[1] >> 16) != (py_version >> 16)) {
				snprintf(err, errlen,
					 "_Py_DebugOffsets version %#llx does not match "
					 "Py_Version %#llx",
					 (unsigned long long)words[1],
					 (unsigned long long)py_version);
				return -EINVAL;
			}
		}
		if (idx < 2 || (size_t)idx >= n || words[idx] > 1 << 20) {
			snprintf(err, errlen,
				 "python layout: debug_%s names word %lld, outside what "
				 "_Py_DebugOffsets holds",
				 layout_keys[k].name, idx);
			return -ERANGE;
		}
		v = words[idx];
		layout__set(nl, k, v);
		remote__layout_set(rl, k, v);
		taken++;
	}
	return taken;
}

int pyoffsets__apply(const struct remote *r, uint64_t runtime, uint64_t py_version,
		     const struct layout *py, struct nw_layout *nl, struct remote_layout *rl,
		     char *err, size_t errlen)
{
	uint64_t words[PYOFFSETS_WORDS] = {};
	size_t n = PYOFFSETS_WORDS;

	/* unreadable: n = 0, an error only if the table relies on published offsets */
	if (!runtime || remote__read(r, runtime, words, sizeof(words)))
		n = 0;
	return pyoffsets__apply_words(words, n, py_version, py, nl, rl, err, errlen);
}
