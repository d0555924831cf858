// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * nanwatchd: attach to a running PyTorch process and report the first layer
 * whose output holds NaN or ±Inf, as JSON lines.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "capture.h"
#include "backward.h"
#include "elfsym.h"
#include "emit.h"
#include "layout.h"
#include "names.h"
#include "probe.h"
#include "pyoffsets.h"
#include "optstate.h"
#include "remote.h"
#include "report.h"
#include "sink.h"
#include "tailfmt.h"
#include "target.h"

#ifndef NW_LAYOUT_DIR
#define NW_LAYOUT_DIR "/usr/local/share/nanwatch/layouts"
#endif
#define NW_VERSION "0.1.0"

static volatile sig_atomic_t exiting;
static volatile sig_atomic_t reopen;	/* SIGHUP: reopen file outputs */

struct args {
	pid_t pid;
	const char *outputs[SINKS_MAX];
	int noutputs;
	size_t queue_bytes;	/* per output, for a reader that falls behind */
	const char *layouts;
	const char *mode;
	int top_only;		/* mode sample or loss: no layer-level checks */
	int loss_only;		/* mode loss: no module probes */
	uint64_t max_scan_bytes;
	double stats_interval;
	int verbose;
	int bpf_stats;
	const char *capture_dir;
	uint64_t capture_max_bytes;
	int backward;		/* --backward: 0 off, 1 norms, 2 on */
};

struct app {
	struct args a;
	struct target t;
	struct nw_layout nwl;
	struct remote remote;
	struct sinks *sinks;
	struct emitter e;
	struct names *names;
	struct report r;
	struct probe *p;
	struct capture *cap;
	char step_symbol[512];
	char backward_symbol[256];
	int published;		/* offsets taken from the interpreter itself */
	struct nw_bwd_layout bwl;
	struct nw_rescan rescan;	/* .on: the torch table lets outputs skip a rescan */
	char node_symbol[256];	/* "" : the backward pass is not checked */
	long long vtable_offset;	/* vtable pointer - its _ZTV symbol */
	int pidfd;
	const char *reason;
	double next_sink_lost;	/* sink drops are reported at most once a second */
	uint64_t step_impl;	/* the tracked optimizer's step tensor handed to BPF; 0: none */
};

static const char usage[] =
	"Usage: nanwatchd --pid PID [options]\n"
	"Watch a running PyTorch process and report the first layer whose output holds\n"
	"NaN or +-Inf, as JSON lines (schema nanwatch/1).\n"
	"\n"
	"  -p, --pid PID            process to watch (required)\n"
	"  -o, --output DEST        '-' (stdout, default), a file, or unix:/path/to/socket;\n"
	"                           repeat for several outputs (at most 8)\n"
	"      --output-queue-kb N  KiB of lines each output holds back for a slow reader\n"
	"                           before it drops lines (default 1024)\n"
	"  -m, --mode MODE          'full': check every module output (default)\n"
	"                           'sample': check only outermost calls (the model's\n"
	"                           output, a loss module): finds the first bad step and\n"
	"                           iteration, not the layer\n"
	"                           'loss': check only the loss backward() starts from, with\n"
	"                           no module probes (one probe hit per backward): finds\n"
	"                           the first bad step, not the layer; the cheapest watch\n"
	"  -L, --layouts DIR        layout tables (default: next to the binary, then\n"
	"                           " NW_LAYOUT_DIR ")\n"
	"      --max-scan-mb N      scan at most N MiB of each tensor (default 1024)\n"
	"      --stats-interval S   emit a stats line every S seconds (default: at exit)\n"
	"      --capture-dir DIR    on the first origin anomaly, write the layer's inputs,\n"
	"                           parameters, buffers and output (.npy) and a manifest\n"
	"                           into DIR/<pid>-step<N>-<layer>/ (see tools/nanwatch-repro)\n"
	"      --capture-max-mb N   tensor bytes one capture may hold (default 60; a\n"
	"                           fraction is allowed); tensors past it are left out\n"
	"      --backward MODE      the backward pass (not in mode sample):\n"
	"                           'norms': gradient norms per backward pass from the\n"
	"                           parameter gradients, which are checked for NaN/+-Inf\n"
	"                           (default)\n"
	"                           'on': also check every gradient an autograd node\n"
	"                           returns, name the node and layer that made one\n"
	"                           non-finite (detect_anomaly, from outside)\n"
	"                           'off': nothing\n"
	"      --bpf-stats          report the BPF programs' run time in stats lines\n"
	"                           (turns on kernel-wide BPF run-time accounting)\n"
	"  -v, --verbose            libbpf and diagnostic messages on stderr\n"
	"  -h, --help               this help\n"
	"  -V, --version            print the version\n"
	"\n"
	"Ctrl-C or SIGTERM detaches; the daemon also exits 0 when the target exits or\n"
	"execs another program. SIGHUP reopens file outputs (after a log rotation).\n";

