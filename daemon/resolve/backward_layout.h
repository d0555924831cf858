/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The torch table's backward keys, for the BPF side's backward-pass checks. */
#ifndef __BACKWARD_LAYOUT_H
#define __BACKWARD_LAYOUT_H

#include <stddef.h>
#include <stdint.h>
#include <linux/types.h>
#include "nanwatch.h"

struct elfsym;
struct layout;
struct remote;

/*
 * Read the torch table's backward keys into *out (acc_vptr resolved against the target's
 * libtorch_cpu mapped at base) and the probe symbol into sym. -ENOENT when the table has
 * no backward keys (then the backward pass is not checked); other errors as layout__fill.
 */
int backward__layout(const struct layout *tl, struct elfsym *torch_cpu, uint64_t base,
		     struct nw_bwd_layout *out, char *sym, size_t symlen, char *err, size_t errlen);

/*
 * Where the target's at::sequence_number counter is (module id, offset) and the table's
 * Node.sequence_nr_, into bl, so that BPF can name the module call that made a node.
 * Negative (bl left with node_sequence_nr -1, seq_modid 0: nodes are then named by the
 * module outputs they are the grad_fn of) when the table lacks the key or the code of
 * peek() is of a kind not decoded.
 */
int backward__seq_counter(const struct layout *tl, struct elfsym *torch_cpu, uint64_t base,
			  const struct remote *r, struct nw_bwd_layout *bl);

#endif /* __BACKWARD_LAYOUT_H */
