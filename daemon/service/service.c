// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Service mode: the config, discovery from the kernel's process list, and one loop over
 * every watched process's session, all writing to the same outputs.
 *
 * The loop never waits on a target. It reads the process list (bpf/procs.bpf.c: a task
 * iterator at each scan, and a wake-up at every exec), keeps one slot per process, and hands
 * whatever may take long to worker threads as jobs: matching a new program against the rules
 * (its /proc files), looking for torch in its maps, resolving and attaching a session. What
 * comes back is applied here; an attached session then runs on a thread of its own
 * (service/runner.h) until it detaches, and the loop only reads its counts. A process is looked at when it appears and
 * whenever it execs; a matching one is attached once its maps show libtorch_python, and
 * resolving it is retried with back-off for a while, since torch's import is still running
 * when the library appears. A forked child that did not exec (the kernel's exec counts say
 * so: DataLoader workers) is left alone unless its rule says children: true.
 *
 * Every uid has a budget (service/budget.h): jobs at once, CPU for work that watched nothing,
 * processes followed at once, error events. A user who starts hostile processes that match a
 * rule spends that much of the daemon at most, and only their own processes wait.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>
#include "capture/capture.h"
#include "output/emit.h"
#include "output/event.h"
#include "output/metrics.h"
#include "output/sink.h"
#include "resolve/target.h"
#include "service/budget.h"
#include "service/config.h"
#include "service/discover.h"
#include "service/procs.h"
#include "service/runner.h"
#include "service/service.h"
#include "service/workers.h"
#include "session/session.h"
#include "util/clock.h"
#include "util/notify.h"
#include "util/utf8.h"

#define OPEN_RETRY_S 10.0     /* torch mapped, the resolve failing: how long to try again */
#define RESOLVE_CPU_MAX_S 2.0 /* a failed resolve that took more is not tried again */
#define BACKOFF_MIN_S 0.1     /* the first retry of a failed resolve, doubled each time ... */
#define BACKOFF_MAX_S 2.0     /* ... up to this */
#define WAIT_SLOW_S 30.0      /* a matching process without torch this long ... */
#define WAIT_SLOW_EVERY 2.0   /* ... has its maps read only this often */
#define TICK_S 0.1	      /* metrics from the sessions' counts */
#define STOP_WAIT_S 20.0      /* the stop waits this long (the unit's TimeoutStopSec is 30 s) */
#define EMPTY_TRIES 3	      /* an empty command line is read again this often, a scan apart */
#define EXEC_SCAN_GAP_S 0.02  /* an exec brings the next scan forward, at most this often */
#define WORKERS_MAX 32	      /* threads for jobs, at most */

enum slot_state {
	SLOT_NEW,     /* not matched against the rules (or execed since) */
	SLOT_IGNORED, /* no rule matches, or a forked child */
	SLOT_WAITING, /* a rule matches; torch not loaded yet, or its resolve is retried */
	SLOT_WATCHED,
	SLOT_DONE,   /* ended or failed: not again while this program runs */
	SLOT_CAPPED, /* its uid has the most processes followed already */
};

struct slot {
	pid_t pid;
	uid_t uid;
	unsigned long long start;   /* with pid, names the process */
	unsigned long long exec_id; /* the kernel's: changes at each exec */
	int execed;		    /* since its fork */
	enum slot_state state;
	int rule;
	int job;       /* a job for it is running: nothing else is started */
	int detaching; /* its session is being detached */
	int followed;  /* counted in its uid's followed processes */
	unsigned gen;  /* the last scan that saw it */
	double first_seen;
	double torch_at; /* when a job first saw libtorch_python mapped; 0: not yet */
	double next_check;
	double backoff;
	int empty;		   /* its command line read empty this often */
	struct runner *r;	   /* its session, watching or detaching; NULL: none */
	struct metrics_target *mt; /* its series on the metrics endpoint; NULL: none */
	/* from its environment once it matched (RANK, ...; the job): what its error lines say */
	int rank, local_rank, world_size;
	char job_id[128];
	char comm[16];
};

struct service {
	const struct service_opts *o;
	struct config *c;
	struct sinks *out;
	struct metrics *m;   /* metrics.listen, metrics.textfile; NULL: neither */
	int textfile_failed; /* its last write failed (said once) */
	struct procs *procs;
	struct workers *ws;
	struct budgets *b;
	struct session_opts so[CONFIG_MAX_RULES];
	int need_env;	    /* a rule matches on the environment */
	struct slot *slots; /* ascending pid */
	size_t n;
	unsigned gen;
	pid_t self;
	double next_scan, last_scan;
	double scan_s, scan_max_s; /* scans' time, for the verbose summary */
	unsigned long scans;
	size_t rr;		 /* where the next dispatch starts: every slot gets its turn */
	int done_fd;		 /* an eventfd: a runner has detached */
	struct runner **orphans; /* sessions attached for a process gone or execed meanwhile */
	size_t norphans;
};

