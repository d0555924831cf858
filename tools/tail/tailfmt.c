// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Formatting behind nanwatch-tail: nanwatch/1 events as lines for a person.
 * Strings in events come partly from the target's memory, so control and bidi
 * characters are never written to the terminal as they are.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strptime, timegm */
#endif
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jsonread.h"
#include "tailfmt.h"
#include "util/utf8.h"

#define TF_RESET "\033[0m"
#define TF_BOLD "\033[1m"
#define TF_DIM "\033[2m"
#define TF_RED "\033[1;31m"
#define TF_GREEN "\033[32m"
#define TF_YELLOW "\033[33m"
#define TF_CYAN "\033[36m"
#define TF_FIRST "\033[1;37;41m" /* white on red: the line people look for */

/* Fields every event carries; the generic printer leaves them out. */
static const char *const tf_common[] = {
	"schema", "event", "time",	 "seq",	       "host", "pid",
	"comm",	  "rank",  "local_rank", "world_size", "job",  NULL,
};

static void tf__on(const struct tailfmt *t, FILE *out, const char *code)
{
	if (t->color)
		fputs(code, out);
}

static void tf__off(const struct tailfmt *t, FILE *out)
{
	if (t->color)
		fputs(TF_RESET, out);
}

static void tf__str(FILE *out, const char *s)
{
	utf8__write_safe(out, s, strlen(s));
}

/* A value as compact JSON, sanitised like any text. */
static void tf__json(FILE *out, const struct jv *v)
{
	struct json j;

	if (json__init(&j, 256))
		return;
	jv__write(&j, NULL, v);
	if (json__str(&j))
		tf__str(out, json__str(&j));
	json__free(&j);
}

/* A value compactly: strings bare, numbers as sent, "?" when absent. */
static void tf__value(FILE *out, const struct jv *v)
{
	switch (jv__type(v)) {
	case JV_STRING:
		utf8__write_safe(out, jv__string(v), jv__string_len(v));
		return;
	case JV_NUMBER:
		fputs(jv__number_text(v), out);
		return;
	default:
		break;
	}
	if (!v)
		fputc('?', out);
	else
		tf__json(out, v);
}

static void tf__field(FILE *out, const struct jv *ev, const char *key)
{
	tf__value(out, jv__get(ev, key));
}

/* Quoted when a bare string would be ambiguous in key=value lists. */
static void tf__kv_value(FILE *out, const struct jv *v)
{
	const char *s = jv__string(v);

	if (!s || (*s && !strpbrk(s, " \"=") && strlen(s) == jv__string_len(v)))
		tf__value(out, v);
	else
		tf__json(out, v);
}

static int tf__is_true(const struct jv *v)
{
	int b;

	return !jv__bool(v, &b) && b;
}

static int tf__is_false(const struct jv *v)
{
	int b;

	return !jv__bool(v, &b) && !b;
}

/* RFC 3339 time to local HH:MM:SS; "--:--:--" when it cannot be read. */
static void tf__clock(const struct jv *ev, char *buf, size_t n)
{
	const char *s = jv__string(jv__get(ev, "time")), *p;
	struct tm tm = {0};
	long off = 0, hh, mm;
	time_t when;

	snprintf(buf, n, "--:--:--");
	if (!s || !(p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm)))
		return;
	if (*p == '.')
		p += 1 + strspn(p + 1, "0123456789");
	if ((*p == '+' || *p == '-') && strlen(p) == 6 && p[3] == ':') {
		hh = strtol(p + 1, NULL, 10);
		mm = strtol(p + 4, NULL, 10);
		off = (*p == '-' ? -60 : 60) * (hh * 60 + mm);
	} else if (strcmp(p, "Z") && strcmp(p, "z"))
		return;
	when = timegm(&tm) - off;
	if (localtime_r(&when, &tm))
		strftime(buf, n, "%H:%M:%S", &tm);
}

