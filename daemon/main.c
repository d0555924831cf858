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
#include <unistd.h>
#include "inject/inject.h"
#include "capture/capture.h"
#include "util/file.h"
#include "session/session.h"
#include "output/httpd.h"
#include "output/metrics.h"
#include "output/sink.h"
#include "util/optval.h"
#include "util/utf8.h"
#include "resolve/target.h"
#include "service/service.h"

#ifndef NW_LAYOUT_DIR
#define NW_LAYOUT_DIR "/usr/local/share/nanwatch/layouts"
#endif
#ifndef NW_LAYOUT_CACHE
#define NW_LAYOUT_CACHE "/var/cache/nanwatch/layouts"
#endif
#define NW_VERSION "0.1.0"
#ifndef NW_LIB_DIR
#define NW_LIB_DIR "/usr/local/lib/nanwatch"
#endif

static volatile sig_atomic_t exiting;
static volatile sig_atomic_t reopen; /* SIGHUP: reopen file outputs */

struct args {
	pid_t pid;
	const char *config;	  /* --config: service mode */
	const char *check_config; /* --check-config: check the file and exit */
	int watch_opts;		  /* options of one watch given: FILE has them in service mode */
	const char *outputs[SINKS_MAX];
	int noutputs;
	size_t queue_bytes; /* per output, for a reader that falls behind */
	struct session_opts o;
	const char *metrics;  /* ADDR:PORT of the Prometheus endpoint, or NULL */
	const char *textfile; /* node_exporter textfile the metrics are written to, or NULL */
	int inject;	      /* --inject: load the GPU library into the target */
	const char *inject_lib;
	char inject_path[PATH_MAX];
};

