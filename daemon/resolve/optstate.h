/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Where a torch optimizer keeps its own step count, read from the target. */
#ifndef __OPTSTATE_H
#define __OPTSTATE_H

#include <stdint.h>

struct remote;

/* Offsets of a torch tensor object (THPVariable) from the torch table. */
struct optstate_layout {
	int64_t var_borrowed;
	int64_t var_tensor;
};

/*
 * The c10::TensorImpl* of opt.state[p]['step'] for the first parameter p in the
 * optimizer's state (Adam, AdamW, Adagrad, ... keep it as a 0-dim tensor).
 * -ENOENT: no state yet (no step taken) or no 'step' kept (SGD); -EINVAL: a
 * 'step' that is not a tensor (torch 1.13's RMSprop keeps an int); other
 * negative errnos for what could not be read.
 */
int optstate__step_impl(const struct remote *r, const struct optstate_layout *l, uint64_t opt,
			uint64_t *impl);

#endif /* __OPTSTATE_H */