static void die_usage(const char *msg)
{
	fprintf(stderr, "nanwatchd: %s (see --help)\n", msg);
	exit(2);
}

static long long parse_num(const char *s, const char *what, long long min, long long max)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || end == s || *end || v < min || v > max) {
		char msg[128];

		snprintf(msg, sizeof(msg), "invalid %s '%s'", what, s);
		die_usage(msg);
	}
	return v;
}

/* MiB, fractions allowed (a budget of a few bytes is a valid test); at most 512. */
static uint64_t parse_mb(const char *s, const char *what)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end || !(v > 0) || v > 512 || v * 1048576 < 1) {
		char msg[128];

		snprintf(msg, sizeof(msg), "invalid %s '%s' (more than 0, at most 512)", what, s);
		die_usage(msg);
	}
	return (uint64_t)(v * 1048576);
}

static void parse_args(int argc, char **argv, struct args *a)
{
	static const struct option opts[] = {
		{"pid", required_argument, NULL, 'p'},
		{"output", required_argument, NULL, 'o'},
		{"output-queue-kb", required_argument, NULL, 'Q'},
		{"mode", required_argument, NULL, 'm'},
		{"layouts", required_argument, NULL, 'L'},
		{"max-scan-mb", required_argument, NULL, 'M'},
		{"stats-interval", required_argument, NULL, 'S'},
		{"bpf-stats", no_argument, NULL, 'B'},
		{"capture-dir", required_argument, NULL, 'C'},
		{"capture-max-mb", required_argument, NULL, 'X'},
		{"backward", required_argument, NULL, 'G'},
		{"verbose", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{},
	};
	int c;

	a->queue_bytes = SINK_DEFAULT_QUEUE;
	a->mode = "full";
	a->max_scan_bytes = 1024ULL << 20;
	a->capture_max_bytes = CAPTURE_DEFAULT_BYTES;
	a->backward = 1;	/* norms */
	while ((c = getopt_long(argc, argv, "p:o:m:L:vhV", opts, NULL)) != -1) {
		switch (c) {
		case 'p':
			a->pid = parse_num(optarg, "pid", 1, INT_MAX);
			break;
		case 'o':
			if (a->noutputs == SINKS_MAX)
				die_usage("too many --output (at most 8)");
			a->outputs[a->noutputs++] = optarg;
			break;
		case 'Q':
			a->queue_bytes = parse_num(optarg, "--output-queue-kb", 1, 1 << 20) << 10;
			break;
		case 'm':
			a->mode = optarg;
			break;
		case 'L':
			a->layouts = optarg;
			break;
		case 'M':
			a->max_scan_bytes = parse_num(optarg, "--max-scan-mb", 1, 1 << 20) << 20;
			break;
		case 'S':
			a->stats_interval = parse_num(optarg, "--stats-interval", 1, 86400);
			break;
		case 'B':
			a->bpf_stats = 1;
			break;
		case 'C':
			a->capture_dir = optarg;
			break;
		case 'X':
			a->capture_max_bytes = parse_mb(optarg, "--capture-max-mb");
			break;
		case 'G':
			if (!strcmp(optarg, "off"))
				a->backward = 0;
			else if (!strcmp(optarg, "norms"))
				a->backward = 1;
			else if (!strcmp(optarg, "on"))
				a->backward = 2;
			else
				die_usage("--backward takes off, norms or on");
			break;
		case 'v':
			a->verbose = 1;
			break;
		case 'h':
			fputs(usage, stdout);
			exit(0);
		case 'V':
			printf("nanwatchd %s\n", NW_VERSION);
			exit(0);
		default:
			fputs(usage, stderr);
			exit(2);
		}
	}
	if (optind < argc)
		die_usage("unexpected argument");
	if (!a->pid)
		die_usage("--pid is required");
	if (!a->noutputs)
		a->outputs[a->noutputs++] = "-";
	if (strcmp(a->mode, "full") && strcmp(a->mode, "sample") && strcmp(a->mode, "loss"))
		die_usage("unknown --mode (supported: full, sample, loss)");
	a->top_only = strcmp(a->mode, "full") != 0;
	a->loss_only = !strcmp(a->mode, "loss");
}

static void on_signal(int sig)
{
	if (sig == SIGHUP)
		reopen = 1;
	else
		exiting = 1;
}

/* Capabilities (linux/capability.h numbers) the watch needs, from /proc/self/status. */
#define CAP_SYS_PTRACE_BIT (1ULL << 19)
#define CAP_SYS_ADMIN_BIT (1ULL << 21)
#define CAP_PERFMON_BIT (1ULL << 38)
#define CAP_BPF_BIT (1ULL << 39)

/* The effective set; -1 when it cannot be read. */
static long long effective_caps(void)
{
	char *buf = target__read_file("/proc/self/status", 64 << 10, NULL), *p;
	long long caps = -1;

	if (!buf)
		return -1;
	p = strstr(buf, "\nCapEff:");
	if (p)
		caps = strtoull(p + 8, NULL, 16);
	free(buf);
	return caps;
}

/*
 * BPF and uprobes: CAP_SYS_ADMIN, or CAP_BPF + CAP_PERFMON on kernels before 6.16 (since then,
 * and in the stable kernels of July 2025, only CAP_SYS_ADMIN creates uprobes: that failure is
 * named at the attach). CAP_SYS_PTRACE: /proc/PID/{maps,root,environ} and process_vm_readv of
 * another user's process. A root daemon has them all.
 */
static int check_privileges(char *err, size_t errlen)
{
	long long caps = effective_caps();
	int bpf, ptrace;

	if (caps < 0)
		return 0;	/* cannot tell: let the BPF load say it */
	bpf = (caps & CAP_SYS_ADMIN_BIT) || ((caps & CAP_BPF_BIT) && (caps & CAP_PERFMON_BIT));
	ptrace = !!(caps & CAP_SYS_PTRACE_BIT);
	if (bpf && ptrace)
		return 0;
	snprintf(err, errlen, "no permission to watch a process: missing %s%s%s; run as root or "
		 "with CAP_SYS_ADMIN and CAP_SYS_PTRACE", bpf ? "" : "CAP_SYS_ADMIN (BPF, uprobes)",
		 bpf || ptrace ? "" : " and ", ptrace ? "" : "CAP_SYS_PTRACE (reading the target)");
	return -EPERM;
}

/* A refused uprobe without CAP_SYS_ADMIN: say which capability, not only "Permission denied". */
static void explain_attach_denied(int ret, char *err, size_t errlen)
{
	long long caps = effective_caps();
	size_t n = strlen(err);

	if ((ret != -EACCES && ret != -EPERM) || caps < 0 || (caps & CAP_SYS_ADMIN_BIT) ||
	    strncmp(err, "failed to attach uprobe", 23))
		return;
	snprintf(err + n, errlen - n, " (missing CAP_SYS_ADMIN: this kernel creates uprobes only "
		 "for it, CAP_BPF and CAP_PERFMON are not enough)");
}

static const char *layouts_dir(const struct args *a, char *buf, size_t len)
{
	char exe[PATH_MAX];
	ssize_t n;
	char *slash;

	if (a->layouts)
		return a->layouts;
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		exe[n] = 0;
		slash = strrchr(exe, '/');
		if (slash) {
			*slash = 0;
			snprintf(buf, len, "%s/../config/layouts", exe);
			if (!access(buf, R_OK))
				return buf;
		}
	}
	return NW_LAYOUT_DIR;
}

