// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * libFuzzer target: the gradient data ring's records (attach/gradsum.c) as the daemon reads
 * them, without BPF. An input is a run of records, each a little-endian 16-bit size and that
 * many bytes: an nw_grad (type NW_EV_GRAD) finishes its id, anything else goes in as a chunk.
 * Whatever they hold, the counts stay inside the histogram and nothing is read past a record.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "attach/gradsum.h"

static struct gradsum *gs;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct nw_grad g;
	uint32_t type;
	size_t n, i;

	if (!gs)
		gs = gradsum__new();
	if (!gs)
		abort();
	for (i = 0; i + 2 <= size; i += n) {
		uint8_t *rec;

		n = (size_t)data[i] | (size_t)data[i + 1] << 8;
		i += 2;
		if (n > size - i)
			n = size - i;
		/* a record of its own, as the ring hands one: reads past it are caught */
		rec = malloc(n ? n : 1);
		if (!rec)
			abort();
		memcpy(rec, data + i, n);
		type = 0;
		if (n >= sizeof(type))
			memcpy(&type, rec, sizeof(type));
		if (type == NW_EV_GRAD && n >= sizeof(g)) {
			memcpy(&g, rec, sizeof(g));
			gradsum__finish(gs, &g);
		} else {
			gradsum__chunk(gs, rec, n);
		}
		free(rec);
	}
	return 0;
}
