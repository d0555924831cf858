// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Unit tests for tools/tail/tailfmt.c: what nanwatch-tail prints for each event. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#include "tailfmt.h"

#define COMMON                                                                   \
	"\"schema\":\"nanwatch/1\",\"time\":\"2024-05-01T14:40:07.123456789Z\"," \
	"\"seq\":1,\"host\":\"gpu1\",\"pid\":4242,\"comm\":\"python3\""

#define ANOMALY(extra)                                                                   \
	"{\"event\":\"anomaly\"," COMMON ",\"tid\":4243,\"step\":3,\"iteration\":3,"     \
	"\"phase\":\"forward\",\"layer\":\"blocks.0.norm\",\"module\":\"RMSNorm\","      \
	"\"tensor\":\"output\",\"dtype\":\"float32\",\"shape\":[16,32],\"numel\":512,"   \
	"\"nan\":512,\"posinf\":0,\"neginf\":0,\"finite_min\":-1.5,\"finite_max\":2.25," \
	"\"cause\":null,\"skipped\":null" extra "}"

/* An anomaly whose layer and module are printf formats (each with one %s). */
#define ANOMALY_NAMED(layer, module)                                                 \
	"{\"event\":\"anomaly\"," COMMON ",\"tid\":4243,\"step\":3,\"iteration\":3," \
	"\"phase\":\"forward\",\"layer\":\"" layer "\",\"module\":\"" module "\","   \
	"\"tensor\":\"output\",\"dtype\":\"float32\",\"shape\":[2],\"numel\":2,"     \
	"\"nan\":2,\"posinf\":0,\"neginf\":0,\"finite_min\":null,\"finite_max\":null}"

struct out {
	char *buf;
	size_t len;
	FILE *f;
};

static int setup(void **state)
{
	struct out *o = calloc(1, sizeof(*o));

	/* times print in local time: pin it so expectations hold anywhere */
	setenv("TZ", "UTC", 1);
	tzset();
	if (!o)
		return -1;
	o->f = open_memstream(&o->buf, &o->len);
	if (!o->f)
		return -1;
	*state = o;
	return 0;
}

static int teardown(void **state)
{
	struct out *o = *state;

	fclose(o->f);
	free(o->buf);
	free(o);
	return 0;
}

/* Format one line and return everything printed so far. */
static const char *fmt(void **state, int color, const char *line)
{
	struct tailfmt t = {.color = color};
	struct out *o = *state;

	assert_int_equal(tailfmt__line(&t, line, strlen(line), o->f), 0);
	fflush(o->f);
	return o->buf;
}

static void test_attach(void **state)
{
	assert_string_equal(
		fmt(state, 0,
		    "{\"event\":\"attach\"," COMMON ",\"python\":\"3.11.2\","
		    "\"torch\":\"1.13.0a0\",\"probes\":2,\"mode\":\"full\","
		    "\"config\":null}"),
		"14:40:07 attach   pid 4242 (python3) python 3.11.2 torch 1.13.0a0, 2 probes, "
		"mode full\n");
}

static void test_attach_config(void **state)
{
	assert_string_equal(
		fmt(state, 0,
		    "{\"event\":\"attach\"," COMMON ",\"python\":\"3.13.0\","
		    "\"torch\":\"2.4.0\",\"probes\":3,\"mode\":\"sample\","
		    "\"config\":\"/etc/nanwatch/nanwatch.yaml\"}"),
		"14:40:07 attach   pid 4242 (python3) python 3.13.0 torch 2.4.0, 3 probes, "
		"mode sample, config /etc/nanwatch/nanwatch.yaml\n");
}

static void test_anomaly_first_origin(void **state)
{
	assert_string_equal(
		fmt(state, 0,
		    ANOMALY(",\"inputs_finite\":true,\"params_finite\":true,"
			    "\"origin\":true,\"first\":true")),
		"14:40:07 ANOMALY  step 3 iter 3  blocks.0.norm (RMSNorm)  output float32[16, 32]"
		"  nan 512 +inf 0 -inf 0  finite [-1.5, 2.25]  inputs finite  ORIGIN  first\n"
		"         >>> First non-finite value: layer blocks.0.norm (RMSNorm) at step 3, "
		"iteration 3 \u2014 this layer created it (its inputs were finite)\n");
}