/* The full name of the torch table's step marker function in the target's libtorch_cpu. */
static int step_symbol(struct app *app, const char *prefix, char *err, size_t errlen)
{
	struct elfsym *e;
	int ret;

	app->step_symbol[0] = 0;
	if (!prefix)
		return 0;
	e = app->t.torch_cpu_file[0] ? elfsym__open(app->t.torch_cpu_file) : NULL;
	if (!e) {
		snprintf(err, errlen, "failed to open the target's libtorch_cpu for the step marker");
		return -ENOENT;
	}
	ret = elfsym__find_prefix(e, prefix, app->step_symbol, sizeof(app->step_symbol));
	elfsym__close(e);
	if (ret)
		snprintf(err, errlen, "no symbol %.60s* in %.100s", prefix, app->t.torch_cpu_file);
	return ret;
}

/* The torch table's keys that identify a tensor already scanned; without them, no skipping. */
static void rescan_layout(struct app *app, const struct layout *tl)
{
	memset(&app->rescan, 0, sizeof(app->rescan));
	layout__fill_rescan(tl, &app->rescan, NULL, 0);
}

/* The torch table's backward keys; a table without them leaves the backward pass unwatched. */
static int backward_layout(struct app *app, const struct layout *tl, char *err, size_t errlen)
{
	int ret;

	app->node_symbol[0] = 0;
	if (!app->a.backward || app->a.top_only || !app->t.torch_cpu_file[0])
		return 0;
	ret = backward__layout(tl, app->t.torch_cpu_file, app->t.torch_cpu_base, &app->bwl,
			       app->node_symbol, sizeof(app->node_symbol), err, errlen);
	if (ret == -ENOENT && !app->node_symbol[0] && !layout__str(tl, LK_node_symbol))
		return 0;
	if (!ret)
		ret = layout__int(tl, LK_vtable_offset, &app->vtable_offset);
	return ret;
}

