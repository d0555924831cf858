// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Unit tests for tools/collect/collect.c: which rank nanwatch-collect names, and why. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "collect.h"
#include "jsonread.h"

/* One event line; extra holds the event's own fields after a comma. */
static int feed(struct collect *c, const char *job, int rank, const char *host, int pid,
		const char *event, const char *time, const char *extra)
{
	char line[2048], jobf[64] = "", rankf[32] = "", err[160];

	if (job)
		snprintf(jobf, sizeof(jobf), ",\"job\":\"%s\"", job);
	if (rank >= 0)
		snprintf(rankf, sizeof(rankf), ",\"rank\":%d", rank);
	snprintf(line, sizeof(line),
		 "{\"schema\":\"nanwatch/1\",\"event\":\"%s\",\"time\":\"2026-11-30T10:00:%sZ\","
		 "\"seq\":1,\"host\":\"%s\",\"pid\":%d,\"comm\":\"python3\"%s%s%s%s}",
		 event, time, host, pid, jobf, rankf, extra ? "," : "", extra ? extra : "");
	return collect__line(c, line, strlen(line), err, sizeof(err));
}

#define ORIGIN(step, layer, module)                                                          \
	"\"step\":" #step ",\"step_source\":\"attach\",\"iteration\":" #step                 \
	",\"phase\":\"forward\",\"layer\":\"" layer "\",\"module\":\"" module                \
	"\",\"tensor\":\"output\",\"inputs_finite\":true,\"params_finite\":true,\"origin\":" \
	"true,\"first\":true,\"cause\":null"
#define RECEIVED(step)                                                                    \
	"\"step\":" #step ",\"step_source\":\"attach\",\"iteration\":" #step              \
	",\"phase\":\"forward\",\"layer\":\"embed\",\"module\":\"Embedding\",\"tensor\":" \
	"\"output\",\"inputs_finite\":true,\"params_finite\":false,\"origin\":false,"     \
	"\"first\":true,\"cause\":null"
#define DIAG(step, layer, cause)                                                                   \
	"\"step\":" #step ",\"step_source\":\"attach\",\"iteration\":" #step ",\"layer\":\"" layer \
	"\",\"module\":\"RMSNorm\",\"cause\":\"" cause "\",\"confidence\":0.75"

static int setup(void **state)
{
	*state = collect__new(64, 64);
	return *state ? 0 : -1;
}

static int teardown(void **state)
{
	collect__free(*state);
	return 0;
}

/* Rank 2 makes the NaN at step 9; the all-reduce carries it to 0, 1 and 3, whose first
 * anomaly is at step 10 with non-finite parameters. */
static void ddp_job(struct collect *c)
{
	int r;

	for (r = 0; r < 4; r++)
		assert_int_equal(feed(c, "ddp", r, r < 2 ? "n1" : "n2", 100 + r, "attach", "00",
				      "\"world_size\":4"),
				 0);
	assert_int_equal(feed(c, "ddp", 0, "n1", 100, "anomaly", "11.5", RECEIVED(10)), 0);
	assert_int_equal(feed(c, "ddp", 3, "n2", 103, "anomaly", "11.6", RECEIVED(10)), 0);
	assert_int_equal(feed(c, "ddp", 2, "n2", 102, "anomaly", "10.1",
			      ORIGIN(9, "blocks.1.norm", "RMSNorm")),
			 0);
	assert_int_equal(feed(c, "ddp", 2, "n2", 102, "diagnosis", "10.2",
			      DIAG(9, "blocks.1.norm", "norm_zero_variance")),
			 0);
	assert_int_equal(feed(c, "ddp", 1, "n1", 101, "anomaly", "11.4", RECEIVED(10)), 0);
	assert_int_equal(feed(c, "ddp", 1, "n1", 101, "diagnosis", "11.5",
			      DIAG(10, "embed", "nonfinite_params")),
			 0);
}

static void test_origin_rank_named(void **state)
{
	struct collect *c = *state;
	struct collect_verdict v;

	ddp_job(c);
	assert_int_equal(collect__verdict(c, "ddp", &v), 0);
	assert_true(v.found);
	assert_int_equal(v.rank, 2);
	assert_string_equal(v.host, "n2");
	assert_int_equal(v.pid, 102);
	assert_int_equal(v.step, 9);
	assert_int_equal(v.iteration, 9);
	assert_string_equal(v.layer, "blocks.1.norm");
	assert_string_equal(v.module, "RMSNorm");
	assert_string_equal(v.cause, "norm_zero_variance");
	assert_string_equal(v.cause_from, "diagnosis");
	assert_int_equal(v.evidence, COLLECT_CREATED);
	assert_string_equal(v.decided_by, "earliest_step");
	assert_int_equal(v.received, 3);
	assert_int_equal(v.tied, 0);
	assert_int_equal(v.clean, 0);
	assert_int_equal(v.ranks, 4);
	assert_int_equal(v.world_size, 4);
	assert_int_equal(collect__verdict(c, "other", &v), -ENOENT);
}

