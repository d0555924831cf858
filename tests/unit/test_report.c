// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The stats line's accounting: per phase found = reported + suppressed + lost
 * from the BPF counters and the lines written, and the records lost per type.
 * And the anomaly line of a module whose parameters BPF did not have: the
 * daemon reads them from a fake target memory (a CPython 3.11 module with a
 * materialized __dict__, its _parameters dict, a float32 Parameter) and judges
 * them against the optimizer steps begun since the anomaly.
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include <linux/types.h>
#include "output/emit.h"
#include "resolve/names.h"
#include "resolve/remote.h"
#include "explain/explain.h"
#include "output/sink.h"
#include "resolve/target.h"
#include "fakemem.h"

static void test_tally_phases(void **state)
{
	uint64_t c[NW_C_MAX] = {0}, reported[FINDING_PHASES] = {2, 1, 1};
	struct explain_tally t;
	int i;

	(void)state;
	/* forward 7 found: 2 reported, 4 suppressed, 1 lost; loss 3: 1 + 2; backward 5: 1 + 4 */
	c[NW_C_ANOMALIES] = 10;
	c[NW_C_LOSS_FOUND] = 3;
	c[NW_C_SUPPRESSED] = 6;
	c[NW_C_LOSS_SUPPRESSED] = 2;
	c[NW_C_LOST_FORWARD] = 1;
	c[NW_C_BWD_ANOMALIES] = 5;
	c[NW_C_BWD_SUPPRESSED] = 4;
	c[NW_C_LOST] = 1 + 100 + 2 + 1;
	c[NW_C_LOST_MODULE] = 100;
	c[NW_C_LOST_MARK] = 2;
	c[NW_C_LOST_LOSS_VALUE] = 1;
	c[NW_C_BWD_GRADS_LOST] = 7;
	c[NW_C_LOST_CAPTURE] = 3;
	explain__tally(c, reported, &t);
	assert_int_equal(t.phase[NW_PHASE_FORWARD].found, 7);
	assert_int_equal(t.phase[NW_PHASE_FORWARD].suppressed, 4);
	assert_int_equal(t.phase[NW_PHASE_FORWARD].lost, 1);
	assert_int_equal(t.phase[NW_PHASE_LOSS].found, 3);
	assert_int_equal(t.phase[NW_PHASE_LOSS].suppressed, 2);
	assert_int_equal(t.phase[NW_PHASE_BACKWARD].found, 5);
	assert_int_equal(t.phase[NW_PHASE_BACKWARD].suppressed, 4);
	for (i = 0; i < FINDING_PHASES; i++) {
		const struct explain_phase *p = &t.phase[i];

		assert_int_equal(p->reported, reported[i]);
		assert_int_equal(p->found, p->reported + p->suppressed + p->lost);
	}
	assert_int_equal(t.all.found, 15);
	assert_int_equal(t.all.reported, 4);
	assert_int_equal(t.all.suppressed, 10);
	assert_int_equal(t.all.lost, 1);
	assert_int_equal(t.lost_anomaly, 1);
	assert_int_equal(t.lost_module, 100);
	assert_int_equal(t.lost_mark, 2);
	assert_int_equal(t.lost_loss, 1);
	assert_int_equal(t.lost_grad, 7);
	assert_int_equal(t.lost_capture, 3);
	/* the events ring's records, every type */
	assert_int_equal(t.lost_anomaly + t.lost_module + t.lost_mark + t.lost_loss, c[NW_C_LOST]);
	/* module records are sent again: not lost for good */
	assert_int_equal(t.lost_for_good, 1 + 2 + 1);
}

/* Counters read while a loss anomaly was between its two increments: no wrap-around. */
static void test_tally_torn_read(void **state)
{
	uint64_t c[NW_C_MAX] = {0}, reported[FINDING_PHASES] = {0};
	struct explain_tally t;

	(void)state;
	c[NW_C_ANOMALIES] = 2;
	c[NW_C_LOSS_FOUND] = 3;
	c[NW_C_SUPPRESSED] = 0;
	c[NW_C_LOSS_SUPPRESSED] = 1;
	explain__tally(c, reported, &t);
	assert_int_equal(t.phase[NW_PHASE_FORWARD].found, 0);
	assert_int_equal(t.phase[NW_PHASE_FORWARD].suppressed, 0);
	assert_int_equal(t.all.found, 3);
}