static int load_layouts(struct app *app, char *err, size_t errlen)
{
	char dirbuf[PATH_MAX + 32], why[512];
	const char *dir = layouts_dir(&app->a, dirbuf, sizeof(dirbuf));
	struct layout *py = NULL, *tl = NULL;
	int ret = -ENOTSUP;

	py = layout__find(dir, "python", app->t.python_series, why, sizeof(why));
	if (!py && errno != ENOENT) {
		snprintf(err, errlen, "%s", why);	/* a table there, but refused: say why */
		goto cleanup;
	}
	if (!py) {
		snprintf(err, errlen, "unsupported Python %s in pid %d: no layout table "
			 "python-%s.yaml in %.256s (%.200s)", app->t.python_version, app->t.pid,
			 app->t.python_series, dir, why);
		goto cleanup;
	}
	tl = layout__find(dir, "torch", app->t.torch_series, why, sizeof(why));
	if (!tl && errno != ENOENT) {
		snprintf(err, errlen, "%s", why);
		goto cleanup;
	}
	if (!tl) {
		snprintf(err, errlen, "unsupported torch %s in pid %d: no layout table "
			 "torch-%s.yaml in %.256s; generate one with tools/nanwatch-layout run as the "
			 "training user in the training environment (%.200s)", app->t.torch_version,
			 app->t.pid, app->t.torch_series, dir, why);
		goto cleanup;
	}
	memset(&app->nwl, 0, sizeof(app->nwl));
	snprintf(app->backward_symbol, sizeof(app->backward_symbol), "%s",
		 layout__str(tl, LK_backward_symbol) ? layout__str(tl, LK_backward_symbol) : "");
	ret = step_symbol(app, layout__str(tl, LK_step_symbol_prefix), why, sizeof(why));
	if (!ret)
		ret = backward_layout(app, tl, why, sizeof(why));
	if (!ret)
		rescan_layout(app, tl);
	if (!ret)
		ret = layout__fill(py, &app->nwl, why, sizeof(why));
	if (!ret)
		ret = layout__fill(tl, &app->nwl, why, sizeof(why));
	if (!ret)
		ret = remote__layout_from(&app->remote.l, py, why, sizeof(why));
	if (ret) {
		snprintf(err, errlen, "bad layout table in %.256s: %.200s", dir, why);
		goto cleanup;
	}
	ret = pyoffsets__apply(&app->remote, app->t.runtime, app->t.py_version_hex, py, &app->nwl,
			       &app->remote.l, why, sizeof(why));
	if (ret < 0) {
		snprintf(err, errlen, "unsupported Python %s in pid %d: %.200s",
			 app->t.python_version, app->t.pid, why);
		goto cleanup;
	}
	app->published = ret;
	ret = 0;
cleanup:
	layout__free(py);
	layout__free(tl);
	return ret;
}

