/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The backward pass (its program: bpf/backward.bpf.c): a uprobe on the autograd engine's
 * evaluate_function(graph_task, Node* func, InputBuffer& inputs, queue), which runs every
 * node once per backward pass, in an order where each node comes after every node that
 * feeds it. The gradients in its input buffer are what the nodes before it produced (summed
 * when several feed one input), so the first non-finite one found names its producer: a
 * node run before, in this thread, with an edge to (func, input). A parameter's gradient
 * is the input of its AccumulateGrad node: its magnitudes are counted into a histogram for
 * gradient norms.
 */
#ifndef __BACKWARD_BPF_H
#define __BACKWARD_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include "nwfloat.h"
#include "state.bpf.h"
#include "tensor.bpf.h"
#include "scan.bpf.h"

#define BWD_INPUTS 8  /* inputs of one node checked */
#define HIST_BLOCK 32 /* words of s->buf per hist_block() call */

/*
 * Which module call made a node: every autograd node takes its sequence_nr_ from its
 * thread's at::sequence_number counter as it is made (get_and_increment), so the nodes a
 * module call made, its children's included, are exactly those numbered from the counter's
 * value at the call's entry up to (not including) its value at the return, and the
 * innermost call whose span holds a node's number is the module whose forward made it,
 * wherever inside forward() that was. Reading the counter costs a few word reads per call
 * (below); the spans go into an array, and are searched only at a backward anomaly. The
 * alternatives cost more or are not exact: a probe on node creation runs once per op,
 * and bounds taken from the grad_fns of module outputs miss the nodes made between them.
 */

/*
 * The counter + 1, 0 when it cannot be read. It is a thread_local of libtorch_cpu, a
 * dlopen'ed library: glibc keeps it in the TLS block that the thread's DTV (the second
 * word of the thread control block at %fs) points at for the library's module id; the
 * DTV's entry before the first (entries are 16 bytes, glibc's dtv_t) holds its length.
 * A DTV too short for the module, or whose entry is not allocated, belongs to a thread
 * that never reached the library's TLS through __tls_get_addr, the only way peek()'s kind
 * of access reaches it (daemon/resolve/seqtls.c): its counter is still the initial 0.
 */
static __always_inline __u64 seq_now(void)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	__u64 fs, dtv, len, blk, v = 0;

	if (!BL.seq_modid)
		return 0;
	count(NW_C_SEQ_READS, 1);
	fs = BPF_CORE_READ(task, thread.fsbase);
	dtv = fs ? read_u64(fs + 8) : 0;
	if (!dtv || bpf_probe_read_user(&len, sizeof(len), (void *)(dtv - 16)))
		return 0;
	if (BL.seq_modid > len)
		return 1;
	blk = read_u64(dtv + 16 * BL.seq_modid);
	if (!blk || blk == ~0ULL)
		return 1;
	if (bpf_probe_read_user(&v, sizeof(v), (void *)(blk + BL.seq_offset)))
		return 0;
	return v + 1;
}

/* A module call returns: keep its span if it made nodes (in_p1: the counter + 1 at entry). */
static __noinline int note_span(__u64 in_p1, __u32 depth, __u64 root, __u64 module)
{
	__u64 out_p1 = seq_now();
	struct call_span *sp;
	__u32 k;

	if (!in_p1 || out_p1 <= in_p1)
		return 0;
	k = __sync_fetch_and_add(&span_pos, 1) % NW_SPANS;
	sp = bpf_map_lookup_elem(&spans, &k);
	if (!sp)
		return 0;
	sp->seq_in = in_p1 - 1;
	sp->seq_out = out_p1 - 1;
	sp->module = module;
	sp->root = root;
	sp->iteration = cur_iteration();
	sp->tid = (__u32)bpf_get_current_pid_tgid();
	sp->depth = depth;
	return 0;
}

struct creator_ctx {
	__u64 seq, iteration;
	__u64 module, root;
	__u32 tid, depth;
	__u32 found, complete;
};