/* The text names the origin and the receivers with their step; the JSON parses and says the
 * same, the receivers with their first step. */
static void test_report_text_and_json(void **state)
{
	struct collect *c = *state;
	char *buf = NULL, err[80];
	size_t len = 0;
	FILE *f;
	struct jv *o;
	const struct jv *rec;
	double d;

	ddp_job(c);
	f = open_memstream(&buf, &len);
	assert_int_equal(collect__report(c, f, 0, 0), 1);
	fclose(f);
	assert_non_null(strstr(buf, "job ddp: rank 2 (host n2, pid 102) first non-finite at step "
				    "9, iteration 9, layer blocks.1.norm (RMSNorm), cause "
				    "norm_zero_variance; ranks 0, 1, 3 received it at step 10\n"));
	assert_non_null(strstr(buf, ")\n  incident page: nanwatch-report FILE... -o "
				    "incident.html\n"));
	free(buf);
	buf = NULL;
	f = open_memstream(&buf, &len);
	assert_int_equal(collect__report(c, f, 1, 0), 1);
	fclose(f);
	o = jv__parse(buf, len, err, sizeof(err));
	assert_non_null(o);
	assert_string_equal(jv__string(jv__get(o, "job")), "ddp");
	assert_int_equal(jv__number(jv__get(o, "rank"), &d), 0);
	assert_true(d == 2);
	assert_int_equal(jv__number(jv__get(o, "step"), &d), 0);
	assert_true(d == 9);
	assert_string_equal(jv__string(jv__get(o, "layer")), "blocks.1.norm");
	assert_string_equal(jv__string(jv__get(o, "cause")), "norm_zero_variance");
	assert_string_equal(jv__string(jv__get(jv__get(o, "origin_basis"), "decided_by")),
			    "earliest_step");
	rec = jv__get(o, "received");
	assert_int_equal(jv__len(rec), 3);
	assert_int_equal(jv__number(jv__get(jv__index(rec, 0), "step"), &d), 0);
	assert_true(d == 10);
	assert_string_equal(jv__string(jv__get(jv__index(rec, 0), "evidence")), "received");
	jv__free(o);
	free(buf);
}

/* Two ranks at the same step: the one whose layer created the value, whatever the order or
 * the clock says; the basis names the tie. */
static void test_tie_by_evidence(void **state)
{
	struct collect *c = *state;
	struct collect_verdict v;

	feed(c, "t", 1, "a", 1, "anomaly", "01", RECEIVED(9));
	feed(c, "t", 3, "b", 3, "anomaly", "05", ORIGIN(9, "head", "Linear"));
	feed(c, "t", 0, "a", 2, "anomaly", "09", RECEIVED(10));
	assert_int_equal(collect__verdict(c, "t", &v), 0);
	assert_int_equal(v.rank, 3);
	assert_string_equal(v.decided_by, "evidence");
	assert_int_equal(v.tied, 1);
	assert_int_equal(v.received, 1);
	assert_non_null(strstr(v.basis, "tied with rank 1 (received)"));
	assert_null(v.cause); /* no diagnosis, and the anomaly's cause is null */
}

/* Same step, same evidence: the earlier event, and said so; same time too: the lower rank. */
static void test_tie_by_time_then_rank(void **state)
{
	struct collect *c = *state;
	struct collect_verdict v;

	feed(c, "t", 5, "a", 5, "anomaly", "02.5", ORIGIN(9, "x", "Linear"));
	feed(c, "t", 4, "b", 4, "anomaly", "02.7", ORIGIN(9, "x", "Linear"));
	assert_int_equal(collect__verdict(c, "t", &v), 0);
	assert_int_equal(v.rank, 5);
	assert_string_equal(v.decided_by, "time");
	assert_non_null(strstr(v.basis, "earlier event time"));

	feed(c, "u", 7, "a", 7, "anomaly", "03", ORIGIN(9, "x", "Linear"));
	feed(c, "u", 6, "b", 6, "anomaly", "03", ORIGIN(9, "x", "Linear"));
	assert_int_equal(collect__verdict(c, "u", &v), 0);
	assert_int_equal(v.rank, 6);
	assert_string_equal(v.decided_by, "rank");
	assert_non_null(strstr(v.basis, "lowest rank"));
}