static int set_params(void *ctx, uint64_t module, const struct nw_params *np)
{
	struct app *app = ctx;
	struct nw_params bufs;

	if (!app->p)
		return -EAGAIN;
	/* a captured layer's buffers are copied with its parameters */
	if (app->cap && !capture__buffers(&app->remote, module, &bufs))
		probe__set_buffers(app->p, module, &bufs);
	return probe__set_params(app->p, module, np);
}

static uint64_t step_starts(void *ctx)
{
	struct app *app = ctx;
	uint64_t c[NW_C_MAX];

	if (!app->p)
		return 0;
	probe__counters(app->p, c);
	return c[NW_C_STEP_STARTS];
}

/* Capture records come before the anomaly they belong to: assemble them first. */
static void take_capture(struct app *app)
{
	const char *msg;
	struct json *j;

	if (!app->cap)
		return;
	capture__consume(app->cap);
	app->r.capture = capture__path(app->cap);
	msg = capture__error(app->cap);
	if (msg) {
		j = emit__begin(&app->e, "error", 0);
		json__string(j, "message", msg);
		emit__end(&app->e);
	}
}

static int on_grad(void *ctx, const struct nw_grad *g)
{
	struct app *app = ctx;

	report__grad(&app->r, g);
	return 0;
}

static int on_event(void *ctx, const void *data, size_t size)
{
	struct app *app = ctx;

	take_capture(app);
	/* a broken output ends the watch in run(); the outputs that work still get the event */
	report__record(&app->r, data, size);
	return 0;
}

static int emit_attach(struct app *app)
{
	struct json *j = emit__begin(&app->e, "attach", 0);

	json__string(j, "python", app->t.python_version);
	json__string(j, "torch", app->t.torch_version);
	json__int(j, "probes", probe__count(app->p));
	json__string(j, "mode", app->a.mode);
	json__string(j, "backward", !app->node_symbol[0] ? "off" :
				    app->a.backward == 2 ? "on" : "norms");
	json__null(j, "config");
	json__string(j, "interpreter", app->t.python_path);
	json__string(j, "torch_library", app->t.torch_path);
	json__int(j, "published_offsets", app->published);
	return emit__end(&app->e);
}

