// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Unit tests for explain__record (daemon/explain/explain.c): raw ring-buffer records, as the kernel
 * delivers them, turned into event lines, without BPF. The real records come from
 * tests/fuzz/corpus/record/ (recorded from nanwatchd watching tests/trainers/nan_input.py);
 * the others are what the record fuzzer found.
 */
#include <errno.h>
#include <math.h>
#include <regex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include <fcntl.h>
#include <linux/types.h>
#include "explain/backward.h"
#include "explain/diagnose.h"
#include "output/emit.h"
#include "jsonread.h"
#include "resolve/names.h"
#include "resolve/remote.h"
#include "explain/explain.h"
#include "output/sink.h"
#include "resolve/elfsym.h"
#include "resolve/target.h"
#include "resolve/vtable.h"

#define REAL_RECORDS "tests/fuzz/corpus/record/nan_input-01"

struct fixture {
	char path[64];
	struct sinks *sinks;
	struct target t;
	struct emitter e;
	struct remote remote;
	struct explain r;
};

static int no_memory(void *ctx, uint64_t addr, void *buf, size_t len)
{
	(void)ctx;
	(void)addr;
	(void)buf;
	(void)len;
	return -EFAULT; /* the target is gone: names are unknown */
}

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	char err[256];
	int fd;

	if (!f)
		return -1;
	snprintf(f->path, sizeof(f->path), "/tmp/nw-test-record-XXXXXX");
	fd = mkstemp(f->path);
	if (fd < 0)
		return -1;
	close(fd);
	f->sinks = sinks__new(SINK_DEFAULT_QUEUE);
	if (!f->sinks || sinks__add(f->sinks, f->path, err, sizeof(err)))
		return -1;
	f->t.pid = 4242;
	strcpy(f->t.comm, "python3");
	if (emit__init(&f->e, f->sinks, &f->t))
		return -1;
	f->remote.read = no_memory;
	f->r.e = &f->e;
	f->r.remote = &f->remote;
	f->r.names = names__new(&f->remote);
	diagnose__init(&f->r.diag);
	*state = f;
	return f->r.names ? 0 : -1;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	names__free(f->r.names);
	emit__free(&f->e);
	sinks__free(f->sinks);
	unlink(f->path);
	free(f);
	return 0;
}

/* Every line written so far, parsed; count set to their number. */
static struct jv **lines(struct fixture *f, size_t *count)
{
	static struct jv *ev[64];
	static char buf[1 << 16];
	size_t n = 0, len;
	char *line, *save;
	FILE *in;

	for (len = 0; len < sizeof(ev) / sizeof(ev[0]) && ev[len]; len++) {
		jv__free(ev[len]);
		ev[len] = NULL;
	}
	assert_int_equal(sinks__flush(f->sinks), 0);
	in = fopen(f->path, "r");
	assert_non_null(in);
	len = fread(buf, 1, sizeof(buf) - 1, in);
	fclose(in);
	buf[len] = 0;
	for (line = strtok_r(buf, "\n", &save); line && n < 64;
	     line = strtok_r(NULL, "\n", &save)) {
		ev[n] = jv__parse(line, strlen(line), NULL, 0);
		assert_non_null(ev[n]);
		n++;
	}
	*count = n;
	return ev;
}

static const char *field(const struct jv *ev, const char *key)
{
	const char *s = jv__string(jv__get(ev, key));

	return s ? s : "";
}

/* Real records: module events write nothing, the anomalies write named lines. */
static void test_real_records(void **state)
{
	struct fixture *f = *state;
	static char data[16 * sizeof(struct nw_event)];
	size_t n, i, k, count, anomalies = 0;
	double numel, dim;
	struct jv **ev;
	FILE *in;

	in = fopen(REAL_RECORDS, "rb");
	assert_non_null(in);
	n = fread(data, 1, sizeof(data), in);
	fclose(in);
	if (n < sizeof(struct nw_event) || n % sizeof(struct nw_event))
		fail_msg("%s holds %zu bytes, not whole %zu-byte records: struct nw_event changed, "
			 "record the corpus again (tests/fuzz/README.md)",
			 REAL_RECORDS, n, sizeof(struct nw_event));
	for (i = 0; i < n; i += sizeof(struct nw_event))
		assert_int_equal(explain__record(&f->r, data + i, sizeof(struct nw_event)), 0);
	ev = lines(f, &count);
	for (i = 0; i < count; i++) {
		if (strcmp(field(ev[i], "event"), "anomaly"))
			continue;
		anomalies++;
		assert_string_equal(field(ev[i], "schema"), "nanwatch/1");
		assert_string_equal(field(ev[i], "dtype"), "float32");
		assert_int_equal(jv__type(jv__get(ev[i], "shape")), JV_ARRAY);
		numel = 1;
		for (k = 0; k < jv__len(jv__get(ev[i], "shape")); k++) {
			assert_int_equal(jv__number(jv__index(jv__get(ev[i], "shape"), k), &dim),
					 0);
			numel *= dim;
		}
		assert_int_equal(jv__number(jv__get(ev[i], "numel"), &dim), 0);
		assert_true(numel == dim);
	}
	if (!anomalies)
		fail_msg("no anomaly among %zu lines", count);
	assert_int_equal(anomalies, f->r.anomalies);
}

