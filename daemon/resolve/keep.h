/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Modules whose output is finite whenever their one input is: torch's own ReLU (max(x, 0)),
 * max pools (each output an element of the input) and Flatten/Unflatten (the input's data
 * viewed); and norms, whose output is non-finite whenever their input is (keep.c says why),
 * the next child of torch's own Sequential. Vouched for from the target's objects, for BPF's
 * keeps_finite() and takes_pending() (struct nw_keep, struct nw_defer): the class is torch's
 * (its name and __module__), so is its forward (the class's own, a function of that module:
 * its globals are the module's), the instance has no forward of its own, and the hook dicts
 * it and torch's _call_impl look at are found for BPF to see empty.
 */
#ifndef __RESOLVE_KEEP_H
#define __RESOLVE_KEEP_H

#include <stdint.h>
#include <linux/types.h>
#include "nanwatch.h"

struct remote;
struct pyobject_layout;

/* torch.nn.modules.<file> of a class vouched for by name, NULL for any other class name. */
const char *keep__class_module(const char *name);

/*
 * module vouched for into *out, and torch.Tensor (the forward's module's "Tensor") into
 * *tensor: 0, or -ENOENT (not such a module, or not torch's own), another negative errno
 * when the target could not be read.
 */
int keep__module(const struct remote *r, const struct pyobject_layout *pl, uint64_t module,
		 struct nw_keep *out, uint64_t *tensor);

/* A pair of consecutive children of a Sequential: 0 to go on, non-zero to stop the walk. */
typedef int (*keep_pair_fn)(void *ctx, uint64_t child, uint64_t next);

/* children of one Sequential looked at: a hostile one's walk is bounded work */
#define KEEP_MAX_CHILDREN 512

/*
 * For torch's own Sequential (its class, its forward and __iter__, none of the instance's),
 * call cb for each two children it calls one after the other, in its _modules order, and
 * fill parent's parent and parent_type. 0, -ENOENT (not such a module), another negative
 * errno when the target could not be read, or what cb returned to stop.
 */
int keep__sequence(const struct remote *r, const struct pyobject_layout *pl, uint64_t module,
		   keep_pair_fn cb, void *ctx, struct nw_defer *parent);

/*
 * &ma_used of torch's global forward pre-hook and hook dicts (_call_impl's module globals),
 * found from module (any nn.Module) into used[NW_KEEP_HOOKS]: 0 or a negative errno.
 */
int keep__globals(const struct remote *r, const struct pyobject_layout *pl, uint64_t module,
		  uint64_t used[NW_KEEP_HOOKS]);

#endif /* __RESOLVE_KEEP_H */
