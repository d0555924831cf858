// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * libFuzzer target: what the GPU library's side hands the daemon, without a socket (the
 * target may write both): an input is a 2-byte little-endian length L, L bytes of one socket
 * message, then request ring slots (256 bytes each, laid from slot 1 on). The message is
 * checked (gpulink__check_msg); a RESULT's results are matched against the ring
 * (gpulink__copy_slot, gpulink__check_result) and explained (gpures__result) into anomaly
 * and diagnosis lines; a NOTICE becomes text.
 */
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/types.h>
#include "attach/gpulink.h"
#include "explain/diagnose.h"
#include "explain/explain.h"
#include "explain/gpures.h"
#include "output/emit.h"
#include "fuzz_stream.h"
#include "output/sink.h"
#include "resolve/target.h"

#define MAX_SLOTS 64 /* ring slots an input may fill */

static struct emitter emitter;
static struct target target = {.pid = 4242, .comm = "python3"};
static struct nw_gpu_req ring[NW_GPU_SLOTS + 1];
static __u64 msg[NW_GPU_MSG_MAX / 8 + 1];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	return fuzz_stream_init(&emitter, &target);
}

static void results(struct gpures *g, const struct gpulink_msg *m)
{
	struct nw_gpu_result r;
	struct nw_gpu_req req;
	size_t i;

	for (i = 0; i + sizeof(r) <= m->len; i += sizeof(r)) {
		memcpy(&r, (const char *)m->body + i, sizeof(r));
		if (gpulink__copy_slot(ring, r.seq, &req) || gpulink__check_result(&req, &r))
			gpures__result(g, NULL, &r, 0);
		else
			gpures__result(g, &req, &r, 0);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct explain x = {.e = &emitter};
	static struct gpures g;
	char text[GPULINK_NOTICE_MAX + 1];
	struct gpulink_msg m;
	size_t len, nslots, i;

	if (size < 2)
		return 0;
	len = data[0] | (size_t)data[1] << 8;
	if (len > size - 2 || len > sizeof(msg))
		return 0;
	memcpy(msg, data + 2, len);
	nslots = (size - 2 - len) / sizeof(struct nw_gpu_req);
	if (nslots > MAX_SLOTS)
		nslots = MAX_SLOTS;
	memcpy(&ring[1], data + 2 + len, nslots * sizeof(struct nw_gpu_req));
	diagnose__init(&x.diag);
	emitter.failed = 0;
	gpures__init(&g, &x, NULL, "cuda");
	if (!gpulink__check_msg(msg, len, &m)) {
		if (m.type == NW_GPU_MSG_RESULT)
			results(&g, &m);
		else if (m.type == NW_GPU_MSG_NOTICE)
			gpulink__notice_text(m.body, m.len, text, sizeof(text));
	}
	gpures__flush_all(&g);
	explain__diagnose(&x, UINT64_MAX);
	for (i = 1; i <= nslots; i++)
		memset(&ring[i], 0, sizeof(ring[i]));
	return 0;
}