/* A step counted from the attach says so; the optimizer's own count reads as before. */
static void test_anomaly_first_step_source(void **state)
{
	const char *got = fmt(state, 0,
			      ANOMALY(",\"step_source\":\"attach\",\"origin\":true,"
				      "\"first\":true"));

	assert_non_null(strstr(got, "(RMSNorm) at step 3 (counted from the attach), iteration 3"));
	got = fmt(state, 0,
		  ANOMALY(",\"step_source\":\"optimizer_state\",\"origin\":true,"
			  "\"first\":true"));
	assert_non_null(strstr(got, "(RMSNorm) at step 3, iteration 3"));
}

static void test_anomaly_first_through_inputs(void **state)
{
	size_t n;
	const char *got = fmt(state, 0,
			      ANOMALY(",\"inputs_finite\":false,"
				      "\"params_finite\":true,\"origin\":false,"
				      "\"first\":true"));

	assert_non_null(strstr(got, "  inputs NONFINITE  first\n"));
	assert_null(strstr(got, "ORIGIN"));
	assert_non_null(strstr(got, "iteration 3 \u2014 it arrived through its inputs\n"));
	/* inputs not read (a complex tensor, a strided view): neither made here nor passed on */
	n = strlen(got); /* fmt() appends: the new line starts there */
	got = fmt(state, 0,
		  ANOMALY(",\"inputs_finite\":null,\"params_finite\":true,\"origin\":false,"
			  "\"first\":true")) +
	      n;
	assert_null(strstr(got, "ORIGIN"));
	assert_null(strstr(got, "arrived through its inputs"));
	assert_non_null(strstr(got, "\u2014 some of its inputs could not be read, so whether it "
				    "made the value is not known\n"));
}

static void test_anomaly_first_from_params(void **state)
{
	const char *got = fmt(state, 0,
			      ANOMALY(",\"inputs_finite\":true,"
				      "\"params_finite\":false,\"origin\":false,"
				      "\"first\":true"));

	assert_non_null(strstr(got, "  inputs finite  params NONFINITE  first\n"));
	assert_non_null(strstr(got, "\u2014 it came from the layer's parameters"));
}

/* A tensor the GPU library checked names its device. */
static void test_anomaly_device(void **state)
{
	assert_non_null(strstr(fmt(state, 0,
				   ANOMALY(",\"device\":\"cuda:1\",\"origin\":false,"
					   "\"first\":false")),
			       "  output float32[16, 32] on cuda:1  nan 512 "));
}

/* Not the first: one line, no block; root layer, backward phase, cause, skip reason. */
static void test_anomaly_later(void **state)
{
	assert_string_equal(
		fmt(state, 0,
		    "{\"event\":\"anomaly\"," COMMON ",\"step\":7,\"iteration\":9,"
		    "\"phase\":\"backward\",\"layer\":\"\",\"module\":\"Net\","
		    "\"tensor\":\"grad[0]\",\"dtype\":\"bfloat16\",\"shape\":[],"
		    "\"nan\":0,\"posinf\":1,\"neginf\":2,\"finite_min\":null,"
		    "\"finite_max\":null,\"inputs_finite\":null,\"origin\":false,"
		    "\"first\":false,\"cause\":\"lr_too_high\","
		    "\"skipped\":\"truncated\"}"),
		"14:40:07 ANOMALY  step 7 iter 9 backward  <root> (Net)  grad[0] bfloat16[]  "
		"nan 0 +inf 1 -inf 2  finite none  cause lr_too_high  skipped truncated\n");
}

/* The backward pass: the autograd node, and the layer that made it when there is one. */
static void test_anomaly_backward_node(void **state)
{
	const char *got = fmt(state, 0,
			      "{\"event\":\"anomaly\"," COMMON ",\"step\":4,\"iteration\":4,"
			      "\"phase\":\"backward\",\"layer\":\"root\",\"module\":\"Root\","
			      "\"node\":\"SqrtBackward0\",\"tensor\":\"grad[0]\","
			      "\"dtype\":\"float32\",\"shape\":[8],\"nan\":8,\"posinf\":0,"
			      "\"neginf\":0,\"finite_min\":null,\"finite_max\":null,"
			      "\"inputs_finite\":true,\"origin\":true,\"first\":true,"
			      "\"cause\":null,\"skipped\":null}");

	assert_non_null(strstr(got, "step 4 iter 4 backward  node SqrtBackward0 of root (Root)  "
				    "grad[0] float32[8]"));
	assert_non_null(strstr(got, ">>> First non-finite value: node SqrtBackward0 of root"));
	assert_non_null(strstr(got, "this autograd node made a non-finite gradient"));
	got = fmt(state, 0,
		  "{\"event\":\"anomaly\"," COMMON ",\"step\":4,\"iteration\":4,"
		  "\"phase\":\"backward\",\"layer\":null,\"module\":null,"
		  "\"node\":\"LogBackward0\",\"tensor\":\"grad[0]\","
		  "\"dtype\":\"float32\",\"shape\":[8],\"nan\":8,\"posinf\":0,"
		  "\"neginf\":0,\"finite_min\":null,\"finite_max\":null,"
		  "\"inputs_finite\":true,\"origin\":true,\"first\":false,"
		  "\"cause\":null,\"skipped\":null}");
	assert_non_null(strstr(got, "node LogBackward0 (made outside any module)  grad[0]"));
}