/* The origin rank's stream is missing: the earliest rank is named, and the basis says it only
 * received the value and how many ranks are missing. */
static void test_missing_origin_rank(void **state)
{
	struct collect *c = *state;
	struct collect_verdict v;

	feed(c, "m", 0, "a", 10, "attach", "00", "\"world_size\":3");
	feed(c, "m", 1, "a", 11, "anomaly", "05", RECEIVED(10));
	feed(c, "m", 0, "a", 10, "anomaly", "06", RECEIVED(10));
	assert_int_equal(collect__verdict(c, "m", &v), 0);
	assert_int_equal(v.evidence, COLLECT_RECEIVED);
	assert_non_null(strstr(v.basis, "may be missing"));
	assert_non_null(strstr(v.basis, "2 of world size 3 ranks seen"));
}

/* A receiver seen only through a parameter's gradient (AccumulateGrad) or a nonfinite_params
 * diagnosis is a receiver even at the origin's step. */
static void test_receiver_evidence(void **state)
{
	struct collect *c = *state;
	struct collect_verdict v;

	feed(c, "g", 0, "a", 1, "anomaly", "01",
	     "\"step\":9,\"step_source\":\"attach\",\"iteration\":9,\"phase\":\"backward\","
	     "\"layer\":\"fc\",\"module\":\"Linear\",\"node\":\"TBackward0\",\"consumer\":"
	     "\"AccumulateGrad\",\"tensor\":\"grad[0]\",\"inputs_finite\":true,"
	     "\"params_finite\":null,\"origin\":false");
	feed(c, "g", 1, "a", 2, "anomaly", "02",
	     "\"step\":9,\"step_source\":\"attach\",\"iteration\":9,\"phase\":\"forward\","
	     "\"layer\":\"fc\",\"module\":\"Linear\",\"tensor\":\"output\",\"inputs_finite\":"
	     "false,\"params_finite\":true,\"origin\":false");
	assert_int_equal(collect__verdict(c, "g", &v), 0);
	assert_int_equal(v.rank, 1);
	assert_int_equal(v.evidence, COLLECT_INPUT);
	assert_string_equal(v.decided_by, "evidence");
}

/* Streams without rank: each host and pid is a rank; without job: job "-". A rank given as a
 * string (older daemons) is the same rank as the integer. */
static void test_rankless_and_string_rank(void **state)
{
	struct collect *c = *state;
	struct collect_verdict v;
	char err[160];
	const char *s = "{\"schema\":\"nanwatch/1\",\"event\":\"attach\",\"host\":\"a\",\"pid\":9,"
			"\"rank\":\"2\"}";

	feed(c, NULL, -1, "a", 1, "anomaly", "02", RECEIVED(5));
	feed(c, NULL, -1, "a", 2, "anomaly", "01", ORIGIN(4, "x", "Linear"));
	feed(c, NULL, -1, "b", 1, "attach", "00", NULL);
	assert_int_equal(collect__verdict(c, "-", &v), 0);
	assert_int_equal(v.rank, -1);
	assert_int_equal(v.pid, 2);
	assert_int_equal(v.ranks, 3);
	assert_int_equal(v.clean, 1);

	feed(c, "s", 2, "a", 9, "anomaly", "01", ORIGIN(4, "x", "Linear"));
	assert_int_equal(collect__line(c, s, strlen(s), err, sizeof(err)), 0);
	assert_int_equal(collect__verdict(c, "s", &v), 0);
	assert_int_equal(v.ranks, 1);
	assert_int_equal(v.rank, 2);
	assert_string_equal(v.decided_by, "only_rank");
}

