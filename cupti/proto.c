// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Request decoding and message encoding for libnanwatch_cupti.so: what the
 * library reads from the gpu_ring map and what it writes to the daemon's
 * socket (bpf/nwgpu.h). No state; the ring is written by BPF (and may be
 * written by anyone holding its fd), so every field is checked.
 */
#include <errno.h>
#include <string.h>

#include "nwcupti.h"
#include "nanwatch.h"
#include "nwfloat.h"

_Static_assert(sizeof(struct nw_gpu_req) == NW_GPU_REQ_SIZE, "request size");
_Static_assert(sizeof(struct nw_gpu_head) == NW_GPU_REQ_SIZE, "ring head size");
_Static_assert(sizeof(struct nw_gpu_result) == 64, "result size");
_Static_assert(sizeof(struct nw_scan_out) == 64, "scan out size");
/* tests/gpu/scan_check.py lays it out by hand */
_Static_assert(sizeof(struct nw_scan_args) == 64, "scan args size");
_Static_assert((NW_GPU_SLOTS & (NW_GPU_SLOTS - 1)) == 0, "ring slots a power of two");

/* Elements a request may name: 2^40 (8 TiB of float64), far above any tensor. */
#define NWC_NUMEL_MAX (1ULL << 40)

/* The scanner's own element sizes (nwfloat.h), 0 for a dtype the kernel does not read. */
int nwc_dtype_size(__u32 dtype)
{
	return nw_dtype_size(dtype);
}

/*
 * Copy the request at ring position pos. 0: out holds it; -ENOENT: not written
 * yet; -ESTALE: overwritten by a later position (or while being read);
 * -EINVAL: written but meaningless (no address, no or absurd element count).
 */
int nwc_req_read(const struct nw_gpu_req *ring, __u64 pos, struct nwc_req *out)
{
	const struct nw_gpu_req *e = &ring[1 + pos % NW_GPU_SLOTS];
	__u64 seq, again;

	seq = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);
	if (seq != pos + 1)
		return seq > pos + 1 ? -ESTALE : -ENOENT;
	out->seq = seq;
	out->data = __atomic_load_n(&e->data, __ATOMIC_RELAXED);
	out->numel = __atomic_load_n(&e->numel, __ATOMIC_RELAXED);
	out->gate = __atomic_load_n(&e->gate, __ATOMIC_RELAXED);
	out->tid = __atomic_load_n(&e->tid, __ATOMIC_RELAXED);
	out->dtype = __atomic_load_n(&e->dtype, __ATOMIC_RELAXED);
	out->role = __atomic_load_n(&e->role, __ATOMIC_RELAXED);
	out->device = __atomic_load_n(&e->device, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	again = __atomic_load_n(&e->seq, __ATOMIC_RELAXED);
	if (again != seq)
		return -ESTALE;
	if (!out->data || !out->numel || out->numel > NWC_NUMEL_MAX)
		return -EINVAL;
	/* a gate is an earlier request; anything else is no gate */
	if (out->gate >= seq)
		out->gate = 0;
	return 0;
}

/* 0 if buf is a HELLO this library speaks, -EPROTO if not. */
int nwc_hello_check(const void *buf, size_t len)
{
	struct nw_gpu_msg m;
	struct nw_gpu_hello h;

	if (len != sizeof(m) + sizeof(h))
		return -EPROTO;
	memcpy(&m, buf, sizeof(m));
	memcpy(&h, (const char *)buf + sizeof(m), sizeof(h));
	if (m.type != NW_GPU_MSG_HELLO || m.len != sizeof(h))
		return -EPROTO;
	if (h.version != NW_GPU_VERSION || h.slots != NW_GPU_SLOTS || h.req_size != NW_GPU_REQ_SIZE)
		return -EPROTO;
	return 0;
}

void nwc_result_from_out(const struct nw_scan_out *o, __u64 seq, struct nw_gpu_result *r)
{
	const volatile struct nw_scan_out *v = o;

	memset(r, 0, sizeof(*r));
	r->seq = seq;
	r->scanned = v->scanned;
	r->nan = v->nan;
	r->posinf = v->posinf;
	r->neginf = v->neginf;
	r->min_key = v->min_key;
	r->max_key = v->max_key;
	r->flags = v->flags;
}

/*
 * Sent: every result that found NaN/±Inf, every gated one, and every loss (one
 * element a pass: its finite value, in min_key, is the daemon's loss trend).
 */
int nwc_result_wanted(const struct nw_gpu_result *r, int gated, int loss)
{
	return gated || loss || r->nan || r->posinf || r->neginf;
}

/* One message: header + body. Its size, or 0 if it does not fit cap or NW_GPU_MSG_MAX. */
size_t nwc_msg_put(void *buf, size_t cap, __u32 type, const void *body, size_t len)
{
	struct nw_gpu_msg m = {.type = type, .len = (__u32)len};

	if (sizeof(m) + len > cap || sizeof(m) + len > NW_GPU_MSG_MAX)
		return 0;
	memcpy(buf, &m, sizeof(m));
	if (len)
		memcpy((char *)buf + sizeof(m), body, len);
	return sizeof(m) + len;
}

/* A RESULT message of as many of r[0..n) as fit; *used says how many. */
size_t nwc_msg_results(void *buf, size_t cap, const struct nw_gpu_result *r, size_t n, size_t *used)
{
	size_t fit = (NW_GPU_MSG_MAX - sizeof(struct nw_gpu_msg)) / sizeof(*r);

	if (n < fit)
		fit = n;
	*used = 0;
	if (!fit)
		return 0;
	n = nwc_msg_put(buf, cap, NW_GPU_MSG_RESULT, r, fit * sizeof(*r));
	if (n)
		*used = fit;
	return n;
}

/* Blocks for one scan: one per NW_SCAN_THREADS elements, at most NW_SCAN_MAX_BLOCKS. */
unsigned int nwc_scan_blocks(__u64 numel)
{
	__u64 b = (numel + NW_SCAN_THREADS - 1) / NW_SCAN_THREADS;

	if (b < 1)
		b = 1;
	return b > NW_SCAN_MAX_BLOCKS ? NW_SCAN_MAX_BLOCKS : (unsigned int)b;
}
