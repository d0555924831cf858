/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The training loop's own step counter, read from outside: where the optimizer keeps no
 * step (plain SGD) or there is no optimizer, the step counts from the attach, but the loop
 * that runs the training step usually holds the number (step, global_step, iter_num, ...).
 * A local of that name in one of the loop thread's frames whose int value moves in lockstep
 * with the steps counted since the attach gives the offset between the two. The daemon finds
 * the candidates; BPF reads their values as each root forward pass begins, next to the step
 * it counts then (bpf/state.bpf.h, loop_snap), so that even a pass far shorter than the
 * daemon's look (updates by hand) gives an exact sample.
 */
#ifndef __SESSION_LOOPSTEP_H
#define __SESSION_LOOPSTEP_H

#include <stdint.h>
#include <linux/types.h>
#include "attach/probe.h"
#include "resolve/pyobject.h"
#include "resolve/remote.h"

#define LOOPSTEP_CANDS 16   /* locals followed at once (NW_LOOP_SLOTS) */
#define LOOPSTEP_FRAMES 64  /* frames of the loop thread looked at, innermost first */
#define LOOPSTEP_NAMES 64   /* locals of one frame looked at */
#define LOOPSTEP_SAMPLES 3  /* agreeing passes over at least two steps before one is used */
#define LOOPSTEP_GIVE_UP 40 /* passes seen without a counter in lockstep: the loop has none */

struct loopstep_cand {
	uint64_t frame, code; /* the frame (long-lived: the loop's) and its code */
	uint32_t index;	      /* localsplus index */
	int rank;	      /* of its name in the list of counter names: lower is preferred */
	int depth;	      /* frames out from the innermost: the outermost is preferred */
	char name[32];
	int64_t offset; /* value - steps counted since the attach */
	int samples;	/* that agreed */
	uint64_t last_step;
	int steps; /* distinct steps among them */
};

#define LOOPSTEP_CODES 64   /* code objects whose counter-named locals are remembered */
#define LOOPSTEP_PER_CODE 4 /* ... at most this many of one code */

/* A code object's locals named like a counter, read once (its names tuple says it is it). */
struct loopstep_code {
	uint64_t code, names; /* the code object, its co_localsplusnames */
	int n;		      /* entries used in index[]/rank[]/name[] */
	uint32_t index[LOOPSTEP_PER_CODE];
	int rank[LOOPSTEP_PER_CODE];
	char name[LOOPSTEP_PER_CODE][32];
};

struct loopstep {
	const struct remote *r;
	struct pyobject_layout pl;
	const struct nw_layout *l;
	int64_t names_off; /* PyCodeObject.co_localsplusnames; 0: off */
	struct loopstep_cand c[LOOPSTEP_CANDS];
	int nc;
	int chosen;  /* index into c, -1: none yet */
	int misses;  /* consecutive passes the chosen one disagreed */
	int samples; /* passes seen (or looks without a candidate) while none was chosen */
	int off;     /* off (no table key), or given up: no counter after LOOPSTEP_GIVE_UP */
	struct loopstep_code codes[LOOPSTEP_CODES];
	int ncodes, next_code; /* used; the one to replace next when full */
	uint64_t int_type;     /* int's type object in the target (as the walk saw one) */
	/* BPF's slots: which candidate each is, how many, their generation */
	int slot_cand[NW_LOOP_SLOTS];
	int nslots;
	uint64_t gen;
	uint64_t snap_iteration; /* the pass whose values were taken last */
};

void loopstep__init(struct loopstep *ls, const struct remote *r, const struct nw_layout *l,
		    uint64_t tuple_type, int64_t names_off);

/*
 * One look at the loop (cheap: a few dozen remote reads): the values BPF read from the
 * candidates as the last root forward pass began, with the step then; and new candidates
 * among the loop thread's frames, handed to BPF. Returns 1 when the counter was just found or
 * lost, 0 otherwise.
 */
int loopstep__sample(struct loopstep *ls, struct probe *p);

/* The same with BPF's state read by read(ctx, out) and its slots set by slots() (tests). */
typedef void (*loopstep_read_fn)(void *ctx, struct probe_loop *out);
typedef void (*loopstep_slots_fn)(void *ctx, const uint64_t *slots, int n, uint64_t gen);
int loopstep__sample_from(struct loopstep *ls, loopstep_read_fn read, loopstep_slots_fn slots,
			  void *ctx);

/* The counter found: its name and the offset to add to a step counted since the attach. */
int loopstep__get(const struct loopstep *ls, const char **name, int64_t *offset);

#endif /* __SESSION_LOOPSTEP_H */