static void emit_stats(struct app *app, const uint64_t c[NW_C_MAX])
{
	struct probe_runtime rt;
	int have = !probe__runtime(app->p, &rt), source;
	uint64_t step = probe__step(app->p, &source);

	report__stats(&app->r, c, probe__steps(app->p), probe__iterations(app->p), step, source,
		      have ? &rt : NULL);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/*
 * A lost line for each output that dropped lines since the last one. At most
 * once a second (final: now): the line itself is dropped by a stalled output.
 */
static void report_sink_losses(struct app *app, int final)
{
	struct json *j;
	uint64_t n;
	int i;

	if (!final && now_s() < app->next_sink_lost)
		return;
	app->next_sink_lost = now_s() + 1;
	for (i = 0; i < sinks__count(app->sinks); i++) {
		n = sinks__take_dropped(app->sinks, i);
		if (!n)
			continue;
		j = emit__begin(&app->e, "lost", 0);
		json__uint(j, "count", n);
		json__string(j, "where", "sink");
		json__string(j, "sink", sinks__name(app->sinks, i));
		emit__end(&app->e);
	}
}

/* The last lines; a reader that does not take them within a quarter second does not delay exit. */
/*
 * Once an optimizer has stepped, find the tensor that holds its step count and
 * hand it to BPF, which reads it at every step. Looked up again each time: a
 * load_state_dict() puts new tensors in its state, and BPF may have moved on to
 * an optimizer that replaced the first (0 until its state has a step).
 */
static void track_step_state(struct app *app)
{
	struct optstate_layout ol = {app->nwl.var_borrowed, app->nwl.var_tensor};
	uint64_t opt = probe__optimizer(app->p), impl = 0;

	if (!opt)
		return;
	if (optstate__step_impl(&app->remote, &ol, opt, &impl))
		impl = 0;
	if (impl == app->step_impl)
		return;
	probe__set_step_state(app->p, impl);
	app->step_impl = impl;
}

static void emit_final(struct app *app)
{
	uint64_t c[NW_C_MAX], step;
	struct json *j;
	int source;

	/* no program runs after this: the ring drained, the counters add up */
	probe__detach(app->p);
	probe__consume(app->p);
	take_capture(app);
	backward__flush(app->r.bwd);
	report__diagnose(&app->r, UINT64_MAX);
	probe__counters(app->p, c);
	report__lost(&app->r, c);
	report_sink_losses(app, 1);
	emit_stats(app, c);
	j = emit__begin(&app->e, "detach", 0);
	json__string(j, "reason", app->reason);
	json__uint(j, "anomalies", app->r.anomalies);
	json__uint(j, "steps", probe__steps(app->p));
	json__uint(j, "iterations", probe__iterations(app->p));
	step = probe__step(app->p, &source);
	json__uint(j, "step", step);
	json__string(j, "step_source", report__step_source(source));
	json__string(j, "iteration_source", "attach");
	emit__end(&app->e);
	sinks__drain(app->sinks, 250);
}

static int target_exited(struct app *app)
{
	struct pollfd pfd = {.fd = app->pidfd, .events = POLLIN};

	if (app->pidfd < 0)
		return !target__alive(&app->t);
	return poll(&pfd, 1, 0) > 0;
}

static int run(struct app *app)
{
	double next_stats = now_s() + app->a.stats_interval;
	uint64_t c[NW_C_MAX];
	int err;

	while (!exiting) {
		/* lines held back for a slow reader are offered again soon */
		err = probe__poll(app->p, sinks__pending(app->sinks) ? 20 : 100);
		if (err && err != -EINTR) {
			app->reason = "error";
			return err;
		}
		if (reopen) {
			reopen = 0;
			sinks__reopen(app->sinks);
		}
		sinks__flush(app->sinks);
		track_step_state(app);
		probe__counters(app->p, c);
		report__lost(&app->r, c);
		/* iterations started - 1 is the one running: the incident's may be over */
		if (probe__iterations(app->p))
			report__diagnose(&app->r, probe__iterations(app->p) - 1);
		if (app->a.stats_interval > 0 && now_s() >= next_stats) {
			emit_stats(app, c);
			next_stats += app->a.stats_interval;
		}
		report_sink_losses(app, 0);
		if (app->e.failed || sinks__failed(app->sinks)) {
			app->reason = "error";
			return -EPIPE;
		}
		if (target_exited(app)) {
			app->reason = "target_exit";
			return 0;
		}
		if (probe__execed(app->p)) {
			/* the probes' files and the layouts belonged to the old image */
			app->reason = "target_exec";
			return 0;
		}
	}
	app->reason = "signal";
	return 0;
}

static int setup_capture(struct app *app, struct probe_opts *po, char *err, size_t errlen)
{
	struct capture_opts co = {
		.dir = app->a.capture_dir, .max_bytes = app->a.capture_max_bytes,
		.pid = app->a.pid, .comm = app->t.comm, .python_version = app->t.python_version,
		.torch_version = app->t.torch_version, .remote = &app->remote,
		.names = app->names, .layout = &app->nwl, .tuple_type = app->t.tuple_type,
		.py_version_hex = app->t.py_version_hex,
	};

	if (!app->a.capture_dir)
		return 0;
	app->cap = capture__new(&co, err, errlen);
	if (!app->cap)
		return -errno;
	po->capture_max_bytes = app->a.capture_max_bytes;
	po->capture_ring_bytes = capture__ring_bytes(app->a.capture_max_bytes);
	if (!po->capture_ring_bytes) {
		snprintf(err, errlen, "--capture-max-mb too large for one ring buffer");
		return -EINVAL;
	}
	po->capture_int_codes = capture__int_codes(&app->nwl);
	return 0;
}

static int open_outputs(struct app *app, char *err, size_t errlen)
{
	int i, ret;

	app->sinks = sinks__new(app->a.queue_bytes);
	if (!app->sinks) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (i = 0; i < app->a.noutputs; i++) {
		ret = sinks__add(app->sinks, app->a.outputs[i], err, errlen);
		if (ret)
			return ret;
	}
	return 0;
}

/* The python table's dict layout, for BPF to read a module's _parameters itself. */
static void dict_layout(const struct app *app, struct nw_dict_layout *d)
{
	const struct remote_layout *l = &app->remote.l;

	*d = (struct nw_dict_layout){
		.type_flags = l->type_flags, .type_dictoffset = l->type_dictoffset,
		.type_cached_keys = l->type_cached_keys, .managed_dict_flag = l->managed_dict_flag,
		.managed_dict = l->managed_dict, .managed_values = l->managed_values,
		.managed_dict_tagged = l->managed_dict_tagged,
		.inline_values_flag = l->inline_values_flag,
		.inline_values_offset = l->inline_values_offset, .values_valid = l->values_valid,
		.dict_keys = l->dict_keys, .dict_values = l->dict_values,
		.keys_log2_index_bytes = l->keys_log2_index_bytes, .keys_kind = l->keys_kind,
		.keys_nentries = l->keys_nentries, .keys_indices = l->keys_indices,
		.values_items = l->values_items, .keys_kind_general = l->keys_kind_general,
		.entry_general = l->entry_general, .entry_unicode = l->entry_unicode,
		.none = app->t.none, .on = 1,
	};
}

/* A thread id names a thread, not a process: the probes filter by process and would see nothing. */
static int check_process(pid_t pid, char *err, size_t errlen)
{
	pid_t tgid = target__tgid(pid);
	char path[64], *comm;

	if (tgid <= 0 || tgid == pid)
		return 0;	/* gone or unreadable: pidfd_open and the resolve say it */
	snprintf(path, sizeof(path), "/proc/%d/comm", tgid);
	comm = target__read_file(path, 64, NULL);
	if (comm)
		comm[strcspn(comm, "\n")] = 0;
	snprintf(err, errlen, "pid %d is a thread of process %d (%s), not a process: watch "
		 "--pid %d", pid, tgid, comm ? comm : "?", tgid);
	free(comm);
	return -EINVAL;
}

static int setup(struct app *app, char *err, size_t errlen)
{
	struct nw_dict_layout dict;
	struct probe_opts po = {.max_scan_bytes = app->a.max_scan_bytes,
				.verbose = app->a.verbose,
				.bpf_stats = app->a.bpf_stats,
				.top_only = app->a.top_only,
				.loss_only = app->a.loss_only,
				.rescan = &app->rescan,
				.dict = &dict};
	int ret;

	ret = check_process(app->a.pid, err, errlen);
	if (ret)
		return ret;
	app->pidfd = syscall(SYS_pidfd_open, app->a.pid, 0);
	if (app->pidfd < 0 && errno == ESRCH) {
		snprintf(err, errlen, "no such process: %d", app->a.pid);
		return -ESRCH;
	}
	ret = check_privileges(err, errlen);
	if (ret)
		return ret;
	ret = target__resolve(app->a.pid, &app->t, err, errlen);
	if (ret)
		return ret;
	remote__init_pid(&app->remote, app->a.pid);
	app->remote.none = app->t.none;
	ret = load_layouts(app, err, errlen);
	if (!ret)
		ret = target__tensor_type(&app->t, &app->remote, app->remote.l.type_name,
					  app->nwl.type_base, err, errlen);
	if (ret)
		return ret;
	dict_layout(app, &dict);
	if (app->a.verbose)
		fprintf(stderr, "nanwatchd: tensor type 0x%llx from %s\n",
			(unsigned long long)app->t.tensor_type, app->t.tensor_type_from);
	ret = open_outputs(app, err, errlen);
	if (ret)
		return ret;
	app->names = names__new(&app->remote);
	ret = app->names ? emit__init(&app->e, app->sinks, &app->t) : -ENOMEM;
	if (ret) {
		snprintf(err, errlen, "out of memory");
		return ret;
	}
	diagnose__init(&app->r.diag);
	app->r.diag.top_only = app->a.top_only;
	app->r.diag.loss_only = app->r.loss_only = app->a.loss_only;
	app->r.e = &app->e;
	app->r.names = app->names;
	app->r.remote = &app->remote;
	app->r.set_params = set_params;
	app->r.step_starts = step_starts;
	app->r.params_ctx = app;
	app->r.layout = &app->nwl;
	app->r.tensor_type = app->t.tensor_type;
	ret = setup_capture(app, &po, err, errlen);
	if (ret)
		return ret;
	po.step_symbol = app->step_symbol[0] ? app->step_symbol : NULL;
	po.backward_symbol = app->backward_symbol[0] ? app->backward_symbol : NULL;
	if (app->node_symbol[0]) {
		app->r.bwd = backward__new(app->t.torch_cpu_file, app->t.torch_cpu_base,
					   app->vtable_offset,
					   &app->remote, app->nwl.var_tensor);
		if (!app->r.bwd) {
			snprintf(err, errlen, "failed to open %.200s: %s", app->t.torch_cpu_file,
				 strerror(errno));
			return -errno;
		}
		po.node_symbol = app->node_symbol;
		po.bwd = &app->bwl;
		po.backward_all = app->a.backward == 2;
		po.grad_cb = on_grad;
	}
	app->p = probe__open(&app->t, &app->nwl, &po, on_event, app, err, errlen);
	if (!app->p) {
		ret = -errno;
		explain_attach_denied(ret, err, errlen);
		return ret;
	}
	if (app->cap && capture__attach(app->cap, probe__capture_fd(app->p))) {
		snprintf(err, errlen, "failed to read the capture ring buffer: %s", strerror(errno));
		return -errno;
	}
	if (target_exited(app)) {
		snprintf(err, errlen, "pid %d exited while attaching", app->a.pid);
		return -ESRCH;
	}
	return 0;
}

static void cleanup(struct app *app)
{
	capture__free(app->cap);
	probe__close(app->p);
	backward__free(app->r.bwd);
	names__free(app->names);
	emit__free(&app->e);
	sinks__free(app->sinks);
	if (app->pidfd >= 0)
		close(app->pidfd);
}

int main(int argc, char **argv)
{
	struct sigaction sa = {.sa_handler = on_signal};
	static struct app app = {.pidfd = -1};
	char err[1024] = "";
	int ret;

	parse_args(argc, argv, &app.a);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	ret = setup(&app, err, sizeof(err));
	if (ret) {
		/* messages name the target's files and comm: never raw on a terminal */
		fputs("nanwatchd: ", stderr);
		tailfmt__text(stderr, err[0] ? err : strerror(-ret),
			      strlen(err[0] ? err : strerror(-ret)));
		fputc('\n', stderr);
		cleanup(&app);
		return 1;
	}
	emit_attach(&app);
	ret = run(&app);
	emit_final(&app);
	if (sinks__failed(app.sinks))
		ret = -EPIPE;	/* said on stderr when it broke */
	cleanup(&app);
	return ret ? 1 : 0;
}
