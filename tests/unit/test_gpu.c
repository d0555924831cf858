// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The GPU library's side of the daemon: socket messages checked (daemon/attach/gpulink.c),
 * ring slots and results checked against each other, and results turned into findings with
 * their origin verdicts, held until the gated results are in (daemon/explain/gpures.c).
 */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include <linux/types.h>
#include "attach/gpulink.h"
#include "explain/gpures.h"
#include "nanwatch.h"
#include "nwfloat.h"
#include "nwgpu.h"

#define F32_1_5 0x3fc00000u
#define F32_M2 0xc0000000u

static char big[NW_GPU_MSG_MAX];

static size_t message(void *buf, __u32 type, const void *body, __u32 len)
{
	struct nw_gpu_msg h = {type, len};

	memcpy(buf, &h, sizeof(h));
	memcpy((char *)buf + sizeof(h), body, len);
	return sizeof(h) + len;
}

static void test_msg_valid(void **state)
{
	static __u64 buf[NW_GPU_MSG_MAX / 8];
	struct nw_gpu_ready ready = {NW_GPU_VERSION, NW_GPU_MODE_INTERPOSE, 1, 1, 13000, 0};
	struct nw_gpu_result res[2] = {{.seq = 1}, {.seq = 2}};
	__u64 stats[NW_GPU_S_MAX] = {1, 2, 3};
	struct gpulink_msg m;
	size_t n;

	(void)state;
	n = message(buf, NW_GPU_MSG_READY, &ready, sizeof(ready));
	assert_int_equal(gpulink__check_msg(buf, n, &m), 0);
	assert_int_equal(m.type, NW_GPU_MSG_READY);
	assert_int_equal(m.len, sizeof(ready));
	assert_ptr_equal(m.body, (char *)buf + 8);
	n = message(buf, NW_GPU_MSG_RESULT, res, sizeof(res));
	assert_int_equal(gpulink__check_msg(buf, n, &m), 0);
	assert_int_equal(m.len, 2 * sizeof(struct nw_gpu_result));
	n = message(buf, NW_GPU_MSG_STATS, stats, 3 * 8); /* an older library's fewer counters */
	assert_int_equal(gpulink__check_msg(buf, n, &m), 0);
	n = message(buf, NW_GPU_MSG_NOTICE, "hi", 2);
	assert_int_equal(gpulink__check_msg(buf, n, &m), 0);
	n = message(buf, 99, "x", 1); /* a later version's message: passed on, then skipped */
	assert_int_equal(gpulink__check_msg(buf, n, &m), 0);
	assert_int_equal(m.type, 99);
	/* the largest message there may be */
	n = message(buf, NW_GPU_MSG_RESULT, big, (NW_GPU_MSG_MAX - 8) / 64 * 64);
	assert_int_equal(gpulink__check_msg(buf, n, &m), 0);
}

static void test_msg_refused(void **state)
{
	static __u64 buf[NW_GPU_MSG_MAX / 8 + 8];
	struct nw_gpu_result res = {.seq = 1};
	struct gpulink_msg m;
	size_t n;

	(void)state;
	assert_int_equal(gpulink__check_msg(buf, 0, &m), -EBADMSG);
	assert_int_equal(gpulink__check_msg(buf, 7, &m), -EBADMSG);
	n = message(buf, NW_GPU_MSG_RESULT, &res, sizeof(res));
	/* len says more, or less, than arrived */
	assert_int_equal(gpulink__check_msg(buf, n - 1, &m), -EBADMSG);
	assert_int_equal(gpulink__check_msg(buf, n + 1, &m), -EBADMSG);
	/* a result cut short, none at all */
	n = message(buf, NW_GPU_MSG_RESULT, &res, sizeof(res) - 8);
	assert_int_equal(gpulink__check_msg(buf, n, &m), -EBADMSG);
	n = message(buf, NW_GPU_MSG_RESULT, &res, 0);
	assert_int_equal(gpulink__check_msg(buf, n, &m), -EBADMSG);
	/* READY too short, STATS not whole counters, an empty NOTICE */
	n = message(buf, NW_GPU_MSG_READY, &res, sizeof(struct nw_gpu_ready) - 4);
	assert_int_equal(gpulink__check_msg(buf, n, &m), -EBADMSG);
	n = message(buf, NW_GPU_MSG_STATS, &res, 12);
	assert_int_equal(gpulink__check_msg(buf, n, &m), -EBADMSG);
	n = message(buf, NW_GPU_MSG_NOTICE, &res, 0);
	assert_int_equal(gpulink__check_msg(buf, n, &m), -EBADMSG);
	/* past NW_GPU_MSG_MAX, whatever the header says */
	n = message(buf, NW_GPU_MSG_NOTICE, big, NW_GPU_MSG_MAX);
	assert_int_equal(gpulink__check_msg(buf, n, &m), -EBADMSG);
}