/* Match if asked, look for torch, open and attach: on a worker thread. */
struct job {
	struct work w;
	struct service *sv;
	pid_t pid;
	uid_t uid;
	unsigned long long start, exec_id;
	int match;  /* match the rules first */
	int execed; /* the kernel's fork/exec, for children: false */
	int rule;   /* in: the rule to watch with (match: out, -1 none) */
	int torch;  /* libtorch_python mapped */
	int err;    /* the resolve (or with attach_failed the attach) failed: -errno */
	int attach_failed;
	double torch_at, done_at;
	double cpu_s;
	struct target env; /* match: its rank, local_rank, world_size and job */
	struct session *s; /* attached */
	char msg[1024];
};

static double thread_cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
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

/*
 * An error event about a process, as if its own session wrote it: its rank and job as read
 * when it matched (sl NULL: the daemon's own line). Nothing of the process is read here.
 */
static void emit_error(struct service *sv, const struct slot *sl, const char *msg)
{
	struct target t = {
		.pid = sl ? sl->pid : sv->self, .rank = -1, .local_rank = -1, .world_size = -1};
	struct emitter e;

	snprintf(t.comm, sizeof(t.comm), "%s", sl ? sl->comm : "nanwatchd");
	if (sl) {
		t.rank = sl->rank;
		t.local_rank = sl->local_rank;
		t.world_size = sl->world_size;
		snprintf(t.job, sizeof(t.job), "%s", sl->job_id);
		if (sl->rule >= 0 && sv->c->rules[sl->rule].job[0])
			snprintf(t.job, sizeof(t.job), "%s", sv->c->rules[sl->rule].job);
	}
	if (!emit__init(&e, sv->out, &t))
		output__error(&e, msg);
	emit__free(&e);
}

/*
 * An error event for a process that has no session (or whose session broke), within its
 * uid's budget; the others are counted, and summed up by say_suppressed.
 */
static void report_error(struct service *sv, const struct slot *sl, const char *msg)
{
	struct budget_uid *u = budgets__get(sv->b, sl->uid, clock__now());

	if (sv->o->verbose) {
		fprintf(stderr, "nanwatchd: pid %d (uid %u): ", sl->pid, (unsigned)sl->uid);
		say(stderr, "", msg);
	}
	if (u && !budget__error(sv->b, u, clock__now()))
		return;
	emit_error(sv, sl, msg);
}

/* Once per error interval, a line per uid whose errors were suppressed since the last one. */
static int say_suppressed_uid(struct budget_uid *u, void *ctx)
{
	struct service *sv = ctx;
	char msg[256];

	if (u->suppressed == u->suppressed_said || !budget__error(sv->b, u, clock__now()))
		return 0;
	u->errors--; /* the summary is not one of the errors it sums up */
	snprintf(msg, sizeof(msg),
		 "%llu error events about processes of uid %u suppressed (per user: %d at once, "
		 "then one every %.0f s)",
		 (unsigned long long)(u->suppressed - u->suppressed_said), (unsigned)u->uid,
		 budgets__limits(sv->b)->err_burst, budgets__limits(sv->b)->err_interval);
	u->suppressed_said = u->suppressed;
	emit_error(sv, NULL, msg);
	return 0;
}

static void say_suppressed(struct service *sv)
{
	budgets__each(sv->b, say_suppressed_uid, sv);
}

/* The service's own counters onto the metrics endpoint. */
static void update_service_metrics(struct service *sv)
{
	struct metrics_service ms = {0};
	struct budget_totals t;

	if (!sv->m)
		return;
	budgets__totals(sv->b, &t);
	ms.errors = t.errors;
	ms.errors_suppressed = t.suppressed;
	ms.capped = t.capped;
	ms.followed = t.followed;
	ms.followed_max = t.followed_max;
	ms.refused_cpu_seconds = t.cpu_ns / 1e9;
	ms.jobs_pending = workers__pending(sv->ws);
	metrics__service_update(sv->m, &ms);
}

/* A watched target's series on the metrics endpoint, labelled with its rank and job. */
static void add_metrics(struct service *sv, struct slot *sl)
{
	const char *job = sv->c->rules[sl->rule].job[0] ? sv->c->rules[sl->rule].job : sl->job_id;

	if (sv->m)
		sl->mt = metrics__target_add(sv->m, sl->pid, sl->rank, job[0] ? job : NULL);
}