/* Short records are not ours: skipped, nothing written; any alignment is read. */
static void test_short_and_unaligned(void **state)
{
	struct fixture *f = *state;
	static char data[sizeof(struct nw_event) + 1];
	struct nw_event ev = {.type = NW_EV_ANOMALY,
			      .phase = NW_PHASE_LOSS,
			      .dtype = NW_DT_F32,
			      .nan = 1,
			      .numel = 1,
			      .index0 = NW_NO_INDEX,
			      .min_key = ~0ULL};
	struct jv **out;
	size_t count;

	assert_int_equal(explain__record(&f->r, &ev, sizeof(ev) - 1), 0);
	assert_int_equal(explain__record(&f->r, &ev, 0), 0);
	lines(f, &count);
	assert_int_equal(count, 0);
	memcpy(data + 1, &ev, sizeof(ev));
	assert_int_equal(explain__record(&f->r, data + 1, sizeof(ev)), 0);
	out = lines(f, &count);
	assert_int_equal(count, 1);
	assert_string_equal(field(out[0], "phase"), "loss");
	assert_string_equal(field(out[0], "tensor"), "loss");
}

/*
 * Found by fuzz_record: a record's time stamp near 2^63 overflowed the conversion to real
 * time (signed overflow, then a time in the year 1677). A stamp that cannot be one is
 * written as the time now.
 */
static void test_time_stamp_out_of_range(void **state)
{
	static const uint64_t stamps[] = {8391404493243653435ULL, UINT64_MAX, 1ULL << 63};
	struct fixture *f = *state;
	struct nw_event ev = {.type = NW_EV_ANOMALY,
			      .phase = NW_PHASE_LOSS,
			      .dtype = NW_DT_F32,
			      .nan = 1,
			      .numel = 1,
			      .index0 = NW_NO_INDEX,
			      .min_key = ~0ULL};
	regex_t re;
	struct jv **out;
	size_t count, i;
	char buf[48];

	assert_int_equal(regcomp(&re,
				 "^20[2-9][0-9]-[01][0-9]-[0-3][0-9]T[0-2][0-9]:[0-5][0-9]:"
				 "[0-6][0-9]\\.[0-9]{9}Z$",
				 REG_EXTENDED | REG_NOSUB),
			 0);
	for (i = 0; i < sizeof(stamps) / sizeof(stamps[0]); i++) {
		ev.time_ns = stamps[i];
		assert_int_equal(explain__record(&f->r, &ev, sizeof(ev)), 0);
	}
	out = lines(f, &count);
	assert_int_equal(count, 3);
	for (i = 0; i < count; i++)
		if (regexec(&re, field(out[i], "time"), 0, NULL, 0))
			fail_msg("time '%s' is not now", field(out[i], "time"));
	regfree(&re);
	emit__format_time(-1, buf, sizeof(buf));
	assert_string_equal(buf, "1970-01-01T00:00:00.000000000Z");
	emit__format_time(INT64_MAX, buf, sizeof(buf));
	assert_string_equal(buf, "2262-04-11T23:47:16.854775807Z");
}

/* A gradient that went non-finite in backward pass iteration it, as report_bwd() sends it. */
static struct nw_event grad_record(uint64_t step, uint64_t it)
{
	struct nw_event ev = {.type = NW_EV_ANOMALY,
			      .phase = NW_PHASE_BACKWARD,
			      .dtype = NW_DT_F32,
			      .posinf = 3,
			      .numel = 8,
			      .index0 = 0,
			      .index1 = NW_NO_INDEX,
			      .min_key = ~0ULL};

	ev.step = step;
	ev.iteration = it;
	return ev;
}

/* A gradient scaler's update at step, iteration it: skipped or not, at scale 2^e. */
static struct nw_event scaler_record(uint64_t step, uint64_t it, int skipped, int e)
{
	struct nw_event ev = {.type = NW_EV_SCALER, .dtype = NW_DT_F32};
	union {
		float f;
		uint32_t u;
	} scale = {.f = 1};

