// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * explain__decode (daemon/explain/decode.c): a raw events-ring record in, the finding's
 * fields out, for each kind and phase; short records refused, any alignment read.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include <linux/types.h>
#include "explain/decode.h"
#include "nanwatch.h"
#include "nwfloat.h"
#include "resolve/names.h"
#include "resolve/remote.h"
#include "fakemem.h"

/* 1.5f and -2.0f as float32 bits */
#define F32_1_5 0x3fc00000u
#define F32_M2 0xc0000000u

static void forward_record(struct nw_event *ev)
{
	memset(ev, 0, sizeof(*ev));
	ev->type = NW_EV_ANOMALY;
	ev->phase = NW_PHASE_FORWARD;
	ev->time_ns = 123456789;
	ev->tid = 77;
	ev->step = 41 | ((__u64)NW_STEP_OPTIMIZER << NW_STEP_SHIFT);
	ev->iteration = 9;
	ev->modules[0] = 0x1000;
	ev->module = 0x2000;
	ev->depth = 3;
	ev->dtype = NW_DT_F32;
	ev->ndim = 2;
	ev->shape[0] = 4;
	ev->shape[1] = 5;
	ev->numel = 20;
	ev->scanned = 20;
	ev->nan = 2;
	ev->posinf = 1;
	ev->min_key = nw_order_key(F32_M2, NW_DT_F32);
	ev->max_key = nw_order_key(F32_1_5, NW_DT_F32);
	ev->index0 = 1;
	ev->index1 = NW_NO_INDEX;
	ev->params_known = 1;
	ev->params_checked = 2;
	ev->step_starts = 5;
	ev->flags = NW_SKIP_TRUNCATED;
	memcpy(ev->class_name, "torch.nn.Linear", 16);
}

static void test_forward(void **state)
{
	struct nw_event ev;
	struct finding f;

	(void)state;
	forward_record(&ev);
	assert_int_equal(explain__decode(&ev, sizeof(ev), NULL, NULL, &f), 0);
	assert_int_equal(f.kind, FINDING_ANOMALY);
	assert_int_equal(f.phase, FINDING_FORWARD);
	assert_string_equal(f.device, "cpu");
	assert_int_equal(f.time_ns, 123456789);
	assert_int_equal(f.tid, 77);
	assert_int_equal(f.step, 41);
	assert_int_equal(f.step_source, FINDING_STEP_OPTIMIZER);
	assert_int_equal(f.iteration, 9);
	assert_int_equal(f.step_starts, 5);
	assert_int_equal(f.root, 0x1000);
	assert_int_equal(f.module, 0x2000);
	assert_int_equal(f.depth, 3);
	assert_null(f.layer); /* no names given */
	assert_string_equal(f.module_class, "Linear");
	assert_string_equal(f.tensor, "output[1]");
	assert_false(f.parameters);
	assert_string_equal(f.dtype_name, "float32");
	assert_int_equal(f.ndim, 2);
	assert_int_equal(f.shape[0], 4);
	assert_int_equal(f.shape[1], 5);
	assert_int_equal(f.numel, 20);
	assert_int_equal(f.nan, 2);
	assert_int_equal(f.posinf, 1);
	assert_int_equal(f.neginf, 0);
	assert_true(f.truncated);
	assert_true(f.has_finite);
	assert_int_equal(f.finite_min_bits, F32_M2);
	assert_int_equal(f.finite_max_bits, F32_1_5);
	assert_true(f.max_abs == 2.0);
	assert_int_equal(f.inputs_finite, 1);
	assert_int_equal(f.params_finite, 1);
	assert_true(f.params_known);
	assert_false(f.nested_unchecked);
	assert_null(f.node);
}

