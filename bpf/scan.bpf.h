/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The scanner: a decoded tensor's bytes (s->ti.data, s->ti.bytes) read in
 * CHUNK_BYTES chunks into s->buf and tested for NaN/±Inf with integer work
 * only (bpf/nwfloat.h): a fast pass that only says whether there is one, a full
 * pass that counts them and finds the finite min/max, and the magnitude sample
 * of a chunk still in s->buf.
 */
#ifndef __SCAN_BPF_H
#define __SCAN_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "nwfloat.h"
#include "state.bpf.h"

#define SCAN_GRAD 2 /* scan_tensor(SCAN_GRAD): the fast pass, counted as a backward gradient */

struct anon_ctx {
	__u64 addr, bytes;
	__u32 ok;
};

static long anon_vma(struct task_struct *task, struct vm_area_struct *vma, void *ctx)
{
	struct anon_ctx *a = ctx;

	a->ok = !vma->vm_file && vma->vm_start <= a->addr && a->addr + a->bytes <= vma->vm_end;
	return 0;
}

/*
 * The task method faults pages in and may wait for them: only memory of one anonymous
 * mapping goes that way (what a tensor allocator hands out), never a file's (a FUSE file
 * would let its owner hold the read, and the target's thread, for as long as it liked).
 */
static __always_inline __u32 tensor_anon(const struct scan_ctx *c)
{
	struct anon_ctx a = {.addr = c->addr, .bytes = c->bytes};

	if (c->bytes > (1ULL << 48) ||
	    bpf_find_vma(bpf_get_current_task_btf(), c->addr, anon_vma, &a, 0))
		return 0;
	return a.ok;
}

/*
 * Copy n bytes at src, chunk idx of s->c's tensor, into s->buf by the way read_method says
 * (global: verified once, whatever path calls it). Each pass's first chunk is timed (every
 * chunk with time_copies): the copy's own rate in stats, and for NW_READ_ADAPTIVE the
 * choice for the rest of the tensor. A host where the kernel's first
 * touch of a new user page is dear copies a new tensor by probe at under 1 GB/s, by the
 * task method (the kernel's page walk and its own map of the pages) several times faster;
 * pages the kernel read before go faster by probe (daemon/attach/readcal.h).
 */
__noinline long copy_chunk(__u32 n, __u64 src, __u32 idx)
{
	struct scratch *s = get_scratch();
	__u64 t0 = 0, dt, pages;
	int timed = time_copies || idx == 0;
	struct scan_ctx *c;
	long r;

	if (!s)
		return -1;
	c = &s->c;
	if (n > CHUNK_BYTES)
		n = CHUNK_BYTES;
	/* the mapping is looked up only where the task method would copy (a page walk a tensor) */
	if (read_method != NW_READ_PROBE && idx == 0)
		c->task = (read_method == NW_READ_TASK || (read_method == NW_READ_ADAPTIVE &&
							   read_slow && ++read_tries % 16 != 0)) &&
			  tensor_anon(c);
	if (timed)
		t0 = bpf_ktime_get_ns();
	if (read_method != NW_READ_PROBE && c->task) {
		__u64 addr = c->addr, bytes = c->bytes;

		barrier_var(n); /* bounded where the verifier sees it, not only before a spill */
		if (n > CHUNK_BYTES)
			n = CHUNK_BYTES;
		r = bpf_copy_from_user_task(s->buf, n, (void *)src, bpf_get_current_task_btf(), 0);
		count(NW_C_TASK_COPIES, 1);
		/*
		 * It may have slept (a page walk's reschedule, a contended mmap lock): the CPU
		 * stays, but another thread of the target may have run a program on it meanwhile
		 * and taken the per-CPU scratch. Then this tensor counts as unreadable, never as
		 * scanned with another's bytes or verdict.
		 */
		if (c->addr != addr || c->bytes != bytes) {
			count(NW_C_SCRATCH_TAKEN, 1);
			return -1;
		}
	} else {
		r = bpf_probe_read_user(s->buf, n, (void *)src);
	}
	if (!timed || r)
		return r;
	dt = bpf_ktime_get_ns() - t0;
	count(NW_C_COPY_NS, dt);
	count(NW_C_COPY_BYTES, n);
	if (read_method == NW_READ_ADAPTIVE && idx == 0 && !c->task) {
		/* the pages it touched, had the task method copied them instead */
		pages = ((src & 4095) + n + 4095) / 4096;
		read_slow = dt > task_ns_per_page * pages;
		/* the rest of the tensor by the task method, where there is a rest it may read */
		c->task = read_slow && c->bytes > n && tensor_anon(c);
	}
	return r;
}