static void test_notice_text(void **state)
{
	char out[GPULINK_NOTICE_MAX + 16], big[1000];

	(void)state;
	gpulink__notice_text("CUPTI held by\x1b[31m another\nsecond line", 40, out, sizeof(out));
	assert_string_equal(out, "CUPTI held by?[31m another");
	gpulink__notice_text("caf\xc3\xa9\0tail", 10, out, sizeof(out));
	assert_string_equal(out, "caf??");
	gpulink__notice_text("abcdef", 6, out, 4);
	assert_string_equal(out, "abc");
	memset(big, 'x', sizeof(big));
	gpulink__notice_text(big, sizeof(big), out, sizeof(out));
	assert_int_equal(strlen(out), GPULINK_NOTICE_MAX);
}

static struct nw_gpu_req *ring_new(void)
{
	return calloc(NW_GPU_SLOTS + 1, sizeof(struct nw_gpu_req));
}

/* A request as BPF writes it at ring position seq - 1. */
static struct nw_gpu_req *put(struct nw_gpu_req *ring, __u64 seq, __u32 role, __u64 gate)
{
	struct nw_gpu_req *r = &ring[1 + ((seq - 1) & (NW_GPU_SLOTS - 1))];
	struct nw_gpu_ctx *c = (struct nw_gpu_ctx *)r->ctx;

	memset(r, 0, sizeof(*r));
	r->seq = seq;
	r->numel = 6;
	r->gate = gate;
	r->tid = 4242;
	r->dtype = NW_DT_F32;
	r->role = role;
	r->device = 0;
	r->index0 = NW_NO_INDEX;
	r->index1 = NW_NO_INDEX;
	c->step = 7 | ((__u64)NW_STEP_OPTIMIZER << NW_STEP_SHIFT);
	c->iteration = 11;
	c->root = 0x1000;
	c->module = 0x2000;
	c->ndim = 2;
	c->shape[0] = 2;
	c->shape[1] = 3;
	c->depth = 3;
	c->phase = role == NW_GPU_LOSS ? NW_PHASE_LOSS : NW_PHASE_FORWARD;
	c->params_known = 1;
	c->gating = 1;
	strcpy(c->class_name, "torch.nn.modules.linear.Linear");
	return r;
}

static void test_copy_slot(void **state)
{
	struct nw_gpu_req *ring = ring_new(), out;
	struct nw_gpu_req *r;

	(void)state;
	put(ring, 5, NW_GPU_OUTPUT, 0);
	assert_int_equal(gpulink__copy_slot(ring, 5, &out), 0);
	assert_int_equal(out.seq, 5);
	assert_int_equal(out.tid, 4242);
	/* never written, seq 0; then written over by a later round of the ring */
	assert_int_equal(gpulink__copy_slot(ring, 6, &out), -ENOENT);
	assert_int_equal(gpulink__copy_slot(ring, 0, &out), -ENOENT);
	put(ring, 5 + NW_GPU_SLOTS, NW_GPU_OUTPUT, 0);
	assert_int_equal(gpulink__copy_slot(ring, 5, &out), -ESTALE);
	/* an earlier round still there: this one not written yet */
	assert_int_equal(gpulink__copy_slot(ring, 5 + 2 * NW_GPU_SLOTS, &out), -ENOENT);
	/* being rewritten (BPF zeroes seq first) */
	ring[1 + 4].seq = 0;
	assert_int_equal(gpulink__copy_slot(ring, 5 + NW_GPU_SLOTS, &out), -ENOENT);
	/* fields out of range: checked whoever wrote them */
	r = put(ring, 9, 4, 0);
	assert_int_equal(gpulink__copy_slot(ring, 9, &out), -EINVAL);
	r = put(ring, 9, NW_GPU_OUTPUT, 0);
	r->dtype = NW_DT_NONE;
	assert_int_equal(gpulink__copy_slot(ring, 9, &out), -EINVAL);
	r = put(ring, 9, NW_GPU_OUTPUT, 0);
	((struct nw_gpu_ctx *)r->ctx)->ndim = NW_MAX_DIMS + 1;
	assert_int_equal(gpulink__copy_slot(ring, 9, &out), -EINVAL);
	r = put(ring, 9, NW_GPU_OUTPUT, 0);
	((struct nw_gpu_ctx *)r->ctx)->depth = NW_MAX_DEPTH + 1;
	assert_int_equal(gpulink__copy_slot(ring, 9, &out), -EINVAL);
	free(ring);
}