/* Inputs not all scanned, parameters not listed, an unchecked nested call, no finite value. */
static void test_forward_unknowns(void **state)
{
	struct nw_event ev;
	struct finding f;

	(void)state;
	forward_record(&ev);
	ev.inputs_skipped = 1;
	ev.params_known = 0;
	ev.flags = NW_FLAG_DEEPER;
	ev.min_key = ~0ULL;
	ev.max_key = 0;
	ev.index0 = 0;
	ev.index1 = 2;
	ev.step = 3;
	assert_int_equal(explain__decode(&ev, sizeof(ev), NULL, NULL, &f), 0);
	assert_int_equal(f.step_source, FINDING_STEP_ATTACH);
	assert_string_equal(f.tensor, "output[0][2]");
	assert_int_equal(f.inputs_finite, -1);
	assert_int_equal(f.params_finite, -1);
	assert_false(f.params_known);
	assert_true(f.nested_unchecked);
	assert_false(f.truncated);
	assert_false(f.has_finite);
	assert_true(f.max_abs == 0);
	ev.inputs_nonfinite = 1;
	ev.params_known = 1;
	ev.params_nonfinite = 1;
	assert_int_equal(explain__decode(&ev, sizeof(ev), NULL, NULL, &f), 0);
	assert_int_equal(f.inputs_finite, 0);
	assert_int_equal(f.params_finite, 0);
}

/* A key an output's value came with, and the tensor path it must be named by. */
struct key_case {
	const char *key;
	unsigned int index1;
	const char *want;
};

/* Each case decoded as output[index0][index1] with its key. */
static void check_keys(const struct key_case *cases, size_t n, unsigned int index0)
{
	struct nw_event ev;
	struct finding f;
	size_t i;

	for (i = 0; i < n; i++) {
		forward_record(&ev);
		ev.index0 = index0;
		ev.index1 = cases[i].index1;
		snprintf(ev.key, sizeof(ev.key), "%s", cases[i].key);
		assert_int_equal(explain__decode(&ev, sizeof(ev), NULL, NULL, &f), 0);
		assert_string_equal(f.tensor, cases[i].want);
	}
}

/*
 * A value of a dict output: named by its key when that is plain text, else by its place; a
 * key filling the field without its NUL, or with a quote, a backslash or a control character
 * in it (what the target chose), is never written.
 */
static void test_forward_dict_key(void **state)
{
	static const struct key_case cases[] = {
		{"logits", NW_NO_INDEX, "output['logits']"},
		{"past_key_values", 3, "output['past_key_values'][3]"},
		{"", NW_NO_INDEX, "output[1]"},
		{"it's", NW_NO_INDEX, "output[1]"},
		{"a\\b", NW_NO_INDEX, "output[1]"},
		{"line\nbreak", 2, "output[1][2]"},
		{"\x1b[31m", NW_NO_INDEX, "output[1]"},
		{"0123456789012345678901234567890", NW_NO_INDEX,
		 "output['0123456789012345678901234567890']"},
	};
	struct nw_event ev;
	struct finding f;

	(void)state;
	check_keys(cases, sizeof(cases) / sizeof(cases[0]), 1);
	forward_record(&ev);
	memset(ev.key, 'k', sizeof(ev.key)); /* no NUL */
	assert_int_equal(explain__decode(&ev, sizeof(ev), NULL, NULL, &f), 0);
	assert_string_equal(f.tensor, "output[1]");
	ev.index0 = NW_NO_INDEX; /* the output itself: a key means nothing */
	snprintf(ev.key, sizeof(ev.key), "logits");
	assert_int_equal(explain__decode(&ev, sizeof(ev), NULL, NULL, &f), 0);
	assert_string_equal(f.tensor, "output");
	ev.phase = NW_PHASE_LOSS; /* only forward outputs have keys */
	ev.index0 = 1;
	assert_int_equal(explain__decode(&ev, sizeof(ev), NULL, NULL, &f), 0);
	assert_string_equal(f.tensor, "loss[1]");
}

/*
 * An attribute of an object output (a dataclass's field): named output.key when the key is
 * an ASCII identifier, else by its place, output.<i>; never the target's other bytes.
 */
static void test_forward_attribute(void **state)
{
	static const struct key_case cases[] = {
		{"logits", NW_NO_INDEX, "output.logits"},
		{"_h0", 2, "output._h0[2]"},
		{"", NW_NO_INDEX, "output.<1>"},
		{"0x", NW_NO_INDEX, "output.<1>"},
		{"a-b", 0, "output.<1>[0]"},
		{"it's", NW_NO_INDEX, "output.<1>"},
		{"\x1b[31m", NW_NO_INDEX, "output.<1>"},
	};
	struct nw_event ev;
	struct finding f;

	(void)state;
	check_keys(cases, sizeof(cases) / sizeof(cases[0]), NW_ATTR_INDEX | 1);
	forward_record(&ev);
	ev.index0 = NW_ATTR_INDEX | 7;
	memset(ev.key, 'k', sizeof(ev.key)); /* no NUL */
	assert_int_equal(explain__decode(&ev, sizeof(ev), NULL, NULL, &f), 0);
	assert_string_equal(f.tensor, "output.<7>");
}