static long span_match(__u32 k, void *data)
{
	struct creator_ctx *c = data;
	struct call_span *sp = bpf_map_lookup_elem(&spans, &k);

	if (!sp || sp->tid != c->tid)
		return 0;
	/*
	 * A span of this thread that ended at or before the node, or of an earlier pass:
	 * every span overwritten was written before it, so ended before the node too.
	 */
	if (sp->iteration != c->iteration || sp->seq_out <= c->seq) {
		c->complete = 1;
		return 0;
	}
	if (sp->seq_in <= c->seq && (!c->found || sp->depth > c->depth)) {
		c->found = 1;
		c->module = sp->module;
		c->root = sp->root;
		c->depth = sp->depth;
	}
	return 0;
}

/*
 * The innermost module call of this pass that made node: 1 with c->module (0: made
 * outside every module call), or 0 when the spans cannot tell (not kept, the counter is
 * not read, or spans that may have held the node were overwritten).
 */
static __noinline int creator_of(__u64 node, struct creator_ctx *c)
{
	__u64 seq;

	/* spans are kept with every gradient checked (--backward on) only */
	if (!backward_all || !BL.seq_modid || BL.node_sequence_nr < 0 || !node ||
	    bpf_probe_read_user(&seq, sizeof(seq), (void *)(node + BL.node_sequence_nr)))
		return 0;
	c->seq = seq;
	c->iteration = cur_iteration();
	c->tid = (__u32)bpf_get_current_pid_tgid();
	c->complete = span_pos <= NW_SPANS;
	bpf_loop(NW_SPANS, span_match, c, 0);
	if (!c->complete)
		return 0;
	if (!c->found)
		c->module = c->root = c->depth = 0;
	return 1;
}

/*
 * A module returned this tensor: remember which module made its grad_fn. The
 * innermost module returns first; its enclosing modules return the same tensor
 * later in the same iteration and do not replace it.
 */
__noinline int note_grad_fn(__u64 obj)
{
	struct scratch *s;
	struct gradfn_rec rec = {}, *old;
	__u64 node, iter;

	if (!backward_on)
		return 0;
	s = get_scratch();
	if (!s)
		return 0;
	node = tensor_grad_fn(tensor_impl(obj), BL.impl_autograd_meta, BL.meta_grad_fn);
	if (!node)
		return 0;
	iter = s->ev.iteration;
	old = bpf_map_lookup_elem(&gradfns, &node);
	if (old && old->iteration == iter && old->depth > s->ev.depth)
		return 0;
	rec.root = s->ev.modules[0];
	rec.module = s->ev.module;
	rec.iteration = iter;
	rec.depth = s->ev.depth;
	bpf_map_update_elem(&gradfns, &node, &rec, BPF_ANY);
	return 0;
}

struct edge_ctx {
	__u64 node, n, esz;
};

/*
 * Edge j of the candidate in b->edges: does it lead to the target's input? A bpf_loop
 * callback, verified once: unrolled, the first-match test doubled the paths at each edge.
 */
static long edge_match(__u32 j, void *ctx)
{
	struct bwd_scratch *b = get_bwd_scratch();
	struct edge_ctx *e = ctx;
	__u64 w, nrw;

	if (!b || j >= e->n)
		return 1;
	w = (j * e->esz) / 8;
	nrw = (j * e->esz + BL.edge_input_nr) / 8;
	if (w >= BWD_EDGES * 4 || nrw >= BWD_EDGES * 4)
		return 1;
	if (b->edges[w] != b->target || (__u32)b->edges[nrw] != b->target_nr)
		return 0;
	if (!b->nfound) {
		b->found = e->node;
		b->found_idx = j;
	}
	b->nfound++;
	return 0;
}

/* One candidate producer (ring entry idx back from the newest): does it feed the target? */
static long producer_edges(__u32 idx, void *ctx)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct bwd_thread *bt = bpf_map_lookup_elem(&bwd_threads, &tid);
	struct bwd_scratch *b = get_bwd_scratch();
	__u64 node, n, esz = BL.edge_size;
	struct edge_ctx e = {};
	__u32 slot;

	if (!bt || !b || esz < 16 || esz > 32 || idx >= bt->valid)
		return 1;
	slot = (bt->pos - 1 - idx) & (BWD_RING - 1);
	node = bt->ring[slot];
	if (!node || node == b->target)
		return 0;
	n = node_edges(node, b->edges, sizeof(b->edges));
	if (!n)
		return 0;
	e.node = node;
	e.n = n;
	e.esz = esz;
	bpf_loop(BWD_EDGES, edge_match, &e, 0);
	return 0;
}

