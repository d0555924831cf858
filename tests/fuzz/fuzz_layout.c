// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * libFuzzer target: the layout table loader (daemon/resolve/layout.c on daemon/util/yamlmap.c and
 * libyaml) and everything that reads a parsed table (layout__fill and the backward and
 * rescan fills, remote__layout_from, layout__int, layout__str). A table the loader accepts
 * must hold only what its checks promise: every value in its key's range.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "resolve/layout.h"
#include "resolve/remote.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[256] = "";
	struct nw_bwd_layout bl = {};
	struct remote_layout rl;
	struct nw_rescan rs;
	struct nw_layout nwl;
	struct layout *l;
	const char *s;
	long long v;
	int k;

	l = layout__parse("fuzz.yaml", (const char *)data, size, err, sizeof(err));
	if (!l) {
		/* refused: one line, naming the table */
		if (!strstr(err, "fuzz.yaml") || strchr(err, '\n'))
			abort();
		return 0;
	}
	if (strcmp(layout__kind(l), "python") && strcmp(layout__kind(l), "torch"))
		abort();
	memset(&nwl, 0, sizeof(nwl));
	layout__fill(l, &nwl, err, sizeof(err));
	layout__fill_bwd(l, &bl, err, sizeof(err));
	layout__fill_rescan(l, &rs, err, sizeof(err));
	memset(&rl, 0, sizeof(rl));
	if (!strcmp(layout__kind(l), "python"))
		remote__layout_from(&rl, l, err, sizeof(err));
	for (k = 0; k < LK__COUNT; k++) {
		const struct layout_key_def *d = &layout_keys[k];

		s = layout__str(l, k);
		if (s && strlen(s) > LAYOUT_MAX_SCALAR)
			abort();
		if (s && layout__is_str(d->type) &&
		    (strlen(s) < (size_t)d->min || strlen(s) > (size_t)d->max))
			abort(); /* a string of the wrong length got through */
		if (!layout__int(l, k, &v) && (v < d->min || v > d->max))
			abort(); /* an integer out of its key's range got through */
		if (!layout__debug_word(l, k, &v) && (!d->published || v < 2 || v > 127))
			abort();
	}
	layout__free(l);
	return 0;
}
