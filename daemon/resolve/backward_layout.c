// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The torch table's backward keys, read for the BPF side's backward-pass checks. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "resolve/backward_layout.h"
#include "resolve/elfsym.h"
#include "resolve/layout.h"
#include "resolve/seqtls.h"

#define SEQ_PEEK "_ZN2at15sequence_number4peekEv"

/*
 * The vtable pointers of the nodes that make a module's output, for the loss's walk to stop
 * at; a class the library lacks is left out (0).
 */
static void end_nodes(struct elfsym *torch_cpu, uint64_t bias, struct nw_bwd_layout *bl)
{
	static const char *const ends[] = {
		"AddmmBackward0",
		"MmBackward0",
		"BmmBackward0",
		"ConvolutionBackward0",
		"NativeLayerNormBackward0",
		"NativeBatchNormBackward0",
		"NativeGroupNormBackward0",
		"LinearBackward0",
	};
	char sym[96];
	uint64_t addr;
	size_t i, n = 0;

	_Static_assert(sizeof(ends) / sizeof(ends[0]) <= NW_LOSS_ENDS, "each end has a slot");
	for (i = 0; i < sizeof(ends) / sizeof(ends[0]); i++) {
		snprintf(sym, sizeof(sym), "_ZTVN5torch8autograd9generated%zu%sE", strlen(ends[i]),
			 ends[i]);
		if (!elfsym__find(torch_cpu, sym, &addr))
			bl->end_vptr[n++] = bias + addr;
	}
}

int backward__layout(const struct layout *tl, struct elfsym *torch_cpu, uint64_t base,
		     struct nw_bwd_layout *out, char *sym, size_t symlen, char *err, size_t errlen)
{
	const char *node = layout__str(tl, LK_node_symbol);
	const char *acc = layout__str(tl, LK_acc_vtable_symbol);
	struct nw_bwd_layout bl = {};
	long long voff = 0;
	uint64_t addr, first;
	int ret;

	if (!node || !acc)
		return -ENOENT;
	ret = layout__fill_bwd(tl, &bl, err, errlen);
	if (!ret && layout__int(tl, LK_vtable_offset, &voff)) {
		snprintf(err, errlen, "key vtable_offset: missing");
		ret = -ENOENT;
	}
	if (ret)
		return ret;
	if (strlen(node) >= symlen) {
		snprintf(err, errlen, "node_symbol too long");
		return -ENAMETOOLONG;
	}
	if (!torch_cpu || !base) {
		snprintf(err, errlen, "failed to open the target's libtorch_cpu");
		return -ENOENT;
	}
	ret = elfsym__find(torch_cpu, acc, &addr) ?: elfsym__first_load(torch_cpu, &first);
	if (ret) {
		snprintf(err, errlen, "no symbol %.80s in the target's libtorch_cpu: %s", acc,
			 strerror(-ret));
		return ret;
	}
	bl.acc_vptr = base - first + addr + voff;
	end_nodes(torch_cpu, base - first + voff, &bl);
	strcpy(sym, node);
	*out = bl;
	return 0;
}

int backward__seq_counter(const struct layout *tl, struct elfsym *torch_cpu, uint64_t base,
			  const struct remote *r, struct nw_bwd_layout *bl)
{
	long long off = -1;
	uint64_t addr, first, modid, offset;
	int ret;

	bl->node_sequence_nr = -1;
	bl->seq_modid = bl->seq_offset = 0;
	if (layout__int(tl, LK_node_sequence_nr, &off) || off < 0)
		return -ENOENT;
	if (!torch_cpu || !base)
		return -ENOENT;
	ret = elfsym__find(torch_cpu, SEQ_PEEK, &addr) ?: elfsym__first_load(torch_cpu, &first);
	if (!ret)
		ret = seqtls__resolve(r, base - first + addr, &modid, &offset);
	if (ret)
		return ret;
	bl->node_sequence_nr = off;
	bl->seq_modid = modid;
	bl->seq_offset = offset;
	return 0;
}