#define TL fakemem_torch /* the tensor offsets the fake memory is laid out with */

static struct fakemem M;

struct world {
	struct remote r;
	uint64_t tensor_type, module, weight_data;
	uint64_t steps; /* NW_C_STEP_STARTS as the daemon reads it */
	int listed;	/* set_params calls */
	struct nw_params np;
};

static uint64_t steps_now(void *ctx)
{
	return ((struct world *)ctx)->steps;
}

static int set_params(void *ctx, uint64_t module, const struct nw_params *np)
{
	struct world *w = ctx;

	assert_int_equal(module, w->module);
	w->np = *np;
	w->listed++;
	return 0;
}

/* A module whose _parameters holds one float32 Parameter of 4 values, and a None. */
static void mkworld(struct world *w)
{
	const char *attrs[] = {"training", "_parameters"}, *pnames[] = {"weight", "bias"};
	uint64_t param_type, mtype, impl, storage, obj, none, vals[2], pvals[2], sizes[2] = {4, 1};
	uint16_t f32 = 6;
	float v[4] = {1, 2, 3, 4};

	fakemem__init(&M);
	memset(w, 0, sizeof(*w));
	none = M.none = fakemem__alloc(&M, 16);
	fakemem__remote(&M, &w->r);
	w->tensor_type = fakemem__alloc(&M, 512);
	param_type = fakemem__alloc(&M, 512);
	fakemem__put64(&M, param_type + TL.type_base, w->tensor_type);
	obj = fakemem__alloc(&M, 64);
	impl = fakemem__alloc(&M, 256);
	storage = fakemem__alloc(&M, 64);
	w->weight_data = fakemem__alloc(&M, 16);
	fakemem__put64(&M, obj + TL.obj_type, param_type);
	fakemem__put64(&M, obj + TL.var_tensor, impl);
	fakemem__put(&M, impl + TL.impl_dtype, &f32, 2);
	fakemem__put64(&M, impl + TL.impl_numel, 4);
	fakemem__put64(&M, impl + TL.impl_ndim, 1);
	fakemem__put(&M, impl + TL.impl_sizes, sizes, 8);
	fakemem__put(&M, impl + TL.impl_sizes + 8 * TL.sizes_inline, sizes + 1, 8);
	fakemem__put64(&M, impl + TL.impl_storage, storage);
	fakemem__put64(&M, storage + TL.storage_data, w->weight_data);
	fakemem__put(&M, w->weight_data, v, sizeof(v));
	pvals[0] = obj;
	pvals[1] = none; /* bias=False */
	mtype = fakemem__alloc(&M, 1024);
	fakemem__put64(&M, mtype + w->r.l.type_flags, w->r.l.managed_dict_flag);
	w->module = fakemem__alloc(&M, 64) + 32;
	fakemem__put64(&M, w->module + w->r.l.obj_type, mtype);
	vals[0] = none;
	vals[1] = fakemem__dict(&M, 2, pnames, pvals);
	fakemem__put64(&M, w->module + w->r.l.managed_dict, fakemem__dict(&M, 2, attrs, vals));
}

