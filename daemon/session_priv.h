/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Inside a session: shared by its resolve (session_resolve.c) and its life (session.c). */
#ifndef __SESSION_PRIV_H
#define __SESSION_PRIV_H

#include "output/emit.h"
#include "explain/explain.h"
#include "nanwatch.h"
#include "resolve/remote.h"
#include "session.h"
#include "resolve/target.h"

struct capture;
struct names;
struct probe;

#define SESSION_SOURCES 4 /* sources of findings a session can hold */

/* A source of findings (the BPF rings; a GPU library's results later). */
struct session_source {
	const char *name;
	int (*poll)(void *ctx, int timeout_ms); /* 0 or a negative errno; -EINTR is normal */
	int (*fd)(const void *ctx);
	void *ctx;
};

struct session {
	struct session_opts o;
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
	int published; /* offsets taken from the interpreter itself */
	struct nw_bwd_layout bwl;
	struct nw_rescan rescan; /* .on: the torch table lets outputs skip a rescan */
	char node_symbol[256];	 /* "" : the backward pass is not checked */
	long long vtable_offset; /* vtable pointer - its _ZTV symbol */
	int pidfd;
	int error; /* the negative errno behind SESSION_ERROR */
	double next_stats;
	double next_sink_lost; /* sink drops are reported at most once a second */
	uint64_t step_impl;    /* the tracked optimizer's step tensor handed to BPF; 0: none */
};

/* session_resolve.c: the layout tables for s->t, and what BPF reads dicts with. */
int load_layouts(struct session *s, char *err, size_t errlen);
void dict_layout(const struct session *s, struct nw_dict_layout *d);

#endif /* __SESSION_PRIV_H */