/* Report a non-finite gradient entering node as its input nr (s->ti is that tensor). */
static __noinline int report_bwd(__u64 node, __u32 nr)
{
	struct scratch *s = get_scratch();
	struct bwd_scratch *b = get_bwd_scratch();
	struct creator_ctx cr = {};
	struct gradfn_rec *m;
	__u64 iter = cur_iteration(), producer = 0, type;

	if (!s || !b)
		return 0;
	count(NW_C_BWD_ANOMALIES, 1);
	/* a non-finite forward output or loss this iteration: the backward only carries it */
	if (fwd_bad_iter_p1 == iter + 1 || bwd_iter_p1 == iter + 1) {
		count(NW_C_BWD_SUPPRESSED, 1);
		return 0;
	}
	bwd_iter_p1 = iter + 1;
	b->target = node;
	b->target_nr = nr;
	b->nfound = 0;
	b->found = 0;
	b->found_idx = NW_NO_INDEX;
	bpf_loop(BWD_RING, producer_edges, NULL, 0);
	__builtin_memset(&s->ev, 0, sizeof(s->ev));
	s->ev.type = NW_EV_ANOMALY;
	s->ev.phase = NW_PHASE_BACKWARD;
	s->ev.tid = (__u32)bpf_get_current_pid_tgid();
	s->ev.step = step_count;
	s->ev.iteration = iter;
	s->ev.index0 = b->nfound ? b->found_idx : NW_NO_INDEX;
	s->ev.index1 = NW_NO_INDEX;
	ev_tensor(s);
	scan_tensor(1);
	producer = b->found;
	s->ev.node = producer;
	s->ev.node_vptr = producer ? read_u64(producer) : 0;
	s->ev.consumer_vptr = read_u64(node);
	s->ev.producers = b->nfound;
	s->ev.input_nr = nr;
	if (creator_of(producer, &cr)) {
		if (cr.module) {
			s->ev.modules[0] = cr.root;
			s->ev.module = cr.module;
			s->ev.depth = cr.depth + 1;
		}
	} else {
		m = producer ? bpf_map_lookup_elem(&gradfns, &producer) : NULL;
		if (m && m->iteration == iter) {
			s->ev.modules[0] = m->root;
			s->ev.module = m->module;
			s->ev.depth = m->depth;
		}
	}
	if (s->ev.module) {
		type = read_u64(s->ev.module + L.obj_type);
		bpf_probe_read_user_str(s->ev.class_name, NW_NAME_LEN,
					(void *)read_u64(type + L.type_name));
	}
	/* the node that fed the producer: WhereBackward0 for a masked branch (diagnosis) */
	if (producer) {
		b->target = producer;
		b->target_nr = 0;
		b->nfound = 0;
		b->found = 0;
		bpf_loop(BWD_RING, producer_edges, NULL, 0);
		s->ev.parent = b->found ? read_u64(b->found) : 0;
	}
	s->ev.time_ns = bpf_ktime_get_ns();
	if (bpf_ringbuf_output(&events, &s->ev, sizeof(s->ev), 0))
		count_lost(NW_C_LOST_BACKWARD);
	return 1;
}

struct hist_ctx {
	__u64 lanes; /* lanes counted so far: the data's, and zero padding (bucket 0) */
	__u32 words; /* words of s->buf to count: a multiple of 8 */
	__u32 bf16;  /* bfloat16 elements, else float32 */
};

#define HIST_MASK (NW_HIST_BUCKETS - 1)

/*
 * Add 1 to the counter at byte offset off (a multiple of 4 below 4 * NW_HIST_BUCKETS) of
 * table. The offset takes the table's address in place (the verifier allows scalar +=
 * pointer): as C, clang copies the pointer first, an instruction more a lane, 1 in 8.
 */