/* The metrics textfile rewritten (once a second); a failure said once until it works again. */
static void textfile_tick(struct service *sv)
{
	int ret = metrics__tick(sv->m);

	if (ret < 0 && !sv->textfile_failed)
		fprintf(stderr, "nanwatchd: cannot write the metrics textfile %s: %s\n",
			sv->c->metrics_textfile, strerror(-ret));
	if (ret)
		sv->textfile_failed = ret < 0;
}

/* The session's counts into its metrics series (the totals keep them once it ends). */
static void update_metrics(struct slot *sl)
{
	struct session_stats st;
	struct metrics_values v;

	if (!sl->mt || !sl->r)
		return;
	runner__stats(sl->r, &st);
	session__metric_values(&st, &v);
	metrics__target_update(sl->mt, &v);
}

/* --- jobs, on the worker threads ------------------------------------------------------- */

#define MATCH_EMPTY -2

/*
 * The first rule that matches the process, -1 for none (or a forked child without children),
 * MATCH_EMPTY for an empty command line: an exec between the scan and this read, or a
 * program that blanked its own.
 */
static int match_rules(const struct service *sv, pid_t pid, int execed)
{
	struct proc_text t;
	int i, rule = -1;

	if (discover__text(pid, &t, sv->need_env)) {
		discover__text_free(&t); /* gone */
		return -1;
	}
	if (!t.cmdline[0]) {
		discover__text_free(&t);
		return MATCH_EMPTY;
	}
	for (i = 0; i < sv->c->nrules && rule < 0; i++)
		if (config__rule_match(&sv->c->rules[i], t.cmdline, t.exe, t.env, t.env_len,
				       t.cgroup))
			rule = i;
	if (rule >= 0 && !execed && !sv->c->rules[rule].children)
		rule = -1;
	discover__text_free(&t);
	return rule;
}

static void look(struct job *j)
{
	struct service *sv = j->sv;
	struct session *s;

	if (j->match) {
		j->rule = match_rules(sv, j->pid, j->execed);
		if (j->rule < 0)
			return;
		j->env.pid = j->pid;
		target__read_env(&j->env);
	}
	j->torch = discover__has_torch(j->pid) > 0;
	if (!j->torch)
		return;
	j->torch_at = clock__now();
	s = session__open(j->pid, &sv->so[j->rule], j->msg, sizeof(j->msg));
	if (!s) {
		j->err = -errno;
		return;
	}
	j->err = session__attach(s, sv->out, j->msg, sizeof(j->msg));
	if (j->err) {
		j->attach_failed = 1;
		session__free(s);
		return;
	}
	j->s = s;
}

static void run_job(struct work *w)
{
	struct job *j = (struct job *)((char *)w - offsetof(struct job, w));
	double cpu = thread_cpu_s();

	look(j);
	j->cpu_s = thread_cpu_s() - cpu;
	j->done_at = clock__now();
}

static struct job *new_job(struct service *sv, const struct slot *sl)
{
	struct job *j = calloc(1, sizeof(*j));

	if (!j)
		return NULL;
	j->w.run = run_job;
	j->sv = sv;
	j->pid = sl->pid;
	j->uid = sl->uid;
	j->start = sl->start;
	j->exec_id = sl->exec_id;
	j->rule = sl->rule;
	return j;
}

/* --- slots ------------------------------------------------------------------------------ */