/* The anomaly line the daemon writes for ev, as text. */
static void anomaly_line(struct world *w, const struct nw_event *ev, char *out, size_t len)
{
	char path[] = "/tmp/nanwatch-test-report.XXXXXX";
	struct target t = {.pid = 4242, .comm = "python3"};
	struct emitter e;
	struct explain r;
	struct sinks *sinks;
	char err[256];
	FILE *f;
	int fd = mkstemp(path);

	assert_true(fd >= 0);
	close(fd);
	unlink(path);
	sinks = sinks__new(1 << 16);
	assert_non_null(sinks);
	assert_int_equal(sinks__add(sinks, path, err, sizeof(err)), 0);
	assert_int_equal(emit__init(&e, sinks, &t), 0);
	memset(&r, 0, sizeof(r));
	diagnose__init(&r.diag);
	r.e = &e;
	r.names = names__new(&w->r);
	r.remote = &w->r;
	r.layout = &TL;
	r.tensor_type = w->tensor_type;
	r.set_params = set_params;
	r.step_starts = steps_now;
	r.params_ctx = w;
	assert_int_equal(explain__record(&r, ev, sizeof(*ev)), 0);
	assert_int_equal(r.reported[NW_PHASE_FORWARD], 1);
	names__free(r.names);
	emit__free(&e);
	sinks__flush(sinks);
	sinks__free(sinks);
	f = fopen(path, "r");
	assert_non_null(f);
	assert_non_null(fgets(out, len, f));
	fclose(f);
	unlink(path);
}

/* A forward anomaly of w's module, inputs finite, from BPF at step_starts 7. */
static void mkevent(const struct world *w, struct nw_event *ev)
{
	memset(ev, 0, sizeof(*ev));
	ev->type = NW_EV_ANOMALY;
	ev->phase = NW_PHASE_FORWARD;
	ev->module = ev->modules[0] = w->module;
	ev->depth = 1;
	ev->dtype = NW_DT_F32;
	ev->numel = 1;
	ev->nan = 1;
	ev->min_key = ~0ULL;
	ev->inputs_checked = 1;
	ev->index0 = ev->index1 = NW_NO_INDEX;
	ev->step_starts = 7;
	memcpy(ev->class_name, "Linear", 7);
}

static void test_late_params(void **state)
{
	float nan = NAN;
	char line[4096];
	struct world w;
	struct nw_event ev;

	(void)state;
	mkworld(&w);
	mkevent(&w, &ev);
	/* finite, no step since: the values the layer used; BPF gets the list */
	w.steps = 7;
	anomaly_line(&w, &ev, line, sizeof(line));
	assert_non_null(
		strstr(line, "\"params_finite\":true,\"params_late\":true,\"origin\":true"));
	assert_int_equal(w.listed, 1);
	assert_int_equal(w.np.n, 1); /* bias=None is not a parameter */
	/* finite after a step began: still finite (an update cannot undo NaN) */
	w.steps = 8;
	anomaly_line(&w, &ev, line, sizeof(line));
	assert_non_null(strstr(line, "\"params_finite\":true,\"params_late\":true"));
	/* NaN, no step since: the layer used a NaN weight, not an origin */
	fakemem__put(&M, w.weight_data + 4, &nan, 4);
	w.steps = 7;
	anomaly_line(&w, &ev, line, sizeof(line));
	assert_non_null(
		strstr(line, "\"params_finite\":false,\"params_late\":true,\"origin\":false"));
	/* NaN after a step began: the update may have written it, unknown */
	w.steps = 8;
	anomaly_line(&w, &ev, line, sizeof(line));
	assert_non_null(
		strstr(line, "\"params_finite\":null,\"params_late\":true,\"origin\":true"));
	/* the module no longer readable: unknown */
	fakemem__put64(&M, w.module + w.r.l.managed_dict, 0);
	anomaly_line(&w, &ev, line, sizeof(line));
	assert_non_null(strstr(line, "\"params_finite\":null,\"params_late\":true"));
}

/* BPF had the list: its counts decide, nothing is read. */
static void test_params_from_bpf(void **state)
{
	char line[4096];
	struct world w;
	struct nw_event ev;

	(void)state;
	mkworld(&w);
	mkevent(&w, &ev);
	ev.params_known = 1;
	ev.params_checked = 2;
	ev.params_nonfinite = 1;
	w.steps = 9;
	anomaly_line(&w, &ev, line, sizeof(line));
	assert_non_null(
		strstr(line, "\"params_finite\":false,\"params_late\":false,\"origin\":false"));
	assert_int_equal(w.listed, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tally_phases),
		cmocka_unit_test(test_tally_torn_read),
		cmocka_unit_test(test_late_params),
		cmocka_unit_test(test_params_from_bpf),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
