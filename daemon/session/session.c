// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * A watched process's life: resolve it, attach the probes, explain what its sources of
 * findings send, keep the periodic lines, detach. Every piece of state lives in the session.
 */
#include <math.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#include "explain/backward.h"
#include "capture/capture.h"
#include "explain/diagnose.h"
#include "util/clock.h"
#include "util/dtype.h"
#include "util/file.h"
#include "util/optval.h"
#include "resolve/keep.h"
#include "resolve/names.h"
#include "resolve/optstate.h"
#include "resolve/pyobject.h"
#include "output/metrics.h"
#include "resolve/vtable.h"
#include "output/event.h"
#include "inject/inject.h"
#include "attach/probe.h"
#include "session/session_priv.h"
#include "output/sink.h"

/* A thread id names a thread, not a process: the probes filter by process and would see nothing. */
static int check_process(pid_t pid, char *err, size_t errlen)
{
	pid_t tgid = target__tgid(pid);
	char path[64], *comm;

	if (tgid <= 0 || tgid == pid)
		return 0; /* gone or unreadable: pidfd_open and the resolve say it */
	snprintf(path, sizeof(path), "/proc/%d/comm", tgid);
	comm = file__read(path, 64, NULL);
	if (comm)
		comm[strcspn(comm, "\n")] = 0;
	snprintf(err, errlen,
		 "pid %d is a thread of process %d (%s), not a process: watch "
		 "--pid %d",
		 pid, tgid, comm ? comm : "?", tgid);
	free(comm);
	return -EINVAL;
}

static int target_exited(const struct session *s)
{
	struct pollfd pfd = {.fd = s->pidfd, .events = POLLIN};

	if (s->pidfd < 0)
		return !target__alive(&s->t);
	return poll(&pfd, 1, 0) > 0;
}

/* Its files, the layout tables and the tensor type; with --verbose, what reading cost. */
static int resolve_files(struct session *s, pid_t pid, char *err, size_t errlen)
{
	double start = clock__now();
	int ret;

	ret = target__resolve(pid, &s->t, err, errlen);
	if (!ret) {
		remote__init_pid(&s->remote, pid);
		s->remote.none = s->t.none;
		ret = load_layouts(s, err, errlen);
	}
	if (!ret)
		ret = target__tensor_type(&s->t, &s->remote, s->remote.l.type_name,
					  s->nwl.type_base, err, errlen);
	if (s->o.verbose)
		fprintf(stderr, "nanwatchd: pid %d %s in %.1f ms, %llu KiB of its files read\n",
			pid, ret ? "refused" : "resolved", (clock__now() - start) * 1e3,
			(unsigned long long)s->t.budget.bytes_read >> 10);
	return ret;
}

/* The process, its interpreter and torch, the layout tables and the tensor type. */
static int resolve(struct session *s, pid_t pid, char *err, size_t errlen)
{
	int ret;

	ret = check_process(pid, err, errlen);
	if (ret)
		return ret;
	s->pidfd = syscall(SYS_pidfd_open, pid, 0);
	if (s->pidfd < 0 && errno == ESRCH) {
		snprintf(err, errlen, "no such process: %d", pid);
		return -ESRCH;
	}
	ret = s->o.may_watch ? s->o.may_watch(err, errlen) : 0;
	if (!ret)
		ret = resolve_files(s, pid, err, errlen);
	if (ret)
		return ret;
	if (s->o.verbose)
		fprintf(stderr, "nanwatchd: tensor type 0x%llx from %s\n",
			(unsigned long long)s->t.tensor_type, s->t.tensor_type_from);
	/* a process that is not what the watch needs is refused above, untouched */
	return s->o.inject_lib ? inject__load(pid, s->o.inject_lib, s->o.verbose, err, errlen) : 0;
}

struct session *session__open(pid_t pid, const struct session_opts *o, char *err, size_t errlen)
{
	struct session *s = calloc(1, sizeof(*s));
	int ret;

	if (!s) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	s->o = *o;
	s->pidfd = -1;
	ret = resolve(s, pid, err, errlen);
	if (ret) {
		session__free(s);
		errno = -ret;
		return NULL;
	}
	if (o->job && o->job[0])
		snprintf(s->t.job, sizeof(s->t.job), "%s", o->job);
	return s;
}