static struct slot *find_slot(struct service *sv, pid_t pid)
{
	size_t lo = 0, hi = sv->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (sv->slots[mid].pid == pid)
			return &sv->slots[mid];
		if (sv->slots[mid].pid < pid)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

static void follow(struct service *sv, struct slot *sl, int on)
{
	struct budget_uid *u;

	if (sl->followed == on)
		return;
	u = budgets__get(sv->b, sl->uid, clock__now());
	if (u)
		u->followed += on ? 1 : -1;
	sl->followed = on;
}

/* Ask the session to detach; its runner says when it has (finish_runner). */
static void stop_session(struct slot *sl, enum session_stop why)
{
	if (sl->r)
		runner__stop(sl->r, why);
}

/* The slot's process runs a new program (an exec): matched against the rules from the start. */
static void new_program(struct slot *sl)
{
	sl->state = SLOT_NEW;
	sl->torch_at = 0;
	sl->backoff = 0;
	sl->next_check = 0;
	sl->empty = 0;
}

/* The session detached: its counts into the metrics, its error said, the slot's next state. */
static void finish_runner(struct service *sv, struct slot *sl)
{
	enum session_stop stop = runner__reason(sl->r);
	char msg[128];

	update_metrics(sl);
	metrics__target_remove(sv->m, sl->mt);
	sl->mt = NULL;
	if (stop == SESSION_ERROR) {
		if (sv->m)
			metrics__watch_lost(sv->m);
		snprintf(msg, sizeof(msg), "failed to watch pid %d: %s", sl->pid,
			 strerror(-runner__error(sl->r)));
		report_error(sv, sl, msg);
	}
	runner__free(sl->r);
	sl->r = NULL;
	/* an exec is a new program: it may match a rule again */
	if (stop == SESSION_TARGET_EXEC)
		new_program(sl);
	else
		sl->state = SLOT_DONE;
	follow(sv, sl, 0);
}

static void reset_slot(struct slot *sl, const struct nw_proc *p, double now)
{
	memset(sl, 0, sizeof(*sl));
	sl->pid = p->tgid;
	sl->uid = p->uid;
	sl->start = p->start_ns;
	sl->exec_id = p->exec_id;
	sl->execed = !!(p->flags & NW_PROC_EXECED);
	sl->first_seen = now;
	sl->rule = -1;
	sl->rank = sl->local_rank = sl->world_size = -1;
	memcpy(sl->comm, p->comm, sizeof(sl->comm));
	sl->comm[sizeof(sl->comm) - 1] = 0;
}

/* Whether a slot whose process is gone can be dropped now (its job finds it gone). */
static int slot_busy(const struct slot *sl)
{
	return sl->r || sl->job;
}

/* A session's runner that no slot holds: detached, and freed once done. */
static void orphan(struct service *sv, struct runner *r, enum session_stop why)
{
	struct runner **n = realloc(sv->orphans, (sv->norphans + 1) * sizeof(*n));

	runner__stop(r, why);
	if (!n) { /* no memory to keep it: wait for it here */
		runner__free(r);
		return;
	}
	sv->orphans = n;
	sv->orphans[sv->norphans++] = r;
}

/* A slot the scan no longer sees: its session sees the exit itself and detaches. */
static void slot_gone(struct service *sv, struct slot *sl)
{
	stop_session(sl, SESSION_TARGET_EXIT);
	if (!sl->r)
		follow(sv, sl, 0);
}

/* The pid is a new process's: the old one's session goes on detaching without its slot. */
static void slot_reused(struct service *sv, struct slot *sl)
{
	if (sl->r) {
		update_metrics(sl);
		metrics__target_remove(sv->m, sl->mt);
		sl->mt = NULL;
		orphan(sv, sl->r, SESSION_TARGET_EXIT);
		sl->r = NULL;
	}
	follow(sv, sl, 0);
}

/* The same process as the last scan saw: an exec makes it a new program. */
static void slot_seen(struct service *sv, struct slot *sl, const struct nw_proc *p)
{
	memcpy(sl->comm, p->comm, sizeof(sl->comm));
	sl->comm[sizeof(sl->comm) - 1] = 0;
	if (p->exec_id == sl->exec_id)
		return;
	sl->exec_id = p->exec_id;
	sl->execed = 1;
	if (sl->r)
		return; /* the session sees its exec, and its end sets the state */
	follow(sv, sl, 0);
	sl->uid = p->uid;
	new_program(sl);
}

/* Merge the kernel's list (ascending tgid) into the slots (ascending pid). */
static int merge(struct service *sv, const struct nw_proc *p, size_t np, double now)
{
	struct slot *out = malloc((sv->n + np) * sizeof(*out)), *o;
	size_t i = 0, k = 0, n = 0;

	if (!out)
		return -ENOMEM;
	while (i < sv->n || k < np) {
		if (k < np && p[k].tgid == (__u32)sv->self) {
			k++;
			continue;
		}
		if (k == np || (i < sv->n && sv->slots[i].pid < (pid_t)p[k].tgid)) {
			o = &sv->slots[i++]; /* gone */
			slot_gone(sv, o);
			if (slot_busy(o))
				out[n++] = *o;
			continue;
		}
		if (i < sv->n && sv->slots[i].pid == (pid_t)p[k].tgid) {
			o = &sv->slots[i++];
			if (p[k].flags & NW_PROC_IN_EXEC) {
				/* mid-exec: as it was, until a scan sees the exec through */
			} else if (o->start != p[k].start_ns) { /* the pid was reused */
				slot_reused(sv, o);
				/* a job for the old one finds its start differs */
				reset_slot(o, &p[k], now);
			} else {
				slot_seen(sv, o, &p[k]);
			}
			o->gen = sv->gen;
			out[n++] = *o;
			k++;
			continue;
		}
		if (p[k].flags & NW_PROC_IN_EXEC) { /* new and mid-exec: the next scan's */
			k++;
			continue;
		}
		reset_slot(&out[n], &p[k++], now);
		out[n++].gen = sv->gen;
	}
	free(sv->slots);
	sv->slots = out;
	sv->n = n;
	return 0;
}

static void scan(struct service *sv)
{
	double now = clock__now(), took;
	struct nw_proc *p = NULL;
	long np;

	np = procs__list(sv->procs, &p);
	sv->last_scan = now;
	if (np < 0) {
		if (sv->o->verbose)
			fprintf(stderr, "nanwatchd: failed to list processes: %s\n", strerror(-np));
		return;
	}
	sv->gen++;
	if (merge(sv, p, np, now) && sv->o->verbose)
		fprintf(stderr, "nanwatchd: out of memory for the process list\n");
	free(p);
	took = clock__now() - now;
	sv->scan_s += took;
	sv->scans++;
	if (took > sv->scan_max_s)
		sv->scan_max_s = took;
}

/* --- dispatch and results --------------------------------------------------------------- */

static int wants_look(const struct slot *sl, double now)
{
	if (sl->job || sl->r)
		return 0;
	return (sl->state == SLOT_NEW || sl->state == SLOT_WAITING) && now >= sl->next_check;
}

static void start_look(struct service *sv, struct slot *sl, struct budget_uid *u)
{
	struct job *j = new_job(sv, sl);

	if (!j)
		return; /* tried again at the next dispatch */
	j->match = sl->state == SLOT_NEW;
	j->execed = sl->execed;
	sl->job = 1;
	u->jobs++;
	workers__submit(sv->ws, &j->w);
}

/* Jobs for the slots due, within their uids' budgets, each slot in its turn. */
static void dispatch(struct service *sv)
{
	double now = clock__now();
	size_t k;

	if (!sv->n)
		return;
	for (k = 0; k < sv->n; k++) {
		struct slot *sl = &sv->slots[(sv->rr + k) % sv->n];
		struct budget_uid *u = budgets__get(sv->b, sl->uid, now);

		if (!u)
			continue;
		/* a capped process is followed once its uid follows fewer */
		if (sl->state == SLOT_CAPPED && budget__may_follow(sv->b, u)) {
			follow(sv, sl, 1);
			sl->state = SLOT_WAITING;
			sl->next_check = now;
		}
		if (wants_look(sl, now) && budget__may_run(sv->b, u, now))
			start_look(sv, sl, u);
	}
	sv->rr = (sv->rr + 1) % sv->n;
}

/* A matching process the service now follows (waits for torch in), within its uid's cap. */
static void matched(struct service *sv, struct slot *sl, const struct job *j)
{
	struct budget_uid *u = budgets__get(sv->b, sl->uid, clock__now());
	int rule = j->rule;
	char msg[256];

	sl->rule = rule;
	sl->rank = j->env.rank;
	sl->local_rank = j->env.local_rank;
	sl->world_size = j->env.world_size;
	snprintf(sl->job_id, sizeof(sl->job_id), "%s", j->env.job);
	if (u && !budget__may_follow(sv->b, u)) {
		sl->state = SLOT_CAPPED; /* followed once another of its uid is not */
		u->capped++;
		snprintf(msg, sizeof(msg),
			 "pid %d matches rule %s but is not watched: uid %u has %d processes "
			 "followed already (the most per user)",
			 sl->pid, sv->c->rules[rule].name, (unsigned)sl->uid, u->followed);
		report_error(sv, sl, msg);
		return;
	}
	follow(sv, sl, 1);
	sl->state = SLOT_WAITING;
	sl->next_check = clock__now();
	if (sv->o->verbose)
		fprintf(stderr, "nanwatchd: pid %d matches rule %s\n", sl->pid,
			sv->c->rules[rule].name);
}

static void attached(struct service *sv, struct slot *sl, struct job *j)
{
	sl->r = runner__start(j->s, sv->done_fd);
	if (!sl->r) { /* no thread for it: detached at once, said */
		report_error(sv, sl, "failed to start a thread for the watch: detached");
		session__detach(j->s, SESSION_ERROR);
		session__free(j->s);
		j->s = NULL;
		sl->state = SLOT_DONE;
		follow(sv, sl, 0);
		return;
	}
	j->s = NULL;
	sl->state = SLOT_WATCHED;
	add_metrics(sv, sl);
	if (sv->o->verbose)
		fprintf(stderr,
			"nanwatchd: pid %d attached %.0f ms after torch was seen loaded, "
			"%.0f ms after the process\n",
			sl->pid, (j->done_at - sl->torch_at) * 1e3,
			(j->done_at - sl->first_seen) * 1e3);
}

/* torch is mapped but the watch could not start: again with back-off, for a while. */
static void open_failed(struct service *sv, struct slot *sl, struct job *j, double now)
{
	if (sv->o->verbose)
		fprintf(stderr, "nanwatchd: pid %d: %s\n", sl->pid,
			j->msg[0] ? j->msg : strerror(-j->err));
	/* ESRCH too: a process gone leaves the next scan's list, and its slot with it */
	if (j->cpu_s > RESOLVE_CPU_MAX_S) {
		snprintf(j->msg, sizeof(j->msg),
			 "failed to resolve pid %d within its budget: %.1f s of CPU (at most %.1f "
			 "s); not tried again",
			 sl->pid, j->cpu_s, RESOLVE_CPU_MAX_S);
		report_error(sv, sl, j->msg);
		sl->state = SLOT_DONE;
	} else if (j->attach_failed || now - sl->torch_at >= OPEN_RETRY_S) {
		report_error(sv, sl, j->msg[0] ? j->msg : strerror(-j->err));
		sl->state = SLOT_DONE;
	} else {
		sl->backoff = sl->backoff ? sl->backoff * 2 : BACKOFF_MIN_S;
		if (sl->backoff > BACKOFF_MAX_S)
			sl->backoff = BACKOFF_MAX_S;
		sl->next_check = now + sl->backoff;
		return;
	}
	follow(sv, sl, 0);
}

/* How long until a matching process without torch has its maps read again. */
static double wait_every(const struct service *sv, const struct slot *sl, double now)
{
	if (now - sl->first_seen > WAIT_SLOW_S)
		return WAIT_SLOW_EVERY;
	return sv->c->scan_interval_ms / 1000.0;
}

static void apply_look(struct service *sv, struct slot *sl, struct job *j, double now)
{
	if (j->match) {
		if (j->rule == MATCH_EMPTY && ++sl->empty < EMPTY_TRIES) {
			sl->next_check = now + sv->c->scan_interval_ms / 1000.0;
			return; /* still SLOT_NEW */
		}
		if (j->rule < 0) {
			sl->state = SLOT_IGNORED;
			return;
		}
		matched(sv, sl, j);
		if (sl->state != SLOT_WAITING)
			return;
	}
	if (j->torch && !sl->torch_at)
		sl->torch_at = j->torch_at;
	if (j->s)
		attached(sv, sl, j);
	else if (!j->torch)
		sl->next_check = now + wait_every(sv, sl, now);
	else
		open_failed(sv, sl, j, now);
}

/* A session whose process is not the slot's any more, or attached while stopping. */
static void detach_orphan(struct service *sv, struct job *j, enum session_stop stop)
{
	struct runner *r = runner__start(j->s, sv->done_fd);

	if (r) {
		orphan(sv, r, stop);
	} else {
		session__detach(j->s, stop);
		session__free(j->s);
	}
	j->s = NULL;
}

static void finish_look(struct service *sv, struct job *j, double now)
{
	struct budget_uid *u = budgets__get(sv->b, j->uid, now);
	struct slot *sl = find_slot(sv, j->pid);

	if (u) {
		u->jobs--;
		if (!j->s) /* work that watched nothing is the uid's to pay for */
			budget__charge(sv->b, u, j->cpu_s, now);
		if (sv->o->verbose > 1)
			fprintf(stderr,
				"nanwatchd: pid %d: job %.1f ms CPU%s%s, uid %u has %.3f s\n",
				j->pid, j->cpu_s * 1e3, j->torch ? ", torch" : "",
				j->err ? ", failed" : "", (unsigned)j->uid, u->cpu);
	}
	if (!sl || sl->start != j->start) {
		if (j->s)
			detach_orphan(sv, j, SESSION_TARGET_EXIT);
		return;
	}
	sl->job = 0;
	if (sl->exec_id != j->exec_id) { /* execed meanwhile: the job looked at the old one */
		if (j->s)
			detach_orphan(sv, j, SESSION_TARGET_EXEC);
		return;
	}
	if (*sv->o->exiting && j->s) {
		detach_orphan(sv, j, SESSION_SIGNAL);
		return;
	}
	apply_look(sv, sl, j, now);
}

static void take_results(struct service *sv)
{
	struct work *w = workers__take(sv->ws), *next;
	double now = clock__now();

	for (; w; w = next) {
		struct job *j = (struct job *)((char *)w - offsetof(struct job, w));

		next = w->next;
		finish_look(sv, j, now);
		free(j);
	}
}

/* --- the loop ---------------------------------------------------------------------------- */

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
		so->learn_layouts = sv->c->learn_layouts;
		so->layout_cache = sv->c->layout_cache[0] ? sv->c->layout_cache : NULL;
		so->learn_timeout_ms = sv->c->learn_timeout_ms;
		so->mode = r->mode;
		so->top_only = strcmp(r->mode, "full") != 0;
		so->loss_only = !strcmp(r->mode, "loss");
		so->max_scan_bytes = sv->c->max_scan_bytes;
		so->grad_ring_bytes = sv->c->grad_ring_bytes;
		so->read_method = sv->c->read_method;
		so->return_probe = sv->c->return_probe;
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
		sv->need_env |= r->nenv > 0;
	}
}

