/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * GPU scan results turned into findings: a bad module output waits for the results of the
 * inputs and parameters gated on it (origin vs propagated), then goes through the explain
 * stage as a CPU finding does, with its device named. Results arrive checked against their
 * request (daemon/attach/gpulink.c).
 */
#ifndef __EXPLAIN_GPURES_H
#define __EXPLAIN_GPURES_H

#include <stdint.h>
#include <linux/types.h>
#include "output/finding.h"
#include "nanwatch.h"
#include "nwgpu.h"

struct explain;
struct names;

#define GPURES_PENDING 64 /* bad outputs waiting for their inputs' results */
#define GPURES_WAIT_S 2.0 /* how long one waits before it is written with what is known */

/* What the results gated on one output said about its call's inputs and parameters. */
struct gpures_gated {
	uint32_t got;			     /* gated results received */
	uint32_t inputs_bad, inputs_unknown; /* unknown: not scanned (dtype, capture, ...) */
	uint32_t params_bad, params_unknown;
};

struct gpures_pending {
	struct nw_gpu_req req;
	struct nw_gpu_result res;
	struct gpures_gated g;
	double since;
};

struct gpures {
	struct explain *x;
	struct names *names;
	const char *kind; /* device type name: "cuda" ("meta" under the test switch) */
	struct gpures_pending p[GPURES_PENDING];
	int n; /* held, oldest first */
	uint64_t first_iter_p1, last_iter_p1;
	uint64_t found, suppressed, loss_found, loss_suppressed; /* like the BPF counters */
	uint64_t not_scanned;					 /* output results with no counts */
	/* the ring's slot of a held output again: BPF finishes its gated counts after its seq */
	int (*reread)(void *ctx, uint64_t seq, struct nw_gpu_req *out);
	void *reread_ctx;
	int (*write)(struct explain *x, const struct finding *f); /* explain__finding */
};

void gpures__init(struct gpures *g, struct explain *x, struct names *names, const char *kind);

/*
 * One result and its request (NULL: the ring no longer held it, nothing to say). A bad
 * output or loss is held or written; a gated result is counted for its output.
 */
int gpures__result(struct gpures *g, const struct nw_gpu_req *req, const struct nw_gpu_result *r,
		   double now);

/* Write the held outputs whose gated results are in or that waited long enough (now). */
int gpures__flush(struct gpures *g, double now);

/* Write every held output now (the watch ends, or the library went away). */
int gpures__flush_all(struct gpures *g);

/*
 * The finding of a bad output or loss result: its request's context, the counts, and the
 * verdicts from g (NULL: nothing known of its inputs). device is "KIND:INDEX" (or KIND
 * alone without an index) written into devbuf; names may be NULL.
 */
void gpures__finding(const struct nw_gpu_req *req, const struct nw_gpu_result *r,
		     const struct gpures_gated *g, const char *kind, struct names *names,
		     char *devbuf, size_t devlen, struct finding *f);

#endif /* __EXPLAIN_GPURES_H */