#define FAST_BLOCK 1024 /* words of s->buf per fast_block() call */
#define FAST_STEP 16	/* words of s->buf per iteration of its loop */

/*
 * Where a view's run r starts, in bytes from its first element: its index r in the view's
 * outer dims (s->ti.view_outer), times their strides.
 */
static __always_inline __u64 run_offset(struct scratch *s, __u64 r)
{
	__u64 off = 0, z;
	int d;

	for (d = 0; d < NW_MAX_DIMS; d++) {
		if (!(s->ti.view_outer & (1U << d)))
			continue;
		z = s->ti.shape[d];
		if (!z)
			break;
		off += (r % z) * s->ti.strides[d];
		r /= z;
	}
	return off * s->c.size;
}

/*
 * Read chunk idx into s->buf; returns the number of 64-bit words (the last one zero-padded).
 * A dense block's chunks follow each other; the full pass of a view (run_chunks set) reads
 * chunk idx % run_chunks of its run idx / run_chunks. c->chunk_end: where the chunk's
 * elements end.
 */
static __always_inline int read_chunk(struct scratch *s, __u32 idx)
{
	struct scan_ctx *c = &s->c;
	__u64 off = (__u64)idx * CHUNK_BYTES, n, at = 0, end = c->bytes;
	__u32 words, tail, i;

	if (c->run_chunks) {
		off = (__u64)(idx % c->run_chunks) * CHUNK_BYTES;
		at = run_offset(s, idx / c->run_chunks);
		end = c->run_bytes;
	}
	if (off >= end)
		return 0;
	n = end - off;
	if (n > CHUNK_BYTES)
		n = CHUNK_BYTES;
	if (n == 0 || copy_chunk(n, c->addr + at + off, idx)) {
		c->err = 1;
		return 0;
	}
	c->copies++;
	if (c->size)
		c->chunk_end = c->elem + n / c->size;
	words = (n + 7) / 8;
	c->words = words;
	tail = n % 8;
	if (tail && words > 0 && words <= CHUNK_WORDS)
		s->buf[(words - 1) & (CHUNK_WORDS - 1)] &= (1ULL << (tail * 8)) - 1;
	/*
	 * the word scan goes FAST_STEP at a time: zeros (finite) after the data, whatever
	 * the boundary (a test of it too doubled the verifier's walk of every scan)
	 */
	for (i = 0; i < FAST_STEP - 1; i++)
		if (words + i < CHUNK_WORDS)
			s->buf[(words + i) & (CHUNK_WORDS - 1)] = 0;
	return words;
}

/* One word into an accumulator, kept in its register: no tree of temporaries to spill */
#define FAST_WORD(i, into)                \
	do {                              \
		__u64 t = p[j + (i)] & m; \
		t += a;                   \
		into |= t;                \
		barrier_var(into);        \
	} while (0)

/*
 * OR the detector over block k of the first `words` words of s->buf (a bpf_loop callback;
 * ctx: the word count). The verifier walks a loop once per iteration: blocks of 1024 words
 * keep that walk as short as a whole chunk's was at 8 KiB.
 */
static long fast_block(__u32 k, void *ctx)
{
	struct scratch *s = get_scratch();
	__u32 base = k * FAST_BLOCK, words = *(__u32 *)ctx, n, j;
	__u64 acc = 0, acc2 = 0, m, a, *p;

	if (!s || base >= words || base > CHUNK_WORDS - FAST_BLOCK)
		return 1;
	n = words - base;
	if (n > FAST_BLOCK)
		n = FAST_BLOCK;
	m = s->c.lanes.mask;
	a = s->c.lanes.add;
	p = &s->buf[base];
	/*
	 * (w & mask) + add never carries out of a lane, so OR-ing the sums and
	 * testing the lanes' top bits once at the end is the same as testing
	 * every word: three instructions a word. read_chunk zero-pads to FAST_STEP
	 * words. With the bound computed before the loop and each sum OR-ed in as it
	 * comes, two accumulators in turn, the loop keeps its registers: 4.2
	 * instructions a word (a tree of 8 sums spilled to the stack at 5.4), the test
	 * alone 42 GB/s against 34 on the host of make bench.
	 */
	for (j = 0; j < n; j += FAST_STEP) {
		FAST_WORD(0, acc);
		FAST_WORD(1, acc2);
		FAST_WORD(2, acc);
		FAST_WORD(3, acc2);
		FAST_WORD(4, acc);
		FAST_WORD(5, acc2);
		FAST_WORD(6, acc);
		FAST_WORD(7, acc2);
		FAST_WORD(8, acc);
		FAST_WORD(9, acc2);
		FAST_WORD(10, acc);
		FAST_WORD(11, acc2);
		FAST_WORD(12, acc);
		FAST_WORD(13, acc2);
		FAST_WORD(14, acc);
		FAST_WORD(15, acc2);
	}
	acc |= acc2;
	s->c.acc |= acc & s->c.lanes.high;
	return 0;
}

