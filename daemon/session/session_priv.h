/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Inside a session: shared by its resolve (resolve.c) and its life (session.c). */
#ifndef __SESSION_PRIV_H
#define __SESSION_PRIV_H

#include "output/emit.h"
#include "explain/explain.h"
#include "explain/gpures.h"
#include "attach/readcal.h"
#include "nanwatch.h"
#include "resolve/learn.h"
#include "resolve/remote.h"
#include "session/loopstep.h"
#include "session/session.h"
#include "resolve/target.h"

struct capture;
struct gpulink;
struct names;
struct probe;
struct probe_opts;
struct vtable_names;

#define SESSION_SOURCES 4 /* sources of findings a session can hold */

/* A source of findings (the BPF rings; a GPU library's results later). */
struct session_source {
	const char *name;
	int (*poll)(void *ctx, int timeout_ms); /* 0 or a negative errno; -EINTR is normal */
	int (*fd)(const void *ctx);
	void *ctx;
};

/* Tables learned for the target (learn.c): kept until they are checked against it. */
struct learned {
	struct learn_identity id; /* who the tool ran as */
	uid_t owner;		  /* the target's uid: whose cache */
	int keep;		  /* the cache is used (not for root in a root of its own) */
	int wanted[2];		  /* [0] python, [1] torch: not in the layouts directory */
	int learned[2];		  /* measured now (else from the cache) */
	char path[2][PATH_MAX];	  /* in the cache; "" without a build-id */
	struct layout *fresh[2];  /* parsed output, until taken */
	char *text[2];		  /* the output, written to the cache once checked */
};

struct session {
	struct session_opts o;
	struct learned learned;
	struct target t;
	struct nw_layout nwl;
	struct remote remote;
	struct sinks *sinks; /* the caller's */
	struct emitter e;
	int emitting; /* e is set up */
	struct names *names;
	struct explain x;
	struct probe *p;
	struct capture *cap;
	struct session_source src[SESSION_SOURCES];
	int nsrc;
	char step_symbol[512];
	char backward_symbol[256];
	/* file offsets of the probed functions (0: not in the file), found while resolving */
	uint64_t step_offset, backward_offset, node_offset, scaler_offset;
	char scaler_symbol[128]; /* "": skipped steps of a gradient scaler are not told apart */
	struct vtable_names *vt; /* node classes, until backward__new takes them */
	int published;		 /* offsets taken from the interpreter itself */
	struct nw_bwd_layout bwl;
	struct nw_rescan rescan; /* .on: the torch table lets outputs skip a rescan */
	uint64_t keep_tensor;	 /* torch.Tensor once keeps_finite() is on; 0 not yet, or: */
#define KEEP_OFF 1		 /* ... torch's global hooks were not found: never */
	char node_symbol[256];	 /* "" : the backward pass is not checked */
	long long vtable_offset; /* vtable pointer - its _ZTV symbol */
	int pidfd;
	int error; /* the negative errno behind SESSION_ERROR */
	double next_stats;
	double next_sink_lost; /* sink drops are reported at most once a second */
	struct loopstep loop;  /* the training loop's step counter */
	double next_loop;      /* when to look at it next */
	uint64_t step_impl;    /* the tracked optimizer's step tensor handed to BPF; 0: none */
	/* GPU tensors (gpu.c): the library's link, NULL when none are requested */
	struct gpulink *gpu;
	struct gpures gres;
	const char *gpu_kind;	      /* "cuda", or "meta" under the test switch */
	const char *gpu_attach;	      /* what the attach line says of GPU tensors */
	struct readcal_choice read;   /* how scans copy the target's bytes, and why */
	char gpu_message[512];	      /* ... and how to have them checked; "" none */
	uint64_t gpu_notice_hash[16]; /* of the notice lines written: each once per watch */
	int gpu_notices;
	int gpu_refused_said;  /* a refused peer was written of (once per watch) */
	long long device_cuda; /* DeviceType codes from the torch table; -1: not there */
	long long device_meta;
	long long impl_device_index; /* TensorImpl offset of the device index; -1: not there */
};

/* resolve.c: the layout tables for s->t, and what BPF reads dicts with. */
int load_layouts(struct session *s, char *err, size_t errlen);

/* learn.c: the tables the layouts directory lacks (NULL in *py, *tl), learned or cached. */
struct layout;
int learn_tables(struct session *s, const char *tool, struct layout **py, struct layout **tl,
		 char *err, size_t errlen);
/* Check them against the target (its remote layout set), then cache what was learned. */
int learn_verify(struct session *s, const struct layout *py, char *err, size_t errlen);
void learned_free(struct learned *ld);
const char *learn_cache_dir(const struct session_opts *o);
void dict_layout(const struct session *s, struct nw_dict_layout *d);

/* gpu.c: whether BPF requests GPU scans, and how (before the probes are opened). */
void gpu_configure(struct session *s, struct probe_opts *po);

/* The library's link over the open probes' ring, as a source of findings; 0 or -errno. */
int gpu_open(struct session *s, char *err, size_t errlen);

/* Connect again if due; drain; write what waited (final: everything held). */
void gpu_tick(struct session *s, int final);

/* The GPU findings counted into the BPF counters a stats line is written from. */
void gpu_counts(const struct session *s, uint64_t c[NW_C_MAX]);

void gpu_free(struct session *s);

#endif /* __SESSION_PRIV_H */
