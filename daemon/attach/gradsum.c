// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
#include <stdlib.h>
#include <string.h>
#include "attach/gradsum.h"

struct slot {
	uint32_t id;   /* 0: free */
	uint32_t next; /* the chunk index expected next */
	uint32_t bad;  /* a chunk out of order, or of another dtype */
	uint32_t dtype;
	uint64_t elems; /* counted so far */
	uint64_t used;	/* when it last got a chunk (a count of chunks) */
	uint32_t hist[NW_HIST_BUCKETS];
};

struct gradsum {
	struct slot slot[GRADSUM_SLOTS];
	uint64_t clock;
	uint64_t dropped;
};

struct gradsum *gradsum__new(void)
{
	return calloc(1, sizeof(struct gradsum));
}

void gradsum__free(struct gradsum *gs)
{
	free(gs);
}

uint64_t gradsum__dropped(const struct gradsum *gs)
{
	return gs ? gs->dropped : 0;
}

/* id's slot, or a free one, or the one unused longest, for it. */
static struct slot *slot_for(struct gradsum *gs, uint32_t id)
{
	struct slot *old = &gs->slot[0], *free_one = NULL;
	int i;

	for (i = 0; i < GRADSUM_SLOTS; i++) {
		struct slot *s = &gs->slot[i];

		if (s->id == id)
			return s;
		if (!s->id && !free_one)
			free_one = s;
		if (s->used < old->used)
			old = s;
	}
	/* a gradient still counting there loses its slot: its nw_grad is then dropped */
	if (!free_one)
		free_one = old;
	memset(free_one, 0, offsetof(struct slot, hist));
	memset(free_one->hist, 0, sizeof(free_one->hist));
	free_one->id = id;
	return free_one;
}

/*
 * The buckets of bpf/backward.bpf.h's hist_f32 and hist_bf16: bits 21..30 of a float32
 * (sign dropped); a bfloat16 is the top half of a float32, and goes where that one would.
 */
static void count(uint32_t *hist, const unsigned char *p, size_t n, int bf16)
{
	size_t i, size = bf16 ? 2 : 4;
	uint32_t v;
	uint16_t h;

	for (i = 0; i + size <= n; i += size) {
		if (bf16) {
			memcpy(&h, p + i, 2);
			v = (uint32_t)h << 16;
		} else {
			memcpy(&v, p + i, 4);
		}
		hist[(v >> 21) & (NW_HIST_BUCKETS - 1)]++;
	}
}

void gradsum__chunk(struct gradsum *gs, const void *data, size_t size)
{
	struct nw_grad_data d;
	const unsigned char *p = (const unsigned char *)data + sizeof(d);
	struct slot *s;

	if (!gs || size < sizeof(d))
		return;
	memcpy(&d, data, sizeof(d));
	if (d.type != NW_EV_GRAD_DATA || !d.id || d.bytes > size - sizeof(d) ||
	    d.bytes > NW_SCAN_CHUNK)
		return;
	s = slot_for(gs, d.id);
	s->used = ++gs->clock;
	if (d.index != s->next || (s->next && d.dtype != s->dtype) ||
	    (d.dtype != (__u32)NW_DT_F32 && d.dtype != (__u32)NW_DT_BF16)) {
		s->bad = 1;
		return;
	}
	s->next++;
	s->dtype = d.dtype;
	count(s->hist, p, d.bytes, d.dtype == (__u32)NW_DT_BF16);
	s->elems += d.bytes / (d.dtype == (__u32)NW_DT_BF16 ? 2 : 4);
}

int gradsum__finish(struct gradsum *gs, struct nw_grad *g)
{
	struct slot *s = NULL;
	int i, ok;

	if (!gs || !g->data_id)
		return -1;
	for (i = 0; i < GRADSUM_SLOTS && !s; i++)
		if (gs->slot[i].id == g->data_id)
			s = &gs->slot[i];
	/* a gradient of no bytes sends no chunk */
	ok = s ? !s->bad && s->next == g->data_chunks && s->elems == g->scanned &&
			     s->dtype == g->dtype
	       : !g->data_chunks && !g->scanned;
	if (ok && s)
		memcpy(g->hist, s->hist, sizeof(g->hist));
	else if (ok)
		memset(g->hist, 0, sizeof(g->hist));
	if (s)
		s->id = 0;
	if (!ok)
		gs->dropped++;
	return ok ? 0 : -1;
}
