// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The request consumer: on a launch's API enter (callback mode) the launching
 * thread takes its own requests from the ring and enqueues their scans on the
 * stream of its previous launch, before the new kernel; the worker takes
 * requests whose thread did not launch again within the drain time and
 * enqueues them on that thread's last stream. The caching allocator reuses a
 * block only on the stream it was freed on, so a scan ordered on the
 * producing stream before that stream's next kernel reads the tensor intact.
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "nwcupti.h"

__thread int nwc_busy;		       /* in our own launch: its callback does nothing */
static __thread struct nwc_thread *me; /* this thread's entry in g->threads */
static __thread int my_tid, my_gen;    /* its tid, asked once per nwc_fork_gen */
int nwc_fork_gen;		       /* a forked child's only thread must ask again */

static void stat_add(struct nwc *g, int which, __u64 n)
{
	__atomic_fetch_add(&g->stats[which], n, __ATOMIC_RELAXED);
}

static struct nwc_thread *thread_self(struct nwc *g)
{
	int tid, i, n;

	/* gettid() is a system call: once per thread (and per fork) */
	if (!my_tid || my_gen != __atomic_load_n(&nwc_fork_gen, __ATOMIC_RELAXED)) {
		my_gen = __atomic_load_n(&nwc_fork_gen, __ATOMIC_RELAXED);
		my_tid = gettid();
	}
	tid = my_tid;
	if (me && me->tid == tid)
		return me;
	me = NULL;
	pthread_mutex_lock(&g->lock);
	n = g->nthreads;
	for (i = 0; i < n && !me; i++)
		if (g->threads[i].tid == tid)
			me = &g->threads[i];
	if (!me && n < NWC_THREADS) {
		me = &g->threads[n];
		memset(me, 0, sizeof(*me));
		me->tid = tid;
		__atomic_store_n(&g->nthreads, n + 1, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&g->lock);
	return me;
}

/* The context's entry; with add, a new one is made WANTED and the worker woken. */
struct nwc_ctx *nwc_ctx_find(struct nwc *g, CUcontext ctx, int add)
{
	struct nwc_ctx *c = NULL;
	int i, n;

