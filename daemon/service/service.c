// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Service mode: the config, discovery by a periodic /proc scan, and one loop over every
 * watched process's session, all writing to the same outputs.
 *
 * A process is looked at when it first appears in a scan, again while it is young (a fork
 * that execs soon after) and whenever it execs (its comm or its stack's address, randomized
 * at each exec, changes); a matching process is
 * attached once its maps show libtorch_python, and resolving it is retried for a while since
 * torch's import is still running when the library appears. Forked children that did not
 * exec (same exe and command line as their parent: DataLoader workers) are left alone unless
 * their rule says children: true.
 */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "explain/capture.h"
#include "output/emit.h"
#include "output/event.h"
#include "output/metrics.h"
#include "output/sink.h"
#include "resolve/target.h"
#include "service/config.h"
#include "service/discover.h"
#include "service/service.h"
#include "session.h"
#include "util/notify.h"
#include "util/utf8.h"

#define YOUNG_S 2.0	    /* a process this new may still exec: its match is not final */
#define OPEN_RETRY_S 10.0   /* torch mapped, the resolve failing: how long to try again */
#define WAIT_SLOW_S 30.0    /* a matching process without torch this long ... */
#define WAIT_SLOW_EVERY 2.0 /* ... has its maps read only this often */
#define TICK_S 0.1	    /* session ticks: step state, diagnoses, exits */

enum slot_state {
	SLOT_NEW,     /* not looked at (or execed since) */
	SLOT_IGNORED, /* no rule matches, or a forked child */
	SLOT_WAITING, /* a rule matches; torch not loaded yet */
	SLOT_WATCHED,
	SLOT_DONE, /* ended or failed: not again while this process lives */
};

struct slot {
	pid_t pid;
	unsigned long long start;      /* with pid, names the process */
	unsigned long long startstack; /* with comm, tells an exec */
	char comm[32];
	enum slot_state state;
	int rule;
	unsigned gen;	   /* the last scan that saw it */
	double first_seen; /* monotonic seconds */
	double torch_at;   /* when libtorch_python was first seen mapped; 0: not yet */
	double next_check;
	struct session *s;
	struct metrics_target *mt; /* its series on the metrics endpoint; NULL: none */
};

struct service {
	const struct service_opts *o;
	struct config *c;
	struct sinks *out;
	struct metrics *m; /* metrics.listen: the Prometheus endpoint; NULL: none */
	struct session_opts so[CONFIG_MAX_RULES];
	struct slot *slots;
	size_t n, cap;
	unsigned gen;
	pid_t self;
	double scan_s, scan_max_s; /* scans' time (with attaches), for the verbose summary */
	unsigned long scans;
};

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* A message quotes the file's or the target's text: never raw on a terminal. */
static void say(FILE *f, const char *prefix, const char *msg)
{
	fputs(prefix, f);
	utf8__write_safe(f, msg, strlen(msg));
	fputc('\n', f);
}

int service__check_config(const char *path)
{
	char err[1024] = "", sum[1024];
	struct config *c = config__load(path, err, sizeof(err));

	if (!c) {
		int ret = errno;

		say(stderr, "nanwatchd: ", err[0] ? err : strerror(ret));
		return -ret;
	}
	config__summary(c, sum, sizeof(sum));
	say(stdout, "", sum);
	config__free(c);
	return 0;
}

/* An error event for a process that has no session (or whose session broke). */
static void report_error(struct service *sv, const struct slot *sl, const char *msg)
{
	const struct config_rule *r = &sv->c->rules[sl->rule];
	struct target t = {.pid = sl->pid};
	struct emitter e;

	snprintf(t.comm, sizeof(t.comm), "%s", sl->comm);
	target__read_env(&t);
	if (r->job[0])
		snprintf(t.job, sizeof(t.job), "%s", r->job);
	if (!emit__init(&e, sv->out, &t))
		output__error(&e, msg);
	emit__free(&e);
	if (sv->o->verbose) {
		fprintf(stderr, "nanwatchd: pid %d (rule %s): ", sl->pid, r->name);
		say(stderr, "", msg);
	}
}

/* The session's counts into its metrics series (the totals keep them once it ends). */
static void update_metrics(struct slot *sl)
{
	struct session_stats st;

	if (!sl->mt)
		return;
	session__stats(sl->s, &st);
	metrics__target_update(sl->mt, &st);
}