/* Runners that detached: their slots move on, orphans are freed. */
static void take_runners(struct service *sv)
{
	uint64_t n;
	size_t i;

	if (read(sv->done_fd, &n, sizeof(n)) < 0)
		return; /* none since the last look */
	for (i = 0; i < sv->n; i++)
		if (sv->slots[i].r && runner__done(sv->slots[i].r))
			finish_runner(sv, &sv->slots[i]);
	for (i = 0; i < sv->norphans;) {
		if (runner__done(sv->orphans[i])) {
			runner__free(sv->orphans[i]);
			sv->orphans[i] = sv->orphans[--sv->norphans];
		} else {
			i++;
		}
	}
}

/* Every watched target's counts into its metrics series. */
static void update_all_metrics(struct service *sv)
{
	size_t i;

	for (i = 0; i < sv->n; i++)
		update_metrics(&sv->slots[i]);
	update_service_metrics(sv);
}

/* Sleep until a finished job or runner, an exec or a metrics client waits, or timeout_ms. */
static void wait_events(struct service *sv, int timeout_ms)
{
	struct pollfd pfd[4] = {
		{.fd = workers__fd(sv->ws), .events = POLLIN},
		{.fd = procs__fd(sv->procs), .events = POLLIN},
		{.fd = sv->done_fd, .events = POLLIN},
		{.fd = sv->m ? metrics__fd(sv->m) : -1, .events = POLLIN},
	};

	poll(pfd, 4, timeout_ms);
}