/* "HH:MM:SS [rank R] tag      " with the tag in its colour, padded to line up. */
static void tf__head(const struct tailfmt *t, FILE *out, const struct jv *ev, const char *tag,
		     const char *color)
{
	const struct jv *rank = jv__get(ev, "rank");
	size_t n = strlen(tag);
	char clock[32];

	tf__clock(ev, clock, sizeof(clock));
	tf__on(t, out, TF_DIM);
	fputs(clock, out);
	tf__off(t, out);
	fputc(' ', out);
	if (rank && !jv__is_null(rank)) {
		fputs("[rank ", out);
		tf__value(out, rank);
		fputs("] ", out);
	}
	tf__on(t, out, color);
	utf8__write_safe(out, tag, n);
	tf__off(t, out);
	fprintf(out, "%*s", n < 9 ? (int)(9 - n) : 1, "");
}

/* "1.2 MiB" from a byte count. */
static void tf__bytes(FILE *out, const struct jv *v)
{
	static const char *const unit[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
	double b;
	int i = -1;

	if (jv__number(v, &b)) {
		tf__value(out, v);
		fputs(" B", out);
		return;
	}
	if (b < 1024) {
		fprintf(out, "%.0f B", b);
		return;
	}
	while (b >= 1024 && i < 4) {
		b /= 1024;
		i++;
	}
	fprintf(out, "%.1f %s", b, unit[i]);
}

static void tf__attach(const struct tailfmt *t, FILE *out, const struct jv *ev)
{
	const char *config = jv__string(jv__get(ev, "config"));

	tf__head(t, out, ev, "attach", TF_GREEN);
	fputs("pid ", out);
	tf__field(out, ev, "pid");
	fputs(" (", out);
	tf__field(out, ev, "comm");
	fputs(") python ", out);
	tf__field(out, ev, "python");
	fputs(" torch ", out);
	tf__field(out, ev, "torch");
	fputs(", ", out);
	tf__field(out, ev, "probes");
	fputs(" probes, mode ", out);
	tf__field(out, ev, "mode");
	if (config) {
		fputs(", config ", out);
		tf__str(out, config);
	}
	fputc('\n', out);
}

/* "blocks.0.norm (RMSNorm)"; the outermost module's own path is "". */
static void tf__layer(FILE *out, const struct jv *ev)
{
	const struct jv *layer = jv__get(ev, "layer");
	const char *phase = jv__string(jv__get(ev, "phase"));

	if (phase && !strcmp(phase, "loss")) {
		fputs("the loss (what backward() started from)", out);
		return;
	}
	if (phase && !strcmp(phase, "backward") && jv__get(ev, "node")) {
		fputs("node ", out);
		tf__field(out, ev, "node");
		if (jv__is_null(layer)) {
			/* --backward norms (origin null): the maker is named only for an output */
			fputs(jv__is_null(jv__get(ev, "origin")) ? " (its layer not known)"
								 : " (made outside any module)",
			      out);
			return;
		}
		fputs(" of ", out);
	}
	if (!jv__string(layer)) {
		/* a diagnosis of the loss or of a value made outside the modules: no layer */
		if (!jv__string(jv__get(ev, "module"))) {
			fputs("outside any module", out);
			return;
		}
		fputs("an unregistered module (", out);
		tf__field(out, ev, "module");
		fputc(')', out);
		return;
	}
	if (!*jv__string(layer))
		fputs("<root>", out);
	else
		tf__value(out, layer);
	fputs(" (", out);
	tf__field(out, ev, "module");
	fputc(')', out);
}

/* "output float32[16, 32]" */
static void tf__tensor(FILE *out, const struct jv *ev)
{
	const struct jv *shape = jv__get(ev, "shape");
	size_t i;

	tf__field(out, ev, "tensor");
	fputc(' ', out);
	tf__field(out, ev, "dtype");
	if (jv__type(shape) != JV_ARRAY)
		return;
	fputc('[', out);
	for (i = 0; i < jv__len(shape); i++) {
		if (i)
			fputs(", ", out);
		tf__value(out, jv__index(shape, i));
	}
	fputc(']', out);
}

/* "nan 512 +inf 0 -inf 0  finite [-1.5, 2.25]" */
static void tf__counts(FILE *out, const struct jv *ev)
{
	const struct jv *lo = jv__get(ev, "finite_min"), *hi = jv__get(ev, "finite_max");

	fputs("nan ", out);
	tf__field(out, ev, "nan");
	fputs(" +inf ", out);
	tf__field(out, ev, "posinf");
	fputs(" -inf ", out);
	tf__field(out, ev, "neginf");
	if (jv__type(lo) != JV_NUMBER && jv__type(hi) != JV_NUMBER) {
		fputs("  finite none", out);
		return;
	}
	fputs("  finite [", out);
	tf__value(out, lo);
	fputs(", ", out);
	tf__value(out, hi);
	fputc(']', out);
}

/* Verdict flags after the counts: what came in, and whether this layer made it. */
static void tf__flags(const struct tailfmt *t, FILE *out, const struct jv *ev)
{
	const struct jv *inputs = jv__get(ev, "inputs_finite");
	const char *cause = jv__string(jv__get(ev, "cause"));
	const char *skipped = jv__string(jv__get(ev, "skipped"));

	if (tf__is_true(inputs))
		fputs("  inputs finite", out);
	else if (tf__is_false(inputs))
		fputs("  inputs NONFINITE", out);
	if (tf__is_false(jv__get(ev, "params_finite")))
		fputs("  params NONFINITE", out);
	if (tf__is_true(jv__get(ev, "origin"))) {
		fputs("  ", out);
		tf__on(t, out, TF_BOLD);
		fputs("ORIGIN", out);
		tf__off(t, out);
	}
	if (tf__is_true(jv__get(ev, "first")))
		fputs("  first", out);
	if (cause) {
		fputs("  cause ", out);
		tf__str(out, cause);
	}
	if (skipped) {
		fputs("  skipped ", out);
		tf__str(out, skipped);
	}
}

/* The highlighted block under the first anomaly of the run. */
static void tf__first(const struct tailfmt *t, FILE *out, const struct jv *ev)
{
	const char *why = "it arrived through its inputs";
	const char *phase = jv__string(jv__get(ev, "phase"));

	if (phase && !strcmp(phase, "loss"))
		why = "every module output was finite: look at how the loss is computed";
	else if (phase && !strcmp(phase, "backward") && tf__is_true(jv__get(ev, "origin")))
		why = "the forward pass and the loss were finite: this autograd node made a "
		      "non-finite gradient from finite ones";
	else if (phase && !strcmp(phase, "backward"))
		why = "the forward pass and the loss were finite: this node handed a parameter "
		      "a non-finite gradient, which an earlier node may have made (--backward on "
		      "names it)";
	else if (tf__is_true(jv__get(ev, "origin")))
		why = "this layer created it (its inputs were finite)";
	else if (tf__is_true(jv__get(ev, "inputs_finite")) &&
		 tf__is_false(jv__get(ev, "params_finite")))
		why = "it came from the layer's parameters (already non-finite)";
	else if (!tf__is_false(jv__get(ev, "inputs_finite")))
		why = "some of its inputs could not be read, so whether it made the value is not "
		      "known";
	fputs("         ", out);
	tf__on(t, out, TF_FIRST);
	fputs(">>> First non-finite value: ", out);
	if (!phase || !strcmp(phase, "forward"))
		fputs("layer ", out);
	tf__layer(out, ev);
	fputs(" at step ", out);
	tf__field(out, ev, "step");
	/* a count from the attach: not the trainer's own step number */
	if (jv__string(jv__get(ev, "step_source")) &&
	    !strcmp(jv__string(jv__get(ev, "step_source")), "attach"))
		fputs(" (counted from the attach)", out);
	fputs(", iteration ", out);
	tf__field(out, ev, "iteration");
	fputs(" \u2014 ", out);
	fputs(why, out);
	tf__off(t, out);
	fputc('\n', out);
}

static void tf__step_iter(FILE *out, const struct jv *ev)
{
	fputs("step ", out);
	tf__field(out, ev, "step");
	fputs(" iter ", out);
	tf__field(out, ev, "iteration");
}

static void tf__anomaly(const struct tailfmt *t, FILE *out, const struct jv *ev)
{
	const char *phase = jv__string(jv__get(ev, "phase"));

	tf__head(t, out, ev, "ANOMALY", TF_RED);
	tf__step_iter(out, ev);
	if (phase && strcmp(phase, "forward") && strcmp(phase, "loss")) {
		fputc(' ', out);
		tf__str(out, phase);
	}
	fputs("  ", out);
	tf__layer(out, ev);
	fputs("  ", out);
	tf__tensor(out, ev);
	if (jv__string(jv__get(ev, "device"))) {
		fputs(" on ", out);
		tf__str(out, jv__string(jv__get(ev, "device")));
	}
	fputs("  ", out);
	tf__counts(out, ev);
	tf__flags(t, out, ev);
	fputc('\n', out);
	if (tf__is_true(jv__get(ev, "first")))
		tf__first(t, out, ev);
}

/* One " name value" pair per stats field, in the order people read them. */
static void tf__stats(const struct tailfmt *t, FILE *out, const struct jv *ev)
{
	tf__head(t, out, ev, "stats", TF_CYAN);
	fputs("steps ", out);
	tf__field(out, ev, "steps");
	fputs(" iterations ", out);
	tf__field(out, ev, "iterations");
	fputs(" modules ", out);
	tf__field(out, ev, "modules");
	fputs(" scanned ", out);
	tf__bytes(out, jv__get(ev, "bytes_scanned"));
	fputc(' ', out);
	tf__field(out, ev, "tensors_scanned");
	fputs(" tensors, anomalies ", out);
	tf__field(out, ev, "anomalies");
	fputs(", suppressed ", out);
	tf__field(out, ev, "suppressed");
	fputs(", lost ", out);
	tf__field(out, ev, "lost");
	fputc('\n', out);
}

static void tf__lost(const struct tailfmt *t, FILE *out, const struct jv *ev)
{
	const struct jv *sink = jv__get(ev, "sink");

	tf__head(t, out, ev, "lost", TF_YELLOW);
	tf__field(out, ev, "count");
	/* where sink: lines an output dropped, not events the kernel did */
	fputs(sink ? " lines (output " : " events (", out);
	tf__field(out, ev, sink ? "sink" : "where");
	fputs(")\n", out);
}

static int tf__is_common(const char *key, const char *const *skip)
{
	int i;

	for (i = 0; tf_common[i]; i++) {
		if (!strcmp(key, tf_common[i]))
			return 1;
	}
	for (i = 0; skip && skip[i]; i++) {
		if (!strcmp(key, skip[i]))
			return 1;
	}
	return 0;
}

/* "key=value" pairs, space-separated, for the fields not common and not in skip. */
static void tf__rest(FILE *out, const struct jv *ev, const char *const *skip, int lead)
{
	const char *key;
	size_t i;

	for (i = 0; i < jv__len(ev); i++) {
		key = jv__key(ev, i);
		if (tf__is_common(key, skip))
			continue;
		if (lead)
			fputc(' ', out);
		lead = 1;
		tf__str(out, key);
		fputc('=', out);
		tf__kv_value(out, jv__index(ev, i));
	}
}

static void tf__detach(const struct tailfmt *t, FILE *out, const struct jv *ev)
{
	static const char *const skip[] = {"reason", NULL};

	tf__head(t, out, ev, "detach", TF_YELLOW);
	tf__field(out, ev, "reason");
	tf__rest(out, ev, skip, 1);
	fputc('\n', out);
}

static void tf__error(const struct tailfmt *t, FILE *out, const struct jv *ev)
{
	tf__head(t, out, ev, "error", TF_RED);
	tf__field(out, ev, "message");
	fputc('\n', out);
}

/* Indented "label: item" lines for each element of a list field. */
static void tf__list(FILE *out, const struct jv *ev, const char *key, const char *label)
{
	const struct jv *list = jv__get(ev, key);
	size_t i;

	for (i = 0; i < jv__len(list); i++) {
		fprintf(out, "         %s: ", label);
		tf__value(out, jv__index(list, i));
		fputc('\n', out);
	}
}

/* "  cause C (confidence X" of a diagnosis or an explanation; the caller closes it. */
static void tf__cause(const struct tailfmt *t, FILE *out, const struct jv *ev)
{
	fputs("  cause ", out);
	tf__on(t, out, TF_BOLD);
	tf__field(out, ev, "cause");
	tf__off(t, out);
	fputs(" (confidence ", out);
	tf__field(out, ev, "confidence");
}

/* The evidence, fixes and capture lines of a diagnosis or an explanation. */
static void tf__findings(FILE *out, const struct jv *ev)
{
	const char *capture = jv__string(jv__get(ev, "capture"));

	tf__list(out, ev, "evidence", "evidence");
	tf__list(out, ev, "fixes", "fix");
	if (capture) {
		fputs("         capture: ", out);
		tf__str(out, capture);
		fputc('\n', out);
	}
}

static void tf__diagnosis(const struct tailfmt *t, FILE *out, const struct jv *ev)
{
	tf__head(t, out, ev, "diagnosis", TF_RED);
	tf__step_iter(out, ev);
	fputs("  ", out);
	tf__layer(out, ev);
	tf__cause(t, out, ev);
	fputs(")\n", out);
	if (jv__get(ev, "origin_step") && !jv__is_null(jv__get(ev, "origin_step"))) {
		fputs("         began with the update of step ", out);
		tf__field(out, ev, "origin_step");
		fputc('\n', out);
	}
	tf__findings(out, ev);
	fputs("         incident page: nanwatch-report FILE... -o incident.html\n", out);
}

/* nanwatch-repro --explain: the operation a replay of the capture found, and its verdict. */
static void tf__explanation(const struct tailfmt *t, FILE *out, const struct jv *ev)
{
	const struct jv *op = jv__get(ev, "op"), *rep = jv__get(ev, "reproducible");

	tf__head(t, out, ev, "explanation", TF_RED);
	tf__step_iter(out, ev);
	fputs("  ", out);
	tf__layer(out, ev);
	fputs("  ", out);
	if (jv__string(op))
		tf__value(out, op);
	else
		fputs("no operation", out);
	tf__cause(t, out, ev);
	fputc(')', out);
	if (tf__is_true(rep)) {
		fputs("  reproducible", out);
	} else if (tf__is_false(rep)) {
		fputs("  ", out);
		tf__on(t, out, TF_BOLD);
		fputs("NOT reproducible", out);
		tf__off(t, out);
		fputs(" (hardware, race or uninitialised memory suspected)", out);
	}
	fputc('\n', out);
	tf__findings(out, ev);
}

/* A line of its step and message, under tag. */
static void tf__message(const struct tailfmt *t, FILE *out, const struct jv *ev, const char *tag)
{
	tf__head(t, out, ev, tag, TF_YELLOW);
	tf__step_iter(out, ev);
	fputs("  ", out);
	tf__field(out, ev, "message");
	fputc('\n', out);
}

static void tf__warning(const struct tailfmt *t, FILE *out, const struct jv *ev)
{
	tf__message(t, out, ev, "warning");
}

static void tf__skipped_step(const struct tailfmt *t, FILE *out, const struct jv *ev)
{
	tf__message(t, out, ev, "skipped");
}

static void tf__generic(const struct tailfmt *t, FILE *out, const struct jv *ev, const char *name)
{
	tf__head(t, out, ev, name, TF_BOLD);
	tf__rest(out, ev, NULL, 0);
	fputc('\n', out);
}

static void tf__event(const struct tailfmt *t, FILE *out, const struct jv *ev, const char *name)
{
	static const struct {
		const char *name;
		void (*fn)(const struct tailfmt *t, FILE *out, const struct jv *ev);
	} table[] = {
		{"attach", tf__attach},
		{"anomaly", tf__anomaly},
		{"stats", tf__stats},
		{"lost", tf__lost},
		{"detach", tf__detach},
		{"error", tf__error},
		{"diagnosis", tf__diagnosis},
		{"warning", tf__warning},
		{"skipped_step", tf__skipped_step},
		{"explanation", tf__explanation},
	};
	size_t i;

	for (i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
		if (!strcmp(name, table[i].name)) {
			table[i].fn(t, out, ev);
			return;
		}
	}
	tf__generic(t, out, ev, name);
}

int tailfmt__line(const struct tailfmt *t, const char *line, size_t len, FILE *out)
{
	struct jv *ev = jv__parse(line, len, NULL, 0);
	const struct jv *name = jv__get(ev, "event");

	/* anything else passes, so the daemon's own errors stay visible, but never raw */
	if (!jv__string(name) || strlen(jv__string(name)) != jv__string_len(name)) {
		utf8__write_safe(out, line, len);
		fputc('\n', out);
	} else {
		tf__event(t, out, ev, jv__string(name));
	}
	jv__free(ev);
	return ferror(out) ? -EIO : 0;
}