	while (e-- > 0)
		scale.f *= 2;
	ev.step = step;
	ev.iteration = it;
	ev.flags = skipped;
	ev.min_key = scale.u;
	return ev;
}

static size_t count_event(struct jv **ev, size_t n, const char *name)
{
	size_t i, k = 0;

	for (i = 0; i < n; i++)
		k += !strcmp(field(ev[i], "event"), name);
	return k;
}

/* The gradient anomalies of a step the scaler skipped are counted, not reported. */
static void test_scaler_skip_folds(void **state)
{
	struct fixture *f = *state;
	struct nw_event g = grad_record(5, 9), u = scaler_record(5, 9, 1, 16);
	struct jv **ev;
	double v;
	size_t n;

	f->r.sc.scale = NAN;
	assert_int_equal(explain__record(&f->r, &g, sizeof(g)), 0);
	ev = lines(f, &n);
	assert_int_equal(n, 0); /* held: its step's fate is not known yet */
	assert_int_equal(explain__record(&f->r, &u, sizeof(u)), 0);
	ev = lines(f, &n);
	assert_int_equal(n, 1);
	assert_string_equal(field(ev[0], "event"), "skipped_step");
	assert_int_equal(jv__number(jv__get(ev[0], "scale"), &v), 0);
	assert_true(v == 65536);
	assert_int_equal(jv__number(jv__get(ev[0], "anomalies"), &v), 0);
	assert_true(v == 1);
	assert_string_equal(field(jv__get(ev[0], "first_gradient"), "tensor"), "grad[0]");
	assert_int_equal(f->r.anomalies, 0);
	assert_int_equal(f->r.sc.folded[FINDING_BACKWARD], 1);
	assert_int_equal(f->r.sc.skipped, 1);
	explain__release_all(&f->r);
	lines(f, &n); /* every line written so far */
	assert_int_equal(n, 1);
}

/* A step the scaler let run: what was held is reported; so is what the next pass outlives. */
static void test_scaler_held_released(void **state)
{
	struct fixture *f = *state;
	struct nw_event g = grad_record(5, 9), u = scaler_record(5, 9, 0, 16);
	struct nw_event g2 = grad_record(6, 10), loss = {.type = NW_EV_LOSS, .dtype = NW_DT_F32};
	struct jv **ev;
	size_t n;

	f->r.sc.scale = NAN;
	assert_int_equal(explain__record(&f->r, &g, sizeof(g)), 0);
	assert_int_equal(explain__record(&f->r, &u, sizeof(u)), 0);
	ev = lines(f, &n);
	assert_int_equal(n, 1);
	assert_string_equal(field(ev[0], "event"), "anomaly");
	assert_string_equal(field(ev[0], "phase"), "backward");
	/* with a scaler seen, held for up to EXPLAIN_HOLD_ITERS iterations, then reported */
	assert_int_equal(explain__record(&f->r, &g2, sizeof(g2)), 0);
	loss.iteration = 11;
	assert_int_equal(explain__record(&f->r, &loss, sizeof(loss)), 0);
	lines(f, &n);
	assert_int_equal(n, 1);
	explain__release(&f->r, 10 + EXPLAIN_HOLD_ITERS + 1);
	ev = lines(f, &n); /* g2's anomaly ends g's iteration: the diagnosis, then it */
	assert_int_equal(n, 3);
	assert_string_equal(field(ev[1], "event"), "diagnosis");
	assert_string_equal(field(ev[2], "event"), "anomaly");
	assert_int_equal(f->r.anomalies, 2);
	assert_int_equal(f->r.sc.folded[FINDING_BACKWARD], 0);
}

/* No scaler seen: a gradient anomaly is reported once the next forward pass has begun. */
static void test_hold_without_scaler(void **state)
{
	struct fixture *f = *state;
	struct nw_event g = grad_record(2, 4);
	size_t n;

	assert_int_equal(explain__record(&f->r, &g, sizeof(g)), 0);
	explain__release(&f->r, 4);
	lines(f, &n);
	assert_int_equal(n, 0);
	explain__release(&f->r, 5);
	lines(f, &n);
	assert_int_equal(n, 1);
	assert_int_equal(f->r.anomalies, 1);
}