/*
 * Classify one word of s->buf: counts and finite min/max. One word per
 * callback keeps the verifier's paths few; this pass only runs on a tensor
 * already known to hold NaN/±Inf.
 */
static long full_word(__u32 wi, void *unused)
{
	struct scratch *s = get_scratch();
	struct scan_ctx *c;
	__u32 lanes, width;
	__u64 w;
	int k;

	if (!s)
		return 1;
	c = &s->c;
	lanes = 8 / c->size;
	width = c->size * 8;
	w = s->buf[wi & (CHUNK_WORDS - 1)];
	for (k = 0; k < 4; k++) {
		__u64 bits, key;

		if (k >= lanes || c->elem >= c->chunk_end)
			break;
		bits = width == 64 ? w : (w >> (k * width)) & c->fmt.all;
		c->elem++;
		switch (nw_classify_f(bits, &c->fmt)) {
		case NW_NAN:
			c->nan++;
			break;
		case NW_POSINF:
			c->posinf++;
			break;
		case NW_NEGINF:
			c->neginf++;
			break;
		default:
			key = nw_order_key_f(bits, &c->fmt);
			if (key < c->min_key)
				c->min_key = key;
			if (key > c->max_key)
				c->max_key = key;
		}
	}
	return 0;
}

/*
 * Read and scan chunk idx; stops the loop (returns 1) at the end or on a read error.
 * Inlined in each bpf_loop callback below, each verified once: a call less deep.
 */
static __always_inline int scan_chunk(__u32 idx, int full)
{
	struct scratch *s = get_scratch();
	int words;

	if (!s)
		return 1;
	words = read_chunk(s, idx);
	if (words <= 0)
		return 1;
	if (full)
		bpf_loop(words, full_word, NULL, 0);
	else
		bpf_loop((words + FAST_BLOCK - 1) / FAST_BLOCK, fast_block, &words, 0);
	return 0;
}

static long fast_chunk(__u32 idx, void *unused)
{
	return scan_chunk(idx, 0) ? 1 : 0;
}

static long full_chunk(__u32 idx, void *unused)
{
	return scan_chunk(idx, 1) ? 1 : 0;
}

/*
 * The full pass over s->c: counts and the finite min/max, run by run, chunk by chunk. A
 * view's runs are its own elements (read_view()), each counted as often as its dims of
 * stride 0 repeat it; a dense block is one run.
 */
static __always_inline void full_pass(struct scratch *s, struct scan_ctx *c)
{
	__u64 chunks, rep = 1;

	c->nan = c->posinf = c->neginf = 0;
	c->elem = 0;
	c->min_key = ~0ULL;
	c->max_key = 0;
	c->run_bytes = c->bytes;
	chunks = 1;
	if (s->ti.view) {
		c->run_bytes = s->ti.view_run * c->size;
		chunks = s->ti.view_runs;
		rep = s->ti.view_rep;
	}
	c->run_chunks = (c->run_bytes + CHUNK_BYTES - 1) / CHUNK_BYTES;
	chunks *= c->run_chunks;
	if (s->ti.view && chunks > VIEW_MAX_CHUNKS) {
		c->err = 1;
		return;
	}
	bpf_loop(chunks, full_chunk, NULL, 0);
	c->nan *= rep;
	c->posinf *= rep;
	c->neginf *= rep;
}

