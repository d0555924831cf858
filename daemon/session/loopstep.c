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

/* The object a frame slot holds (3.14: a _PyStackRef, its tag bits cleared); -1 unreadable. */
static int slot_ref(const struct loopstep *ls, uint64_t addr, uint64_t *obj)
{
	if (remote__u64(ls->r, addr, obj))
		return -1;
	*obj &= ~(uint64_t)ls->l->stackref_mask;
	return 0;
}

/* A local slot's address in the target. */
static uint64_t slot_addr(const struct loopstep *ls, uint64_t frame, uint32_t i)
{
	return frame + ls->l->frame_localsplus + 8 * (uint64_t)i;
}

/* An int local's value and its type (int's); -1 if the slot holds anything else. */
static int int_local(const struct loopstep *ls, uint64_t frame, uint32_t i, long long *v,
		     uint64_t *type)
{
	struct py_value pv;
	uint64_t obj = 0;

	if (slot_ref(ls, slot_addr(ls, frame, i), &obj) || !obj ||
	    pyobject__value(ls->r, &ls->pl, obj, &pv))
		return -1;
	pyobject__value_free(&pv);
	if (pv.kind != PY_INT || pv.i < 0 || remote__u64(ls->r, obj + ls->l->obj_type, type))
		return -1;
	*v = pv.i;
	return 0;
}

/*
 * The int BPF copied from slot k as a pass began (its first NW_LOOP_WORDS words); -1 if it
 * was not an int (of the type the walk saw), negative, or of more than two digits.
 */