/* An anomaly of the loss backward() starts from: no module stack, no nodes named. */
static void loss_record(struct nw_event *ev)
{
	forward_record(ev);
	ev->phase = NW_PHASE_LOSS;
	ev->index0 = NW_NO_INDEX;
	memset(ev->modules, 0, sizeof(ev->modules));
}

/* The loss: no module, no verdicts; its value record. */
static void test_loss(void **state)
{
	struct nw_event ev;
	struct finding f;

	(void)state;
	loss_record(&ev);
	assert_int_equal(explain__decode(&ev, sizeof(ev), NULL, NULL, &f), 0);
	assert_int_equal(f.phase, FINDING_PHASE_LOSS);
	assert_string_equal(f.tensor, "loss");
	assert_null(f.module_class);
	assert_int_equal(f.inputs_finite, -1);
	assert_int_equal(f.params_finite, -1);
	ev.type = NW_EV_LOSS;
	ev.min_key = F32_1_5; /* a loss record carries the value's bits */
	assert_int_equal(explain__decode(&ev, sizeof(ev), NULL, NULL, &f), 0);
	assert_int_equal(f.kind, FINDING_LOSS);
	assert_true(f.value == 1.5);
}

/*
 * The loss's nodes as BPF walked them: how each was found, a second user, the line of single
 * inputs (no names here: the line ends at the first node, "?"); a record that is no walk's
 * ends them.
 */
static void test_loss_nodes(void **state)
{
	__u64 *word;
	struct nw_event ev;
	struct finding f;

	(void)state;
	loss_record(&ev);
	word = ev.modules + 1 + NW_LOSS_NODES;
	ev.modules[1] = ev.modules[2] = ev.modules[3] = ev.modules[4] = 0x7000;
	word[0] = NW_LOSS_ROOT | NW_LOSS_SINGLE;
	word[1] = 0;
	word[2] = 1 | 1 << 8 | NW_LOSS_ALSO | 1ULL << 32 | 0ULL << 40;
	word[3] = 2 | NW_LOSS_ALSO | 9ULL << 32; /* a user the event does not hold */
	assert_int_equal(explain__decode(&ev, sizeof(ev), NULL, NULL, &f), 0);
	assert_int_equal(f.loss.n, 4);
	assert_int_equal(f.loss.line, 1);
	assert_string_equal(f.loss.op[0], "?");
	assert_int_equal(f.loss.parent[0], FINDING_LOSS_ROOT);
	assert_int_equal(f.loss.parent[2], 1);
	assert_int_equal(f.loss.input[2], 1);
	assert_int_equal(f.loss.also[2], 1);
	assert_int_equal(f.loss.also[1], FINDING_LOSS_ROOT);
	assert_int_equal(f.loss.also[3], FINDING_LOSS_ROOT);
	assert_null(f.op);
	/* node 2 found from a node after it: no walk's record, the nodes end before it */
	word[2] = 3;
	assert_int_equal(explain__decode(&ev, sizeof(ev), NULL, NULL, &f), 0);
	assert_int_equal(f.loss.n, 2);
	word[0] = 0; /* the first is the loss's own */
	assert_int_equal(explain__decode(&ev, sizeof(ev), NULL, NULL, &f), 0);
	assert_int_equal(f.loss.n, 0);
}