static const char usage[] =
	"Usage: nanwatchd --pid PID [options]\n"
	"       nanwatchd --config FILE [-v]      (service mode)\n"
	"       nanwatchd --check-config FILE\n"
	"Watch a running PyTorch process and report the first layer whose output holds\n"
	"NaN or +-Inf, as JSON lines (schema nanwatch/1).\n"
	"\n"
	"  -p, --pid PID            process to watch (required without --config)\n"
	"  -o, --output DEST        '-' (stdout, default), a file, or unix:/path/to/socket\n"
	"                           (a collector, connected to again if it goes away);\n"
	"                           repeat for several outputs (at most 8)\n"
	"      --output-queue-kb N  KiB of lines each output holds back for a slow or absent\n"
	"                           reader before it drops lines (1..1048576, default 1024)\n"
	"  -m, --mode MODE          'full': check every module output (default)\n"
	"                           'sample': check only outermost calls (the model's\n"
	"                           output, a loss module): finds the first bad step and\n"
	"                           iteration, not the layer\n"
	"                           'loss': check only the loss backward() starts from, with\n"
	"                           no module probes (one probe hit per backward): finds\n"
	"                           the first bad step, not the layer; the cheapest watch\n"
	"  -L, --layouts DIR        layout tables (default: next to the binary, then\n"
	"                           " NW_LAYOUT_DIR ")\n"
	"      --learn-layouts      a Python or torch build without a table: learn one by\n"
	"                           running nanwatch-layout with the target's interpreter,\n"
	"                           as its user inside its root (no privileges, no\n"
	"                           network, a clean environment), check it against the\n"
	"                           target, keep it for that user's processes of the same\n"
	"                           build (by ELF build-id) in --layout-cache\n"
	"      --layout-cache DIR   where learned tables are kept (default\n"
	"                           " NW_LAYOUT_CACHE ")\n"
	"      --learn-timeout S    seconds nanwatch-layout may run (1..3600, default 120)\n"
	"      --max-scan-mb N      scan at most N MiB of each tensor (1..1048576, default\n"
	"                           1024)\n"
	"      --stats-interval S   emit a stats line every S seconds (0..86400; 0, the\n"
	"                           default: only at exit)\n"
	"      --capture-dir DIR    on the first origin anomaly, write the layer's inputs,\n"
	"                           parameters, buffers and output (.npy) and a manifest\n"
	"                           into DIR/<pid>-step<N>-<layer>/ (see tools/nanwatch-repro)\n"
	"      --capture-max-mb N   MiB of tensors one capture may hold (more than 0, at\n"
	"                           most 512, fractions allowed; default 60); tensors\n"
	"                           past it are left out\n"
	"      --backward MODE      the backward pass (not in mode sample):\n"
	"                           'norms': gradient norms per backward pass from the\n"
	"                           parameter gradients, which are checked for NaN/+-Inf\n"
	"                           (default)\n"
	"                           'on': also check every gradient an autograd node\n"
	"                           returns, name the node and layer that made one\n"
	"                           non-finite (detect_anomaly, from outside)\n"
	"                           'off': nothing\n"
	"      --step-counter MODE  where the optimizer keeps no step (plain SGD, updates by\n"
	"                           hand): 'loop' (default) takes it from the training\n"
	"                           loop's own counter (a local such as step or iter_num\n"
	"                           that follows the steps); 'off' counts from the attach\n"
	"      --grad-ring-mb N     MiB of kernel memory (0, or a power of 2 up to 256;\n"
	"                           default 8) through which parameter gradients go to\n"
	"                           nanwatchd, which counts their norms off the target's\n"
	"                           thread; 0: counted in the target's thread (BPF)\n"
	"      --read-method M      how scans copy a tensor's bytes out of the target:\n"
	"                           'auto' (default): measured on this host at the first\n"
	"                           attach; 'probe': bpf_probe_read_user; 'task':\n"
	"                           bpf_copy_from_user_task; 'adaptive': per tensor, the\n"
	"                           faster of the two (for hosts where the kernel's first\n"
	"                           touch of a new page is dear)\n"
	"      --return-probe HOW   how module calls' returns are seen: 'session'\n"
	"                           (Linux 6.13+), a return armed only for module\n"
	"                           calls; 'uretprobe', a return probe on every Python\n"
	"                           call (a stop may wait for the target's frames);\n"
	"                           'auto' (default): session where the kernel has it\n"
	"      --metrics ADDR:PORT  serve Prometheus metrics at http://ADDR:PORT/metrics\n"
	"                           (a loopback address: 127.0.0.1:9464, [::1]:9464)\n"
	"      --metrics-textfile F write the same metrics to file F (NAME.prom, absolute)\n"
	"                           for node_exporter's textfile collector, replaced at\n"
	"                           once every second and at exit, mode 0644\n"
	"      --bpf-stats          report the BPF programs' run time in stats lines\n"
	"                           (turns on kernel-wide BPF run-time accounting)\n"
	"      --inject             load the GPU library (" INJECT_LIB_NAME ") into the\n"
	"                           running target before attaching: its threads stop for\n"
	"                           a moment (ptrace) and one blocked in a system call runs\n"
	"                           dlopen; taken from next to nanwatchd, else\n"
	"                           " NW_LIB_DIR "\n"
	"      --inject-lib PATH    load this library instead (implies --inject)\n"
	"  -v, --verbose            libbpf and diagnostic messages on stderr (twice: service\n"
	"                           mode's per-process jobs and their CPU too)\n"
	"  -c, --config FILE        service mode: watch every process a rule of FILE\n"
	"                           (YAML) matches, found in the kernel's process list,\n"
	"                           attached once it has loaded torch; FILE holds the\n"
	"                           options of the watches (only -v and --bpf-stats go\n"
	"                           with it)\n"
	"      --check-config FILE  check FILE, print a one-line summary, exit 0 (or the\n"
	"                           error as FILE: line N: KEY: reason, exit 1)\n"
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

/* ret from util/optval (or metrics): a bad value is a usage error, said as the config says it. */
static void checked(int ret, const char *why)
{
	if (ret)
		die_usage(why);
}