static int snap_int(const struct loopstep *ls, const struct nw_loop_snap *sn, int k, long long *v)
{
	const unsigned char *raw = (const unsigned char *)sn->raw[k];
	const struct remote_layout *rl = &ls->r->l;
	uint32_t digits[2] = {};
	uint64_t type, word;
	int n, neg;

	if (!sn->obj[k] || !ls->int_type || ls->l->obj_type < 0 || ls->l->var_size < 0 ||
	    ls->l->obj_type > (int64_t)sizeof(sn->raw[k]) - 8 ||
	    ls->l->var_size > (int64_t)sizeof(sn->raw[k]) - 8 || rl->long_digit_bits < 1 ||
	    rl->long_digit_bits > 30)
		return -1;
	memcpy(&type, raw + ls->l->obj_type, sizeof(type));
	memcpy(&word, raw + ls->l->var_size, sizeof(word));
	n = pyobject__long_size(word, (int)rl->long_tagged, &neg);
	if (type != ls->int_type || n < 0 || n > 2 || neg || rl->long_digits < 0 ||
	    rl->long_digits + 4 * n > (int64_t)sizeof(sn->raw[k]))
		return -1;
	memcpy(digits, raw + rl->long_digits, 4 * (size_t)n);
	*v = pyobject__long_value(digits, n, (int)rl->long_digit_bits, 0);
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

/* A counter-named int local: a candidate (new ones go to BPF's slots); 1 if it is new. */
static int add_cand(struct loopstep *ls, uint64_t frame, uint64_t code, uint32_t index,
		    const char *name, int rank, int depth)
{
	struct loopstep_cand *c = find(ls, frame, code, index);

	if (c || ls->nc == LOOPSTEP_CANDS)
		return 0;
	c = &ls->c[ls->nc++];
	memset(c, 0, sizeof(*c));
	c->frame = frame;
	c->code = code;
	c->index = index;
	c->rank = rank;
	c->depth = depth;
	snprintf(c->name, sizeof(c->name), "%s", name);
	return 1;
}

/* The candidate held v as a pass of step began: one more agreeing sample, or a new start. */
static void observe(struct loopstep_cand *c, long long v, uint64_t step)
{
	int64_t offset = (int64_t)v - (int64_t)step;

	if (!c->samples || c->offset != offset) {
		/* the first, or not in lockstep (a micro-batch or epoch counter): starts over */
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

/* The counter-named int locals of the loop thread's frames, as candidates; 1 if any is new. */
static int walk(struct loopstep *ls, uint64_t tstate)
{
	uint64_t frame = top_frame(ls, tstate), code, names, type;
	const struct loopstep_code *k;
	int depth, j, added = 0;
	long long v;

	for (depth = 0; frame && depth < LOOPSTEP_FRAMES; depth++) {
		if (!slot_ref(ls, frame + ls->l->frame_code, &code) && code &&
		    !remote__u64(ls->r, code + ls->names_off, &names) && names) {
			k = code_locals(ls, code, names);
			for (j = 0; j < k->n; j++) {
				if (int_local(ls, frame, k->index[j], &v, &type))
					continue;
				ls->int_type = type;
				added |= add_cand(ls, frame, code, k->index[j], k->name[j],
						  k->rank[j], depth);
			}
		}
		if (remote__u64(ls->r, frame + ls->l->frame_previous, &frame))
			break;
	}
	return added;
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

static void probe_read(void *ctx, struct probe_loop *out)
{
	probe__loop(ctx, out);
}

static void probe_slots(void *ctx, const uint64_t *slots, int n, uint64_t gen)
{
	probe__loop_slots(ctx, slots, n, gen);
}

int loopstep__sample(struct loopstep *ls, struct probe *p)
{
	return loopstep__sample_from(ls, probe_read, probe_slots, p);
}

/* BPF reads these slots as each pass begins: the chosen one, or every candidate. */
static void publish(struct loopstep *ls, loopstep_slots_fn slots, void *ctx)
{
	uint64_t a[NW_LOOP_SLOTS];
	int i, n = 0;

	if (ls->chosen >= 0) {
		ls->slot_cand[n] = ls->chosen;
		a[n++] = slot_addr(ls, ls->c[ls->chosen].frame, ls->c[ls->chosen].index);
	} else {
		for (i = 0; i < ls->nc && n < NW_LOOP_SLOTS; i++) {
			ls->slot_cand[n] = i;
			a[n++] = slot_addr(ls, ls->c[i].frame, ls->c[i].index);
		}
	}
	if (ls->off)
		n = 0;
	ls->nslots = n;
	slots(ctx, a, n, ++ls->gen);
}

/* The loop's counter lost (or never found): candidates looked for anew. */
static void start_over(struct loopstep *ls)
{
	ls->chosen = -1;
	ls->nc = 0;
	ls->misses = 0;
	ls->samples = 0;
}

/*
 * What BPF read from the published slots as the last pass began, with the step then.
 * Returns 1 when the counter was found or lost by it.
 */
static int take_snap(struct loopstep *ls, const struct probe_loop *a)
{
	const struct nw_loop_snap *sn = &a->snap;
	uint64_t step = sn->step & NW_STEP_MASK;
	int k, i;

	if (!a->snap_ok || !ls->nslots || sn->gen != ls->gen ||
	    sn->nslots != (uint64_t)ls->nslots || sn->iteration == ls->snap_iteration)
		return 0;
	ls->snap_iteration = sn->iteration;
	/* the optimizer's own count needs no loop counter */
	if ((sn->step >> NW_STEP_SHIFT) == NW_STEP_OPTIMIZER)
		return 0;
	for (k = 0; k < ls->nslots && k < NW_LOOP_SLOTS; k++) {
		struct loopstep_cand *c = &ls->c[ls->slot_cand[k]];
		long long v;

		if (snap_int(ls, sn, k, &v))
			v = -1;
		if (ls->chosen >= 0) {
			if (v >= 0 && (int64_t)v - (int64_t)step == c->offset) {
				ls->misses = 0;
				return 0;
			}
			if (++ls->misses < 2)
				return 0;
			/* the loop left that frame, or its counter no longer follows the steps */
			start_over(ls);
			return 1;
		}
		if (v >= 0)
			observe(c, v, step);
	}
	i = best(ls);
	if (i >= 0) {
		ls->chosen = i;
		return 1;
	}
	if (++ls->samples >= LOOPSTEP_GIVE_UP)
		ls->off = 1;
	return 0;
}

int loopstep__sample_from(struct loopstep *ls, loopstep_read_fn read, loopstep_slots_fn slots,
			  void *ctx)
{
	struct probe_loop a;
	int changed, added = 0;

	if (ls->off)
		return 0;
	read(ctx, &a);
	/* the optimizer's own count needs no loop counter: BPF reads nothing meanwhile */
	if ((a.step_word >> NW_STEP_SHIFT) == NW_STEP_OPTIMIZER) {
		if (ls->nslots) {
			start_over(ls);
			publish(ls, slots, ctx);
		}
		return 0;
	}
	changed = take_snap(ls, &a);
	/* new candidates among the loop thread's frames (any time: BPF reads their values) */
	if (ls->chosen < 0 && !ls->off && a.tstate) {
		added = walk(ls, a.tstate);
		if (!added && !ls->nc && ++ls->samples >= LOOPSTEP_GIVE_UP)
			ls->off = 1; /* no counter-named int in the loop's frames */
	}
	if (changed || added || (ls->off && ls->nslots))
		publish(ls, slots, ctx);
	return changed;
}

int loopstep__get(const struct loopstep *ls, const char **name, int64_t *offset)
{
	if (ls->chosen < 0)
		return -ENOENT;
	*name = ls->c[ls->chosen].name;
	*offset = ls->c[ls->chosen].offset;
	return 0;
}