/* --backward norms: a parameter's gradient, whose origin and layer are not known */
static void test_anomaly_backward_norms(void **state)
{
	const char *got;

	got = fmt(state, 0,
		  "{\"event\":\"anomaly\"," COMMON ",\"step\":4,\"iteration\":4,"
		  "\"phase\":\"backward\",\"layer\":null,\"module\":null,"
		  "\"node\":\"AddmmBackward0\",\"tensor\":\"grad[0]\","
		  "\"dtype\":\"float32\",\"shape\":[8],\"nan\":8,\"posinf\":0,"
		  "\"neginf\":0,\"finite_min\":null,\"finite_max\":null,"
		  "\"inputs_finite\":null,\"origin\":null,\"first\":true,"
		  "\"cause\":null,\"skipped\":null}");
	assert_non_null(strstr(got, "node AddmmBackward0 (its layer not known)  grad[0]"));
	assert_non_null(strstr(got, "an earlier node may have made (--backward on names it)"));
	assert_null(strstr(got, "from finite ones"));
}

/* The loss: no layer to name; the first-anomaly block points at the loss computation. */
static void test_anomaly_loss_first(void **state)
{
	const char *got = fmt(state, 0,
			      "{\"event\":\"anomaly\"," COMMON ",\"step\":4,\"iteration\":4,"
			      "\"phase\":\"loss\",\"layer\":null,\"module\":null,"
			      "\"tensor\":\"loss\",\"dtype\":\"float32\",\"shape\":[],"
			      "\"nan\":0,\"posinf\":1,\"neginf\":0,\"finite_min\":null,"
			      "\"finite_max\":null,\"inputs_finite\":null,\"origin\":true,"
			      "\"first\":true,\"cause\":null,\"skipped\":null}");

	assert_non_null(strstr(got, "step 4 iter 4  the loss (what backward() started from)  "
				    "loss float32[]"));
	assert_non_null(strstr(got, ">>> First non-finite value: the loss"));
	assert_non_null(strstr(got, "look at how the loss is computed"));
	assert_null(strstr(got, "null"));
}

static void test_skipped_step(void **state)
{
	const char *got =
		fmt(state, 0,
		    "{\"event\":\"skipped_step\"," COMMON ",\"tid\":4243,\"step\":12,"
		    "\"step_source\":\"attach\",\"iteration\":12,\"scale\":65536.0,"
		    "\"consecutive\":1,\"skipped_steps\":3,\"anomalies\":1,\"first_gradient\":null,"
		    "\"message\":\"the gradient scaler skipped step 12 at scale 65536\"}");

	assert_non_null(strstr(got, "14:40:07 skipped "));
	assert_non_null(strstr(got, "step 12"));
	assert_non_null(strstr(got, "the gradient scaler skipped step 12 at scale 65536\n"));
}

static void test_stats(void **state)
{
	assert_string_equal(
		fmt(state, 0,
		    "{\"event\":\"stats\"," COMMON ",\"steps\":10,\"iterations\":10,"
		    "\"modules\":12,\"tensors_scanned\":340,\"bytes_scanned\":1258291,"
		    "\"anomalies\":1,\"suppressed\":8,\"lost\":0}"),
		"14:40:07 stats    steps 10 iterations 10 modules 12 scanned 1.2 MiB 340 tensors, "
		"anomalies 1, suppressed 8, lost 0\n");
}

static void test_stats_small_and_missing(void **state)
{
	const char *got = fmt(state, 0, "{\"event\":\"stats\"," COMMON ",\"bytes_scanned\":512}");

	assert_string_equal(got, "14:40:07 stats    steps ? iterations ? modules ? scanned 512 B "
				 "? tensors, anomalies ?, suppressed ?, lost ?\n");
}

