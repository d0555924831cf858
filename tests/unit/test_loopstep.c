// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Unit tests for daemon/session/loopstep.c: the training loop's step counter found among a
 * thread's frames in a fake target memory, taken only when it moves in lockstep with the
 * steps counted since the attach, and only from samples taken inside a pass.
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
	uint64_t outer, inner;	       /* frames: the loop's, and one it calls */
	uint64_t step_word, step_iter; /* what BPF says */
	uint64_t iterations;
	int step_during_read; /* the next sample's second read sees one more step */
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
	fakemem__put64(&w->m, frame + w->l.frame_localsplus + 8 * i, make_int(w, v));
}

static void read_bpf(const void *ctx, struct probe_loop *out)
{
	struct world *w = (struct world *)ctx;

	if (w->step_during_read == 2) {
		/* the read after the walk: a step went by meanwhile */
		w->step_during_read = 0;
		w->step_word++;
		w->step_iter++;
	} else if (w->step_during_read == 1) {
		w->step_during_read = 2;
	}
	memset(out, 0, sizeof(*out));
	out->step_word = w->step_word;
	out->step_at_iter = w->step_iter;
	out->iterations = w->iterations;
	out->tid = 4242;
	out->tstate = w->tstate;
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
 * One sample inside the pass of step (counted since the attach), the loop at step + 100 and
 * a micro-batch counter i at micro.
 */
static int sample(struct world *w, uint64_t step, uint32_t micro)
{
	w->step_word = w->step_iter = step;
	w->iterations++;
	set_local(w, w->outer, 1, (uint32_t)step + 100);
	set_local(w, w->outer, 2, 1); /* epoch: not in the names */
	set_local(w, w->inner, 1, micro);
	return loopstep__sample_from(&w->ls, read_bpf, w);
}

static void test_found_in_lockstep(void **state)
{
	struct world *w = *state;
	const char *name;
	int64_t off;

	assert_int_equal(sample(w, 5, 0), 0);
	assert_int_equal(sample(w, 5, 0), 0);
	assert_int_equal(loopstep__get(&w->ls, &name, &off), -ENOENT); /* one step only so far */
	assert_int_equal(sample(w, 6, 3), 1);
	assert_int_equal(loopstep__get(&w->ls, &name, &off), 0);
	assert_string_equal(name, "step");
	assert_int_equal(off, 100);
	/* checked from then on: still in lockstep */
	assert_int_equal(sample(w, 7, 6), 0);
	assert_int_equal(loopstep__get(&w->ls, &name, &off), 0);
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

/* Outside a pass (a step ran since it began) or across a step: no sample. */
static void test_samples_only_inside_a_pass(void **state)
{
	struct world *w = *state;
	const char *name;
	int64_t off;

	w->step_word = 9;
	w->step_iter = 8;
	set_local(w, w->outer, 1, 108);
	assert_int_equal(loopstep__sample_from(&w->ls, read_bpf, w), 0);
	assert_int_equal(w->ls.nc, 0);
	w->step_iter = 9;
	w->step_during_read = 1;
	assert_int_equal(loopstep__sample_from(&w->ls, read_bpf, w), 0);
	assert_int_equal(w->ls.nc, 0); /* what it saw was dropped */
	/* the optimizer's own count needs no counter */
	w->step_word = w->step_iter = (1ULL << NW_STEP_SHIFT) | 9;
	assert_int_equal(loopstep__sample_from(&w->ls, read_bpf, w), 0);
	assert_int_equal(w->ls.nc, 0);
	assert_int_equal(loopstep__get(&w->ls, &name, &off), -ENOENT);
}

/* The counter stops following the steps (the loop ended): lost, and looked for again. */
static void test_lost(void **state)
{
	struct world *w = *state;
	const char *name;
	int64_t off;

	sample(w, 1, 0);
	sample(w, 2, 0);
	sample(w, 3, 0);
	assert_int_equal(loopstep__get(&w->ls, &name, &off), 0);
	w->step_word = w->step_iter = 4;
	set_local(w, w->outer, 1, 7);
	assert_int_equal(loopstep__sample_from(&w->ls, read_bpf, w), 0); /* one miss is forgiven */
	assert_int_equal(loopstep__sample_from(&w->ls, read_bpf, w), 1);
	assert_int_equal(loopstep__get(&w->ls, &name, &off), -ENOENT);
	assert_int_equal(w->ls.off, 0);
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

/* A loop with no counter: given up after LOOPSTEP_GIVE_UP samples. */
static void test_give_up(void **state)
{
	static const char *names[] = {"x"};
	struct world *w = *state;
	uint64_t vals[1] = {0}, f = make_frame(w, 1, names, vals, 0);
	int i;

	fakemem__put64(&w->m, w->tstate + w->l.tstate_frame, f);
	for (i = 0; i < LOOPSTEP_GIVE_UP; i++) {
		w->step_word = w->step_iter = (uint64_t)i;
		assert_int_equal(loopstep__sample_from(&w->ls, read_bpf, w), 0);
	}
	assert_int_equal(w->ls.off, 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_found_in_lockstep, setup, teardown),
		cmocka_unit_test_setup_teardown(test_micro_batch_counter_not_taken, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_samples_only_inside_a_pass, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lost, setup, teardown),
		cmocka_unit_test_setup_teardown(test_off, setup, teardown),
		cmocka_unit_test_setup_teardown(test_give_up, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
