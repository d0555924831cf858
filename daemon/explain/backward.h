/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The backward pass in user space: autograd node class names from their vtables
 * (resolve/vtable.c) and gradient norms per backward pass from the parameter gradient
 * histograms the BPF side sends (explain/backward.c). The torch table's backward keys are
 * read by resolve/backward_layout.h.
 */
#ifndef __BACKWARD_H
#define __BACKWARD_H

#include <stddef.h>
#include <stdint.h>
#include <linux/types.h>
#include "nanwatch.h"
#include "output/finding.h"

struct layout;
struct remote;
struct names;
struct backward;
struct vtable_names;

#define BWD_HISTORY 64 /* backward passes whose norms are kept */

/*
 * vt: the node classes (resolve/vtable.h), which the new object owns, freed with it (also on
 * failure). NULL + errno on failure. var_tensor: THPVariable's TensorImpl* offset.
 */
struct backward *backward__new(struct vtable_names *vt, const struct remote *r, int64_t var_tensor);
void backward__free(struct backward *b);

/* "LogBackward0" for a node's vtable pointer; NULL if it names no class we know. */
const char *backward__class(struct backward *b, uint64_t vptr);

/*
 * The forward op behind a node class, in words: "SqrtBackward0" -> "sqrt",
 * "NativeLayerNormBackward0" -> "native_layer_norm" (autograd names a derivative after its
 * ATen op, camel-cased). -EINVAL when name is not an op's node (AccumulateGrad, a Python
 * Function's node) or the op does not fit len.
 */
int backward__op_name(const char *name, char *out, size_t len);

/* Parameters of a module (THPVariable objects): their gradients count towards it. */
void backward__note_params(struct backward *b, uint64_t root, uint64_t module,
			   const struct nw_params *np);

/* Add one parameter gradient's histogram; 1 when it completed the previous pass's norm. */
int backward__grad(struct backward *b, const struct nw_grad *g);

/*
 * End the pass in progress (at detach). missed: the parameter gradients not measured so far
 * (the counters' NW_C_BWD_GRADS_LOST + NW_C_BWD_NORM_SKIPPED, as nw_grad.lost counts them):
 * more than the pass's last gradient said, and its last ones may be missing.
 */
void backward__flush(struct backward *b, uint64_t missed);

/* The completed passes' norms, oldest first, at most max; returns how many. */
int backward__norms(const struct backward *b, struct grad_norm *out, int max);

/* Finish the pass being summed if it belongs to an iteration before this one (whose forward
 * has begun: that pass is over). */
void backward__settle(struct backward *b, uint64_t iteration);

/* Sum-of-squares bounds of one histogram (exposed for tests). */
void backward__hist_bounds(const uint32_t *hist, double *lo2, double *hi2, double *max_lo,
			   double *max_hi, uint64_t *nonfinite);

#endif /* __BACKWARD_H */