static void test_check_result(void **state)
{
	struct nw_gpu_req *ring = ring_new();
	struct nw_gpu_req *req = put(ring, 3, NW_GPU_OUTPUT, 0);
	struct nw_gpu_result r = {.seq = 3,
				  .scanned = 6,
				  .nan = 2,
				  .posinf = 2,
				  .neginf = 2,
				  .flags = NW_GPU_R_SCANNED};

	(void)state;
	assert_int_equal(gpulink__check_result(req, &r), 0);
	r.seq = 4;
	assert_int_equal(gpulink__check_result(req, &r), -EINVAL);
	r.seq = 3;
	r.scanned = 7; /* more than the request asked for */
	assert_int_equal(gpulink__check_result(req, &r), -EINVAL);
	r.scanned = 6;
	r.nan = 3; /* more non-finite than scanned */
	assert_int_equal(gpulink__check_result(req, &r), -EINVAL);
	r.nan = 3; /* each within, together more than scanned */
	r.posinf = 3;
	r.neginf = 1;
	assert_int_equal(gpulink__check_result(req, &r), -EINVAL);
	/* not scanned: the counts mean nothing */
	r.flags = NW_GPU_R_DTYPE;
	assert_int_equal(gpulink__check_result(req, &r), 0);
	free(ring);
}