/* Scan s->ti's data. Returns 1 if some element is NaN/±Inf, 0 if all finite, -1 if unreadable. */
__noinline int scan_tensor(int full)
{
	struct scratch *s = get_scratch();
	struct scan_ctx *c;
	__u64 t0, bytes;
	__u32 chunks;
	int direct;

	if (!s || s->ti.dtype == NW_DT_NONE)
		return -1;
	c = &s->c;
	__builtin_memset(c, 0, sizeof(*c));
	c->addr = s->ti.data;
	c->bytes = s->ti.bytes;
	bytes = c->bytes;
	c->size = nw_dtype_size(s->ti.dtype);
	if (!c->size)
		return -1;
	c->elems = s->ti.view ? s->ti.numel : c->bytes / c->size;
	c->min_key = ~0ULL;
	nw_lanes_for(s->ti.dtype, &c->lanes);
	nw_fmt_for(s->ti.dtype, &c->fmt);
	chunks = (c->bytes + CHUNK_BYTES - 1) / CHUNK_BYTES;
	/* a view whose runs take no more copies than its span (x[:, 0]): run by run at once */
	direct = s->ti.view && s->ti.view_chunks <= chunks;
	t0 = bpf_ktime_get_ns();
	if (full != 1 && !direct)
		bpf_loop(chunks, fast_chunk, NULL, 0);
	/* the full pass; or a view's span held NaN/±Inf: in the view's elements, or between? */
	if (full == 1 || direct || (c->acc && s->ti.view && !c->err)) {
		if (full != 1)
			count(NW_C_VIEWS_EXACT, 1);
		if (direct)
			bytes = s->ti.view_runs * s->ti.view_run * c->size;
		full_pass(s, c);
		c->acc = c->nan | c->posinf | c->neginf;
	}
	if (!full) { /* the time and copies of the bytes in NW_C_BYTES_SCANNED */
		count(NW_C_SCAN_NS, bpf_ktime_get_ns() - t0);
		count(NW_C_SCAN_COPIES, c->copies);
	} else if (full == SCAN_GRAD) { /* ... and of those in NW_C_BWD_BYTES */
		count(NW_C_BWD_SCAN_NS, bpf_ktime_get_ns() - t0);
		count(NW_C_BWD_COPIES, c->copies);
	}
	if (full == 1) {
		s->ev.nan = c->nan;
		s->ev.posinf = c->posinf;
		s->ev.neginf = c->neginf;
		s->ev.min_key = c->min_key;
		s->ev.max_key = c->max_key;
		s->ev.scanned = c->elems;
	}
	if (c->err) {
		count(NW_C_SKIP_UNREADABLE, 1);
		return -1;
	}
	if (!full) {
		count(NW_C_TENSORS_SCANNED, 1);
		count(NW_C_BYTES_SCANNED, bytes);
		if (s->ti.view)
			count(NW_C_VIEWS, 1);
	} else if (full == SCAN_GRAD) {
		count(NW_C_BWD_GRADS, 1);
		count(NW_C_BWD_BYTES, bytes);
	}
	return c->acc ? 1 : 0;
}

static __always_inline void count_skip(__u32 flags)
{
	if (flags & NW_SKIP_NONCONTIG)
		count(NW_C_SKIP_NONCONTIG, 1);
	if (flags & NW_SKIP_DEVICE)
		count(NW_C_SKIP_DEVICE, 1);
	if (flags & NW_SKIP_UNREADABLE)
		count(NW_C_SKIP_UNREADABLE, 1);
	if (flags & NW_SKIP_DIMS)
		count(NW_C_SKIP_DIMS, 1);
	if (flags & NW_SKIP_TRUNCATED)
		count(NW_C_TRUNCATED, 1);
	if (flags & NW_SKIP_DTYPE)
		count(NW_C_SKIP_DTYPE, 1);
}

/*
 * max(a, b) without a branch, for values below 2^63: a branch per element
 * would give the verifier a state per path and the loop would never verify.
 */
static __always_inline __u64 umax63(__u64 a, __u64 b)
{
	__u64 mask = -((a - b) >> 63); /* all ones when a < b */

	return a ^ ((a ^ b) & mask);
}

/* Eight words of s->buf into the running magnitude s->c.mag (a bpf_loop callback). */
static long mag_block(__u32 k, void *unused)
{
	struct scratch *s = get_scratch();
	__u32 size, j, base = k * 8;
	__u64 mx, w;

	if (!s || base >= s->c.words || base >= NW_MAG_WORDS)
		return 1;
	size = s->c.size;
	mx = s->c.mag;
	for (j = 0; j < 8; j++) {
		if (base + j >= s->c.words)
			break;
		w = s->buf[(base + j) & (CHUNK_WORDS - 1)];
		if (size == 8) {
			mx = umax63(mx, w & 0x7fffffffffffffffULL);
		} else if (size == 4) {
			mx = umax63(mx, w & 0x7fffffffULL);
			mx = umax63(mx, (w >> 32) & 0x7fffffffULL);
		} else {
			mx = umax63(mx, w & 0x7fff);
			mx = umax63(mx, (w >> 16) & 0x7fff);
			mx = umax63(mx, (w >> 32) & 0x7fff);
			mx = umax63(mx, (w >> 48) & 0x7fff);
		}
	}
	s->c.mag = mx;
	return 0;
}

/*
 * Largest |element| bits in the first NW_MAG_WORDS words of s->buf (s->c.words
 * of them hold data, of s->c.size bytes an element).
 */
__noinline __u64 sample_max(void)
{
	struct scratch *s = get_scratch();

	if (!s)
		return 0;
	s->c.mag = 0;
	bpf_loop(NW_MAG_WORDS / 8, mag_block, NULL, 0);
	return s->c.mag;
}

#endif /* __SCAN_BPF_H */