static void test_lost_detach_error(void **state)
{
	fmt(state, 0, "{\"event\":\"lost\"," COMMON ",\"count\":12,\"where\":\"kernel\"}");
	fmt(state, 0,
	    "{\"event\":\"lost\"," COMMON ",\"count\":5,\"where\":\"sink\","
	    "\"sink\":\"unix:/run/c.sock\"}");
	fmt(state, 0, "{\"event\":\"detach\"," COMMON ",\"reason\":\"target_exit\"}");
	fmt(state, 0, "{\"event\":\"detach\"," COMMON ",\"reason\":\"signal\",\"anomalies\":3}");
	assert_string_equal(fmt(state, 0,
				"{\"event\":\"error\"," COMMON ",\"rank\":1,"
				"\"message\":\"failed to read names: EFAULT\"}"),
			    "14:40:07 lost     12 events (kernel)\n"
			    "14:40:07 lost     5 lines (output unix:/run/c.sock)\n"
			    "14:40:07 detach   target_exit\n"
			    "14:40:07 detach   signal anomalies=3\n"
			    "14:40:07 [rank 1] error    failed to read names: EFAULT\n");
}

static void test_diagnosis(void **state)
{
	assert_string_equal(fmt(state, 0,
				"{\"event\":\"diagnosis\"," COMMON ",\"step\":3,\"iteration\":3,"
				"\"layer\":\"blocks.0.norm\",\"module\":\"RMSNorm\","
				"\"cause\":\"norm_zero_variance\",\"confidence\":0.9,"
				"\"evidence\":[\"input variance 0\"],\"fixes\":[\"raise eps\","
				"\"check data\"],\"capture\":\"/var/lib/nanwatch/c1.pt\"}"),
			    "14:40:07 diagnosis step 3 iter 3  blocks.0.norm (RMSNorm)  "
			    "cause norm_zero_variance (confidence 0.9)\n"
			    "         evidence: input variance 0\n"
			    "         fix: raise eps\n"
			    "         fix: check data\n"
			    "         capture: /var/lib/nanwatch/c1.pt\n"
			    "         incident page: nanwatch-report FILE... -o incident.html\n");
}

/* The loss's diagnosis, or a gradient made outside the modules: no layer, no "null (null)". */
static void test_diagnosis_no_layer(void **state)
{
	fmt(state, 0,
	    "{\"event\":\"diagnosis\"," COMMON ",\"step\":7,\"iteration\":7,\"layer\":null,"
	    "\"module\":null,\"cause\":\"domain_error\",\"confidence\":0.8,\"evidence\":[],"
	    "\"fixes\":[]}");
	assert_string_equal(fmt(state, 0,
				"{\"event\":\"diagnosis\"," COMMON ",\"step\":7,\"iteration\":7,"
				"\"layer\":null,\"module\":\"Scale\",\"cause\":\"unknown\","
				"\"confidence\":0.2,\"evidence\":[],\"fixes\":[]}"),
			    "14:40:07 diagnosis step 7 iter 7  outside any module  "
			    "cause domain_error (confidence 0.8)\n"
			    "         incident page: nanwatch-report FILE... -o incident.html\n"
			    "14:40:07 diagnosis step 7 iter 7  an unregistered module (Scale)  "
			    "cause unknown (confidence 0.2)\n"
			    "         incident page: nanwatch-report FILE... -o incident.html\n");
}

static void test_explanation(void **state)
{
	assert_string_equal(
		fmt(state, 0,
		    "{\"event\":\"explanation\"," COMMON ",\"step\":4,"
		    "\"iteration\":4,\"layer\":\"norm\",\"module\":\"L2Norm\","
		    "\"op\":\"aten::div\",\"cause\":\"division_by_zero\",\"confidence\":0.9,"
		    "\"evidence\":[\"aten::div: 8 of 48 denominators are 0\"],\"fixes\":[\"add "
		    "eps\"],\"reproducible\":true,\"capture\":\"/c/1\"}"),
		"14:40:07 explanation step 4 iter 4  norm (L2Norm)  aten::div  cause "
		"division_by_zero (confidence 0.9)  reproducible\n"
		"         evidence: aten::div: 8 of 48 denominators are 0\n"
		"         fix: add eps\n"
		"         capture: /c/1\n");
}

