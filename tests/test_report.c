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

#define BASE 0x300000ULL
#define ARENA (1 << 16)

static struct {
	unsigned char bytes[ARENA];
	uint64_t top;
} M;

static int mem_read(void *ctx, uint64_t addr, void *buf, size_t len)
{
	(void)ctx;
	if (addr < BASE || addr + len > BASE + ARENA || addr + len < addr)
		return -EFAULT;
	memcpy(buf, M.bytes + (addr - BASE), len);
	return 0;
}

static uint64_t alloc(size_t n)
{
	uint64_t a = BASE + M.top;

	M.top += (n + 15) & ~15ULL;
	assert_true(M.top <= ARENA);
	return a;
}

static void put(uint64_t addr, const void *v, size_t n)
{
	memcpy(M.bytes + (addr - BASE), v, n);
}

static void put64(uint64_t addr, uint64_t v)
{
	put(addr, &v, 8);
}

/* CPython 3.11 (as tests/test_names.c lays it out) and torch 1.13-like tensor offsets. */
static const struct remote_layout PY = {
	.obj_type = 8,
	.type_flags = 168,
	.type_dictoffset = 288,
	.type_cached_keys = 880,
	.managed_dict_flag = 1 << 4,
	.managed_dict = -24,
	.managed_values = -32,
	.dict_keys = 32,
	.dict_values = 40,
	.keys_log2_index_bytes = 9,
	.keys_kind = 10,
	.keys_nentries = 24,
	.keys_indices = 32,
	.values_items = 0,
	.keys_kind_general = 0,
	.entry_general = 24,
	.entry_unicode = 16,
	.unicode_length = 16,
	.unicode_state = 32,
	.unicode_ascii_data = 48,
	.unicode_compact_data = 72,
	.unicode_kind_shift = 2,
	.ascii_bit = 6,
	.compact_bit = 5,
	.type_name = 24,
};
static const struct nw_layout TL = {
	.obj_type = 8,
	.type_base = 256,
	.var_borrowed = 24,
	.var_tensor = 16,
	.impl_storage = 48,
	.impl_storage_offset = 152,
	.impl_numel = 160,
	.impl_dtype = 168,
	.impl_device = 170,
	.impl_ndim = 72,
	.impl_sizes = 80,
	.storage_data = 16,
	.sizes_inline = 5,
	.dtype_f32 = 6,
	.dtype_f64 = 7,
	.dtype_f16 = 5,
	.dtype_bf16 = 15,
};

static uint64_t mkstr(const char *s)
{
	size_t n = strlen(s);
	uint64_t a = alloc(64 + n + 1);
	uint32_t state = 1u << 5 | 1u << 2 | 1u << 6; /* compact, kind 1, ascii */

	put64(a + PY.unicode_length, n);
	put(a + PY.unicode_state, &state, 4);
	put(a + PY.unicode_ascii_data, s, n + 1);
	return a;
}

/* A combined dict of str keys (unicode kind: key, value entries, 8 index bytes). */
static uint64_t mkdict(int n, const char **names, const uint64_t *vals)
{
	uint64_t k = alloc(PY.keys_indices + 8 + 16 * n), d = alloc(48);
	int i;

	M.bytes[k + PY.keys_log2_index_bytes - BASE] = 3;
	M.bytes[k + PY.keys_kind - BASE] = 1;
	put64(k + PY.keys_nentries, n);
	for (i = 0; i < n; i++) {
		put64(k + PY.keys_indices + 8 + 16 * i, mkstr(names[i]));
		put64(k + PY.keys_indices + 8 + 16 * i + 8, vals[i]);
	}
	put64(d + PY.dict_keys, k);
	return d;
}

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

	memset(&M, 0, sizeof(M));
	memset(w, 0, sizeof(*w));
	w->r.read = mem_read;
	w->r.l = PY;
	none = alloc(16);
	w->r.none = none;
	w->tensor_type = alloc(512);
	param_type = alloc(512);
	put64(param_type + TL.type_base, w->tensor_type);
	obj = alloc(64);
	impl = alloc(256);
	storage = alloc(64);
	w->weight_data = alloc(16);
	put64(obj + TL.obj_type, param_type);
	put64(obj + TL.var_tensor, impl);
	put(impl + TL.impl_dtype, &f32, 2);
	put64(impl + TL.impl_numel, 4);
	put64(impl + TL.impl_ndim, 1);
	put(impl + TL.impl_sizes, sizes, 8);
	put(impl + TL.impl_sizes + 8 * TL.sizes_inline, sizes + 1, 8);
	put64(impl + TL.impl_storage, storage);
	put64(storage + TL.storage_data, w->weight_data);
	put(w->weight_data, v, sizeof(v));
	pvals[0] = obj;
	pvals[1] = none; /* bias=False */
	mtype = alloc(1024);
	put64(mtype + PY.type_flags, PY.managed_dict_flag);
	w->module = alloc(64) + 32;
	put64(w->module + PY.obj_type, mtype);
	vals[0] = none;
	vals[1] = mkdict(2, pnames, pvals);
	put64(w->module + PY.managed_dict, mkdict(2, attrs, vals));
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
	put(w.weight_data + 4, &nan, 4);
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
	put64(w.module + PY.managed_dict, 0);
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
