// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The training loop's step counter, found among the loop thread's frames (loopstep.h). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <linux/types.h>
#include "nanwatch.h"
#include "session/loopstep.h"

/* Names training loops give their step counter, the likeliest first. */
static const char *const counter_names[] = {
	"global_step", "iter_num",  "step",   "steps",	   "step_idx", "train_step",
	"num_updates", "updates",   "update", "iteration", "iter",     "it",
	"n_iter",      "batch_idx", "batch",  "i",
};

static int name_rank(const char *name)
{
	size_t i;

	for (i = 0; i < sizeof(counter_names) / sizeof(counter_names[0]); i++)
		if (!strcmp(name, counter_names[i]))
			return (int)i;
	return -1;
}

void loopstep__init(struct loopstep *ls, const struct remote *r, const struct nw_layout *l,
		    uint64_t tuple_type, int64_t names_off)
{
	memset(ls, 0, sizeof(*ls));
	ls->r = r;
	ls->l = l;
	ls->pl.l = l;
	ls->pl.tuple_type = tuple_type;
	ls->names_off = names_off;
	ls->chosen = -1;
	ls->off = names_off <= 0;
}

/* The thread's innermost Python frame (3.11, 3.12: through its _PyCFrame). */
static uint64_t top_frame(const struct loopstep *ls, uint64_t tstate)
{
	uint64_t f = 0;

	if (remote__u64(ls->r, tstate + ls->l->tstate_frame, &f) || !f)
		return 0;
	if (ls->l->cframe_frame >= 0 && remote__u64(ls->r, f + ls->l->cframe_frame, &f))
		return 0;
	return f;
}

/* An int local's value; -1 if the slot holds anything else. */
static int int_local(const struct loopstep *ls, uint64_t frame, uint32_t i, long long *v)
{
	struct py_value pv;
	uint64_t obj = 0;

	if (remote__u64(ls->r, frame + ls->l->frame_localsplus + 8 * (uint64_t)i, &obj) || !obj ||
	    pyobject__value(ls->r, &ls->pl, obj, &pv))
		return -1;
	pyobject__value_free(&pv);
	if (pv.kind != PY_INT || pv.i < 0)
		return -1;
	*v = pv.i;
	return 0;
}

static struct loopstep_cand *find(struct loopstep *ls, uint64_t frame, uint64_t code,
				  uint32_t index)
{
	int i;

	for (i = 0; i < ls->nc; i++)
		if (ls->c[i].frame == frame && ls->c[i].code == code && ls->c[i].index == index)
			return &ls->c[i];
	return NULL;
}

/* A local seen with value v at step: a new candidate, one more agreeing sample, or reset. */
static void observe(struct loopstep *ls, uint64_t frame, uint64_t code, uint32_t index,
		    const char *name, int rank, int depth, long long v, uint64_t step)
{
	struct loopstep_cand *c = find(ls, frame, code, index);
	int64_t offset = (int64_t)v - (int64_t)step;

	if (!c) {
		if (ls->nc == LOOPSTEP_CANDS)
			return;
		c = &ls->c[ls->nc++];
		memset(c, 0, sizeof(*c));
		c->frame = frame;
		c->code = code;
		c->index = index;
		c->rank = rank;
		c->depth = depth;
		snprintf(c->name, sizeof(c->name), "%s", name);
		c->offset = offset;
		c->samples = 1;
		c->steps = 1;
		c->last_step = step;
		return;
	}
	if (c->offset != offset) {
		/* not in lockstep (a micro-batch or epoch counter): starts over */
		c->offset = offset;
		c->samples = 1;
		c->steps = 1;
		c->last_step = step;
		return;
	}
	c->samples++;
	if (step != c->last_step)
		c->steps++;
	c->last_step = step;
}

/* The counter-named locals of code (names its co_localsplusnames), read once. */
static const struct loopstep_code *code_locals(struct loopstep *ls, uint64_t code, uint64_t names)
{
	struct loopstep_code *k;
	uint64_t n, item;
	char name[32];
	uint32_t i;
	int c, rank;

	for (c = 0; c < ls->ncodes; c++)
		if (ls->codes[c].code == code && ls->codes[c].names == names)
			return &ls->codes[c];
	if (ls->ncodes < LOOPSTEP_CODES) {
		k = &ls->codes[ls->ncodes++];
	} else {
		k = &ls->codes[ls->next_code];
		ls->next_code = (ls->next_code + 1) % LOOPSTEP_CODES;
	}
	memset(k, 0, sizeof(*k));
	k->code = code;
	k->names = names;
	if (remote__u64(ls->r, names + ls->l->var_size, &n))
		n = 0;
	for (i = 0; i < n && i < LOOPSTEP_NAMES && k->n < LOOPSTEP_PER_CODE; i++) {
		if (remote__u64(ls->r, names + ls->l->tuple_items + 8 * (uint64_t)i, &item) ||
		    remote__str(ls->r, item, name, sizeof(name)))
			continue;
		rank = name_rank(name);
		if (rank < 0)
			continue;
		k->index[k->n] = i;
		k->rank[k->n] = rank;
		snprintf(k->name[k->n], sizeof(k->name[0]), "%s", name);
		k->n++;
	}
	return k;
}