/* The explain stage hands parameter lists back to the BPF maps through this. */
static int set_params(void *ctx, uint64_t module, const struct nw_params *np)
{
	struct session *s = ctx;
	struct nw_params bufs;

	if (!s->p)
		return -EAGAIN;
	/* a captured layer's buffers are copied with its parameters */
	if (s->cap && !capture__buffers(&s->remote, module, &bufs))
		probe__set_buffers(s->p, module, &bufs);
	return probe__set_params(s->p, module, np);
}

/*
 * module vouched for in BPF as k says; the first such turns keeps_finite() and takes_pending()
 * on, once torch's global hook dicts are found. 0 when it is.
 */
static int vouch(struct session *s, uint64_t module, const struct nw_keep *k, uint64_t tensor)
{
	struct pyobject_layout pl = {.l = &s->nwl, .tuple_type = s->t.tuple_type};
	uint64_t used[NW_KEEP_HOOKS];

	if (!s->keep_tensor) {
		/* torch's global hooks not as we know them: nothing vouched for in this watch */
		if (keep__globals(&s->remote, &pl, module, used)) {
			s->keep_tensor = KEEP_OFF;
			return -ENOENT;
		}
		s->keep_tensor = tensor;
		probe__keep_on(s->p, tensor, used);
	}
	if (tensor != s->keep_tensor)
		return -ENOENT;
	return probe__set_keep(s->p, module, k);
}

struct seq_pairs {
	struct session *s;
	struct pyobject_layout pl;
	struct nw_defer d; /* the Sequential's part */
};

/* Two children of a Sequential: the first's output check may wait for the second, a norm. */
static int seq_pair(void *ctx, uint64_t child, uint64_t next)
{
	struct seq_pairs *q = ctx;
	struct session *s = q->s;
	struct nw_defer d = q->d;
	uint64_t tensor, type;
	struct nw_keep k;

	if (s->keep_tensor == KEEP_OFF)
		return 1;
	if (keep__module(&s->remote, &q->pl, next, &k, &tensor) || k.kind != NW_KEEP_NORM ||
	    remote__u64(&s->remote, child + s->remote.l.obj_type, &type) ||
	    vouch(s, next, &k, tensor))
		return 0;
	d.type = type;
	d.next = next;
	probe__set_defer(s->p, child, &d);
	return 0;
}

/*
 * A module seen for the first time: vouched for in BPF if it keeps a finite input finite,
 * and, a Sequential, its children that hand their output to a norm.
 */
static void new_module(void *ctx, uint64_t module)
{
	struct session *s = ctx;
	struct seq_pairs q = {.s = s, .pl = {.l = &s->nwl, .tuple_type = s->t.tuple_type}};
	uint64_t tensor;
	struct nw_keep k;

	if (!s->p || s->keep_tensor == KEEP_OFF)
		return;
	if (!keep__module(&s->remote, &q.pl, module, &k, &tensor) && k.kind == NW_KEEP_FINITE)
		vouch(s, module, &k, tensor);
	keep__sequence(&s->remote, &q.pl, module, seq_pair, &q, &q.d);
}

static uint64_t step_starts(void *ctx)
{
	struct session *s = ctx;
	uint64_t c[NW_C_MAX];

	if (!s->p)
		return 0;
	probe__counters(s->p, c);
	return c[NW_C_STEP_STARTS];
}

static uint64_t model(void *ctx)
{
	struct session *s = ctx;

	return s->p ? probe__model(s->p) : 0;
}

/* The captured call's autograd nodes by their aten names ("log"), "" for a class not known. */
static void name_ops(struct session *s, struct evidence_facts *x)
{
	int i;

	for (i = 0; i < x->nops && i < EVIDENCE_MAX_OPS; i++)
		if (backward__op_name(backward__class(s->x.bwd, x->op_vptr[i]), x->ops[i],
				      sizeof(x->ops[i])))
			x->ops[i][0] = 0;
}

static int add_code_op(const char *name, void *ctx)
{
	struct evidence_facts *x = ctx;

	diagnose__add_code_op(x->code_ops, &x->ncode, name);
	return 0;
}

/*
 * Where the walk of the call's autograd nodes missed some (the batch needs no gradient, or no
 * autograd ran), the ops the code of the module's forward names, read from its class.
 */
static void code_ops(struct session *s, struct evidence_facts *x)
{
	struct pyobject_layout pl = {.l = &s->nwl, .tuple_type = s->t.tuple_type};

	x->ncode = 0;
	x->code_read = 0;
	if ((x->nops && !x->ops_partial) || !x->module)
		return;
	/* a class or function not read leaves none: the walk's ops alone */
	x->code_read =
		!pyobject__method_names(&s->remote, &pl, x->module, "forward", add_code_op, x);
}