/* One option of the command line; exits on --help, --version and bad values. */
static void parse_opt(int c, struct args *a)
{
	char why[256];
	int secs;

	if (strchr("poQmLMSCXGPJjTAYUF", c))
		a->watch_opts++;
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
		checked(optval__queue_kb("--output-queue-kb", optarg, &a->queue_bytes, why,
					 sizeof(why)),
			why);
		break;
	case 'm':
		checked(optval__mode("--mode", optarg, &a->o.mode, why, sizeof(why)), why);
		break;
	case 'L':
		a->o.layouts = optarg;
		break;
	case 'A':
		a->o.learn_layouts = 1;
		break;
	case 'Y':
		if (optarg[0] != '/')
			die_usage("--layout-cache takes an absolute path");
		a->o.layout_cache = optarg;
		break;
	case 'U':
		checked(optval__learn_timeout("--learn-timeout", optarg, &a->o.learn_timeout_ms,
					      why, sizeof(why)),
			why);
		break;
	case 'M':
		checked(optval__max_scan_mb("--max-scan-mb", optarg, &a->o.max_scan_bytes, why,
					    sizeof(why)),
			why);
		break;
	case 'S':
		checked(optval__stats_interval("--stats-interval", optarg, &secs, why, sizeof(why)),
			why);
		a->o.stats_interval = secs;
		break;
	case 'P':
		a->metrics = optarg; /* checked once --config is known not to be given with it */
		break;
	case 'F':
		checked(optval__textfile("--metrics-textfile", optarg, why, sizeof(why)), why);
		a->textfile = optarg;
		break;
	case 'B':
		a->o.bpf_stats = 1;
		break;
	case 'J':
		a->inject = 1;
		break;
	case 'j':
		a->inject = 1;
		a->inject_lib = optarg;
		break;
	case 'C':
		a->o.capture_dir = optarg;
		break;
	case 'X':
		checked(optval__capture_max_mb("--capture-max-mb", optarg, &a->o.capture_max_bytes,
					       why, sizeof(why)),
			why);
		break;
	case 'G':
		checked(optval__backward("--backward", optarg, &a->o.backward, why, sizeof(why)),
			why);
		break;
	case 'W':
		checked(optval__grad_ring_mb("--grad-ring-mb", optarg, &a->o.grad_ring_bytes, why,
					     sizeof(why)),
			why);
		break;
	case 'R':
		checked(optval__read_method("--read-method", optarg, &a->o.read_method, why,
					    sizeof(why)),
			why);
		break;
	case 'E':
		checked(optval__return_probe("--return-probe", optarg, &a->o.return_probe, why,
					     sizeof(why)),
			why);
		break;
	case 'T':
		if (!strcmp(optarg, "off"))
			a->o.step_loop_off = 1;
		else if (strcmp(optarg, "loop"))
			die_usage("--step-counter: 'loop' or 'off'");
		break;
	case 'c':
		a->config = optarg;
		break;
	case 'K':
		a->check_config = optarg;
		break;
	case 'v':
		a->o.verbose++;
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

static void parse_args(int argc, char **argv, struct args *a)
{
	static const struct option opts[] = {
		{"pid", required_argument, NULL, 'p'},
		{"output", required_argument, NULL, 'o'},
		{"output-queue-kb", required_argument, NULL, 'Q'},
		{"mode", required_argument, NULL, 'm'},
		{"layouts", required_argument, NULL, 'L'},
		{"learn-layouts", no_argument, NULL, 'A'},
		{"layout-cache", required_argument, NULL, 'Y'},
		{"learn-timeout", required_argument, NULL, 'U'},
		{"max-scan-mb", required_argument, NULL, 'M'},
		{"stats-interval", required_argument, NULL, 'S'},
		{"metrics", required_argument, NULL, 'P'},
		{"metrics-textfile", required_argument, NULL, 'F'},
		{"bpf-stats", no_argument, NULL, 'B'},
		{"inject", no_argument, NULL, 'J'},
		{"inject-lib", required_argument, NULL, 'j'},
		{"capture-dir", required_argument, NULL, 'C'},
		{"capture-max-mb", required_argument, NULL, 'X'},
		{"backward", required_argument, NULL, 'G'},
		{"step-counter", required_argument, NULL, 'T'},
		{"read-method", required_argument, NULL, 'R'},
		{"grad-ring-mb", required_argument, NULL, 'W'},
		{"return-probe", required_argument, NULL, 'E'},
		{"config", required_argument, NULL, 'c'},
		{"check-config", required_argument, NULL, 'K'},
		{"verbose", no_argument, NULL, 'v'},
		{"help", no_argument, NULL, 'h'},
		{"version", no_argument, NULL, 'V'},
		{},
	};
	char why[256];
	int c;

	a->queue_bytes = SINK_DEFAULT_QUEUE;
	a->o.mode = "full";
	a->o.max_scan_bytes = 1024ULL << 20;
	a->o.capture_max_bytes = CAPTURE_DEFAULT_BYTES;
	a->o.backward = 1; /* norms */
	a->o.read_method = OPTVAL_READ_AUTO;
	a->o.return_probe = OPTVAL_RETURN_AUTO;
	a->o.grad_ring_bytes = OPTVAL_GRAD_RING_MB_DEFAULT << 20;
	a->o.learn_timeout_ms = OPTVAL_LEARN_TIMEOUT_DEFAULT * 1000;
	while ((c = getopt_long(argc, argv, "p:o:m:L:c:vhV", opts, NULL)) != -1)
		parse_opt(c, a);
	if (optind < argc)
		die_usage("unexpected argument");
	if (a->check_config)
		exit(service__check_config(a->check_config) ? 1 : 0);
	if (a->config && a->watch_opts)
		die_usage("--config takes the watch's options from FILE (only -v and --bpf-stats "
			  "go with it)");
	if (a->config)
		return;
	if (a->metrics && httpd__check_listen("--metrics", a->metrics, why, sizeof(why)))
		die_usage(why);
	if (!a->pid)
		die_usage("--pid (or --config) is required");
	if (!a->noutputs)
		a->outputs[a->noutputs++] = "-";
	a->o.top_only = strcmp(a->o.mode, "full") != 0;
	a->o.loss_only = !strcmp(a->o.mode, "loss");
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
	char *buf = file__read("/proc/self/status", 64 << 10, NULL), *p;
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
 * BPF and uprobes: CAP_SYS_ADMIN, or CAP_BPF + CAP_PERFMON where the kernel creates the uprobes
 * for them (uprobe_multi links on 6.18; since 6.16, and in the stable kernels of July 2025, a
 * perf uprobe only for CAP_SYS_ADMIN: that failure is named at the attach). CAP_SYS_PTRACE: /proc/PID/{maps,root,environ} and process_vm_readv of
 * another user's process. A root daemon has them all.
 */
static int check_privileges(char *err, size_t errlen)
{
	long long caps = effective_caps();
	int bpf, ptrace;

	if (caps < 0)
		return 0; /* cannot tell: let the BPF load say it */
	bpf = (caps & CAP_SYS_ADMIN_BIT) || ((caps & CAP_BPF_BIT) && (caps & CAP_PERFMON_BIT));
	ptrace = !!(caps & CAP_SYS_PTRACE_BIT);
	if (bpf && ptrace)
		return 0;
	snprintf(err, errlen,
		 "no permission to watch a process: missing %s%s%s; run as root or "
		 "with CAP_SYS_ADMIN and CAP_SYS_PTRACE",
		 bpf ? "" : "CAP_SYS_ADMIN (BPF, uprobes)", bpf || ptrace ? "" : " and ",
		 ptrace ? "" : "CAP_SYS_PTRACE (reading the target)");
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
	snprintf(err + n, errlen - n,
		 " (missing CAP_SYS_ADMIN: this kernel creates uprobes only "
		 "for it, CAP_BPF and CAP_PERFMON are not enough)");
}

static int open_outputs(const struct args *a, struct sinks **out, char *err, size_t errlen)
{
	int i, ret;

	*out = sinks__new(a->queue_bytes);
	if (!*out) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (i = 0; i < a->noutputs; i++) {
		ret = sinks__add(*out, a->outputs[i], err, errlen);
		if (ret)
			return ret;
	}
	return 0;
}

/* The Prometheus endpoint (--metrics) and the watched target's values in it. */
struct served {
	struct metrics *m;
	struct metrics_target *t;
	int textfile_said; /* a failed write of --metrics-textfile was said */
};

static int open_metrics(const struct args *a, struct served *sv, char *err, size_t errlen)
{
	struct metrics_opts mo = {.listen = a->metrics, .textfile = a->textfile};

	if (!a->metrics && !a->textfile)
		return 0;
	sv->m = metrics__new(&mo, err, errlen);
	return sv->m ? 0 : -errno;
}

/* The target's series, labelled with its rank and job once they are read. */
static int add_metrics_target(const struct args *a, struct session *s, struct served *sv, char *err,
			      size_t errlen)
{
	const char *job;
	int rank;

	if (!sv->m)
		return 0;
	session__identity(s, &rank, &job);
	sv->t = metrics__target_add(sv->m, a->pid, rank, job);
	if (!sv->t) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	return 0;
}

/* Resolve the target, open the outputs, attach; 0 or a negative errno with err written. */
static int start(const struct args *a, struct session **s, struct sinks **out, struct served *sv,
		 char *err, size_t errlen)
{
	int ret;

	ret = open_metrics(a, sv, err, errlen); /* a bad or busy address: before the target */
	if (ret)
		return ret;
	*s = session__open(a->pid, &a->o, err, errlen);
	if (!*s)
		return -errno;
	ret = add_metrics_target(a, *s, sv, err, errlen);
	if (ret)
		return ret;
	ret = open_outputs(a, out, err, errlen);
	if (ret)
		return ret;
	ret = session__attach(*s, *out, err, errlen);
	if (ret)
		explain_attach_denied(ret, err, errlen);
	return ret;
}

/* Wait for findings or a metrics client at most timeout_ms; answer the client. */
static enum session_stop wait_poll(struct session *s, struct sinks *out, struct served *sv,
				   int timeout_ms)
{
	struct pollfd pfd[2] = {{.fd = session__fd(s), .events = POLLIN},
				{.fd = sv->m ? metrics__fd(sv->m) : -1, .events = POLLIN}};
	struct session_stats st;
	struct metrics_values v;
	int ret;

	if (!sv->m)
		return session__poll(s, timeout_ms);
	poll(pfd, 2, timeout_ms); /* EINTR: a signal, seen by the caller */
	session__stats(s, &st);
	session__metric_values(&st, &v);
	metrics__target_update(sv->t, &v);
	metrics__update_sinks(sv->m, out);
	metrics__serve(sv->m);
	ret = metrics__tick(sv->m);
	if (ret < 0 && !sv->textfile_said)
		fprintf(stderr, "nanwatchd: cannot write the metrics textfile: %s\n",
			strerror(-ret));
	if (ret)
		sv->textfile_said = ret < 0;
	return session__poll(s, 0);
}

/* Poll until the target goes, an output breaks, or a signal says stop. */
static enum session_stop run(struct session *s, struct sinks *out, struct served *sv)
{
	enum session_stop stop;

	while (!exiting) {
		/* lines held back for a slow reader are offered again soon */
		stop = wait_poll(s, out, sv, sinks__pending(out) ? 20 : 100);
		if (stop)
			return stop;
		if (reopen) {
			reopen = 0;
			sinks__reopen(out);
		}
		sinks__flush(out);
		stop = session__tick(s);
		if (stop)
			return stop;
	}
	return SESSION_SIGNAL;
}

int main(int argc, char **argv)
{
	struct sigaction sa = {.sa_handler = on_signal};
	struct sinks *out = NULL;
	struct session *s = NULL;
	struct served sv = {};
	enum session_stop stop;
	char err[1024] = "";
	struct args a = {};
	int ret;

	parse_args(argc, argv, &a);
	a.o.may_watch = check_privileges;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	if (a.config) {
		struct service_opts so = {.config = a.config,
					  .verbose = a.o.verbose,
					  .bpf_stats = a.o.bpf_stats,
					  .may_watch = check_privileges,
					  .exiting = &exiting,
					  .reopen = &reopen};

		return service__run(&so);
	}
	ret = a.inject ? inject__find_lib(a.inject_lib, NW_LIB_DIR, a.inject_path,
					  sizeof(a.inject_path), err, sizeof(err))
		       : 0;
	a.o.inject_lib = a.inject ? a.inject_path : NULL;
	if (!ret)
		ret = start(&a, &s, &out, &sv, err, sizeof(err));
	if (ret) {
		/* messages name the target's files and comm: never raw on a terminal */
		fputs("nanwatchd: ", stderr);
		utf8__write_safe(stderr, err[0] ? err : strerror(-ret),
				 strlen(err[0] ? err : strerror(-ret)));
		fputc('\n', stderr);
		session__free(s);
		sinks__free(out);
		metrics__free(sv.m);
		return 1;
	}
	stop = run(s, out, &sv);
	session__detach(s, stop);
	/* the last lines; a reader that does not take them within a quarter second does not delay exit */
	sinks__drain(out, 250);
	ret = stop == SESSION_ERROR || sinks__failed(out); /* a broken output: said on stderr */
	session__free(s);
	sinks__free(out);
	metrics__free(sv.m);
	return ret;
}