/* An exec anywhere: the next scan comes now, or EXEC_SCAN_GAP_S after the last one. */
static void take_events(struct service *sv)
{
	double soon = sv->last_scan + EXEC_SCAN_GAP_S;

	if (procs__consume(sv->procs) > 0 && sv->next_scan > soon)
		sv->next_scan = soon;
}

static int loop_timeout(struct service *sv, double next_tick)
{
	double now = clock__now(), until = sv->next_scan < next_tick ? sv->next_scan : next_tick;
	int timeout = (int)((until - now) * 1000) + 1, max = sinks__pending(sv->out) ? 20 : 100;

	if (timeout > max)
		timeout = max;
	return timeout > 0 ? timeout : 0;
}

static void loop(struct service *sv)
{
	double interval = sv->c->scan_interval_ms / 1000.0, next_tick = clock__now(), next_said = 0;
	double now;

	sv->next_scan = clock__now() + interval;
	while (!*sv->o->exiting) {
		wait_events(sv, loop_timeout(sv, next_tick));
		take_events(sv);
		take_results(sv);
		take_runners(sv);
		now = clock__now();
		if (now >= next_tick) {
			next_tick = now + TICK_S;
			update_all_metrics(sv);
		}
		if (sv->m) {
			metrics__update_sinks(sv->m, sv->out);
			metrics__serve(sv->m);
			textfile_tick(sv);
		}
		if (*sv->o->reopen) {
			*sv->o->reopen = 0;
			sinks__reopen(sv->out);
		}
		if (clock__now() >= sv->next_scan) {
			scan(sv);
			sv->next_scan = clock__now() + interval;
		}
		dispatch(sv);
		if (now >= next_said) {
			say_suppressed(sv);
			next_said = now + 1;
		}
		sinks__flush(sv->out);
	}
}