static void test_finding_forward(void **state)
{
	struct nw_gpu_req *ring = ring_new();
	struct nw_gpu_req *req = put(ring, 3, NW_GPU_OUTPUT, 0);
	struct nw_gpu_result r = {.seq = 3,
				  .scanned = 6,
				  .nan = 1,
				  .posinf = 2,
				  .min_key = nw_order_key(F32_M2, NW_DT_F32),
				  .max_key = nw_order_key(F32_1_5, NW_DT_F32),
				  .flags = NW_GPU_R_SCANNED};
	struct gpures_gated g = {.got = 0};
	struct finding f;
	char dev[16];

	(void)state;
	req->index0 = 1;
	req->index1 = 0;
	((struct nw_gpu_ctx *)req->ctx)->ngated = 3;
	gpures__finding(req, &r, &g, "cuda", NULL, dev, sizeof(dev), &f);
	assert_int_equal(f.kind, FINDING_ANOMALY);
	assert_int_equal(f.phase, FINDING_FORWARD);
	assert_string_equal(f.device, "cuda:0");
	assert_int_equal(f.tid, 4242);
	assert_int_equal(f.step, 7);
	assert_int_equal(f.step_source, FINDING_STEP_OPTIMIZER);
	assert_int_equal(f.iteration, 11);
	assert_int_equal(f.root, 0x1000);
	assert_int_equal(f.module, 0x2000);
	assert_int_equal(f.depth, 3);
	assert_string_equal(f.module_class, "Linear");
	assert_string_equal(f.tensor, "output[1][0]");
	assert_string_equal(f.dtype_name, "float32");
	assert_int_equal(f.ndim, 2);
	assert_int_equal(f.shape[1], 3);
	assert_int_equal(f.numel, 6);
	assert_int_equal(f.nan, 1);
	assert_int_equal(f.posinf, 2);
	assert_true(f.has_finite);
	assert_int_equal(f.finite_min_bits, F32_M2);
	assert_int_equal(f.finite_max_bits, F32_1_5);
	assert_true(fabs(f.max_abs - 2.0) < 1e-12);
	assert_int_equal(f.params_known, 1); /* never read late from the CPU side */
	/* none of its 3 gated results in yet: nothing known */
	assert_int_equal(f.inputs_finite, -1);
	assert_int_equal(f.params_finite, -1);
	/* all in, finite */
	g.got = 3;
	gpures__finding(req, &r, &g, "cuda", NULL, dev, sizeof(dev), &f);
	assert_int_equal(f.inputs_finite, 1);
	assert_int_equal(f.params_finite, 1);
	/* an input bad (propagated), a parameter not scanned */
	g.inputs_bad = 1;
	g.params_unknown = 1;
	gpures__finding(req, &r, &g, "cuda", NULL, dev, sizeof(dev), &f);
	assert_int_equal(f.inputs_finite, 0);
	assert_int_equal(f.params_finite, -1);
	/* an input BPF could not request; no device index */
	memset(&g, 0, sizeof(g));
	g.got = 3;
	((struct nw_gpu_ctx *)req->ctx)->inputs_unknown = 1;
	req->device = -1;
	gpures__finding(req, &r, &g, "meta", NULL, dev, sizeof(dev), &f);
	assert_int_equal(f.inputs_finite, -1);
	assert_int_equal(f.params_finite, 1);
	assert_string_equal(f.device, "meta");
	/* no finite value */
	r.min_key = ~0ULL;
	r.max_key = 0;
	gpures__finding(req, &r, &g, "cuda", NULL, dev, sizeof(dev), &f);
	assert_false(f.has_finite);
	assert_true(f.max_abs == 0);
	free(ring);
}

static void test_finding_loss(void **state)
{
	struct nw_gpu_req *ring = ring_new();
	struct nw_gpu_req *req = put(ring, 8, NW_GPU_LOSS, 0);
	struct nw_gpu_result r = {
		.seq = 8, .scanned = 1, .nan = 1, .min_key = ~0ULL, .flags = NW_GPU_R_SCANNED};
	struct finding f;
	char dev[16];

	(void)state;
	gpures__finding(req, &r, NULL, "cuda", NULL, dev, sizeof(dev), &f);
	assert_int_equal(f.phase, FINDING_PHASE_LOSS);
	assert_string_equal(f.tensor, "loss");
	assert_null(f.module_class);
	assert_null(f.layer);
	assert_int_equal(f.module, 0);
	assert_int_equal(f.inputs_finite, -1);
	assert_int_equal(f.params_finite, -1);
	free(ring);
}

/* What gpures writes, in order. */
static struct finding written[8];
static int nwritten;

static int record(struct explain *x, const struct finding *f)
{
	(void)x;
	if (nwritten < 8)
		written[nwritten] = *f;
	nwritten++;
	return 0;
}

static struct nw_gpu_result bad(__u64 seq)
{
	return (struct nw_gpu_result){
		.seq = seq, .scanned = 6, .nan = 6, .min_key = ~0ULL, .flags = NW_GPU_R_SCANNED};
}

static struct nw_gpu_result fine(__u64 seq, __u32 flags)
{
	return (struct nw_gpu_result){.seq = seq, .scanned = 6, .flags = flags};
}

