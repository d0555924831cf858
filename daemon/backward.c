// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The torch table's backward keys, read for the BPF side's backward-pass checks. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "backward.h"
#include "elfsym.h"
#include "layout.h"

static int layout_int(const struct layout *tl, const char *key, __s64 *out, char *err,
		      size_t errlen)
{
	long long v;
	int ret = layout__int(tl, key, &v);

	if (ret)
		snprintf(err, errlen, "key %s: %s", key, ret == -ENOENT ? "missing" : "not an integer");
	else
		*out = v;
	return ret;
}

int backward__layout(const struct layout *tl, const char *torch_cpu_file, uint64_t base,
		     struct nw_bwd_layout *out, char *sym, size_t symlen, char *err,
		     size_t errlen)
{
	const char *node = layout__str(tl, "node_symbol");
	const char *acc = layout__str(tl, "acc_vtable_symbol");
	struct nw_bwd_layout bl = {};
	__s64 voff = 0;
	uint64_t addr, first;
	struct elfsym *e;
	int ret;

	if (!node || !acc)
		return -ENOENT;
	ret = layout_int(tl, "impl_autograd_meta", &bl.impl_autograd_meta, err, errlen);
	ret = ret ?: layout_int(tl, "meta_grad_fn", &bl.meta_grad_fn, err, errlen);
	ret = ret ?: layout_int(tl, "node_next_edges", &bl.node_next_edges, err, errlen);
	ret = ret ?: layout_int(tl, "edge_size", &bl.edge_size, err, errlen);
	ret = ret ?: layout_int(tl, "edge_input_nr", &bl.edge_input_nr, err, errlen);
	ret = ret ?: layout_int(tl, "acc_variable", &bl.acc_variable, err, errlen);
	ret = ret ?: layout_int(tl, "inputbuf_items", &bl.inputbuf_items, err, errlen);
	ret = ret ?: layout_int(tl, "vtable_offset", &voff, err, errlen);
	if (ret)
		return ret;
	if (strlen(node) >= symlen) {
		snprintf(err, errlen, "node_symbol too long");
		return -ENAMETOOLONG;
	}
	e = torch_cpu_file[0] && base ? elfsym__open(torch_cpu_file) : NULL;
	if (!e) {
		snprintf(err, errlen, "failed to open the target's libtorch_cpu");
		return -ENOENT;
	}
	ret = elfsym__find(e, acc, &addr) ?: elfsym__first_load(e, &first);
	elfsym__close(e);
	if (ret) {
		snprintf(err, errlen, "no symbol %.80s in %.200s", acc, torch_cpu_file);
		return ret;
	}
	bl.acc_vptr = base - first + addr + voff;
	strcpy(sym, node);
	*out = bl;
	return 0;
}