/* Each counter-named local of the loop thread's frames, observed at step. */
static void walk(struct loopstep *ls, uint64_t tstate, uint64_t step)
{
	uint64_t frame = top_frame(ls, tstate), code, names;
	const struct loopstep_code *k;
	int depth, j;
	long long v;

	for (depth = 0; frame && depth < LOOPSTEP_FRAMES; depth++) {
		if (!remote__u64(ls->r, frame + ls->l->frame_code, &code) && code &&
		    !remote__u64(ls->r, code + ls->names_off, &names) && names) {
			k = code_locals(ls, code, names);
			for (j = 0; j < k->n; j++)
				if (!int_local(ls, frame, k->index[j], &v))
					observe(ls, frame, code, k->index[j], k->name[j],
						k->rank[j], depth, v, step);
		}
		if (remote__u64(ls->r, frame + ls->l->frame_previous, &frame))
			break;
	}
}

/*
 * The best candidate in lockstep: in the outermost frame (the loop's own, alive as long as
 * the loop: a function it calls each step may leave its frame to another), then the
 * likeliest name.
 */
static int best(const struct loopstep *ls)
{
	int i, b = -1;

	for (i = 0; i < ls->nc; i++) {
		const struct loopstep_cand *c = &ls->c[i];

		if (c->samples < LOOPSTEP_SAMPLES || c->steps < 2)
			continue;
		if (b < 0 || c->depth > ls->c[b].depth ||
		    (c->depth == ls->c[b].depth && c->rank < ls->c[b].rank))
			b = i;
	}
	return b;
}

static void probe_read(const void *ctx, struct probe_loop *out)
{
	probe__loop(ctx, out);
}

int loopstep__sample(struct loopstep *ls, const struct probe *p)
{
	return loopstep__sample_from(ls, probe_read, p);
}

int loopstep__sample_from(struct loopstep *ls, loopstep_read_fn read, const void *ctx)
{
	struct probe_loop a, b;
	int was = ls->chosen, i;
	uint64_t step;

	if (ls->off)
		return 0;
	read(ctx, &a);
	/*
	 * Only inside a pass: no optimizer step since it began (with updates by hand, whose
	 * step is counted as the next pass begins, no backward pass yet), so the loop's
	 * counter names the step the pass is of.
	 */
	if (!a.tstate || a.step_word != a.step_at_iter ||
	    (a.step_word >> NW_STEP_SHIFT) == NW_STEP_OPTIMIZER ||
	    ((a.step_word >> NW_STEP_SHIFT) == NW_STEP_BACKWARD && a.bwd_ran))
		return 0;
	step = a.step_word & NW_STEP_MASK;
	if (ls->chosen >= 0) {
		struct loopstep_cand *c = &ls->c[ls->chosen];
		long long v;

		if (int_local(ls, c->frame, c->index, &v))
			v = -1;
		read(ctx, &b);
		if (b.step_word != a.step_word || b.iterations != a.iterations ||
		    b.bwd_ran != a.bwd_ran)
			return 0; /* a step or a pass went by while it was read: not a sample */
		if (v >= 0 && (int64_t)v - (int64_t)step == c->offset) {
			ls->misses = 0;
			return 0;
		}
		if (++ls->misses < 2)
			return 0;
		/* the loop left that frame, or its counter no longer follows the steps: look again */
		ls->chosen = -1;
		ls->nc = 0;
		ls->misses = 0;
		ls->samples = 0;
		return 1;
	}
	/* what a sample taken across a step would observe is dropped by the check after */
	{
		/* only the candidates: the code objects' names read stay true */
		struct loopstep_cand saved[LOOPSTEP_CANDS];
		int nc = ls->nc;

		memcpy(saved, ls->c, sizeof(saved));
		walk(ls, a.tstate, step);
		read(ctx, &b);
		if (b.step_word != a.step_word || b.iterations != a.iterations ||
		    b.bwd_ran != a.bwd_ran) {
			memcpy(ls->c, saved, sizeof(saved));
			ls->nc = nc;
			return 0;
		}
	}
	i = best(ls);
	if (i >= 0)
		ls->chosen = i;
	else if (++ls->samples >= LOOPSTEP_GIVE_UP)
		ls->off = 1;
	return ls->chosen != was;
}

int loopstep__get(const struct loopstep *ls, const char **name, int64_t *offset)
{
	if (ls->chosen < 0)
		return -ENOENT;
	*name = ls->c[ls->chosen].name;
	*offset = ls->c[ls->chosen].offset;
	return 0;
}
