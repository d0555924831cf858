// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * libFuzzer target: the layout table parser (daemon/layout.c) and everything that reads a
 * parsed table (layout__fill, remote__layout_from, layout__int, layout__str). A table the
 * parser accepts must hold only what its checks promise.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "layout.h"
#include "remote.h"

static const char *const keys[] = {
	"kind", "version", "frame_code", "impl_numel", "managed_dict", "debug_frame_code",
	"node_symbol", "vtable_offset", "step_symbol_prefix", "backward_symbol", "",
};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[256] = "";
	struct remote_layout rl;
	struct nw_layout nwl;
	struct layout *l;
	const char *s;
	long long v;
	size_t i;

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
	memset(&rl, 0, sizeof(rl));
	if (!strcmp(layout__kind(l), "python"))
		remote__layout_from(&rl, l, err, sizeof(err));
	for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		s = layout__str(l, keys[i]);
		if (s && strlen(s) > LAYOUT_MAX_LINE)
			abort();
		if (!layout__int(l, keys[i], &v) && layout__has_range(keys[i]) &&
		    (v < -64 || v > (1LL << 31)))
			abort();	/* a ranged key out of every range got through */
	}
	layout__free(l);
	return 0;
}
