/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Event lines of the stream, one writer per event kind, from findings and the explain stage. */
#ifndef __OUTPUT_EVENT_H
#define __OUTPUT_EVENT_H

#include <stdint.h>
#include "output/finding.h"

struct emitter;
struct json;
struct probe_runtime;

/* "attach" or "optimizer_state": where a step number comes from (enum finding_step_source). */
const char *output__step_source(int source);

/* What the explain stage concluded about an anomaly; tristates: 1, 0, -1 null. */
struct output_verdict {
	int inputs_finite; /* 1, 0, -1: not known */
	int params_finite;
	int params_late; /* the daemon checked the parameters (phase forward) */
	int origin;
	int first; /* the first anomaly line of the watch */
};

int output__anomaly(struct emitter *e, const struct finding *f, const struct output_verdict *v);

/* A run-up towards overflow of f's module (a magnitude finding). */
int output__warning(struct emitter *e, const struct finding *f, const struct diag_warning *w);

/* has_layer/has_module: the incident's first anomaly named them; capture may be NULL. */
int output__diagnosis(struct emitter *e, const struct diagnosis *g, int step_source, int has_layer,
		      int has_module, const char *capture);

/* What a stats line says. */
struct output_stats {
	const uint64_t *c; /* NW_C_MAX counters of the BPF side */
	uint64_t steps, iterations, step;
	int step_source;
	uint64_t modules, warnings, params_late;
	const struct explain_tally *t;
	int backward;		       /* the backward pass is watched */
	const struct grad_norm *norms; /* its last passes, oldest first */
	int nnorms;
	const char *top_layer[BWD_MAX_TOP]; /* the last pass's top modules' layers */
	const struct probe_runtime *rt;	    /* NULL: BPF run time not measured */
	/* more fields from another source of findings (the GPU library); NULL: none */
	void (*extra)(struct json *j, const void *ctx);
	const void *extra_ctx;
	/* a gradient scaler's updates (0: none seen), skipped steps, the run now, its scale */
	uint64_t scaler_updates, scaler_skipped, scaler_run;
	double scaler_scale;	 /* NaN: not read */
	const char *read_method; /* how scans copy the target's bytes (util/optval.h's name) */
};

int output__stats(struct emitter *e, const struct output_stats *s);

/* A step a gradient scaler skipped (f: its update), with the anomalies found in it. */
struct output_skip {
	uint64_t anomalies; /* reported by BPF in the step, and not reported as anomalies */
	const struct finding *first; /* the first of them, NULL: none */
	uint64_t consecutive;	     /* skipped steps in a row, this one included */
	uint64_t skipped, updates;   /* all skipped steps, all updates, since the attach */
};

int output__skipped_step(struct emitter *e, const struct finding *f, const struct output_skip *s);

/* count lines lost; where "kernel" or "sink" (then sink names it, else NULL). */
int output__lost(struct emitter *e, uint64_t count, const char *where, const char *sink);

/* The attach line: what was found in the target and how it is watched. */
struct output_attach {
	const char *python, *torch; /* versions */
	int probes;
	const char *mode, *backward;
	const char *backward_layer;		 /* "made", "output"; NULL: backward not watched */
	const char *interpreter, *torch_library; /* paths as the target sees them */
	int published_offsets;
	/* GPU tensors: "none" (no CUDA in the process; NULL too), "not_checked", "waiting" (for
	 * the library to listen), "connected"; gpu_message says how to enable it, or NULL */
	const char *gpu, *gpu_message;
	const char *read_method, *read_why; /* how scans copy bytes, and the measure behind it */
	const char *return_probe;	    /* "session" or "uretprobe" (util/optval.h) */
};

int output__attach(struct emitter *e, const struct output_attach *a);

/* The detach line: why, and the anomalies, steps and iterations of the watch. */
struct output_detach {
	const char *reason;
	uint64_t anomalies, steps, iterations, step;
	int step_source;
};

int output__detach(struct emitter *e, const struct output_detach *d);

/* An error line carrying message. */
int output__error(struct emitter *e, const char *message);

/* The same, saying which source of findings it comes from ("gpu"); source NULL: none. */
int output__error_from(struct emitter *e, const char *source, const char *message);

#endif /* __OUTPUT_EVENT_H */
