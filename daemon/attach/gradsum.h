/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Parameter gradients whose magnitude histograms the daemon counts: BPF sends a gradient's
 * bytes in struct nw_grad_data chunks on the gradient data ring, then its struct nw_grad
 * with data_id set and hist empty (bpf/backward.bpf.h measure_grad). The chunks of each id
 * are counted as they come; the nw_grad gets the sum. Sending them costs the target's thread
 * about half of counting them in BPF; the counting costs the daemon as much on its own CPU.
 */
#ifndef __GRADSUM_H
#define __GRADSUM_H

#include <stddef.h>
#include <stdint.h>
#include <linux/types.h>
#include "nanwatch.h"

#define GRADSUM_SLOTS 32 /* gradients counted at once (one a thread sending them) */

struct gradsum;

struct gradsum *gradsum__new(void); /* NULL: out of memory */
void gradsum__free(struct gradsum *gs);

/* One record of the gradient data ring that is not an nw_grad: a chunk, counted into its id. */
void gradsum__chunk(struct gradsum *gs, const void *data, size_t size);

/*
 * g (data_id not 0) gets its chunks' histogram: 0, or -1 when they were not all seen, in
 * order, with g->scanned elements (the gradient is dropped, and counted in gradsum__dropped).
 */
int gradsum__finish(struct gradsum *gs, struct nw_grad *g);

/* Gradients dropped so far: their chunks not all seen (more at once than GRADSUM_SLOTS). */
uint64_t gradsum__dropped(const struct gradsum *gs);

#endif /* __GRADSUM_H */