/* A bad output waits for its gated results, is written in order, judged origin by them. */
static void test_results_held(void **state)
{
	static struct gpures g;
	struct nw_gpu_req *ring = ring_new();
	struct nw_gpu_req *out1 = put(ring, 1, NW_GPU_OUTPUT, 0);
	struct nw_gpu_req *in1 = put(ring, 2, NW_GPU_INPUT, 1);
	struct nw_gpu_req *par1 = put(ring, 3, NW_GPU_PARAM, 1);
	struct nw_gpu_req *out2 = put(ring, 4, NW_GPU_OUTPUT, 0);
	struct nw_gpu_req *in2 = put(ring, 5, NW_GPU_INPUT, 4);
	struct nw_gpu_result r;

	(void)state;
	nwritten = 0;
	((struct nw_gpu_ctx *)out1->ctx)->ngated = 2;
	((struct nw_gpu_ctx *)out2->ctx)->ngated = 1;
	gpures__init(&g, NULL, NULL, "cuda");
	g.write = record;
	r = bad(1);
	gpures__result(&g, out1, &r, 0);
	r = bad(4);
	gpures__result(&g, out2, &r, 0);
	assert_int_equal(nwritten, 0); /* both wait */
	/* the second's input comes first, bad: still behind the first */
	r = bad(5);
	gpures__result(&g, in2, &r, 0.1);
	assert_int_equal(nwritten, 0);
	r = fine(2, NW_GPU_R_SCANNED);
	gpures__result(&g, in1, &r, 0.1);
	assert_int_equal(nwritten, 0);
	r = fine(3, NW_GPU_R_SCANNED);
	gpures__result(&g, par1, &r, 0.2);
	assert_int_equal(nwritten, 2);
	assert_int_equal(written[0].inputs_finite, 1); /* the origin */
	assert_int_equal(written[0].params_finite, 1);
	assert_int_equal(written[1].inputs_finite, 0); /* propagated */
	assert_int_equal(g.found, 2);
	free(ring);
}

/* A gated result that never comes: written with what is known once it waited long enough. */
static void test_results_timeout(void **state)
{
	static struct gpures g;
	struct nw_gpu_req *ring = ring_new();
	struct nw_gpu_req *out = put(ring, 1, NW_GPU_OUTPUT, 0);
	struct nw_gpu_result r = bad(1);

	(void)state;
	nwritten = 0;
	((struct nw_gpu_ctx *)out->ctx)->ngated = 1;
	gpures__init(&g, NULL, NULL, "cuda");
	g.write = record;
	gpures__result(&g, out, &r, 10);
	gpures__flush(&g, 10 + GPURES_WAIT_S / 2);
	assert_int_equal(nwritten, 0);
	gpures__flush(&g, 10 + GPURES_WAIT_S);
	assert_int_equal(nwritten, 1);
	assert_int_equal(written[0].inputs_finite, -1);
	/* not scanned, finite, overwritten: nothing written */
	r = fine(1, NW_GPU_R_CAPTURING);
	gpures__result(&g, out, &r, 20);
	r = fine(1, NW_GPU_R_SCANNED);
	gpures__result(&g, out, &r, 20);
	gpures__result(&g, NULL, &r, 20);
	gpures__flush_all(&g);
	assert_int_equal(nwritten, 1);
	assert_int_equal(g.not_scanned, 1);
	free(ring);
}

/* As BPF reports: every anomaly of the first bad iteration, then the first of each later one. */
static void test_results_suppressed(void **state)
{
	static struct gpures g;
	struct nw_gpu_req *ring = ring_new();
	struct nw_gpu_result r;
	__u64 seq, iters[] = {11, 11, 12, 12, 13};
	int i;

	(void)state;
	nwritten = 0;
	gpures__init(&g, NULL, NULL, "cuda");
	g.write = record;
	for (i = 0; i < 5; i++) {
		struct nw_gpu_req *req;

		seq = i + 1;
		req = put(ring, seq, NW_GPU_OUTPUT, 0);
		((struct nw_gpu_ctx *)req->ctx)->iteration = iters[i];
		r = bad(seq);
		gpures__result(&g, req, &r, 0);
	}
	assert_int_equal(nwritten, 4);
	assert_int_equal(g.found, 5);
	assert_int_equal(g.suppressed, 1);
	assert_int_equal(written[3].iteration, 13);
	free(ring);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_msg_valid),	cmocka_unit_test(test_msg_refused),
		cmocka_unit_test(test_notice_text),	cmocka_unit_test(test_copy_slot),
		cmocka_unit_test(test_check_result),	cmocka_unit_test(test_finding_forward),
		cmocka_unit_test(test_finding_loss),	cmocka_unit_test(test_results_held),
		cmocka_unit_test(test_results_timeout), cmocka_unit_test(test_results_suppressed),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