/* A gradient: the maker module when known, the producers' verdict; no vtable names here. */
static void test_backward(void **state)
{
	struct nw_event ev;
	struct finding f;

	(void)state;
	forward_record(&ev);
	ev.phase = NW_PHASE_BACKWARD;
	ev.index0 = 0;
	ev.producers = 1;
	ev.input_nr = 2;
	ev.node_vptr = 0x5000;
	assert_int_equal(explain__decode(&ev, sizeof(ev), NULL, NULL, &f), 0);
	assert_int_equal(f.phase, FINDING_BACKWARD);
	assert_string_equal(f.tensor, "grad[0]");
	assert_string_equal(f.module_class, "Linear");
	assert_int_equal(f.inputs_finite, 1);
	assert_int_equal(f.params_finite, -1);
	assert_int_equal(f.producers, 1);
	assert_int_equal(f.input_nr, 2);
	assert_null(f.node);
	ev.module = 0;
	ev.producers = 0;
	assert_int_equal(explain__decode(&ev, sizeof(ev), NULL, NULL, &f), 0);
	assert_null(f.module_class);
	assert_int_equal(f.inputs_finite, 0);
}

/* A magnitude of the parameters; module records; other types; short and unaligned records. */
static void test_other_kinds(void **state)
{
	static char data[sizeof(struct nw_event) + 1];
	struct nw_event ev;
	struct finding f;

	(void)state;
	forward_record(&ev);
	ev.type = NW_EV_MAGNITUDE;
	ev.index0 = NW_PARAMS_INDEX;
	ev.max_key = F32_M2;
	assert_int_equal(explain__decode(&ev, sizeof(ev), NULL, NULL, &f), 0);
	assert_int_equal(f.kind, FINDING_MAGNITUDE);
	assert_true(f.parameters);
	assert_string_equal(f.tensor, "parameters");
	assert_true(f.value == -2.0);
	ev.type = NW_EV_MODULE;
	assert_int_equal(explain__decode(&ev, sizeof(ev), NULL, NULL, &f), 0);
	assert_int_equal(f.kind, FINDING_MODULE);
	assert_int_equal(f.module, 0x2000);
	ev.type = NW_EV_GRAD;
	assert_int_equal(explain__decode(&ev, sizeof(ev), NULL, NULL, &f), 0);
	assert_int_equal(f.kind, FINDING_NONE);
	assert_int_equal(explain__decode(&ev, sizeof(ev) - 1, NULL, NULL, &f), -EINVAL);
	forward_record(&ev);
	memcpy(data + 1, &ev, sizeof(ev));
	assert_int_equal(explain__decode(data + 1, sizeof(ev), NULL, NULL, &f), 0);
	assert_int_equal(f.step, 41);
	assert_string_equal(f.module_class, "Linear");
}

/*
 * A module record says where its caller holds it: with the model's memory unreadable (freed
 * before the records were read), the record names the module and the anomalies that follow.
 */
static void test_module_record_names(void **state)
{
	struct remote r = {.read = fakemem__gone};
	struct names *n = names__new(&r);
	struct nw_event ev;
	struct finding f;

	(void)state;
	assert_non_null(n);
	forward_record(&ev);
	ev.type = NW_EV_MODULE;
	ev.module = 0x1800;
	ev.parent = 0x1000;
	strcpy(ev.held, "blocks.0");
	assert_int_equal(explain__decode(&ev, sizeof(ev), n, NULL, &f), 0);
	assert_string_equal(f.layer, "blocks.0");
	ev.module = 0x2000;
	ev.parent = 0x1800;
	memset(ev.held, 'k', sizeof(ev.held)); /* no NUL: read as its 64 bytes */
	assert_int_equal(explain__decode(&ev, sizeof(ev), n, NULL, &f), 0);
	assert_int_equal(strlen(f.layer), strlen("blocks.0.") + sizeof(ev.held));
	forward_record(&ev);
	assert_int_equal(explain__decode(&ev, sizeof(ev), n, NULL, &f), 0);
	assert_int_equal(f.kind, FINDING_ANOMALY);
	assert_memory_equal(f.layer, "blocks.0.kkk", 12);
	ev.module = 0x2800; /* no record */
	assert_int_equal(explain__decode(&ev, sizeof(ev), n, NULL, &f), 0);
	assert_null(f.layer);
	names__free(n);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_forward),
		cmocka_unit_test(test_forward_unknowns),
		cmocka_unit_test(test_forward_dict_key),
		cmocka_unit_test(test_forward_attribute),
		cmocka_unit_test(test_loss),
		cmocka_unit_test(test_loss_nodes),
		cmocka_unit_test(test_backward),
		cmocka_unit_test(test_other_kinds),
		cmocka_unit_test(test_module_record_names),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
