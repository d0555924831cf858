/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The events ring's raw records decoded, once each, into named findings. */
#ifndef __EXPLAIN_DECODE_H
#define __EXPLAIN_DECODE_H

#include <stddef.h>
#include <stdint.h>
#include "output/finding.h"

struct names;
struct backward;

/*
 * One raw record of the events ring buffer (size bytes at data, any alignment) as a finding:
 * the step word split, the tensor path, dtype and verdicts spelled out, the module's layer
 * path (names) and the autograd nodes' classes (bwd) looked up; names and bwd may be NULL
 * (then not named). -EINVAL for a record shorter than struct nw_event (not ours); a record of
 * a type that is no finding gives kind FINDING_NONE.
 */
int explain__decode(const void *data, size_t size, struct names *names, struct backward *bwd,
		    struct finding *f);

/* Where a step word's count comes from (enum finding_step_source). */
int decode__step_source(uint64_t step_word);

#endif /* __EXPLAIN_DECODE_H */