/* --- the stop ---------------------------------------------------------------------------- */

static int runners_left(const struct service *sv)
{
	size_t i;
	int n = (int)sv->norphans;

	for (i = 0; i < sv->n; i++)
		n += sv->slots[i].r != NULL;
	return n;
}

/*
 * Jobs still running finish (a session one attached is detached at once), then every session
 * is told to detach, all at once: each probe's removal waits for the kernel, and those waits
 * overlap, so many targets stop in about the time of one. A job or a watch that does not end
 * within STOP_WAIT_S (a read of a hostile target's memory can block) is left to the exit,
 * which removes its probes with the descriptors: 1 then, with its threads still running.
 */
static int stop_all(struct service *sv)
{
	struct pollfd pfd[2] = {{.fd = workers__fd(sv->ws), .events = POLLIN},
				{.fd = sv->done_fd, .events = POLLIN}};
	double deadline = clock__now() + STOP_WAIT_S;
	size_t i;

	while (workers__pending(sv->ws) && clock__now() < deadline) {
		poll(pfd, 1, 100);
		take_results(sv);
	}
	for (i = 0; i < sv->n; i++)
		stop_session(&sv->slots[i], SESSION_SIGNAL);
	while (runners_left(sv) && clock__now() < deadline) {
		poll(&pfd[1], 1, 100);
		take_runners(sv);
		sinks__flush(sv->out);
	}
	if (!workers__pending(sv->ws) && !runners_left(sv))
		return 0;
	fprintf(stderr,
		"nanwatchd: %d watches and %d jobs did not end within %.0f s; exiting without "
		"them\n",
		runners_left(sv), workers__pending(sv->ws), STOP_WAIT_S);
	return 1;
}