/* The names the code of type(module).forward uses, read from the target (explain's). */
static void code_names(void *ctx, uint64_t module, int (*cb)(const char *name, void *cb_ctx),
		       void *cb_ctx)
{
	struct session *s = ctx;
	struct pyobject_layout pl = {.l = &s->nwl, .tuple_type = s->t.tuple_type};

	pyobject__method_names(&s->remote, &pl, module, "forward", cb, cb_ctx);
}

/* Capture records come before the anomaly they belong to: assemble them first. */
static void take_capture(struct session *s)
{
	const struct evidence_facts *f;
	const char *msg;

	if (!s->cap)
		return;
	capture__consume(s->cap);
	s->x.capture = capture__path(s->cap);
	f = capture__facts(s->cap);
	if (f && !s->x.diag.facts_known) {
		struct evidence_facts *x = malloc(sizeof(*x));

		if (x) {
			*x = *f;
			name_ops(s, x);
			code_ops(s, x);
			diagnose__facts(&s->x.diag, x);
			free(x);
		}
	}
	msg = capture__error(s->cap);
	if (msg)
		output__error(&s->e, msg);
}

static int on_grad(void *ctx, const struct nw_grad *g)
{
	struct session *s = ctx;

	explain__grad(&s->x, g);
	return 0;
}

static int on_event(void *ctx, const void *data, size_t size)
{
	struct session *s = ctx;

	take_capture(s);
	/* a broken output ends the watch in tick; the outputs that work still get the event */
	explain__record(&s->x, data, size);
	return 0;
}

static void take_grads(void *ctx)
{
	struct session *s = ctx;

	if (s->p)
		probe__consume_grads(s->p);
}

static void setup_explain(struct session *s)
{
	struct explain *x = &s->x;

	diagnose__init(&x->diag);
	x->sc.scale = NAN;
	x->diag.top_only = s->o.top_only;
	x->diag.loss_only = x->loss_only = s->o.loss_only;
	x->diag.grads_all = x->grads_all = s->o.backward == 2;
	x->e = &s->e;
	x->names = s->names;
	x->remote = &s->remote;
	x->set_params = set_params;
	x->new_module = new_module;
	x->step_starts = step_starts;
	x->model = model;
	x->code_names = code_names;
	x->take_grads = take_grads;
	x->params_ctx = s;
	x->layout = &s->nwl;
	x->tensor_type = s->t.tensor_type;
}

/* A capture's step as the events name it: the loop's counter once found. */
static uint64_t capture_step(void *ctx, uint64_t step, int *source)
{
	const struct session *s = ctx;

	return explain__step(&s->x, step, source);
}

static int setup_capture(struct session *s, struct probe_opts *po, char *err, size_t errlen)
{
	struct capture_opts co = {
		.dir = s->o.capture_dir,
		.max_bytes = s->o.capture_max_bytes,
		.pid = s->t.pid,
		.comm = s->t.comm,
		.python_version = s->t.python_version,
		.torch_version = s->t.torch_version,
		.remote = &s->remote,
		.names = s->names,
		.layout = &s->nwl,
		.tuple_type = s->t.tuple_type,
		.step_of = capture_step,
		.step_ctx = s,
	};

	/* without a directory the call is still copied, for the diagnosis' evidence only */
	if (!s->o.capture_dir && co.max_bytes > CAPTURE_FACTS_BYTES)
		co.max_bytes = CAPTURE_FACTS_BYTES;
	s->cap = capture__new(&co, err, errlen);
	if (!s->cap)
		return -errno;
	po->capture_max_bytes = co.max_bytes;
	po->capture_ring_bytes = capture__ring_bytes(co.max_bytes);
	if (!po->capture_ring_bytes) {
		snprintf(err, errlen, "--capture-max-mb too large for one ring buffer");
		return -EINVAL;
	}
	return 0;
}

static int setup_backward(struct session *s, struct probe_opts *po, char *err, size_t errlen)
{
	if (!s->node_symbol[0])
		return 0;
	s->x.bwd = backward__new(s->vt, &s->remote, s->nwl.var_tensor);
	s->vt = NULL; /* the backward state's now */
	if (!s->x.bwd) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	po->node_symbol = s->node_symbol;
	po->bwd = &s->bwl;
	po->backward_all = s->o.backward == 2;
	po->grad_cb = on_grad;
	return 0;
}

static int bpf_poll(void *ctx, int timeout_ms)
{
	return probe__poll(ctx, timeout_ms);
}