	n = __atomic_load_n(&g->nctxs, __ATOMIC_ACQUIRE);
	for (i = 0; i < n; i++)
		if (g->ctxs[i].ctx == ctx)
			return &g->ctxs[i];
	if (!add || !ctx)
		return NULL;
	pthread_mutex_lock(&g->lock);
	for (i = 0; i < g->nctxs && !c; i++)
		if (g->ctxs[i].ctx == ctx)
			c = &g->ctxs[i];
	if (!c && g->nctxs < NWC_CTXS) {
		c = &g->ctxs[g->nctxs];
		memset(c, 0, sizeof(*c));
		c->ctx = ctx;
		c->state = NWC_CTX_WANTED;
		__atomic_store_n(&g->nctxs, g->nctxs + 1, __ATOMIC_RELEASE);
		nwc_wake(g);
	}
	pthread_mutex_unlock(&g->lock);
	return c;
}

/* The stream the launch goes to (params as generated_cuda_meta.h lays them out). */
static int launch_stream(CUpti_CallbackId cbid, const void *p, CUstream *s)
{
	const nwc_launch_ex_params *ex = p;

	switch (cbid) {
	case NWC_CBID_cuLaunchKernel:
	case NWC_CBID_cuLaunchCooperativeKernel:
		*s = ((const nwc_launch_params *)p)->hStream;
		return 0;
	case NWC_CBID_cuLaunchKernel_ptsz:
	case NWC_CBID_cuLaunchCooperativeKernel_ptsz:
		*s = ((const nwc_launch_params *)p)->hStream;
		break;
	case NWC_CBID_cuLaunchKernelEx:
		*s = ex->config ? ex->config->hStream : NULL;
		return 0;
	case NWC_CBID_cuLaunchKernelEx_ptsz:
		*s = ex->config ? ex->config->hStream : NULL;
		break;
	default:
		return -ENOENT;
	}
	/* the _ptsz entry points: stream 0 is the thread's own default stream */
	if (!*s)
		*s = NWC_CU_STREAM_PER_THREAD;
	return 0;
}

/* Take ring position pos for scanning; 0 if someone else has. */
static int claim(struct nwc *g, __u64 pos)
{
	__u64 *t = &g->taken[pos % NW_GPU_SLOTS];
	__u64 old = __atomic_load_n(t, __ATOMIC_RELAXED);

	while (old < pos + 1)
		if (__atomic_compare_exchange_n(t, &old, pos + 1, 0, __ATOMIC_ACQ_REL,
						__ATOMIC_RELAXED))
			return 1;
	return 0;
}

void nwc_host_result(struct nwc *g, __u64 seq, __u32 flags)
{
	struct nw_gpu_result *r;

	pthread_mutex_lock(&g->lock);
	if (g->nhostres < NWC_HOSTRES) {
		r = &g->hostres[g->nhostres++];
		memset(r, 0, sizeof(*r));
		r->seq = seq;
		r->min_key = ~0ULL;
		r->flags = flags;
	}
	pthread_mutex_unlock(&g->lock);
}

static void seq_set(struct nwc *g, __u64 seq, int state, int idx)
{
	struct nwc_seq *m = &g->seqmap[(seq - 1) % NW_GPU_SLOTS];

	m->seq = seq;
	m->state = state;
	m->idx = idx;
}

/* Not scanned: remembered (for what it gates) and, if gated, answered. */
static void skip(struct nwc *g, const struct nwc_req *r, __u32 flag)
{
	pthread_mutex_lock(&g->lock);
	seq_set(g, r->seq, flag == NW_GPU_R_GATED_OUT ? NWC_SEQ_GOOD : NWC_SEQ_SKIPPED, -1);
	pthread_mutex_unlock(&g->lock);
	if (r->gate)
		nwc_host_result(g, r->seq, flag);
}

/* The scratch of stream s in c (under g->lock); 0 if every one is taken. */
static CUdeviceptr stream_scratch(struct nwc_ctx *c, CUstream s)
{
	int i;

	for (i = 0; i < c->nstreams; i++)
		if (c->streams[i] == s)
			break;
	if (i == c->nstreams) {
		if (c->nstreams == NWC_STREAMS)
			return 0;
		c->streams[c->nstreams++] = s;
	}
	return c->scratch + (CUdeviceptr)i * sizeof(struct nw_scan_scratch);
}

/*
 * The gate of r (under g->lock): 1 with *gate_idx the slot of a gate in flight
 * (-1: none, scan r alone), 0 if the gate was finite (r is not needed).
 */
static int gate_lookup(struct nwc *g, const struct nwc_req *r, int *gate_idx)
{
	const struct nwc_seq *m;

	*gate_idx = -1;
	if (!r->gate)
		return 1;
	m = &g->seqmap[(r->gate - 1) % NW_GPU_SLOTS];
	if (m->seq != r->gate)
		return 1;
	if (m->state == NWC_SEQ_GOOD)
		return 0;
	if (m->state == NWC_SEQ_INFLIGHT) {
		*gate_idx = m->idx;
		g->slots[m->idx].refs++;
	}
	return 1;
}

static void slot_put(struct nwc *g, int idx)
{
	if (idx >= 0 && --g->slots[idx].refs == 0)
		g->free_slots[g->nfree++] = idx;
}

/* Reserve a result slot for r, scanned in c (under g->lock); -1 if none is free. */
static int slot_get(struct nwc *g, const struct nwc_ctx *c, const struct nwc_req *r, int gate_idx)
{
	struct nwc_slot *sl;
	int idx;

	if (!g->outs || !g->nfree)
		return -1;
	idx = g->free_slots[--g->nfree];
	memset(&g->outs[idx], 0, sizeof(g->outs[idx]));
	sl = &g->slots[idx];
	sl->seq = r->seq;
	sl->c = c;
	sl->refs = 1;
	sl->gate_idx = gate_idx;
	sl->gated = r->gate != 0;
	sl->loss = r->role == NW_GPU_LOSS;
	sl->done = 0;
	g->inflight[g->ninflight++] = idx;
	seq_set(g, r->seq, NWC_SEQ_INFLIGHT, idx);
	return idx;
}

static void launch_failed(struct nwc *g, const struct nwc_req *r, int idx)
{
	int i;

	pthread_mutex_lock(&g->lock);
	for (i = 0; i < g->ninflight; i++)
		if (g->inflight[i] == idx)
			g->inflight[i] = g->inflight[--g->ninflight];
	slot_put(g, g->slots[idx].gate_idx);
	slot_put(g, idx);
	pthread_mutex_unlock(&g->lock);
	stat_add(g, NW_GPU_S_LAUNCH_ERROR, 1);
	skip(g, r, NW_GPU_R_LAUNCH_ERROR);
}

/* Enqueue the scan of r on stream s of context c (current in this thread). */
static void scan(struct nwc *g, struct nwc_ctx *c, CUstream s, const struct nwc_req *r)
{
	struct nw_scan_args args = {.data = r->data, .numel = r->numel, .seq = r->seq};
	void *params[] = {&args};
	int size = nwc_dtype_size(r->dtype), cap = 0, gate_idx, idx = -1;

	if (!size) {
		stat_add(g, NW_GPU_S_DTYPE, 1);
		nwc_notice(g, NWC_N_DTYPE);
		skip(g, r, NW_GPU_R_DTYPE);
		return;
	}
	if (g->cu.StreamIsCapturing(s, &cap) || cap != NWC_CU_STREAM_CAPTURE_STATUS_NONE) {
		stat_add(g, NW_GPU_S_CAPTURING, 1);
		nwc_notice(g, NWC_N_CAPTURING);
		skip(g, r, NW_GPU_R_CAPTURING);
		return;
	}
	pthread_mutex_lock(&g->lock);
	if (!gate_lookup(g, r, &gate_idx)) {
		pthread_mutex_unlock(&g->lock);
		stat_add(g, NW_GPU_S_GATED_OUT, 1);
		skip(g, r, NW_GPU_R_GATED_OUT);
		return;
	}
	args.scratch = stream_scratch(c, s);
	if (args.scratch)
		idx = slot_get(g, c, r, gate_idx);
	if (idx < 0)
		slot_put(g, gate_idx);
	/* a gate scanned in another context (its verdict is not here): scanned whole */
	else if (gate_idx >= 0 && g->slots[gate_idx].c == c)
		args.gate = c->flags + (CUdeviceptr)gate_idx * sizeof(__u32);
	pthread_mutex_unlock(&g->lock);
	if (idx < 0) {
		stat_add(g, NW_GPU_S_NO_MEMORY, 1);
		nwc_notice(g, NWC_N_NO_MEMORY);
		skip(g, r, NW_GPU_R_NO_MEMORY);
		return;
	}
	args.out = (__u64)(uintptr_t)&g->outs[idx];
	args.flag = c->flags + (CUdeviceptr)idx * sizeof(__u32);
	args.dtype = r->dtype;
	if (g->cu.LaunchKernel(c->fn, nwc_scan_blocks(r->numel), 1, 1, NW_SCAN_THREADS, 1, 1, 0, s,
			       params, NULL)) {
		launch_failed(g, r, idx);
		return;
	}
	stat_add(g, NW_GPU_S_SCANS, 1);
	stat_add(g, NW_GPU_S_BYTES, r->numel * size);
}

/* This thread's requests since its last look, scanned on stream s. */
static void drain_thread(struct nwc *g, struct nwc_thread *t, struct nwc_ctx *c, CUstream s)
{
	const struct nw_gpu_head *h = (const struct nw_gpu_head *)g->ring;
	__u64 head = __atomic_load_n(&h->head, __ATOMIC_ACQUIRE), p;
	const struct nw_gpu_req *e;
	struct nwc_req r;

	if (head - t->cursor > NW_GPU_SLOTS)
		t->cursor = head - NW_GPU_SLOTS;
	for (p = t->cursor; p < head; p++) {
		e = &g->ring[1 + p % NW_GPU_SLOTS];
		/* a thread's own requests are complete before its next launch */
		if (__atomic_load_n(&e->tid, __ATOMIC_RELAXED) != (__u32)t->tid)
			continue;
		if (nwc_req_read(g->ring, p, &r) || r.tid != (__u32)t->tid || !claim(g, p))
			continue;
		stat_add(g, NW_GPU_S_REQUESTS, 1);
		scan(g, c, s, &r);
	}
	t->cursor = head;
}

/* API enter of a launch (callback mode), a daemon connected, not our own launch. */
void nwc_on_launch(struct nwc *g, CUpti_CallbackId cbid, const nwc_callback_data *cb)
{
	CUstream s;

	if (!launch_stream(cbid, cb->functionParams, &s))
		nwc_launch_enter(g, cb->context, s);
}

/*
 * A launch on stream s in context ctx is about to be made by this thread:
 * scan this thread's requests on the stream of its previous launch first.
 */
void nwc_launch_enter(struct nwc *g, CUcontext ctx, CUstream s)
{
	struct nwc_thread *t;
	struct nwc_ctx *c;
	CUstream prev;

	stat_add(g, NW_GPU_S_LAUNCHES, 1);
	t = thread_self(g);
	if (!t)
		return;
	if (t->epoch != g->epoch) {
		t->epoch = g->epoch;
		t->cursor = __atomic_load_n(&g->wpos, __ATOMIC_RELAXED);
	}
	/* the previous launch's stream, if it was in this context */
	prev = t->stream_known && t->ctx == ctx ? t->stream : s;
	c = nwc_ctx_find(g, ctx, 1);
	if (c && __atomic_load_n(&c->state, __ATOMIC_ACQUIRE) == NWC_CTX_READY)
		drain_thread(g, t, c, prev);
	if (!t->stream_known || t->stream != s || t->ctx != ctx) {
		pthread_mutex_lock(&g->lock);
		t->stream = s;
		t->ctx = ctx;
		t->stream_known = 1;
		pthread_mutex_unlock(&g->lock);
	}
}

/* The worker: r's thread did not launch within the drain time; scan on its last stream. */
static void enqueue_late(struct nwc *g, const struct nwc_req *r)
{
	CUstream s = NULL;
	CUcontext ctx = NULL, old;
	struct nwc_ctx *c = NULL;
	int i, known = 0;

	pthread_mutex_lock(&g->lock);
	for (i = 0; i < g->nthreads; i++)
		if (g->threads[i].tid == (int)r->tid && g->threads[i].stream_known) {
			s = g->threads[i].stream;
			ctx = g->threads[i].ctx;
			known = 1;
		}
	pthread_mutex_unlock(&g->lock);
	if (known)
		c = nwc_ctx_find(g, ctx, 0);
	/* another thread's per-thread default stream is not ours to name */
	if (!c || __atomic_load_n(&c->state, __ATOMIC_ACQUIRE) != NWC_CTX_READY ||
	    s == NWC_CU_STREAM_PER_THREAD || g->cu.CtxPushCurrent(ctx)) {
		skip(g, r, NW_GPU_R_NO_STREAM);
		return;
	}
	scan(g, c, s, r);
	g->cu.CtxPopCurrent(&old);
}

/*
 * The worker's pass over the ring: positions no thread took within drain_ms
 * are scanned on their thread's last stream; overwritten ones are counted
 * stale. wpos moves past every position that is settled.
 */
void nwc_drain_stale(struct nwc *g, __u64 now_ns)
{
	const struct nw_gpu_head *h = (const struct nw_gpu_head *)g->ring;
	__u64 head = __atomic_load_n(&h->head, __ATOMIC_ACQUIRE), p, wpos = g->wpos;
	__u64 drain_ns = (__u64)g->drain_ms * 1000000ULL;
	struct nwc_req r;
	int settled = 1, rc, i;

	if (head - wpos > NW_GPU_SLOTS) {
		stat_add(g, NW_GPU_S_STALE, head - NW_GPU_SLOTS - wpos);
		wpos = head - NW_GPU_SLOTS;
	}
	for (p = wpos; p < head; p++) {
		i = p % NW_GPU_SLOTS;
		if (__atomic_load_n(&g->taken[i], __ATOMIC_ACQUIRE) >= p + 1)
			goto next;
		rc = nwc_req_read(g->ring, p, &r);
		if (rc == -ESTALE) {
			stat_add(g, NW_GPU_S_STALE, 1);
			goto next;
		}
		if (g->seen_pos[i] != p + 1) {
			g->seen_pos[i] = p + 1;
			g->seen_ns[i] = now_ns;
		}
		if (now_ns - g->seen_ns[i] < drain_ns) {
			settled = 0;
			continue;
		}
		if (rc == 0 && claim(g, p)) {
			stat_add(g, NW_GPU_S_REQUESTS, 1);
			nwc_busy = 1;
			enqueue_late(g, &r);
			nwc_busy = 0;
		}
next:
		if (settled)
			wpos = p + 1;
	}
	__atomic_store_n(&g->wpos, wpos, __ATOMIC_RELAXED);
}

/*
 * Whether sl's gate is still in flight here (under g->lock). On the device the gate's scan
 * finished first (same stream), but this pass may have looked at its slot before it did:
 * the gated result then waits for the next pass, as the daemon drops the gated results of
 * an output it has not been sent.
 */
static int gate_pending(const struct nwc *g, const struct nwc_slot *sl)
{
	const struct nwc_seq *m;
	__u64 seq;

	if (sl->gate_idx < 0)
		return 0;
	seq = g->slots[sl->gate_idx].seq;
	m = &g->seqmap[(seq - 1) % NW_GPU_SLOTS];
	return m->seq == seq && m->state == NWC_SEQ_INFLIGHT && m->idx == sl->gate_idx;
}

/* In request order: the daemon holds an output for its gated results, which come after it. */
static void sort_results(struct nw_gpu_result *res, size_t n)
{
	struct nw_gpu_result t;
	size_t i, j;

	for (i = 1; i < n; i++) {
		t = res[i];
		for (j = i; j > 0 && res[j - 1].seq > t.seq; j--)
			res[j] = res[j - 1];
		res[j] = t;
	}
}

/*
 * Finished work for the daemon (worker): scans whose out says done == seq,
 * then results decided on the host, sorted by seq. Returns how many of cap
 * were filled; results nobody needs (finite, not gated) are consumed but not
 * returned.
 */
size_t nwc_collect(struct nwc *g, struct nw_gpu_result *res, size_t cap)
{
	char done[NWC_OUTS];
	struct nwc_slot *sl;
	size_t n = 0;
	int i, j, k, idx, bad;

	pthread_mutex_lock(&g->lock);
	/* in request order (slots are taken by several threads) */
	for (i = 1; i < g->ninflight; i++) {
		idx = g->inflight[i];
		for (j = i; j > 0 && g->slots[g->inflight[j - 1]].seq > g->slots[idx].seq; j--)
			g->inflight[j] = g->inflight[j - 1];
		g->inflight[j] = idx;
	}
	/*
	 * Latest first: a stream finishes its scans in order, so a scan seen done here has
	 * every earlier scan of its stream seen done too, and none is sent before an earlier
	 * one (the daemon's first anomaly is the first it is sent).
	 */
	for (i = g->ninflight - 1; i >= 0; i--)
		done[i] = __atomic_load_n(&g->outs[g->inflight[i]].done, __ATOMIC_ACQUIRE) ==
			  g->slots[g->inflight[i]].seq;
	for (i = k = 0; i < g->ninflight; i++) {
		idx = g->inflight[i];
		sl = &g->slots[idx];
		if (!done[i] || n >= cap || gate_pending(g, sl)) {
			g->inflight[k++] = idx;
			continue;
		}
		nwc_result_from_out(&g->outs[idx], sl->seq, &res[n]);
		bad = res[n].nan || res[n].posinf || res[n].neginf;
		if (res[n].flags & NW_GPU_R_GATED_OUT)
			__atomic_fetch_add(&g->stats[NW_GPU_S_GATED_OUT], 1, __ATOMIC_RELAXED);
		seq_set(g, sl->seq, bad ? NWC_SEQ_BAD : NWC_SEQ_GOOD, -1);
		if (nwc_result_wanted(&res[n], sl->gated, sl->loss))
			n++;
		slot_put(g, sl->gate_idx);
		slot_put(g, idx);
	}
	g->ninflight = k;
	for (i = 0; i < g->nhostres && n < cap; i++)
		res[n++] = g->hostres[i];
	memmove(g->hostres, g->hostres + i, (g->nhostres - i) * sizeof(g->hostres[0]));
	g->nhostres -= i;
	pthread_mutex_unlock(&g->lock);
	sort_results(res, n);
	return n;
}

/* Scans still in flight (worker: nothing may be freed or reset while some are). */
int nwc_inflight(struct nwc *g)
{
	int n;

	pthread_mutex_lock(&g->lock);
	n = g->ninflight;
	pthread_mutex_unlock(&g->lock);
	return n;
}
