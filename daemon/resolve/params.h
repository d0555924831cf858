/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* A module's own parameters, listed for the BPF side to scan at an anomaly. */
#ifndef __PARAMS_H
#define __PARAMS_H

#include <stdint.h>
#include <linux/types.h>
#include "nanwatch.h"

struct remote;

/* The non-None values of module._parameters, in order; 0 or a negative errno. */
int params__list(const struct remote *r, uint64_t module, struct nw_params *out);

#define PARAMS_MAX_BYTES (64ULL << 20) /* a parameter larger than this is not read late */

/* What reading a tensor object from user space needs. */
struct params_reader {
	const struct remote *r;
	const struct nw_layout *l;
	uint64_t tensor_type; /* &THPVariableType */
};

/* The parameters' data, read now: counts as struct nw_event's params_* fields. */
struct params_check {
	uint32_t checked;
	uint32_t nonfinite;
	uint32_t skipped; /* not readable, not dense, not on the CPU, too large */
};

/*
 * Scan one tensor object's data for NaN/±Inf as BPF does: 1 some element is,
 * 0 none, 2 not a float tensor (cannot be NaN), a negative errno if not scanned.
 */
int params__scan_tensor(const struct params_reader *pr, uint64_t obj);

/* Scan np's tensors into out (np->more counts as skipped). */
void params__check(const struct params_reader *pr, const struct nw_params *np,
		   struct params_check *out);

/*
 * The verdict on parameters read after the anomaly: read is what the data holds
 * now (1 all finite, 0 some not, -1 unknown); stepped: an optimizer step began
 * between the anomaly and the end of the read. Without one these are the values
 * the layer used. With one, finite values still stand (an update cannot make a
 * NaN or Inf parameter finite again), non-finite ones may be the update's: -1.
 */
int params__late_verdict(int read, int stepped);

#endif /* __PARAMS_H */