static void end_session(struct service *sv, struct slot *sl, enum session_stop stop)
{
	char msg[128];

	if (stop == SESSION_ERROR) {
		snprintf(msg, sizeof(msg), "failed to watch pid %d: %s", sl->pid,
			 strerror(-session__error(sl->s)));
		report_error(sv, sl, msg);
	}
	session__detach(sl->s, stop);
	update_metrics(sl);
	metrics__target_remove(sv->m, sl->mt);
	sl->mt = NULL;
	session__free(sl->s);
	sl->s = NULL;
	/* an exec is a new program: it may match a rule again */
	sl->state = stop == SESSION_TARGET_EXEC ? SLOT_NEW : SLOT_DONE;
}

/* Same exe and command line as its parent: forked, not execed. */
static int forked_child(pid_t ppid, const struct proc_text *t)
{
	struct proc_text pt;
	int same;

	if (ppid <= 1 || discover__text(ppid, &pt)) {
		discover__text_free(&pt);
		return 0;
	}
	same = t->exe[0] && !strcmp(t->exe, pt.exe) && !strcmp(t->cmdline, pt.cmdline);
	discover__text_free(&pt);
	return same;
}

static void evaluate(struct service *sv, struct slot *sl, const struct proc_stat *st, double now)
{
	struct proc_text t;
	int i;

	sl->state = SLOT_IGNORED;
	if (discover__text(sl->pid, &t) || !t.cmdline[0]) {
		discover__text_free(&t); /* gone, or a kernel thread */
		return;
	}
	for (i = 0; i < sv->c->nrules; i++)
		if (config__rule_match(&sv->c->rules[i], t.cmdline, t.exe, t.env, t.env_len,
				       t.cgroup))
			break;
	if (i < sv->c->nrules && (sv->c->rules[i].children || !forked_child(st->ppid, &t))) {
		sl->state = SLOT_WAITING;
		sl->rule = i;
		sl->next_check = now;
		sl->torch_at = 0;
		if (sv->o->verbose)
			fprintf(stderr, "nanwatchd: pid %d matches rule %s\n", sl->pid,
				sv->c->rules[i].name);
	}
	discover__text_free(&t);
}

/* A watched target's series on the metrics endpoint, labelled with its rank and job. */
static void add_metrics(struct service *sv, struct slot *sl)
{
	const struct config_rule *r = &sv->c->rules[sl->rule];
	struct target t = {.pid = sl->pid};

	if (!sv->m)
		return;
	target__read_env(&t);
	if (r->job[0])
		snprintf(t.job, sizeof(t.job), "%s", r->job);
	sl->mt = metrics__target_add(sv->m, sl->pid, t.rank, t.job[0] ? t.job : NULL);
}

static void try_attach(struct service *sv, struct slot *sl, double now)
{
	int has = discover__has_torch(sl->pid);
	char err[1024] = "";
	struct session *s;

	if (has <= 0) {
		sl->next_check = now + (now - sl->first_seen > WAIT_SLOW_S ? WAIT_SLOW_EVERY : 0);
		return;
	}
	if (!sl->torch_at)
		sl->torch_at = now;
	s = session__open(sl->pid, &sv->so[sl->rule], err, sizeof(err));
	if (!s) {
		if (errno == ESRCH)
			sl->state = SLOT_DONE; /* gone */
		else if (now - sl->torch_at >= OPEN_RETRY_S) {
			report_error(sv, sl, err[0] ? err : strerror(errno));
			sl->state = SLOT_DONE;
		}
		return;
	}
	if (session__attach(s, sv->out, err, sizeof(err))) {
		report_error(sv, sl, err);
		session__free(s);
		sl->state = SLOT_DONE;
		return;
	}
	sl->s = s;
	sl->state = SLOT_WATCHED;
	add_metrics(sv, sl);
	if (sv->o->verbose)
		fprintf(stderr,
			"nanwatchd: pid %d attached %.0f ms after torch was seen loaded, "
			"%.0f ms after the process\n",
			sl->pid, (now_s() - sl->torch_at) * 1e3, (now_s() - sl->first_seen) * 1e3);
}

static struct slot *find_slot(struct service *sv, pid_t pid)
{
	size_t i;

	for (i = 0; i < sv->n; i++)
		if (sv->slots[i].pid == pid)
			return &sv->slots[i];
	return NULL;
}

static struct slot *add_slot(struct service *sv, pid_t pid)
{
	struct slot *sl;

