// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The copy-rate probe (bpf/nwreadcal.h): a uprobe on a function of the daemon's own, called
 * with a buffer of its own, copies that buffer in chunks by one method and times it. A
 * separate object from the watch's, loaded for a moment at the first attach (and by
 * bench/scanrate for its sweep); it reads nothing but the daemon's own memory.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "nwreadcal.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u8[NW_RC_MAX_CHUNK]);
} rc_buf SEC(".maps");

struct nw_rc_run run = {};

struct rc_ctx {
	__u64 addr, len;
	void *buf;
	struct task_struct *task;
	__u32 method, chunk;
};

/* One chunk by the run's method; sleepable helpers only where the program is. */
static __always_inline long copy_chunk(struct rc_ctx *c, __u32 n, __u64 off, int sleepable)
{
	if (n > NW_RC_MAX_CHUNK)
		n = NW_RC_MAX_CHUNK;
	if (!sleepable || c->method == NW_RC_PROBE)
		return bpf_probe_read_user(c->buf, n, (void *)(c->addr + off));
	if (c->method == NW_RC_USER)
		return bpf_copy_from_user(c->buf, n, (void *)(c->addr + off));
	return bpf_copy_from_user_task(c->buf, n, (void *)(c->addr + off), c->task, 0);
}

static __always_inline long chunk_at(__u32 i, struct rc_ctx *c, int sleepable)
{
	__u64 off = (__u64)i * c->chunk, n;

	if (off >= c->len)
		return 1;
	n = c->len - off;
	if (n > c->chunk)
		n = c->chunk;
	if (copy_chunk(c, (__u32)n, off, sleepable))
		run.errors++;
	run.copies++;
	run.bytes += n;
	return 0;
}

static long chunk_plain(__u32 i, void *ctx)
{
	return chunk_at(i, ctx, 0);
}

static long chunk_sleepable(__u32 i, void *ctx)
{
	return chunk_at(i, ctx, 1);
}

static __always_inline int copy_all(__u64 addr, __u64 len, int sleepable)
{
	struct rc_ctx c = {.addr = addr, .len = len, .method = run.method, .chunk = run.chunk};
	__u32 zero = 0, chunks;
	__u64 t0;

	if ((__u32)bpf_get_current_pid_tgid() != run.tid || run.done)
		return 0;
	c.buf = bpf_map_lookup_elem(&rc_buf, &zero);
	if (!c.buf || !c.chunk || c.chunk > NW_RC_MAX_CHUNK)
		return 0;
	c.task = bpf_get_current_task_btf();
	chunks = (len + c.chunk - 1) / c.chunk;
	t0 = bpf_ktime_get_ns();
	bpf_loop(chunks, sleepable ? chunk_sleepable : chunk_plain, &c, 0);
	run.ns = bpf_ktime_get_ns() - t0;
	run.done = 1;
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(uprobe_rc_probe, void *buf, __u64 len)
{
	if (run.method == NW_RC_PROBE)
		copy_all((__u64)buf, len, 0);
	return 0;
}

SEC("uprobe.s")
int BPF_KPROBE(uprobe_rc_sleepable, void *buf, __u64 len)
{
	if (run.method != NW_RC_PROBE)
		copy_all((__u64)buf, len, 1);
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
