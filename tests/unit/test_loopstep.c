// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Unit tests for daemon/session/loopstep.c: the training loop's step counter found among a
 * thread's frames in a fake target memory, taken only when it moves in lockstep with the
 * steps counted since the attach, from the values BPF read as each pass began (emulated
 * here from the slots the daemon handed it).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "fakemem.h"
#include "session/loopstep.h"

#define NAMES_OFF 96 /* PyCodeObject.co_localsplusnames in the fake */

struct world {
	struct fakemem m;
	struct remote r;
	struct nw_layout l;
	struct loopstep ls;
	uint64_t int_type, tuple_type, tstate;
	uint64_t outer, inner; /* frames: the loop's, and one it calls */
	uint64_t step_word;    /* what BPF says */
	uint64_t iterations;
	uint64_t slots[NW_LOOP_SLOTS]; /* what the daemon handed BPF */
	int nslots;
	uint64_t gen;
	struct nw_loop_snap snap; /* what BPF read as the last pass began */
	uint64_t tag;		  /* 3.14: tag bits on the objects in frame slots */
};

static uint64_t make_int(struct world *w, uint32_t v)
{
	uint64_t o = fakemem__alloc(&w->m, 32);

	fakemem__put64(&w->m, o + 8, w->int_type);
	fakemem__put64(&w->m, o + 16, v ? 1 : 0); /* ob_size: digits */
	fakemem__put(&w->m, o + 24, &v, 4);
	return o;
}

/* A frame of code whose locals are names, valued vals (0: an empty slot). */
static uint64_t make_frame(struct world *w, int n, const char **names, const uint64_t *vals,
			   uint64_t previous)
{
	uint64_t code = fakemem__alloc(&w->m, 128), tup = fakemem__alloc(&w->m, 24 + 8 * n);
	uint64_t f = fakemem__alloc(&w->m, 72 + 8 * n);
	int i;

	fakemem__put64(&w->m, tup + 8, w->tuple_type);
	fakemem__put64(&w->m, tup + 16, n);
	for (i = 0; i < n; i++) {
		fakemem__put64(&w->m, tup + 24 + 8 * i, fakemem__str(&w->m, names[i], 0));
		fakemem__put64(&w->m, f + 72 + 8 * i, vals[i]);
	}
	fakemem__put64(&w->m, code + NAMES_OFF, tup);
	fakemem__put64(&w->m, f + w->l.frame_code, code);
	fakemem__put64(&w->m, f + w->l.frame_previous, previous);
	return f;
}

static void set_local(struct world *w, uint64_t frame, int i, uint32_t v)
{
	fakemem__put64(&w->m, frame + w->l.frame_localsplus + 8 * i, make_int(w, v) | w->tag);
}

static void read_bpf(void *ctx, struct probe_loop *out)
{
	struct world *w = ctx;

	memset(out, 0, sizeof(*out));
	out->step_word = w->step_word;
	out->tid = 4242;
	out->tstate = w->tstate;
	out->snap_ok = 1;
	out->snap = w->snap;
}

static void set_slots(void *ctx, const uint64_t *slots, int n, uint64_t gen)
{
	struct world *w = ctx;

	assert_true(n >= 0 && n <= NW_LOOP_SLOTS);
	memcpy(w->slots, slots, n * sizeof(slots[0]));
	w->nslots = n;
	w->gen = gen;
}

/* A root forward pass of step begins: BPF reads the slots it was handed (bpf/state.bpf.h). */
static void begin_pass(struct world *w, uint64_t step)
{
	int k;

	w->step_word = step;
	w->iterations++;
	memset(&w->snap, 0, sizeof(w->snap));
	w->snap.gen = w->gen;
	w->snap.nslots = w->nslots;
	w->snap.step = step;
	w->snap.iteration = w->iterations;
	for (k = 0; k < w->nslots; k++) {
		uint64_t obj = 0;

		if (fakemem__read(&w->m, w->slots[k], &obj, 8) ||
		    !(obj &= ~(uint64_t)w->l.stackref_mask) ||
		    fakemem__read(&w->m, obj, w->snap.raw[k], sizeof(w->snap.raw[k])))
			obj = 0;
		w->snap.obj[k] = obj;
	}
}

static int look(struct world *w)
{
	return loopstep__sample_from(&w->ls, read_bpf, set_slots, w);
}