static int bpf_fd(const void *ctx)
{
	return probe__fd(ctx);
}

/* The BPF rings: the first source of findings. */
static int open_probes(struct session *s, struct probe_opts *po, char *err, size_t errlen)
{
	s->p = probe__open(&s->t, &s->nwl, po, on_event, s, err, errlen);
	if (!s->p)
		return -errno;
	if (probe__read_method(s->p) != s->read.method) {
		s->read.method = probe__read_method(s->p);
		snprintf(s->read.why, sizeof(s->read.why), "no sleepable uprobes in this kernel");
	}
	s->x.read_method = optval__read_method_name(s->read.method);
	s->src[s->nsrc++] = (struct session_source){
		.name = "bpf",
		.poll = bpf_poll,
		.fd = bpf_fd,
		.ctx = s->p,
	};
	if (s->cap && capture__attach(s->cap, probe__capture_fd(s->p))) {
		snprintf(err, errlen, "failed to read the capture ring buffer: %s",
			 strerror(errno));
		return -errno;
	}
	return 0;
}

static int emit_attach(struct session *s)
{
	struct output_attach a = {
		.python = s->t.python_version,
		.torch = s->t.torch_version,
		.probes = probe__count(s->p),
		.mode = s->o.mode,
		.backward = !s->node_symbol[0]	 ? "off"
			    : s->o.backward == 2 ? "on"
						 : "norms",
		/* the module call that made a node, or (the counter not located) an output's */
		.backward_layer = !s->node_symbol[0]			   ? NULL
				  : s->o.backward == 2 && s->bwl.seq_modid ? "made"
									   : "output",
		.interpreter = s->t.python_path,
		.torch_library = s->t.torch_path,
		.published_offsets = s->published,
		.gpu = s->gpu_attach,
		.gpu_message = s->gpu_message[0] ? s->gpu_message : NULL,
		.read_method = s->x.read_method,
		.read_why = s->read.why,
		.return_probe = optval__return_probe_name(probe__return_probe(s->p)),
	};

	return output__attach(&s->e, &a);
}

/*
 * How scans copy the target's bytes: measured once per daemon (attach/readcal.h) for auto
 * and for adaptive (which needs the task method's cost), else as the options say (a method
 * that needs sleepable programs, where the kernel has none, falls back to the probe method
 * when the programs load: open_probes says so).
 */
static void choose_read_method(struct session *s, struct probe_opts *po)
{
	if (s->o.read_method == OPTVAL_READ_AUTO || s->o.read_method == NW_READ_ADAPTIVE)
		readcal__choose(&s->read);
	if (s->o.read_method != OPTVAL_READ_AUTO) {
		s->read.method = s->o.read_method;
		snprintf(s->read.why, sizeof(s->read.why), "set by the options");
	}
	po->read_method = s->read.method;
	/* unmeasured (no sleepable uprobes): any positive cost keeps adaptive on the probe */
	po->task_ns_per_page = s->read.task_ns_per_page ? s->read.task_ns_per_page : 1;
}

int session__attach(struct session *s, struct sinks *out, char *err, size_t errlen)
{
	struct nw_dict_layout dict;
	struct probe_opts po = {.max_scan_bytes = s->o.max_scan_bytes,
				.grad_ring_bytes = s->o.grad_ring_bytes,
				.verbose = s->o.verbose,
				.bpf_stats = s->o.bpf_stats,
				.top_only = s->o.top_only,
				.loss_only = s->o.loss_only,
				.return_probe = s->o.return_probe,
				.rescan = &s->rescan,
				.dict = &dict};
	int ret;

	dict_layout(s, &dict);
	choose_read_method(s, &po);
	po.c10_codes = dtype__c10_codes(&s->nwl); /* integers known finite, and copied */
	s->sinks = out;
	s->names = names__new(&s->remote);
	ret = s->names ? emit__init(&s->e, out, &s->t) : -ENOMEM;
	if (ret) {
		snprintf(err, errlen, "out of memory");
		return ret;
	}
	s->emitting = 1;
	setup_explain(s);
	ret = setup_capture(s, &po, err, errlen);
	if (ret)
		return ret;
	po.step_symbol = s->step_symbol[0] ? s->step_symbol : NULL;
	po.backward_symbol = s->backward_symbol[0] ? s->backward_symbol : NULL;
	po.step_offset = s->step_offset;
	po.backward_offset = s->backward_offset;
	po.node_offset = s->node_offset;
	po.scaler_symbol = s->scaler_offset ? s->scaler_symbol : NULL;
	po.scaler_offset = s->scaler_offset;
	ret = setup_backward(s, &po, err, errlen);
	gpu_configure(s, &po);
	if (!ret)
		ret = open_probes(s, &po, err, errlen);
	if (!ret)
		ret = gpu_open(s, err, errlen);
	if (ret)
		return ret;
	if (target_exited(s)) {
		snprintf(err, errlen, "pid %d exited while attaching", s->t.pid);
		return -ESRCH;
	}
	emit_attach(s);
	loopstep__init(&s->loop, &s->remote, &s->nwl, s->t.tuple_type,
		       s->o.step_loop_off ? 0 : s->remote.l.code_localsplusnames);
	s->next_stats = clock__now() + s->o.stats_interval;
	target__close(&s->t); /* the uprobes hold the files now */
	return 0;
}