/* Garbage is refused with a reason and never changes a verdict. */
static void test_garbage_lines(void **state)
{
	static const char *const bad[] = {
		"",
		"not json",
		"[1,2]",
		"{\"schema\":\"nanwatch/2\",\"event\":\"anomaly\",\"host\":\"a\",\"pid\":1}",
		"{\"event\":\"anomaly\",\"host\":\"a\",\"pid\":1}",
		"{\"schema\":\"nanwatch/1\",\"host\":\"a\",\"pid\":1}",
		"{\"schema\":\"nanwatch/1\",\"event\":\"anomaly\",\"pid\":1}",
		"{\"schema\":\"nanwatch/1\",\"event\":\"anomaly\",\"host\":\"a\",\"pid\":\"x\"}",
		"{\"schema\":\"nanwatch/1\",\"event\":\"anomaly\",\"host\":\"a\",\"pid\":1,",
	};
	struct collect *c = *state;
	struct collect_verdict v;
	struct collect_counts n;
	char err[160];
	size_t i;

	ddp_job(c);
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = 0;
		assert_int_equal(collect__line(c, bad[i], strlen(bad[i]), err, sizeof(err)),
				 -EINVAL);
		assert_true(err[0] != 0);
	}
	collect__counts(c, &n);
	assert_int_equal(n.events, 10);
	assert_int_equal(collect__verdict(c, "ddp", &v), 0);
	assert_int_equal(v.rank, 2);
	assert_int_equal(v.step, 9);
}

/* --follow: a verdict is printed once, again only when it changes (an earlier rank, then its
 * diagnosis); clean jobs are not printed. */
static void test_changed_only(void **state)
{
	struct collect *c = *state;
	FILE *f = fopen("/dev/null", "w");

	assert_non_null(f);
	feed(c, "f", 0, "a", 1, "attach", "00", NULL);
	assert_int_equal(collect__report(c, f, 0, 1), 0);
	feed(c, "f", 0, "a", 1, "anomaly", "05", RECEIVED(10));
	assert_int_equal(collect__report(c, f, 0, 1), 1);
	assert_int_equal(collect__report(c, f, 0, 1), 0);
	feed(c, "f", 1, "a", 2, "anomaly", "04", RECEIVED(11));
	assert_int_equal(collect__report(c, f, 1, 1), 0);
	feed(c, "f", 2, "a", 3, "anomaly", "03", ORIGIN(9, "x", "Linear"));
	assert_int_equal(collect__report(c, f, 1, 1), 1);
	feed(c, "f", 2, "a", 3, "diagnosis", "03", DIAG(9, "x", "lr_too_high"));
	assert_int_equal(collect__report(c, f, 1, 1), 1);
	assert_int_equal(collect__report(c, f, 1, 0), 1);
	fclose(f);
}

/* Jobs are reported earliest origin first, clean jobs last. */
static void test_job_order(void **state)
{
	struct collect *c = *state;
	char *buf = NULL;
	size_t len = 0;
	FILE *f;
	char *late, *early, *clean;

	feed(c, "late", 0, "a", 1, "anomaly", "30", ORIGIN(1, "x", "Linear"));
	feed(c, "clean", 0, "a", 2, "attach", "00", NULL);
	feed(c, "early", 0, "a", 3, "anomaly", "10", ORIGIN(7, "x", "Linear"));
	f = open_memstream(&buf, &len);
	assert_int_equal(collect__report(c, f, 0, 0), 3);
	fclose(f);
	early = strstr(buf, "job early:");
	late = strstr(buf, "job late:");
	clean = strstr(buf, "job clean: no non-finite value in 1 rank");
	assert_true(early && late && clean && early < late && late < clean);
	free(buf);
}

/* Ranks counting steps differently (one from the optimizer, one from the attach) are ordered
 * by event time, and the basis says so. */
static void test_uncomparable_steps(void **state)
{
	struct collect *c = *state;
	struct collect_verdict v;

	feed(c, "x", 0, "a", 1, "anomaly", "02",
	     "\"step\":3,\"step_source\":\"attach\",\"iteration\":3,\"phase\":\"forward\","
	     "\"layer\":\"x\",\"module\":\"M\",\"inputs_finite\":true,\"params_finite\":true,"
	     "\"origin\":true");
	feed(c, "x", 1, "b", 2, "anomaly", "01",
	     "\"step\":47,\"step_source\":\"optimizer_state\",\"iteration\":3,\"phase\":"
	     "\"forward\",\"layer\":\"y\",\"module\":\"M\",\"inputs_finite\":true,"
	     "\"params_finite\":true,\"origin\":true");
	assert_int_equal(collect__verdict(c, "x", &v), 0);
	assert_int_equal(v.rank, 1);
	assert_string_equal(v.decided_by, "earliest_time");
	assert_non_null(strstr(v.basis, "count steps differently"));
}

/* Step order and the clock disagree by more than a second: the verdict keeps the step order
 * and says so. */