static int setup(void **state)
{
	static const char *outer_names[] = {"self", "step", "epoch"};
	static const char *inner_names[] = {"batch", "i"};
	struct world *w = calloc(1, sizeof(*w));
	uint64_t name, vals[3] = {0};

	if (!w)
		return -1;
	fakemem__init(&w->m);
	w->m.l.long_digits = 24;
	w->m.l.long_digit_bits = 30;
	fakemem__remote(&w->m, &w->r);
	w->l.obj_type = 8;
	w->l.var_size = 16;
	w->l.tuple_items = 24;
	w->l.tstate_frame = 56;
	w->l.cframe_frame = -1;
	w->l.frame_code = 0;
	w->l.frame_previous = 8;
	w->l.frame_localsplus = 72;
	/* a static type named int (not a heap type: its flags are 0) */
	w->int_type = fakemem__alloc(&w->m, 256);
	name = fakemem__alloc(&w->m, 8);
	fakemem__put(&w->m, name, "int", 4);
	fakemem__put64(&w->m, w->int_type + w->m.l.type_name, name);
	w->tuple_type = fakemem__alloc(&w->m, 256);
	w->outer = make_frame(w, 3, outer_names, vals, 0);
	w->inner = make_frame(w, 2, inner_names, vals, w->outer);
	w->tstate = fakemem__alloc(&w->m, 128);
	fakemem__put64(&w->m, w->tstate + w->l.tstate_frame, w->inner);
	loopstep__init(&w->ls, &w->r, &w->l, w->tuple_type, NAMES_OFF);
	*state = w;
	return 0;
}

static int teardown(void **state)
{
	free(*state);
	return 0;
}

/*
 * A pass of step (counted since the attach) begins with the loop at step + 100 and a
 * micro-batch counter i at micro; then the daemon looks.
 */
static int sample(struct world *w, uint64_t step, uint32_t micro)
{
	set_local(w, w->outer, 1, (uint32_t)step + 100);
	set_local(w, w->outer, 2, 1); /* epoch: not in the names */
	set_local(w, w->inner, 1, micro);
	begin_pass(w, step);
	return look(w);
}

static void test_found_in_lockstep(void **state)
{
	struct world *w = *state;
	const char *name;
	int64_t off;

	/* the first look finds the candidates and hands them to BPF */
	assert_int_equal(sample(w, 4, 0), 0);
	assert_int_equal(w->ls.nc, 2);
	assert_int_equal(w->nslots, 2);
	assert_int_equal(sample(w, 5, 0), 0);
	assert_int_equal(sample(w, 5, 0), 0);
	assert_int_equal(loopstep__get(&w->ls, &name, &off), -ENOENT); /* one step only so far */
	assert_int_equal(sample(w, 6, 3), 1);
	assert_int_equal(loopstep__get(&w->ls, &name, &off), 0);
	assert_string_equal(name, "step");
	assert_int_equal(off, 100);
	/* BPF reads the chosen one alone from then on, and it is checked: still in lockstep */
	assert_int_equal(w->nslots, 1);
	assert_int_equal(sample(w, 7, 6), 0);
	assert_int_equal(loopstep__get(&w->ls, &name, &off), 0);
}

/* 3.14: the code and the locals are _PyStackRefs (tag bits set); found the same. */
static void test_tagged_slots(void **state)
{
	struct world *w = *state;
	const uint64_t frames[] = {w->outer, w->inner};
	const char *name;
	uint64_t code;
	int64_t off;
	int i;

	w->l.stackref_mask = 7;
	w->tag = 1; /* Py_TAG_REFCNT: an immortal or borrowed reference */
	for (i = 0; i < 2; i++) {
		assert_int_equal(fakemem__read(&w->m, frames[i] + w->l.frame_code, &code, 8), 0);
		fakemem__put64(&w->m, frames[i] + w->l.frame_code, code | w->tag);
	}
	assert_int_equal(sample(w, 4, 0), 0);
	assert_int_equal(w->ls.nc, 2);
	assert_int_equal(sample(w, 5, 0), 0);
	assert_int_equal(sample(w, 5, 0), 0);
	assert_int_equal(sample(w, 6, 3), 1);
	assert_int_equal(loopstep__get(&w->ls, &name, &off), 0);
	assert_string_equal(name, "step");
	assert_int_equal(off, 100);

	/* the same tagged slots read without the mask: nothing is found */
	w->l.stackref_mask = 0;
	loopstep__init(&w->ls, &w->r, &w->l, w->tuple_type, NAMES_OFF);
	assert_int_equal(sample(w, 7, 0), 0);
	assert_int_equal(w->ls.nc, 0);
}

