/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * One watched process: everything the daemon resolves, attaches and keeps for it, behind
 * open -> attach -> poll/tick -> detach -> free. No globals and no signal handling: the
 * outputs are the caller's (shared by every session), and why a watch stopped is returned.
 */
#ifndef __SESSION_H
#define __SESSION_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct session;
struct sinks;
struct metrics_values;

struct session_opts {
	const char *layouts; /* layout tables; NULL: next to the binary, then installed */
	/* tables the layouts lack are learned (nanwatch-layout as the target's user) */
	int learn_layouts;
	const char *layout_cache;      /* where learned tables are kept; NULL: the default */
	unsigned int learn_timeout_ms; /* the tool's time limit */
	const char *mode;	       /* "full", "sample" or "loss" (named in the attach line) */
	int top_only;		       /* mode sample or loss: no layer-level checks */
	int loss_only;		       /* mode loss: no module probes */
	uint64_t max_scan_bytes;
	uint32_t grad_ring_bytes; /* the gradient data ring (attach/gradsum.h); 0: none */
	int read_method;	  /* how scans copy bytes: OPTVAL_READ_AUTO (measured at the first
			  * attach) or enum nw_read_method */
	double stats_interval;	  /* seconds between stats lines; 0: only at the detach */
	int return_probe;	  /* enum probe_return (attach/probe.h) */
	int verbose;
	int bpf_stats;
	const char *capture_dir; /* NULL: no capture files (the call is copied for evidence) */
	uint64_t capture_max_bytes;
	int backward;	   /* 0 off, 1 norms, 2 on */
	int step_loop_off; /* 1: steps count from the attach, never from the loop's counter */
	const char *job;   /* the job's name in event lines; NULL: from the target's environment */
	/* a broken output does not end the watch (the others still get every line): outputs
	 * shared by many watches */
	int outlive_sinks;
	/* --inject: the library loaded into the process (ptrace, dlopen) once it is resolved and
	 * before the probes attach; NULL: none */
	const char *inject_lib;
	/* called once the process is known to exist, before it is read; NULL: not asked */
	int (*may_watch)(char *err, size_t errlen);
};

/* Why a watch stopped; SESSION_WATCHING while it goes on. */
enum session_stop {
	SESSION_WATCHING = 0,
	SESSION_SIGNAL, /* the caller was told to stop */
	SESSION_TARGET_EXIT,
	SESSION_TARGET_EXEC, /* the probes' files and the layouts belonged to the old image */
	SESSION_ERROR,	     /* a source or an output failed: session__error says which errno */
};

struct session_stats {
	uint64_t anomalies, warnings, modules;
	uint64_t skipped_steps;	    /* steps a gradient scaler skipped */
	uint64_t steps, iterations; /* counted since the attach */
	uint64_t step;		    /* the current step */
	int step_source;	    /* enum finding_step_source */

	const char *cause;   /* the diagnosis's cause; NULL before the diagnosis */
	uint64_t cause_step; /* ... its step and layer ("" none) */
	char cause_layer[256];
	double first_time;		/* the first anomaly line's time (Unix seconds); 0: none */
	uint64_t anomalies_undiagnosed; /* anomaly lines written before the diagnosis */
	uint64_t probe_hits, tensors_scanned, bytes_scanned; /* bytes: outputs and gradients */
};

/*
 * Resolve process pid: the interpreter, torch, layout tables and offsets. NULL with errno
 * set and a one-line reason in err on failure.
 */
struct session *session__open(pid_t pid, const struct session_opts *o, char *err, size_t errlen);

/*
 * Load and attach the probes and start writing event lines to out (which the session
 * does not own); writes the attach line. 0 or a negative errno with err written.
 */
int session__attach(struct session *s, struct sinks *out, char *err, size_t errlen);

/* A descriptor that turns readable when findings wait (for an outer epoll loop). */
int session__fd(const struct session *s);

/* Wait up to timeout_ms for findings from every source and explain them. */
enum session_stop session__poll(struct session *s, int timeout_ms);

/*
 * The work between polls: the optimizer's step state, lost records, a diagnosis whose
 * iteration is over, stats lines, output drops; and whether the target exited or execed.
 */
enum session_stop session__tick(struct session *s);

/* The negative errno behind SESSION_ERROR, 0 if none. */
int session__error(const struct session *s);

/* The target's rank (-1: unknown) and job (NULL: unknown), as its event lines carry them. */
void session__identity(const struct session *s, int *rank, const char **job);

/* Detach, drain, conclude, and write the stats and detach lines with reason. */
void session__detach(struct session *s, enum session_stop reason);

void session__stats(const struct session *s, struct session_stats *out);

/* Those stats as the metrics series of the target take them. */
void session__metric_values(const struct session_stats *st, struct metrics_values *v);

void session__free(struct session *s); /* accepts NULL */

#endif /* __SESSION_H */