static void cleanup(struct service *sv)
{
	if (sv->ws && stop_all(sv)) {
		/* threads still use the outputs and the config: only the lines are drained */
		sinks__drain(sv->out, 250);
		return;
	}
	workers__free(sv->ws);
	free(sv->orphans);
	if (sv->done_fd >= 0)
		close(sv->done_fd);
	/* the last lines; a reader that does not take them within a quarter second does not
	 * delay exit */
	if (sv->out)
		sinks__drain(sv->out, 250);
	sinks__free(sv->out);
	metrics__free(sv->m);
	procs__free(sv->procs);
	budgets__free(sv->b);
	free(sv->slots);
	config__free(sv->c);
}

static int start(struct service *sv, char *err, size_t errlen)
{
	struct budget_limits bl;
	long ncpu;
	int ret;

	sv->c = config__load(sv->o->config, err, errlen);
	if (!sv->c)
		return -errno;
	ret = open_outputs(sv, err, errlen);
	if (ret)
		return ret;
	if (sv->c->metrics_listen[0] || sv->c->metrics_textfile[0]) {
		struct metrics_opts mo = {
			.listen = sv->c->metrics_listen[0] ? sv->c->metrics_listen : NULL,
			.textfile = sv->c->metrics_textfile[0] ? sv->c->metrics_textfile : NULL,
		};

		sv->m = metrics__new(&mo, err, errlen);
		if (!sv->m)
			return -errno;
	}
	/* resolves and attaches are CPU work: one uid gets half the CPUs at once, at least 2, and
	 * the pool a thread per CPU and 2 more, so one uid's jobs that wait block nobody else */
	ncpu = sysconf(_SC_NPROCESSORS_ONLN);
	ncpu = ncpu < 1 ? 1 : ncpu > WORKERS_MAX - 2 ? WORKERS_MAX - 2 : ncpu;
	budget__defaults(&bl);
	bl.jobs = ncpu / 2 > bl.jobs ? ncpu / 2 : bl.jobs;
	sv->b = budgets__new(&bl);
	if (!sv->b) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	sv->done_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (sv->done_fd < 0) {
		snprintf(err, errlen, "failed to create an eventfd: %s", strerror(errno));
		return -errno;
	}
	sv->procs = procs__open(err, errlen);
	if (!sv->procs)
		return -errno;
	sv->ws = workers__new(ncpu + 2 > bl.jobs + 2 ? ncpu + 2 : bl.jobs + 2, err, errlen);
	return sv->ws ? 0 : -errno;
}

int service__run(const struct service_opts *o)
{
	struct service sv = {.o = o, .self = getpid(), .done_fd = -1};
	char err[1024] = "", sum[1024];
	int ret;

	ret = start(&sv, err, sizeof(err));
	if (ret) {
		say(stderr, "nanwatchd: ", err[0] ? err : strerror(-ret));
		cleanup(&sv);
		return 1;
	}
	session_options(&sv);
	config__summary(sv.c, sum, sizeof(sum));
	say(stderr, "nanwatchd: service mode: ", sum);
	scan(&sv);
	dispatch(&sv);
	ret = notify__send("READY=1");
	if (ret)
		fprintf(stderr, "nanwatchd: failed to notify the service manager: %s\n",
			strerror(-ret));
	loop(&sv);
	notify__send("STOPPING=1");
	if (o->verbose)
		fprintf(stderr,
			"nanwatchd: %lu process list scans, %.2f ms each, the slowest %.1f ms\n",
			sv.scans, sv.scans ? sv.scan_s * 1e3 / sv.scans : 0, sv.scan_max_s * 1e3);
	/* a broken output was said on stderr when it broke; the others served to the end */
	cleanup(&sv);
	return 0;
}