int session__fd(const struct session *s)
{
	return s->nsrc ? s->src[0].fd(s->src[0].ctx) : -1;
}

enum session_stop session__poll(struct session *s, int timeout_ms)
{
	int i, err;

	/* the first source waits; the others are only looked at */
	for (i = 0; i < s->nsrc; i++) {
		err = s->src[i].poll(s->src[i].ctx, i ? 0 : timeout_ms);
		if (err && err != -EINTR) {
			s->error = err;
			return SESSION_ERROR;
		}
	}
	return SESSION_WATCHING;
}

/*
 * Once an optimizer has stepped, find the tensor that holds its step count and
 * hand it to BPF, which reads it at every step. Looked up again each time: a
 * load_state_dict() puts new tensors in its state, and BPF may have moved on to
 * an optimizer that replaced the first (0 until its state has a step).
 */
static void track_step_state(struct session *s)
{
	struct optstate_layout ol = {s->nwl.var_borrowed, s->nwl.var_tensor};
	uint64_t opt = probe__optimizer(s->p), impl = 0;

	if (!opt)
		return;
	if (optstate__step_impl(&s->remote, &ol, opt, &impl))
		impl = 0;
	if (impl == s->step_impl)
		return;
	probe__set_step_state(s->p, impl);
	s->step_impl = impl;
}

static void emit_stats(struct session *s, const uint64_t c[NW_C_MAX])
{
	struct probe_runtime rt;
	int have = !probe__runtime(s->p, &rt), source;
	uint64_t step = probe__step(s->p, &source), all[NW_C_MAX];

	memcpy(all, c, sizeof(all));
	gpu_counts(s, all);
	explain__stats(&s->x, all, probe__steps(s->p), probe__iterations(s->p), step, source,
		       have ? &rt : NULL);
}

/*
 * A lost line for each output that dropped lines since the last one. At most
 * once a second (final: now): the line itself is dropped by a stalled output.
 */
static void report_sink_losses(struct session *s, int final)
{
	uint64_t n;
	int i;

	if (!final && clock__now() < s->next_sink_lost)
		return;
	s->next_sink_lost = clock__now() + 1;
	for (i = 0; i < sinks__count(s->sinks); i++) {
		n = sinks__take_dropped(s->sinks, i);
		if (n)
			output__lost(&s->e, n, "sink", sinks__name(s->sinks, i));
	}
}

/*
 * The training loop's counter: looked for a few times a second until found (or given up),
 * then checked; steps counted since the attach are then written as its values.
 */
static void track_loop(struct session *s)
{
	const char *name;
	int64_t offset;

	if (s->loop.off || clock__now() < s->next_loop)
		return;
	s->next_loop = clock__now() + (s->loop.chosen >= 0 ? 0.5 : 0.1);
	if (!loopstep__sample(&s->loop, s->p))
		return;
	if (loopstep__get(&s->loop, &name, &offset)) {
		explain__set_loop(&s->x, 0, 0);
		return;
	}
	snprintf(s->e.step_variable, sizeof(s->e.step_variable), "%s", name);
	explain__set_loop(&s->x, 1, offset);
}

enum session_stop session__tick(struct session *s)
{
	uint64_t c[NW_C_MAX];

