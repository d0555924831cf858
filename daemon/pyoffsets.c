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
#include "layout.h"
#include "pyoffsets.h"
#include "remote.h"

#define COOKIE "xdebugpy"

struct target_field {
	const char *key;
	size_t nl_off;		/* offset in struct nw_layout, or (size_t)-1 */
	size_t rl_off;		/* offset in struct remote_layout, or (size_t)-1 */
};

#define NONE ((size_t)-1)
#define NL(f) offsetof(struct nw_layout, f)
#define RL(f) offsetof(struct remote_layout, f)

static const struct target_field fields[] = {
	{"frame_code", NL(frame_code), NONE},
	{"frame_localsplus", NL(frame_localsplus), NONE},
	{"frame_previous", NL(frame_previous), NONE},
	{"tstate_frame", NL(tstate_frame), NONE},
	{"code_name", NL(code_name), NONE},
	{"code_filename", NL(code_filename), NONE},
	{"obj_type", NL(obj_type), RL(obj_type)},
	{"type_name", NL(type_name), RL(type_name)},
	{"type_flags", NONE, RL(type_flags)},
	{"tuple_items", NL(tuple_items), NONE},
	{"list_items", NL(list_items), NONE},
	{"var_size", NL(var_size), NONE},
	{"dict_keys", NONE, RL(dict_keys)},
	{"dict_values", NONE, RL(dict_values)},
	{"unicode_state", NL(unicode_state), RL(unicode_state)},
	{"unicode_length", NL(unicode_length), RL(unicode_length)},
	{"unicode_ascii_data", NL(unicode_ascii_data), RL(unicode_ascii_data)},
};

int pyoffsets__apply_words(const uint64_t *words, size_t n, uint64_t py_version,
			   const struct layout *py, struct nw_layout *nl,
			   struct remote_layout *rl, char *err, size_t errlen)
{
	int taken = 0;
	size_t i;

	for (i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
		char key[64];
		long long idx;
		int64_t v;

		snprintf(key, sizeof(key), "debug_%s", fields[i].key);
		if (layout__int(py, key, &idx))
			continue;
		if (!taken) {
			/* only now is the table relying on them: check what we read */
			if (n < 2 || memcmp(&words[0], COOKIE, 8)) {
				snprintf(err, errlen, "no _Py_DebugOffsets cookie in the target's "
					 "_PyRuntime");
				return -ENOENT;
			}
			if ((words[1] >> 16) != (py_version >> 16)) {
				snprintf(err, errlen, "_Py_DebugOffsets version %#llx does not match "
					 "Py_Version %#llx", (unsigned long long)words[1],
					 (unsigned long long)py_version);
				return -EINVAL;
			}
		}
		if (idx < 2 || (size_t)idx >= n || words[idx] > 1 << 20) {
			snprintf(err, errlen, "python layout: %s names word %lld, outside what "
				 "_Py_DebugOffsets holds", key, idx);
			return -ERANGE;
		}
		v = words[idx];
		if (fields[i].nl_off != NONE)
			*(__s64 *)((char *)nl + fields[i].nl_off) = v;
		if (fields[i].rl_off != NONE)
			*(int64_t *)((char *)rl + fields[i].rl_off) = v;
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