	if (sv->n == sv->cap) {
		size_t cap = sv->cap ? sv->cap * 2 : 256;
		struct slot *n = realloc(sv->slots, cap * sizeof(*n));

		if (!n)
			return NULL; /* looked at again next scan */
		sv->slots = n;
		sv->cap = cap;
	}
	sl = &sv->slots[sv->n++];
	memset(sl, 0, sizeof(*sl));
	sl->pid = pid;
	return sl;
}

/* Whether to match the process against the rules (again). */
static int rematch(const struct slot *sl, const struct proc_stat *st, double now)
{
	int execed = strcmp(st->comm, sl->comm) || st->startstack != sl->startstack;

	switch (sl->state) {
	case SLOT_NEW:
		return 1;
	case SLOT_IGNORED:
		return execed || now - sl->first_seen < YOUNG_S;
	case SLOT_WAITING: /* a launcher that execs the trainer */
	case SLOT_DONE:
		return execed;
	default:
		return 0; /* the session sees its exec */
	}
}

static void visit(struct service *sv, pid_t pid, double now)
{
	struct proc_stat st;
	struct slot *sl;

	if (discover__stat(pid, &st) || st.state == 'Z')
		return;
	sl = find_slot(sv, pid);
	if (sl && sl->start != st.start) { /* the pid was reused */
		if (sl->s)
			end_session(sv, sl, SESSION_TARGET_EXIT);
		memset(sl, 0, sizeof(*sl));
		sl->pid = pid;
	} else if (!sl) {
		sl = add_slot(sv, pid);
		if (!sl)
			return;
	}
	if (!sl->start) {
		sl->start = st.start;
		sl->first_seen = now;
	}
	sl->gen = sv->gen;
	if (rematch(sl, &st, now))
		evaluate(sv, sl, &st, now);
	memcpy(sl->comm, st.comm, sizeof(sl->comm));
	sl->startstack = st.startstack;
	if (sl->state == SLOT_WAITING && now >= sl->next_check)
		try_attach(sv, sl, now);
}

static void scan(struct service *sv)
{
	double now = now_s();
	struct dirent *de;
	DIR *d = opendir("/proc");
	size_t i;

	if (!d)
		return;
	sv->gen++;
	while ((de = readdir(d))) {
		char *end;
		long pid = strtol(de->d_name, &end, 10);

		if (*end || pid <= 0 || pid == sv->self)
			continue;
		visit(sv, pid, now);
	}
	closedir(d);
	/* processes gone since (a watched one ends through its session) */
	for (i = 0; i < sv->n;) {
		if (sv->slots[i].gen != sv->gen && !sv->slots[i].s)
			sv->slots[i] = sv->slots[--sv->n];
		else
			i++;
	}
	now = now_s() - now;
	sv->scan_s += now;
	sv->scans++;
	if (now > sv->scan_max_s)
		sv->scan_max_s = now;
}

static int open_outputs(struct service *sv, char *err, size_t errlen)
{
	int i, ret;

	sv->out = sinks__new(sv->c->queue_bytes);
	if (!sv->out) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	for (i = 0; i < sv->c->noutputs; i++) {
		ret = sinks__add(sv->out, sv->c->outputs[i], err, errlen);
		if (ret)
			return ret;
	}
	return 0;
}

/* Each rule's session options, the config's and the command line's settings together. */
static void session_options(struct service *sv)
{
	int i;

	for (i = 0; i < sv->c->nrules; i++) {
		const struct config_rule *r = &sv->c->rules[i];
		struct session_opts *so = &sv->so[i];

		so->layouts = sv->c->layouts[0] ? sv->c->layouts : NULL;
		so->mode = r->mode;
		so->top_only = strcmp(r->mode, "full") != 0;
		so->loss_only = !strcmp(r->mode, "loss");
		so->max_scan_bytes = sv->c->max_scan_bytes;
		so->stats_interval = sv->c->stats_interval;
		so->verbose = sv->o->verbose;
		so->bpf_stats = sv->o->bpf_stats;
		so->capture_dir = r->capture_dir[0] ? r->capture_dir : NULL;
		so->capture_max_bytes =
			r->capture_max_bytes ? r->capture_max_bytes : CAPTURE_DEFAULT_BYTES;
		so->backward = r->backward;
		so->job = r->job[0] ? r->job : NULL;
		so->outlive_sinks = 1;
		so->may_watch = sv->o->may_watch;
	}
}