static void test_explanation_not_reproduced(void **state)
{
	assert_string_equal(fmt(state, 0,
				"{\"event\":\"explanation\"," COMMON ",\"step\":4,\"iteration\":4,"
				"\"layer\":\"\",\"module\":\"Net\",\"op\":null,\"cause\":"
				"\"unknown\",\"confidence\":0.3,\"evidence\":[],\"fixes\":[],"
				"\"reproducible\":false,\"capture\":null}"),
			    "14:40:07 explanation step 4 iter 4  <root> (Net)  no operation  cause "
			    "unknown (confidence 0.3)  NOT reproducible (hardware, race or "
			    "uninitialised memory suspected)\n");
}

static void test_unknown_event_generic(void **state)
{
	assert_string_equal(
		fmt(state, 0,
		    "{\"event\":\"gpu_sync\"," COMMON ",\"a\":1,\"b\":\"x y\","
		    "\"c\":[1,{\"d\":null}],\"e\":\"plain\",\"f\":true,\"g\":\"\"}"),
		"14:40:07 gpu_sync a=1 b=\"x y\" c=[1,{\"d\":null}] e=plain f=true g=\"\"\n");
}

/* Anything that is not an event object goes through, printable text byte for byte. */
static void test_passthrough(void **state)
{
	static const char *const lines[] = {
		"nanwatchd: failed to attach: no such process 4242",
		"",
		"{\"event\":\"attach\"",
		"[1,2,3]",
		"{\"no_event\":1}",
		"{\"event\":7}",
		"{\"event\":\"x\"} trailing",
		"caf\xc3\xa9 \xe2\x80\x94 ok",
	};
	char want[512] = "";
	const char *got = NULL;
	size_t i;

	for (i = 0; i < sizeof(lines) / sizeof(lines[0]); i++) {
		got = fmt(state, 0, lines[i]);
		strcat(want, lines[i]);
		strcat(want, "\n");
	}
	assert_string_equal(got, want);
}

/* A line that is not an event is not a way around the sanitising either. */
static void test_passthrough_sanitized(void **state)
{
	fmt(state, 0, "\xff\xfe not utf-8");
	fmt(state, 0,
	    "nanwatchd: pid 7 (\033]0;owned\007x) \xc2\x9b"
	    "2J");
	assert_string_equal(fmt(state, 0,
				"{\"event\":\"x\"} \xe2\x80\xae"
				"evil"),
			    "?? not utf-8\n"
			    "nanwatchd: pid 7 (?]0;owned?x) ?2J\n"
			    "{\"event\":\"x\"} ?evil\n");
}

/* Names come from the target's memory: no control byte may reach the terminal. */
static void test_untrusted_text_sanitized(void **state)
{
	const char *got = fmt(state, 0,
			      "{\"event\":\"error\"," COMMON ",\"message\":"
			      "\"a\\u001b[2Jb\\u0007c\\u009bd\\u007fe\\n\xc3\xa9\"}");

	assert_string_equal(got, "14:40:07 error    a?[2Jb?c?d?e?\xc3\xa9\n");
	got = fmt(state, 0, "{\"event\":\"x\\u001b]0;t\\u0007\"," COMMON "}");
	assert_null(strchr(got, '\033'));
	assert_null(strchr(got, '\007'));
}

/*
 * Unicode bidi controls reorder what a terminal shows (a layer name that reads backwards, a
 * class name that hides what follows): each is shown as '?', the rest of the name kept.
 */
static void test_bidi_controls_neutralised(void **state)
{
	static const char *const bidi[] = {
		"\\u202a", "\\u202b", "\\u202c", "\\u202d", "\\u202e", "\\u2066",
		"\\u2067", "\\u2068", "\\u2069", "\\u200e", "\\u200f", "\\u061c",
	};
	char line[1024], want[128];
	const char *got = NULL;
	size_t i;

	for (i = 0; i < sizeof(bidi) / sizeof(bidi[0]); i++) {
		snprintf(line, sizeof(line), ANOMALY_NAMED("a%sb", "M%sN"), bidi[i], bidi[i]);
		got = fmt(state, 0, line);
	}
	snprintf(want, sizeof(want), "a?b (M?N)  output");
	for (i = 0; i < sizeof(bidi) / sizeof(bidi[0]); i++) {
		got = strstr(got, want);
		assert_non_null(got);
		got += strlen(want);
	}
	/* raw UTF-8 in the line (not \\u escapes) is caught the same way, in every field */
	got = fmt(state, 0,
		  "{\"event\":\"diagnosis\"," COMMON ",\"step\":1,\"iteration\":1,"
		  "\"layer\":\"x\xe2\x80\xae\",\"module\":\"Y\xe2\x81\xa6\","
		  "\"cause\":\"z\xd8\x9c\",\"confidence\":1,\"evidence\":[\"e\xe2\x80\x8f\"],"
		  "\"fixes\":[],\"capture\":\"/c\xc2\x85\"}");
	assert_null(strstr(got, "\xe2\x80\xae"));
	assert_null(strstr(got, "\xe2\x81\xa6"));
	assert_null(strstr(got, "\xd8\x9c"));
	assert_null(strstr(got, "\xe2\x80\x8f"));
	assert_null(strstr(got, "\xc2\x85"));
	assert_non_null(strstr(got, "x? (Y?)  cause z?"));
	assert_non_null(strstr(got, "evidence: e?\n"));
	assert_non_null(strstr(got, "capture: /c?\n"));
	/* what is not a control stays: an em dash, an accented letter, a CJK name */
	snprintf(line, sizeof(line), ANOMALY_NAMED("\\u2014\\u00e9%s", "\\u5c42%s"), "", "");
	got = fmt(state, 0, line);
	assert_non_null(strstr(got, "\xe2\x80\x94\xc3\xa9 (\xe5\xb1\x82)"));
}