static __always_inline void hist_bump(__u32 *table, __u64 off)
{
	asm volatile("%[off] += %[t]" : [off] "+r"(off) : [t] "r"(table));
	(*(__u32 *)off)++;
}

#define HIST_OFF (HIST_MASK << 2) /* a bucket's byte offset in its table */

/* A float32 word's two lanes: the low one into ha, the high one into hb. */
static __always_inline void hist_f32(__u32 *ha, __u32 *hb, __u64 w)
{
	hist_bump(ha, (w >> 19) & HIST_OFF);
	hist_bump(hb, (w >> 51) & HIST_OFF);
}

/* A bfloat16 word (a float32's upper half a lane): lanes 0 and 2 into ha, 1 and 3 into hb. */
static __always_inline void hist_bf16(__u32 *ha, __u32 *hb, __u64 w)
{
	hist_bump(ha, (w >> 3) & HIST_OFF);
	hist_bump(hb, (w >> 19) & HIST_OFF);
	hist_bump(ha, (w >> 35) & HIST_OFF);
	hist_bump(hb, (w >> 51) & HIST_OFF);
}

/*
 * HIST_BLOCK words of s->buf, block k, into the two histograms (bpf_loop callbacks, one per
 * dtype: each verified once, not once per word of a chunk).
 */
static __always_inline long hist_block(__u32 k, struct hist_ctx *h, int bf16)
{
	struct scratch *s = get_scratch();
	struct bwd_scratch *b = get_bwd_scratch();
	__u32 base = k * HIST_BLOCK, words = h->words, i, j;
	__u32 *ha, *hb;
	__u64 *p;

	if (!s || !b || base >= words || base > CHUNK_WORDS - HIST_BLOCK)
		return 1;
	/* words at constant offsets from one pointer: no index arithmetic per word */
	p = &s->buf[base];
	ha = b->g.hist;
	hb = b->hist_split;
	/* read_chunk zero-pads to 8 words: all 8 counted, the padding in bucket 0 */
	for (j = 0; j < HIST_BLOCK; j += 8) {
		if (base + j >= words)
			break;
#pragma unroll /* hist_bump's asm leaves clang a loop */
		for (i = 0; i < 8; i++) {
			if (bf16)
				hist_bf16(ha, hb, p[j + i]);
			else
				hist_f32(ha, hb, p[j + i]);
		}
	}
	return 0;
}

static long hist_block_f32(__u32 k, void *ctx)
{
	return hist_block(k, ctx, 0);
}

static long hist_block_bf16(__u32 k, void *ctx)
{
	return hist_block(k, ctx, 1);
}

/* Read chunk idx and count its words (a bpf_loop callback; ctx: struct hist_ctx). */
static long hist_chunk(__u32 idx, void *ctx)
{
	struct hist_ctx *h = ctx;
	struct scratch *s = get_scratch();
	int words;

	if (!s)
		return 1;
	words = read_chunk(s, idx);
	if (words <= 0)
		return 1;
	/* read_chunk zero-pads the data to 8 words: counted 8 at a time, in bucket 0 */
	h->words = (words + 7) & ~7;
	h->lanes += (__u64)h->words * (h->bf16 ? 4 : 2);
	bpf_loop((h->words + HIST_BLOCK - 1) / HIST_BLOCK,
		 h->bf16 ? hist_block_bf16 : hist_block_f32, h, 0);
	return 0;
}

static long clear_hist(__u32 idx, void *ctx)
{
	struct bwd_scratch *b = get_bwd_scratch();

	if (!b || idx >= NW_HIST_BUCKETS / 64)
		return 1;
	__builtin_memset(&b->g.hist[idx * 64], 0, 64 * sizeof(__u32));
	__builtin_memset(&b->hist_split[idx * 64], 0, 64 * sizeof(__u32));
	return 0;
}

/* The second histogram's 64 buckets from idx * 64 added into g.hist. */
static long merge_hist(__u32 idx, void *ctx)
{
	struct bwd_scratch *b = get_bwd_scratch();
	__u32 k, base = idx * 64;

	if (!b || base >= NW_HIST_BUCKETS)
		return 1;
	for (k = 0; k < 64; k++) {
		__u32 i = (base + k) & HIST_MASK;

		b->g.hist[i] += b->hist_split[i];
	}
	return 0;
}