/* Findings of every session, then (each TICK_S) their periodic work and exits. */
static void serve_sessions(struct service *sv, int tick)
{
	enum session_stop stop;
	size_t i;

	for (i = 0; i < sv->n; i++) {
		struct slot *sl = &sv->slots[i];

		if (!sl->s)
			continue;
		stop = session__poll(sl->s, 0);
		if (!stop && tick) {
			stop = session__tick(sl->s);
			update_metrics(sl);
		}
		if (stop)
			end_session(sv, sl, stop);
	}
}

/* Sleep until a session's findings wait, or timeout_ms. */
static void wait_findings(struct service *sv, int timeout_ms)
{
	struct pollfd pfd[256];
	nfds_t n = 0;
	size_t i;

	if (sv->m)
		pfd[n++] = (struct pollfd){.fd = metrics__fd(sv->m), .events = POLLIN};
	for (i = 0; i < sv->n && n < 256; i++)
		if (sv->slots[i].s && session__fd(sv->slots[i].s) >= 0)
			pfd[n++] = (struct pollfd){.fd = session__fd(sv->slots[i].s),
						   .events = POLLIN};
	poll(pfd, n, timeout_ms);
}

static void loop(struct service *sv)
{
	double interval = sv->c->scan_interval_ms / 1000.0;
	double next_scan = now_s() + interval, next_tick = now_s(), now;
	int timeout;

	while (!*sv->o->exiting) {
		now = now_s();
		timeout = (int)((next_scan - now) * 1000) + 1;
		if (timeout > (sinks__pending(sv->out) ? 20 : 100))
			timeout = sinks__pending(sv->out) ? 20 : 100;
		wait_findings(sv, timeout > 0 ? timeout : 0);
		now = now_s();
		serve_sessions(sv, now >= next_tick);
		if (sv->m) {
			metrics__update_sinks(sv->m, sv->out);
			metrics__serve(sv->m);
		}
		if (now >= next_tick)
			next_tick = now + TICK_S;
		if (*sv->o->reopen) {
			*sv->o->reopen = 0;
			sinks__reopen(sv->out);
		}
		sinks__flush(sv->out);
		if (now_s() >= next_scan) {
			scan(sv);
			next_scan = now_s() + interval;
		}
	}
}

static void cleanup(struct service *sv)
{
	size_t i;

	for (i = 0; i < sv->n; i++)
		if (sv->slots[i].s)
			end_session(sv, &sv->slots[i], SESSION_SIGNAL);
	/* the last lines; a reader that does not take them within a quarter second does not
	 * delay exit */
	if (sv->out)
		sinks__drain(sv->out, 250);
	sinks__free(sv->out);
	metrics__free(sv->m);
	free(sv->slots);
	config__free(sv->c);
}

int service__run(const struct service_opts *o)
{
	struct service sv = {.o = o, .self = getpid()};
	char err[1024] = "", sum[1024];
	int ret;

	sv.c = config__load(o->config, err, sizeof(err));
	if (!sv.c) {
		say(stderr, "nanwatchd: ", err[0] ? err : strerror(errno));
		return 1;
	}
	ret = open_outputs(&sv, err, sizeof(err));
	if (ret) {
		say(stderr, "nanwatchd: ", err[0] ? err : strerror(-ret));
		cleanup(&sv);
		return 1;
	}
	if (sv.c->metrics_listen[0]) {
		struct metrics_opts mo = {.listen = sv.c->metrics_listen};

		sv.m = metrics__new(&mo, err, sizeof(err));
		if (!sv.m) {
			say(stderr, "nanwatchd: ", err[0] ? err : strerror(errno));
			cleanup(&sv);
			return 1;
		}
	}
	session_options(&sv);
	config__summary(sv.c, sum, sizeof(sum));
	say(stderr, "nanwatchd: service mode: ", sum);
	scan(&sv);
	ret = notify__send("READY=1");
	if (ret)
		fprintf(stderr, "nanwatchd: failed to notify the service manager: %s\n",
			strerror(-ret));
	loop(&sv);
	notify__send("STOPPING=1");
	if (o->verbose)
		fprintf(stderr, "nanwatchd: %lu /proc scans, %.2f ms each, the slowest %.1f ms\n",
			sv.scans, sv.scans ? sv.scan_s * 1e3 / sv.scans : 0, sv.scan_max_s * 1e3);
	/* a broken output was said on stderr when it broke; the others served to the end */
	cleanup(&sv);
	return 0;
}