static void test_clock_disagrees(void **state)
{
	struct collect *c = *state;
	struct collect_verdict v;

	feed(c, "k", 0, "a", 1, "anomaly", "20", ORIGIN(3, "x", "Linear"));
	feed(c, "k", 1, "b", 2, "anomaly", "05", RECEIVED(5));
	assert_int_equal(collect__verdict(c, "k", &v), 0);
	assert_int_equal(v.rank, 0);
	assert_non_null(
		strstr(v.basis, "but rank 1's first anomaly is more than a second earlier"));
	feed(c, "l", 0, "a", 1, "anomaly", "05", ORIGIN(3, "x", "Linear"));
	feed(c, "l", 1, "b", 2, "anomaly", "05.9", RECEIVED(5));
	assert_int_equal(collect__verdict(c, "l", &v), 0);
	assert_null(strstr(v.basis, "earlier by the clock"));
}

/* A time outside 1970..2262 (a fuzzed year 1013 overflowed the nanoseconds) is no time: the
 * ranks tie on it and the lower rank is named. */
static void test_time_out_of_range(void **state)
{
	struct collect *c = *state;
	struct collect_verdict v;
	char err[160];
	const char *far = "{\"schema\":\"nanwatch/1\",\"event\":\"anomaly\",\"host\":\"a\","
			  "\"pid\":3,\"job\":\"y\",\"rank\":3,\"time\":\"1013-11-30T18:40:42Z\","
			  "\"step\":2,\"iteration\":2,\"origin\":true,\"inputs_finite\":true}";
	const char *late = "{\"schema\":\"nanwatch/1\",\"event\":\"anomaly\",\"host\":\"a\","
			   "\"pid\":4,\"job\":\"y\",\"rank\":4,\"time\":\"9999-11-30T18:40:42Z\","
			   "\"step\":2,\"iteration\":2,\"origin\":true,\"inputs_finite\":true}";

	assert_int_equal(collect__line(c, far, strlen(far), err, sizeof(err)), 0);
	assert_int_equal(collect__line(c, late, strlen(late), err, sizeof(err)), 0);
	assert_int_equal(collect__verdict(c, "y", &v), 0);
	assert_int_equal(v.rank, 3);
	assert_string_equal(v.decided_by, "rank");
}

/* Bounded: the stalest job makes room; ranks past the limit are counted, not kept. */
static void test_limits(void **state)
{
	struct collect *c = collect__new(2, 2);
	struct collect_verdict v;
	struct collect_counts n;

	(void)state;
	assert_non_null(c);
	feed(c, "j1", 0, "a", 1, "attach", "00", NULL);
	feed(c, "j2", 0, "a", 2, "attach", "00", NULL);
	feed(c, "j1", 1, "a", 3, "attach", "00", NULL);
	feed(c, "j3", 0, "a", 4, "attach", "00", NULL); /* j2 is the stalest */
	assert_int_equal(collect__verdict(c, "j2", &v), -ENOENT);
	assert_int_equal(collect__verdict(c, "j1", &v), 0);
	feed(c, "j1", 2, "a", 5, "anomaly", "01", ORIGIN(1, "x", "Linear"));
	assert_int_equal(collect__verdict(c, "j1", &v), 0);
	assert_false(v.found);
	assert_int_equal(v.ranks, 2);
	collect__counts(c, &n);
	assert_int_equal(n.evicted_jobs, 1);
	assert_int_equal(n.dropped_events, 1);
	collect__free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_origin_rank_named, setup, teardown),
		cmocka_unit_test_setup_teardown(test_report_text_and_json, setup, teardown),
		cmocka_unit_test_setup_teardown(test_tie_by_evidence, setup, teardown),
		cmocka_unit_test_setup_teardown(test_tie_by_time_then_rank, setup, teardown),
		cmocka_unit_test_setup_teardown(test_missing_origin_rank, setup, teardown),
		cmocka_unit_test_setup_teardown(test_receiver_evidence, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rankless_and_string_rank, setup, teardown),
		cmocka_unit_test_setup_teardown(test_garbage_lines, setup, teardown),
		cmocka_unit_test_setup_teardown(test_changed_only, setup, teardown),
		cmocka_unit_test_setup_teardown(test_job_order, setup, teardown),
		cmocka_unit_test_setup_teardown(test_uncomparable_steps, setup, teardown),
		cmocka_unit_test_setup_teardown(test_clock_disagrees, setup, teardown),
		cmocka_unit_test_setup_teardown(test_time_out_of_range, setup, teardown),
		cmocka_unit_test(test_limits),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