/*
 * Wake the daemon for the gradient ring once a quarter of it waits: no wake-up per parameter
 * otherwise (the daemon polls every 100 ms).
 */
static __always_inline __u64 data_wake(void)
{
	return bpf_ringbuf_query(&grad_data, BPF_RB_AVAIL_DATA) > grad_ring_bytes / 4
		       ? BPF_RB_FORCE_WAKEUP
		       : BPF_RB_NO_WAKEUP;
}

/*
 * Whether a gradient of this many bytes goes to the daemon: the ring holds all its records
 * and an eighth of the ring stays free for the other threads' (a chunk it cannot take
 * after all loses that gradient's norm, counted as lost).
 */
static __always_inline int data_room(__u64 bytes)
{
	__u64 chunks = (bytes + CHUNK_BYTES - 1) / CHUNK_BYTES;
	__u64 need =
		bytes + chunks * (sizeof(struct nw_grad_data) + 16) + sizeof(struct nw_grad) + 16;

	return grad_offload && bytes <= grad_ring_bytes &&
	       bpf_ringbuf_query(&grad_data, BPF_RB_AVAIL_DATA) + need + grad_ring_bytes / 8 <=
		       grad_ring_bytes;
}

/* Read chunk idx, test it, and send it to the daemon (a bpf_loop callback). */
static long data_chunk(__u32 idx, void *ctx)
{
	struct scratch *s;
	__u64 n;

	if (scan_chunk(idx, 0))
		return 1;
	s = get_scratch();
	if (!s)
		return 1;
	n = s->c.bytes - (__u64)idx * CHUNK_BYTES;
	if (n > CHUNK_BYTES)
		n = CHUNK_BYTES;
	s->gd.bytes = n;
	s->gd.index = idx;
	barrier_var(n); /* bounded where the helper's size is checked */
	if (n > CHUNK_BYTES)
		return 1;
	if (bpf_ringbuf_output(&grad_data, &s->gd, sizeof(s->gd) + n, data_wake()))
		s->c.dropped++;
	else
		s->c.sent++;
	return 0;
}

/*
 * A parameter's gradient (s->ti, float32 or bfloat16) as it enters AccumulateGrad, in one
 * pass over its bytes: its magnitude histogram, sent for the gradient norms, and whether it
 * holds NaN/±Inf. Where the gradient data ring has room, the bytes go there and the daemon
 * counts the histogram (b->g follows them, data_id set); else it is counted here, and
 * whether it holds NaN/±Inf is whether the buckets of the all-ones exponent counted any lane.
 * Returns what scan_tensor(SCAN_GRAD) would: 1 non-finite, 0 finite, -1 unreadable.
 */