/* A micro-batch counter (three passes a step) never is the step, whatever its name. */
static void test_micro_batch_counter_not_taken(void **state)
{
	struct world *w = *state;
	uint64_t step;

	for (step = 10; step < 14; step++) {
		sample(w, step, (uint32_t)(step * 3));
		sample(w, step, (uint32_t)(step * 3 + 1));
	}
	for (int i = 0; i < w->ls.nc; i++)
		if (!strcmp(w->ls.c[i].name, "i"))
			assert_true(w->ls.c[i].samples < LOOPSTEP_SAMPLES || w->ls.c[i].steps < 2);
	assert_string_equal(w->ls.c[w->ls.chosen].name, "step");
}

/*
 * The values are those the pass began with, whenever the daemon looks (the loop may have
 * moved on); a pass is taken once, and a copy of slots handed over before is not taken.
 */
static void test_values_from_the_pass_start(void **state)
{
	struct world *w = *state;
	const char *name;
	int64_t off;
	uint64_t step;

	sample(w, 1, 0); /* candidates handed over */
	for (step = 2; step < 5; step++) {
		set_local(w, w->outer, 1, (uint32_t)step + 100);
		begin_pass(w, step);
		/* the loop's counter moved on before the daemon looked: not what is taken */
		set_local(w, w->outer, 1, (uint32_t)step + 101);
		look(w);
		look(w); /* the same pass again: nothing new */
	}
	assert_int_equal(loopstep__get(&w->ls, &name, &off), 0);
	assert_int_equal(off, 100);
	/* a copy of the slots of an older generation is not taken */
	loopstep__init(&w->ls, &w->r, &w->l, w->tuple_type, NAMES_OFF);
	sample(w, 1, 0);
	begin_pass(w, 2);
	w->snap.gen = w->gen + 1;
	look(w);
	for (int i = 0; i < w->ls.nc; i++)
		assert_int_equal(w->ls.c[i].samples, 0);
	/* the optimizer's own count needs no counter: BPF is handed nothing */
	w->step_word = (1ULL << NW_STEP_SHIFT) | 9;
	assert_int_equal(look(w), 0);
	assert_int_equal(w->nslots, 0);
	assert_int_equal(loopstep__get(&w->ls, &name, &off), -ENOENT);
}

/* The counter stops following the steps (the loop ended): lost, and looked for again. */
static void test_lost(void **state)
{
	struct world *w = *state;
	const char *name;
	int64_t off;

	sample(w, 0, 0);
	sample(w, 1, 0);
	sample(w, 2, 0);
	sample(w, 3, 0);
	assert_int_equal(loopstep__get(&w->ls, &name, &off), 0);
	set_local(w, w->outer, 1, 7);
	begin_pass(w, 4);
	assert_int_equal(look(w), 0); /* one miss is forgiven */
	begin_pass(w, 4);
	assert_int_equal(look(w), 1);
	assert_int_equal(loopstep__get(&w->ls, &name, &off), -ENOENT);
	assert_int_equal(w->ls.off, 0);
	assert_int_equal(w->nslots, 2); /* the frames' candidates, handed over again */
}

/* A table without co_localsplusnames, or --step-counter off: nothing is read. */
static void test_off(void **state)
{
	struct world *w = *state;

	loopstep__init(&w->ls, &w->r, &w->l, w->tuple_type, 0);
	assert_int_equal(sample(w, 1, 0), 0);
	assert_int_equal(sample(w, 2, 0), 0);
	assert_int_equal(sample(w, 3, 0), 0);
	assert_int_equal(w->ls.nc, 0);
}

/* A loop with no counter: given up after LOOPSTEP_GIVE_UP looks. */
static void test_give_up(void **state)
{
	static const char *names[] = {"x"};
	struct world *w = *state;
	uint64_t vals[1] = {0}, f = make_frame(w, 1, names, vals, 0);
	int i;

	fakemem__put64(&w->m, w->tstate + w->l.tstate_frame, f);
	for (i = 0; i < LOOPSTEP_GIVE_UP; i++) {
		begin_pass(w, (uint64_t)i);
		assert_int_equal(look(w), 0);
	}
	assert_int_equal(w->ls.off, 1);
	assert_int_equal(w->nslots, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_found_in_lockstep, setup, teardown),
		cmocka_unit_test_setup_teardown(test_tagged_slots, setup, teardown),
		cmocka_unit_test_setup_teardown(test_micro_batch_counter_not_taken, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_values_from_the_pass_start, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lost, setup, teardown),
		cmocka_unit_test_setup_teardown(test_off, setup, teardown),
		cmocka_unit_test_setup_teardown(test_give_up, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
