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

#endif /* __PARAMS_H */