__noinline int measure_grad(__u64 node)
{
	struct scratch *s = get_scratch();
	struct bwd_scratch *b = get_bwd_scratch();
	struct hist_ctx h = {};
	__u64 elems, t0, bad = 0;
	__u32 size, i, id = 0;

	if (!s || !b)
		return -1;
	size = nw_dtype_size(s->ti.dtype);
	if (!size)
		return -1;
	h.bf16 = s->ti.dtype == NW_DT_BF16;
	__builtin_memset(&b->g, 0, offsetof(struct nw_grad, hist));
	__builtin_memset(&s->c, 0, sizeof(s->c));
	s->c.addr = s->ti.data;
	s->c.bytes = s->ti.bytes;
	elems = s->c.bytes / size;
	t0 = bpf_ktime_get_ns();
	if (data_room(s->c.bytes)) {
		id = __sync_fetch_and_add(&grad_data_ids, 1) + 1;
		if (!id) /* 0 says "counted here": the ids wrap past it */
			id = __sync_fetch_and_add(&grad_data_ids, 1) + 1;
		nw_lanes_for(s->ti.dtype, &s->c.lanes);
		s->gd.type = NW_EV_GRAD_DATA;
		s->gd.tid = (__u32)bpf_get_current_pid_tgid();
		s->gd.id = id;
		s->gd.dtype = s->ti.dtype;
		bpf_loop((s->c.bytes + CHUNK_BYTES - 1) / CHUNK_BYTES, data_chunk, NULL, 0);
		bad = s->c.acc;
	} else {
		bpf_loop(NW_HIST_BUCKETS / 64, clear_hist, NULL, 0);
		bpf_loop((s->c.bytes + CHUNK_BYTES - 1) / CHUNK_BYTES, hist_chunk, &h, 0);
	}
	count(NW_C_BWD_SCAN_NS, bpf_ktime_get_ns() - t0);
	count(NW_C_BWD_COPIES, s->c.copies);
	if (s->c.err) {
		count(NW_C_SKIP_UNREADABLE, 1);
		count(NW_C_BWD_NORM_SKIPPED, 1);
		return -1;
	}
	count(NW_C_BWD_GRADS, 1);
	count(NW_C_BWD_BYTES, s->c.bytes);
	if (!id) {
		bpf_loop(NW_HIST_BUCKETS / 64, merge_hist, NULL, 0);
		for (i = NW_HIST_NONFINITE; i < NW_HIST_BUCKETS; i++)
			bad += b->g.hist[i];
		/* the lanes past the data were zero-padded: they fell in bucket 0 */
		if (h.lanes > elems && b->g.hist[0] >= h.lanes - elems)
			b->g.hist[0] -= h.lanes - elems;
	}
	b->g.type = NW_EV_GRAD;
	b->g.time_ns = bpf_ktime_get_ns();
	b->g.tid = (__u32)bpf_get_current_pid_tgid();
	b->g.step = step_count;
	b->g.iteration = cur_iteration();
	b->g.param = read_u64(node + BL.acc_variable);
	b->g.numel = s->ti.numel;
	b->g.scanned = elems;
	b->g.dtype = s->ti.dtype;
	b->g.flags = s->ti.flags;
	b->g.data_id = id;
	b->g.data_chunks = s->c.sent;
	count(NW_C_BWD_PARAM_GRADS, 1);
	if (id && s->c.dropped) { /* a chunk the ring could not take: the norm is lost */
		count(NW_C_BWD_GRADS_LOST, 1);
		return bad ? 1 : 0;
	}
	/* every parameter gradient not measured so far: a pass missing one is not complete */
	b->g.lost = counters[NW_C_BWD_GRADS_LOST] + counters[NW_C_BWD_NORM_SKIPPED];
	if (bpf_ringbuf_output(&grad_data, &b->g, sizeof(b->g), data_wake()))
		count(NW_C_BWD_GRADS_LOST, 1);
	else if (id)
		count(NW_C_BWD_OFFLOADED, 1);
	return bad ? 1 : 0;
}

/*
 * Check input i of node: 1 if it was reported (stop looking at this node). A parameter's
 * gradient of a dtype the norms take is scanned by the norms' own pass.
 */
static __noinline int check_grad(__u64 node, __u64 items, __u32 i, int accumulate)
{
	struct scratch *s = get_scratch();
	int r, norm = accumulate && i == 0;
	__u64 impl;

	if (!s)
		return 0;
	/* an undefined gradient is UndefinedTensorImpl's singleton, never 0 */
	r = read_sure(&impl, sizeof(impl), items + 8 * i) || !impl ? -1 : read_impl(impl);
	if (r < 0 && !impl)
		s->ti.flags = NW_SKIP_UNREADABLE;
	if (r < 0) {
		count_skip(s->ti.flags);
		if (norm) /* a parameter's gradient the norms could not read */
			count(NW_C_BWD_NORM_SKIPPED, 1);
	}
	if (r != 0)
		return 0;
	if (norm && (s->ti.dtype == NW_DT_F32 || s->ti.dtype == NW_DT_BF16)) {
		r = measure_grad(node);
	} else {
		r = scan_tensor(SCAN_GRAD);
		if (norm && r >= 0)
			count(NW_C_BWD_NORM_SKIPPED, 1);
	}
	if (r <= 0)
		return 0;
	return report_bwd(node, i);
}

#endif /* __BACKWARD_BPF_H */