static void test_time_forms(void **state)
{
	fmt(state, 0,
	    "{\"event\":\"detach\",\"time\":\"2024-05-01T16:40:09+02:00\","
	    "\"reason\":\"signal\"}");
	fmt(state, 0,
	    "{\"event\":\"detach\",\"time\":\"2024-05-01T23:59:59.5-01:30\","
	    "\"reason\":\"signal\"}");
	fmt(state, 0, "{\"event\":\"detach\",\"time\":\"yesterday\",\"reason\":\"signal\"}");
	assert_string_equal(fmt(state, 0, "{\"event\":\"detach\",\"reason\":\"error\"}"),
			    "14:40:09 detach   signal\n"
			    "01:29:59 detach   signal\n"
			    "--:--:-- detach   signal\n"
			    "--:--:-- detach   error\n");
}

static void test_color(void **state)
{
	const char *got = fmt(state, 1,
			      ANOMALY(",\"inputs_finite\":true,\"params_finite\":true,"
				      "\"origin\":true,\"first\":true"));

	assert_non_null(strstr(got, "\033[2m14:40:07\033[0m \033[1;31mANOMALY\033[0m  step 3"));
	assert_non_null(strstr(got, "\033[1mORIGIN\033[0m"));
	assert_non_null(strstr(got, "\033[1;37;41m>>> First non-finite value"));
	/* and none without colour */
	assert_int_equal(teardown(state), 0);
	assert_int_equal(setup(state), 0);
	got = fmt(state, 0, ANOMALY(",\"origin\":true,\"first\":true"));
	assert_null(strchr(got, '\033'));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_attach, setup, teardown),
		cmocka_unit_test_setup_teardown(test_skipped_step, setup, teardown),
		cmocka_unit_test_setup_teardown(test_attach_config, setup, teardown),
		cmocka_unit_test_setup_teardown(test_anomaly_first_origin, setup, teardown),
		cmocka_unit_test_setup_teardown(test_anomaly_first_step_source, setup, teardown),
		cmocka_unit_test_setup_teardown(test_anomaly_first_through_inputs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_anomaly_first_from_params, setup, teardown),
		cmocka_unit_test_setup_teardown(test_anomaly_later, setup, teardown),
		cmocka_unit_test_setup_teardown(test_anomaly_device, setup, teardown),
		cmocka_unit_test_setup_teardown(test_anomaly_loss_first, setup, teardown),
		cmocka_unit_test_setup_teardown(test_anomaly_backward_node, setup, teardown),
		cmocka_unit_test_setup_teardown(test_anomaly_backward_norms, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stats, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stats_small_and_missing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_lost_detach_error, setup, teardown),
		cmocka_unit_test_setup_teardown(test_diagnosis_no_layer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_diagnosis, setup, teardown),
		cmocka_unit_test_setup_teardown(test_explanation, setup, teardown),
		cmocka_unit_test_setup_teardown(test_explanation_not_reproduced, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unknown_event_generic, setup, teardown),
		cmocka_unit_test_setup_teardown(test_passthrough, setup, teardown),
		cmocka_unit_test_setup_teardown(test_passthrough_sanitized, setup, teardown),
		cmocka_unit_test_setup_teardown(test_untrusted_text_sanitized, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bidi_controls_neutralised, setup, teardown),
		cmocka_unit_test_setup_teardown(test_time_forms, setup, teardown),
		cmocka_unit_test_setup_teardown(test_color, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
