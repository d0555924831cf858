// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * A session's GPU tensors: whether BPF requests their scans (the target uses CUDA), the
 * link to libnanwatch_cupti.so as a source of findings, and what the attach and stats
 * lines say of them.
 */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "attach/gpulink.h"
#include "inject/inject.h"
#include "attach/probe.h"
#include "output/event.h"
#include "output/json.h"
#include "session/session_priv.h"
#include "util/clock.h"
#include "util/file.h"

#define LIB_NAME "libnanwatch_cupti.so"
/*
 * Test only: NANWATCH_TEST_GPU_DEVICE=meta makes BPF take tensors on torch's meta device
 * for GPU tensors, so that a CPU build of torch exercises the request path (with a
 * test-side program in the library's place); =cpu takes CPU tensors for GPU tensors (not
 * scanned in BPF: the library scans them, under an emulated driver whose device memory
 * is the process's own).
 */
#define TEST_DEVICE_ENV "NANWATCH_TEST_GPU_DEVICE"

/* Whether pid maps CUDA (the driver, or torch's CUDA libraries) and our library. */
static void scan_maps(pid_t pid, int *cuda, int *lib)
{
	char path[64], *maps;

	*cuda = *lib = 0;
	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	maps = file__read(path, 64 << 20, NULL);
	if (!maps)
		return;
	*cuda = strstr(maps, "/libcuda.so") || strstr(maps, "/libtorch_cuda.so") ||
		strstr(maps, "/libc10_cuda.so");
	*lib = inject__loaded(maps); /* a copy --inject placed in a container's /tmp too */
	free(maps);
}

/* Where this daemon's library is: next to the binary, or installed beside it. */
static void lib_path(char *out, size_t len)
{
	static const char *const rel[] = {"", "/../lib/nanwatch"};
	char exe[PATH_MAX], cand[PATH_MAX + 64];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	size_t i;

	snprintf(out, len, "/path/to/%s", LIB_NAME);
	if (n <= 0)
		return;
	exe[n] = 0;
	dirname(exe);
	for (i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
		snprintf(cand, sizeof(cand), "%s%s/%s", exe, rel[i], LIB_NAME);
		if (!access(cand, R_OK) && realpath(cand, exe)) {
			snprintf(out, len, "%s", exe);
			return;
		}
	}
}

void gpu_configure(struct session *s, struct probe_opts *po)
{
	const char *test = getenv(TEST_DEVICE_ENV);
	int cuda, lib;

	s->gpu_attach = "none";
	s->gpu_message[0] = 0;
	scan_maps(s->t.pid, &cuda, &lib);
	if (test && !strcmp(test, "meta") && s->device_meta >= 0) {
		s->gpu_kind = "meta";
		po->gpu_device = s->device_meta;
	} else if (test && !strcmp(test, "cpu") && s->nwl.impl_device >= 0) {
		s->gpu_kind = "cpu";
		po->gpu_device = s->nwl.device_cpu;
	} else if (cuda) {
		s->gpu_kind = "cuda";
		/* c10::DeviceType::CUDA is 1 in every torch release; a table may say otherwise */
		po->gpu_device = s->device_cuda >= 0 ? s->device_cuda : 1;
	} else {
		return;
	}
	po->gpu = 1;
	/* c10::Device is {DeviceType type_; DeviceIndex index_;}: the index follows the type */
	po->gpu_index_off = s->impl_device_index >= 0 ? s->impl_device_index
			    : s->nwl.impl_device >= 0 ? s->nwl.impl_device + 1
						      : -1;
	s->gpu_attach = lib ? "waiting" : "not_checked";
	if (!lib && !test) {
		char path[PATH_MAX];

		lib_path(path, sizeof(path));
		snprintf(s->gpu_message, sizeof(s->gpu_message),
			 "pid %d uses CUDA but has no %s loaded: GPU tensors are not checked; "
			 "start it with CUDA_INJECTION64_PATH=%.200s, or attach with --inject",
			 s->t.pid, LIB_NAME, path);
	}
}

static void on_result(void *ctx, const struct nw_gpu_req *req, const struct nw_gpu_result *r)
{
	struct session *s = ctx;

	gpures__result(&s->gres, req, r, clock__now());
}

static void on_notice(void *ctx, const char *text)
{
	struct session *s = ctx;
	uint64_t h = 14695981039346656037ULL; /* FNV-1a */
	int i;

	for (i = 0; text[i]; i++)
		h = (h ^ (unsigned char)text[i]) * 1099511628211ULL;
	for (i = 0; i < s->gpu_notices; i++)
		if (s->gpu_notice_hash[i] == h)
			return;
	/* each text once (a library says its notices again after a reconnect), and so many */
	if (s->gpu_notices >= (int)(sizeof(s->gpu_notice_hash) / sizeof(s->gpu_notice_hash[0])))
		return;
	s->gpu_notice_hash[s->gpu_notices++] = h;
	output__error_from(&s->e, "gpu", text);
}

static void on_ready(void *ctx, const struct nw_gpu_ready *r)
{
	struct session *s = ctx;

	if (s->o.verbose)
		fprintf(stderr, "nanwatchd: GPU library of pid %d ready: mode %u, state 0x%x\n",
			s->t.pid, r->mode, r->state);
}

