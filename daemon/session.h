/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* One watched process: what the daemon resolved, attached and keeps for it. */
#ifndef __SESSION_H
#define __SESSION_H

#include <stdint.h>
#include <sys/types.h>
#include "capture.h"
#include "emit.h"
#include "explain.h"
#include "nanwatch.h"
#include "remote.h"
#include "sink.h"
#include "target.h"

struct names;
struct probe;

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
	struct explain r;
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

int load_layouts(struct app *app, char *err, size_t errlen);
void dict_layout(const struct app *app, struct nw_dict_layout *d);

#endif /* __SESSION_H */