	track_step_state(s);
	track_loop(s);
	gpu_tick(s, 0);
	probe__tick(s->p);
	probe__counters(s->p, c);
	explain__lost(&s->x, c);
	/* iterations started - 1 is the one running: the incident's may be over */
	if (probe__iterations(s->p)) {
		uint64_t now = probe__iterations(s->p) - 1;

		/* every record sent before that iteration began is read before it is used */
		probe__consume(s->p);
		explain__release(&s->x, now);
		explain__diagnose(&s->x, now);
	}
	if (s->o.stats_interval > 0 && clock__now() >= s->next_stats) {
		emit_stats(s, c);
		s->next_stats += s->o.stats_interval;
	}
	report_sink_losses(s, 0);
	if (!s->o.outlive_sinks && (s->e.failed || sinks__failed(s->sinks))) {
		s->error = -EPIPE;
		return SESSION_ERROR;
	}
	if (target_exited(s))
		return SESSION_TARGET_EXIT;
	if (probe__execed(s->p))
		return SESSION_TARGET_EXEC;
	return SESSION_WATCHING;
}

int session__error(const struct session *s)
{
	return s->error;
}

void session__identity(const struct session *s, int *rank, const char **job)
{
	*rank = s->t.rank;
	*job = s->t.job[0] ? s->t.job : NULL;
}

static const char *stop_reason(enum session_stop reason)
{
	switch (reason) {
	case SESSION_TARGET_EXIT:
		return "target_exit";
	case SESSION_TARGET_EXEC:
		return "target_exec";
	case SESSION_ERROR:
		return "error";
	default:
		return "signal";
	}
}

void session__stats(const struct session *s, struct session_stats *out)
{
	uint64_t c[NW_C_MAX];

	memset(out, 0, sizeof(*out));
	out->anomalies = s->x.anomalies;
	out->warnings = s->x.warnings;
	out->skipped_steps = s->x.sc.skipped;
	out->modules = s->x.modules;
	out->cause = s->x.cause;
	out->cause_step = s->x.cause_step;
	snprintf(out->cause_layer, sizeof(out->cause_layer), "%s", s->x.cause_layer);
	out->first_time = s->x.first_time;
	out->anomalies_undiagnosed = s->x.cause ? s->x.undiagnosed : s->x.anomalies;
	if (!s->p)
		return;
	probe__counters(s->p, c);
	out->probe_hits = c[NW_C_PROBE_HITS];
	out->tensors_scanned = c[NW_C_TENSORS_SCANNED] + c[NW_C_BWD_GRADS];
	out->bytes_scanned = c[NW_C_BYTES_SCANNED] + c[NW_C_BWD_BYTES];
	out->steps = probe__steps(s->p);
	out->iterations = probe__iterations(s->p);
	out->step = probe__step(s->p, &out->step_source);
	out->step = explain__step(&s->x, out->step, &out->step_source);
}

void session__metric_values(const struct session_stats *st, struct metrics_values *v)
{
	*v = (struct metrics_values){
		.anomalies = st->anomalies,
		.undiagnosed = st->anomalies_undiagnosed,
		.cause = st->cause,
		.warnings = st->warnings,
		.skipped_steps = st->skipped_steps,
		.probe_hits = st->probe_hits,
		.tensors = st->tensors_scanned,
		.bytes = st->bytes_scanned,
		.steps = st->steps,
		.iterations = st->iterations,
		.cause_step = st->cause_step,
		.first_time = st->first_time,
	};
	snprintf(v->cause_layer, sizeof(v->cause_layer), "%s", st->cause_layer);
}

void session__detach(struct session *s, enum session_stop reason)
{
	struct output_detach d = {.reason = stop_reason(reason)};
	struct session_stats st;
	uint64_t c[NW_C_MAX];

	/* no program runs after this: the ring drained, the counters add up */
	probe__detach(s->p);
	probe__consume(s->p);
	take_capture(s);
	gpu_tick(s, 1);
	probe__counters(s->p, c);
	backward__flush(s->x.bwd, c[NW_C_BWD_GRADS_LOST] + c[NW_C_BWD_NORM_SKIPPED]);
	explain__release_all(&s->x);
	explain__diagnose(&s->x, UINT64_MAX);
	explain__lost(&s->x, c);
	report_sink_losses(s, 1);
	emit_stats(s, c);
	session__stats(s, &st);
	d.anomalies = st.anomalies;
	d.steps = st.steps;
	d.iterations = st.iterations;
	d.step = st.step;
	d.step_source = st.step_source;
	output__detach(&s->e, &d);
}

void session__free(struct session *s)
{
	if (!s)
		return;
	capture__free(s->cap);
	gpu_free(s);
	probe__close(s->p);
	backward__free(s->x.bwd);
	vtable__free(s->vt);
	target__close(&s->t);
	names__free(s->names);
	if (s->emitting)
		emit__free(&s->e);
	if (s->pidfd >= 0)
		close(s->pidfd);
	free(s);
}
