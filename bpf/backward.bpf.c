/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The backward pass: each autograd node's input gradients as the engine
 * evaluates it (the search for their producer is in bpf/backward.bpf.h).
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "state.bpf.h"
#include "backward.bpf.h"

SEC("uprobe")
int BPF_KPROBE(uprobe_bwd_node, void *engine, void *graph_task, void *func, void *inputs)
{
	__u64 id = bpf_get_current_pid_tgid(), node = (__u64)func, v[2] = {}, n, vptr;
	struct bwd_thread *bt;
	__u32 tid = (__u32)id;
	int i, acc;

	if ((id >> 32) != targ_tgid || stopped || !node || !inputs)
		return 0;
	count(NW_C_BWD_NODES, 1);
	bt = bpf_map_lookup_elem(&bwd_threads, &tid);
	if (!bt) {
		bpf_map_update_elem(&bwd_threads, &tid, &bwd_zero, BPF_NOEXIST);
		bt = bpf_map_lookup_elem(&bwd_threads, &tid);
		if (!bt)
			return 0;
	}
	if (bt->iter_p1 != cur_iteration() + 1) {
		bt->iter_p1 = cur_iteration() + 1; /* a new pass: forget the old nodes */
		bt->valid = 0;
	}
	if (read_sure(&vptr, sizeof(vptr), node)) {
		/* a node of no known class: it may have been a parameter's, its norm not measured */
		count(NW_C_SKIP_UNREADABLE, 1);
		if (BL.acc_vptr)
			count(NW_C_BWD_NORM_SKIPPED, 1);
	}
	acc = BL.acc_vptr && vptr == BL.acc_vptr;
	if ((acc || backward_all) && read_sure(v, sizeof(v), (__u64)inputs + BL.inputbuf_items)) {
		count(NW_C_SKIP_UNREADABLE, 1);
		if (acc)
			count(NW_C_BWD_NORM_SKIPPED, 1);
	} else if ((acc || backward_all) && v[1] > v[0]) {
		n = (v[1] - v[0]) / 8;
		if (n > BWD_INPUTS)
			count(NW_C_SKIP_ITEMS, n - BWD_INPUTS);
		for (i = 0; i < BWD_INPUTS; i++) {
			if (i >= n)
				break;
			if (check_grad(node, v[0], i, acc))
				break;
		}
	}
	bt->ring[bt->pos & (BWD_RING - 1)] = node;
	bt->pos++;
	if (bt->valid < BWD_RING)
		bt->valid++;
	return 0;
}