static void on_link(void *ctx, int on)
{
	struct session *s = ctx;

	probe__gpu_link(s->p, on);
}

/* Once per watch: a peer that keeps failing the check is tried every second. */
static void on_refused(void *ctx, const char *why)
{
	struct session *s = ctx;

	if (s->gpu_refused_said)
		return;
	s->gpu_refused_said = 1;
	output__error_from(&s->e, "gpu", why);
}

static int reread(void *ctx, uint64_t seq, struct nw_gpu_req *out)
{
	return gpulink__slot(ctx, seq, out);
}

static int gpu_poll(void *ctx, int timeout_ms)
{
	struct session *s = ctx;

	(void)timeout_ms;
	gpu_tick(s, 0);
	return 0;
}

static int gpu_fd(const void *ctx)
{
	const struct session *s = ctx;

	return gpulink__fd(s->gpu);
}

static const char *mode_name(uint32_t mode)
{
	switch (mode) {
	case NW_GPU_MODE_CALLBACK:
		return "callback";
	case NW_GPU_MODE_INTERPOSE:
		return "interpose";
	default:
		return NULL;
	}
}

static void library_stats(struct json *j, const struct gpulink_state *st)
{
	static const char *const names[NW_GPU_S_MAX] = {
		[NW_GPU_S_REQUESTS] = "requests",
		[NW_GPU_S_SCANS] = "scans",
		[NW_GPU_S_BYTES] = "bytes",
		[NW_GPU_S_RESULTS] = "results",
		[NW_GPU_S_CAPTURING] = "capturing",
		[NW_GPU_S_DTYPE] = "dtype",
		[NW_GPU_S_NO_MEMORY] = "no_memory",
		[NW_GPU_S_STALE] = "stale",
		[NW_GPU_S_LAUNCH_ERROR] = "launch_error",
		[NW_GPU_S_GATED_OUT] = "gated_out",
		[NW_GPU_S_LAUNCHES] = "launches",
	};
	int i;

	if (!st->have_stats) {
		json__null(j, "library");
		return;
	}
	json__object_begin(j, "library");
	for (i = 0; i < NW_GPU_S_MAX; i++)
		json__uint(j, names[i], st->stats[i]);
	json__object_end(j);
}

/* stats.gpu: the link, BPF's requests, the library's counters. */
static void stats_fields(struct json *j, const void *ctx)
{
	const struct session *s = ctx;
	struct gpulink_state st;

	gpulink__state(s->gpu, &st);
	json__object_begin(j, "gpu");
	json__string(j, "device", s->gpu_kind);
	json__bool(j, "connected", st.connected);
	json__bool(j, "ready", st.ready);
	json__uint(j, "connects", st.connects);
	json__string(j, "mode", st.ready ? mode_name(st.mode) : NULL);
	json__uint(j, "requests", st.written);
	json__uint(j, "dropped", st.dropped);
	json__uint(j, "results_lost", st.lost);
	json__uint(j, "invalid", st.invalid);
	json__uint(j, "refused", st.refused);
	json__uint(j, "not_scanned", s->gres.not_scanned);
	json__uint(j, "anomalies", s->gres.found);
	json__uint(j, "suppressed", s->gres.suppressed);
	library_stats(j, &st);
	json__object_end(j);
}

int gpu_open(struct session *s, char *err, size_t errlen)
{
	struct gpulink_cb cb = {.ready = on_ready,
				.result = on_result,
				.notice = on_notice,
				.link = on_link,
				.refused = on_refused,
				.ctx = s};

	if (!s->gpu_kind)
		return 0;
	s->gpu = gpulink__new(s->t.pid, s->pidfd, probe__gpu_ring_fd(s->p), &cb, err, errlen);
	if (!s->gpu)
		return -errno;
	gpures__init(&s->gres, &s->x, s->names, s->gpu_kind);
	s->gres.reread = reread;
	s->gres.reread_ctx = s->gpu;
	s->x.stats_extra = stats_fields;
	s->x.stats_ctx = s;
	s->src[s->nsrc++] = (struct session_source){
		.name = "gpu",
		.poll = gpu_poll,
		.fd = gpu_fd,
		.ctx = s,
	};
	if (gpulink__tick(s->gpu, clock__now()))
		s->gpu_attach = "connected";
	if (s->gpu_message[0])
		fprintf(stderr, "nanwatchd: %s\n", s->gpu_message);
	return 0;
}

void gpu_tick(struct session *s, int final)
{
	if (!s->gpu)
		return;
	if (!final)
		gpulink__tick(s->gpu, clock__now());
	gpulink__poll(s->gpu);
	if (final || gpulink__fd(s->gpu) < 0)
		gpures__flush_all(&s->gres); /* nothing more comes for what is held */
	else
		gpures__flush(&s->gres, clock__now());
}

void gpu_counts(const struct session *s, uint64_t c[NW_C_MAX])
{
	if (!s->gpu)
		return;
	c[NW_C_ANOMALIES] += s->gres.found;
	c[NW_C_SUPPRESSED] += s->gres.suppressed;
	c[NW_C_LOSS_FOUND] += s->gres.loss_found;
	c[NW_C_LOSS_SUPPRESSED] += s->gres.loss_suppressed;
}

void gpu_free(struct session *s)
{
	gpulink__free(s->gpu);
	s->gpu = NULL;
}