/* Skipping at a scale that falls to 1: an incident, its first skip's gradient its anomaly. */
static void test_scaler_skips_persist(void **state)
{
	struct fixture *f = *state;
	struct jv **ev;
	size_t n, i;
	int e;

	f->r.sc.scale = NAN;
	for (e = 4, i = 0; e >= 0; e--, i++) {
		struct nw_event g = grad_record(i, i), u = scaler_record(i, i, 1, e);

		assert_int_equal(explain__record(&f->r, &g, sizeof(g)), 0);
		assert_int_equal(explain__record(&f->r, &u, sizeof(u)), 0);
	}
	explain__diagnose(&f->r, UINT64_MAX);
	ev = lines(f, &n);
	assert_int_equal(count_event(ev, n, "skipped_step"), 5);
	assert_int_equal(count_event(ev, n, "anomaly"), 1);
	assert_int_equal(count_event(ev, n, "diagnosis"), 1);
	for (i = 0; i < n; i++) {
		double step = -1;

		if (!strcmp(field(ev[i], "event"), "anomaly")) {
			assert_int_equal(jv__number(jv__get(ev[i], "step"), &step), 0);
			assert_true(step == 0);
		}
		if (!strcmp(field(ev[i], "event"), "diagnosis"))
			assert_string_equal(field(ev[i], "cause"), "scaler_skips_persist");
	}
	/* skips after the incident are counted, not written */
	{
		struct nw_event u = scaler_record(5, 5, 1, 0);

		assert_int_equal(explain__record(&f->r, &u, sizeof(u)), 0);
		lines(f, &n); /* every line written so far: none more */
		assert_int_equal(n, 7);
		assert_int_equal(f->r.sc.skipped, 6);
	}
	assert_int_equal(f->r.sc.folded[FINDING_BACKWARD], 4);
}

/* The gradient ring, as the daemon reads it: what is still queued when the diagnosis asks. */
struct queued_grads {
	struct explain *x;
	struct nw_grad g;
	int left;
};

static void take_queued(void *ctx)
{
	struct queued_grads *q = ctx;

	for (; q->left > 0; q->left--)
		explain__grad(q->x, &q->g);
}

/*
 * A record of the next iteration ends the incident's while the incident pass's last gradient
 * still waits in its ring (read after the events'): the diagnosis takes it before it closes
 * the pass, which stays one pass of all its gradients, not two.
 */
static void test_diagnosis_takes_queued_grads(void **state)
{
	struct fixture *f = *state;
	struct elfsym *e = elfsym__open_fd(open("/proc/self/exe", O_RDONLY | O_CLOEXEC), NULL);
	struct nw_event g = grad_record(4, 4), next = grad_record(5, 5);
	static struct queued_grads q;
	struct grad_norm n[4];
	struct jv **ev;
	size_t lines_n;

	next.phase = NW_PHASE_FORWARD; /* a module's output in the next forward pass */
	f->r.bwd = backward__new(vtable__open(e, 0x400000, 16), NULL, 24);
	elfsym__close(e);
	assert_non_null(f->r.bwd);
	q.x = &f->r;
	q.g.type = NW_EV_GRAD;
	q.g.iteration = 4;
	q.g.step = 4;
	q.g.scanned = 1;
	q.g.hist[127 << 2] = 1; /* one element of 1.0 */
	q.left = 1;
	f->r.take_grads = take_queued;
	f->r.params_ctx = &q;
	explain__grad(&f->r, &q.g); /* two of the pass's three gradients read */
	explain__grad(&f->r, &q.g);
	assert_int_equal(explain__record(&f->r, &g, sizeof(g)), 0);
	explain__release(&f->r, 5); /* the incident: a gradient of iteration 4 */
	assert_int_equal(explain__grad_norms(&f->r, n, 4), 0);
	assert_int_equal(explain__record(&f->r, &next, sizeof(next)), 0);
	assert_int_equal(q.left, 0);
	assert_int_equal(explain__grad_norms(&f->r, n, 4), 1);
	assert_int_equal(n[0].iteration, 4);
	assert_int_equal(n[0].params, 3);
	assert_true(n[0].complete);
	ev = lines(f, &lines_n);
	assert_int_equal(count_event(ev, lines_n, "diagnosis"), 1);
	backward__free(f->r.bwd);
	f->r.bwd = NULL;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_real_records, setup, teardown),
		cmocka_unit_test_setup_teardown(test_short_and_unaligned, setup, teardown),
		cmocka_unit_test_setup_teardown(test_time_stamp_out_of_range, setup, teardown),
		cmocka_unit_test_setup_teardown(test_scaler_skip_folds, setup, teardown),
		cmocka_unit_test_setup_teardown(test_scaler_held_released, setup, teardown),
		cmocka_unit_test_setup_teardown(test_hold_without_scaler, setup, teardown),
		cmocka_unit_test_setup_teardown(test_scaler_skips_persist, setup, teardown),
		cmocka_unit_test_setup_teardown(test_diagnosis_takes_queued_grads, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
