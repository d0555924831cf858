/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Everything the programs share: the settings the daemon writes before the load
 * (rodata), the counters and flags it reads (bss), the maps, and the per-CPU
 * scratch heaps (struct scratch, struct cap_state, struct bwd_scratch) that hold
 * what is too big for the 512-byte BPF stack. Defined once, here; every other
 * header and program file includes this one.
 */
#ifndef __STATE_BPF_H
#define __STATE_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "nanwatch.h"
#include "nwfloat.h"
#include "nwgpu.h"

#define CHUNK_BYTES NW_SCAN_CHUNK /* read per loop iteration */
#define CHUNK_WORDS (CHUNK_BYTES / 8)
#define VIEW_MAX_CHUNKS (1U << 18) /* copies of a view's runs in a full pass, at most */
#define MAX_ITEMS 8		   /* tuple/list items looked at per level */
#define MORE_ARGS 1		   /* frame_rec.more: positional arguments past MAX_ITEMS */
#define MORE_SHRUNK 2 /* frame_rec.more: a list argument lost items in the call (a boxed call) */
#define STR_READ 64

#define BWD_RING 64  /* nodes remembered per thread to find a producer */
#define BWD_EDGES 16 /* edges of one candidate producer looked at */
#define CAP_STOPS 16 /* tensor arguments whose grad_fn ends the capture's op walk */

enum code_kind {
	CODE_OTHER = 0,
	CODE_MODULE = 1,
	CODE_STEP = 2,
};

const volatile __u32 targ_tgid = 0;
const volatile __u64 max_scan_bytes = 1ULL << 30;
const volatile __u32 step_by_marker = 0; /* steps come from uprobe_step_marker instead */
const volatile __u32 top_only = 0;	 /* mode sample: check outermost calls only */
const volatile __u32 loss_only = 0;	 /* mode loss: no module probes, the loss only */
const volatile struct nw_rescan RS = {};
const volatile struct nw_layout L = {};
const volatile struct nw_addrs A = {};
const volatile struct nw_dict_layout D = {};
const volatile __u64 capture_max_bytes = 0; /* 0: captures off */
const volatile __u32 c10_codes = 0;	    /* the target numbers ScalarType as c10 does */
const volatile __u32 backward_on = 0;
const volatile __u32 backward_all = 0; /* every gradient; else parameter gradients only */
const volatile struct nw_bwd_layout BL = {};
/* GPU tensors get check requests (bpf/gpu.bpf.h): the target uses CUDA; 0: none are written */
const volatile __u32 gpu_on = 0;
const volatile __u32 gpu_device = 0;	 /* DeviceType code requested: CUDA's (a test: meta's) */
const volatile __s64 gpu_index_off = -1; /* TensorImpl offset of the device index; -1: none */
/*
 * How scans copy the target's bytes (enum nw_read_method). Anything but NW_READ_PROBE is
 * loaded only into sleepable programs: elsewhere the branch is dead at load time.
 */
const volatile __u32 read_method = NW_READ_PROBE;
const volatile __u64 task_ns_per_page = 0; /* NW_READ_ADAPTIVE: the task method's cost */
const volatile __u32 time_copies = 0;	   /* time every scan copy, not just first chunks */

__u64 counters[NW_C_MAX] = {};
__u32 read_slow = 0;  /* NW_READ_ADAPTIVE: the last timed first chunk was slow */
__u32 read_tries = 0; /* ... tensors begun while it was: each 16th tries the probe again */
__u32 stopped = 0; /* set by the daemon before it removes the probes: every count stops at once */
__u32 execed = 0;  /* the target called execve: its image, and every probe's file, are gone */
__u64 step_count = 0;	/* step word (NW_STEP_SHIFT): optimizer steps completed */
__u64 step_opt = 0;	/* the optimizer whose state gives the step: the first seen */
__u64 step_impl = 0;	/* TensorImpl of its first parameter's state['step'] (daemon) */
__u64 step_other = 0;	/* another optimizer that stepped since step_opt last did */
__u64 iter_started = 0; /* root forward passes started */
__u32 opt_stepped = 0;	/* an optimizer step was seen: it, not backward passes, counts */
__u32 bwd_ran = 0;	/* a backward pass ran since the last root forward pass started */
__u32 loop_tid = 0;	/* the thread that started the last root forward pass */
__u64 loop_slots[NW_LOOP_SLOTS] = {}; /* the loop's counter-named locals (daemon) */
__u64 loop_nslots = 0;		      /* ... in use (daemon) */
__u64 loop_gen = 0;		      /* ... their list's generation (daemon) */
struct nw_loop_snap loop_snap = {};   /* what they held as the last root forward began */
__u64 root_module = 0;		      /* the model: see note_root() */
__u64 root_type = 0;		      /* its type when it became the model */
__u32 root_flat = 0;		      /* root_module has no child calls: see note_flat_root() */
__u64 first_iter_p1 = 0;	      /* first anomalous iteration + 1; 0: none yet */
__u64 last_iter_p1 = 0;		      /* last iteration that reported + 1 */
__u64 fwd_bad_iter_p1 = 0; /* last iteration with a non-finite module output or loss + 1 */
/* GPU requests are written while set: the daemon's, never in the ring the library holds */
__u32 gpu_link = 0;

/* set while another watch of the daemon has its probes removed: no return armed (a session) */
__u32 arm_paused = 0;

/* A module output scanned finite: see struct nw_rescan. impl 0: none. */
struct fingerprint {
	__u64 impl, data, bytes, grad_fn;
	__u32 version;
	__u32 pad;
};

/*
 * A module output not scanned at its return: its check waits for the norm it goes to (struct
 * nw_defer). obj 0: none. At most one a thread: anything but that norm's entry with it as
 * its argument, and the norm's return, scans it (flush_pending).
 */
struct pending {
	struct fingerprint fp; /* the output's, at its return */
	__u64 obj;	       /* the output */
	__u64 module;	       /* the call that returned it */
	__u64 next;	       /* the norm it goes to */
	__u64 frame;	       /* the Python frame that called them, running nw_defer.code */
	__u64 arg;	       /* its call's one argument, known finite then (input_known()) */
	/* ... its identity then (impl 0: none): a late report scans it only while it is so */
	struct fingerprint in_fp;
	__u32 depth;  /* of the call */
	__u32 deeper; /* its NW_FLAG_DEEPER */
	__u32 broken; /* another call was entered first: flush_pending(1) checks it */
	__u32 pad;
};

struct thread_state {
	__u64 stack[NW_MAX_DEPTH];
	/* per call in the stack: the stack pointer its return will have (frame_key.sp) */
	__u64 sp[NW_MAX_DEPTH];
	/* per call in the stack: the output of its last child to return, if finite */
	struct fingerprint kid[NW_MAX_DEPTH];
	/* per call in the stack: at::sequence_number's count + 1 at its entry (0: unknown) */
	__u64 seq_in[NW_MAX_DEPTH];
	/* per call in the stack: a call nested in it was never checked (NW_FLAG_DEEPER) */
	__u8 unchecked[NW_MAX_DEPTH];
	__u32 depth;
	__u32 step_depth;
	__u64 step_sp; /* frame_key.sp of the outermost optimizer step recorded last */
	struct pending pend;
};

/* never written: a new thread's state starts as this (too big for the BPF stack) */
static struct thread_state zero_thread;

__u32 capture_taken = 0;      /* one capture per watch */
__u32 capture_first_seen = 0; /* the first anomaly was reported */
__u64 bwd_iter_p1 = 0;	      /* last iteration whose backward pass reported + 1 */

struct bwd_thread {
	__u64 ring[BWD_RING]; /* nodes evaluated, most recent at pos - 1 */
	__u64 iter_p1;	      /* the iteration (+ 1) whose backward pass the ring holds */
	__u32 pos;
	__u32 valid; /* entries of this pass (older ones may be freed nodes) */
};

__u64 bwd_zero[BWD_RING + 2] = {}; /* a new thread's state (never written) */

struct frame_key {
	__u64 sp;
	__u32 tid;
	__u32 pad;
};

struct frame_rec {
	/* positional arguments, taken at entry: 3.12+ clears the frame first */
	__u64 args[MAX_ITEMS];
	/* keyword arguments: their values and key objects, in the call's order */
	__u64 kwargs[NW_MAX_KWARGS];
	__u64 kwkeys[NW_MAX_KWARGS];
	__u32 nkwargs;
	__u32 nargs;
	__u32 kind;
	__u32 depth;
	__u32 keep;  /* its output is finite: keeps_finite() said so at its entry */
	__u32 pred;  /* a norm that took the thread's pending output: takes_pending() */
	__u32 more;  /* arguments past those kept (MORE_ARGS): not all checked */
	__u32 list0; /* args[0]'s length + 1 where it was a list at entry, else 0 */
};

struct code_rec {
	__u64 name; /* co_name seen when classified: a reused address must match it */
	__u32 kind;
	__u32 pad;
};

struct seen_key {
	__u64 root;
	__u64 module;
};

/* A TensorImpl as tensor_decode() read it, and what read_impl() made of it. */
struct tensor_info {
	__u64 impl;  /* the TensorImpl */
	__u64 data;  /* its first element (read_impl: a float tensor's) */
	__u64 bytes; /* of its dense block, at most max_scan_bytes (read_impl) */
	__u64 numel;
	__u64 shape[NW_MAX_DIMS];
	__u64 strides[NW_MAX_DIMS];
	__u64 storage;	      /* the storage's data pointer; 0: none */
	__u64 storage_offset; /* in elements */
	__u32 ndim;
	__u32 dtype;	   /* enum nw_dtype of scalar_type */
	__u32 flags;	   /* enum nw_skip */
	__u32 scalar_type; /* the target's ScalarType code */
	__u32 gpu;	   /* on gpu_device: data is a device address, never read here */
	__s32 gpu_index;   /* its device index; -1: not known */
	/*
	 * A CPU view with holes or overlaps that read_view() took (view set; data and bytes its
	 * span): view_runs runs of view_run elements each, run r at the element offset its index
	 * names in the dims of view_outer (a bit per dim), each met view_rep times (its dims of
	 * stride 0); all within view_span elements from the first (tensor_view()); view_chunks
	 * copies to read them run by run.
	 */
	__u64 view_runs, view_run, view_rep, view_span, view_chunks;
	__u32 view_outer;
	__u32 view;
};

/* tensor_view()'s walk of a view's dims (bpf/tensor.bpf.h) */
struct view_walk {
	__u64 run, runs, span;
	__u32 ndim, inner, outer, found, bad;
};

struct scan_ctx {
	__u64 addr;
	__u64 bytes;
	__u64 acc;
	__u64 elems;	  /* elements in the whole tensor */
	__u64 chunk_end;  /* elem at the end of the chunk in s->buf (the full pass) */
	__u64 run_bytes;  /* the full pass: bytes of a run (all of a dense block) */
	__u32 run_chunks; /* ... chunks in one */
	__u64 nan, posinf, neginf;
	__u64 min_key, max_key;
	struct nw_lanes lanes;
	struct nw_fmt fmt;
	__u64 elem;   /* elements classified so far */
	__u32 words;  /* words in the current chunk */
	__u32 copies; /* chunks copied out of the target so far */
	__u64 mag;    /* sample_max's running maximum */
	__u32 size;   /* element size */
	__u32 err;
	__u32 task;    /* the chunks left go by bpf_copy_from_user_task (read_method) */
	__u32 sent;    /* chunks on the gradient data ring (measure_grad) */
	__u32 dropped; /* ... that it could not take */
};

enum {
	HELD_FINITE = 1,
	HELD_NONFINITE = 2
};

/* A dict's entries, as pyobj.bpf.h's dict_walk finds them. */
struct dict_walk {
	__u64 entries, values, n, esize;
};

/* A module looked for in _modules dicts (pyobj.bpf.h: child_key, held_key). */
struct child_find {
	struct dict_walk w;
	__u64 child;	  /* the module looked for */
	__u64 key;	  /* its key (a str) once found */
	__u64 holder_key; /* ... in the dict of the container held under this key */
};

/* An instance attribute looked for by name (pyobj.bpf.h: attr_list). */
struct attr_find {
	struct dict_walk w;
	__u64 found; /* the dict held under the name */
	int which;   /* enum attr_name */
};

/*
 * A tuple's, list's or dict's items, or an object's attributes, as walk_items() found them
 * (check.bpf.h).
 */
struct item_list {
	__u64 key[MAX_ITEMS]; /* a dict's keys, an object's attribute names (str objects); 0 for
			       * a tuple's or list's items */
	__u64 val[MAX_ITEMS];
	__u32 attrs; /* 1: an object's attributes */
	__u32 pad;
};

enum {
	ITEMS_RESULT,
	ITEMS_ARG
}; /* which list: a returning call's output, an argument */

/* The walk of the loss's autograd nodes, breadth first (bpf/loss.bpf.c). */
struct loss_walk {
	__u64 nodes[NW_LOSS_NODES];
	__u64 edges[BWD_EDGES * 4]; /* of the node being visited */
	__u32 n;		    /* nodes found so far */
	__u32 visiting;		    /* the node whose edges are read (its index in nodes) */
	__u64 nedges;		    /* ... how many of them are in edges */
};

struct scratch {
	struct nw_grad_data gd; /* right before buf: a gradient's chunk goes out as one record */
	__u64 buf[CHUNK_WORDS];
	__u64 args[MAX_ITEMS];	     /* the returning call's positional arguments */
	__u64 kwargs[NW_MAX_KWARGS]; /* ... its keyword arguments' values */
	__u64 kwkeys[NW_MAX_KWARGS]; /* ... and their keys */
	__u32 nargs;
	__u32 nkwargs;
	__u32 more_args; /* the returning call's frame_rec.more */
	struct nw_event ev;
	struct tensor_info ti;
	struct view_walk vw;
	struct fingerprint fp;	/* of s->ti, when it has a grad_fn */
	struct fingerprint kid; /* the returning call's last child's finite output */
	struct fingerprint sib; /* ... and its previous sibling's: most often its input */
	__u32 single;		/* the returning call's output is one tensor */
	__u32 deeper;		/* NW_FLAG_DEEPER for this call's events, or 0 */
	__u32 out_ok;		/* ... fingerprinted and finite */
	__u32 keep;		/* ... is finite: its frame_rec's keep */
	__u32 hold;	   /* ... took a pending output: a non-finite one is not reported yet */
	__u32 held;	   /* ... and its output was: HELD_FINITE, HELD_NONFINITE; 0 unknown */
	__u64 defer;	   /* ... may leave its output to this norm (nw_defer.next) */
	__u64 defer_frame; /* ... as called from this frame (struct pending's frame) */
	__u32 late_in;	   /* a pending output's late check: its input, found finite, is gone */
	/* a returning call's output items, and an argument's checked in its report */
	struct item_list items[ITEMS_ARG + 1];
	struct scan_ctx c;
	struct nw_params np; /* a module's parameters as list_params found them */
	__u64 gpu_gate;	     /* the returning call's request gating its inputs' and params' */
	char str[STR_READ];
	struct {
		__u64 root, module, parent;
		__u32 depth;
	} note; /* a module's first call, for note_module() (calls.bpf.h) */
	/* looked for in dicts, off the stack (the entry's calls nest deep): */
	struct attr_find af;  /* an attribute, by name */
	struct child_find kf; /* a child, in one _modules dict */
	struct child_find cf; /* ... in the containers a module holds (held_key) */
	struct loss_walk lw;
};

/* The capture in progress (bpf/capture.bpf.h). */
struct cap_state {
	struct nw_cap_tensor d; /* the tensor being described */
	__u64 addr;		/* its dense block in the target */
	__u64 bytes;
	__u64 used; /* data bytes copied in this capture */
	__u32 ntensors;
	__u32 lost;
	__u32 truncated;
	__u32 pad;
	/* the op walk (capture.bpf.h's cap_ops); past the part a capture clears */
	__u32 nnodes; /* nodes found so far, breadth first */
	__u32 nstops;
	__u32 more;
	__u32 partial;	/* an edge to nothing: an input that needs no gradient */
	__u32 visiting; /* the node whose edges are read (its index in nodes) */
	__u32 pad2;
	__u64 nedges; /* of the node being visited, in edges[] */
	__u64 nodes[NW_CAP_OPS];
	__u8 parent[NW_CAP_OPS]; /* the node whose edge found each (0xff: the output's own) */
	__u64 stops[CAP_STOPS];	 /* grad_fns of the call's tensor arguments */
	__u64 edges[BWD_EDGES * 4];
};

/* forward module whose output carried a grad_fn */
struct gradfn_rec {
	__u64 root;
	__u64 module;
	__u64 iteration;
	__u32 depth;
	__u32 pad;
};

/*
 * A module call that made autograd nodes: those numbered seq_in <= sequence_nr < seq_out
 * in thread tid (see bpf/backward.bpf.h, creator_of()).
 */
struct call_span {
	__u64 seq_in, seq_out;
	__u64 module, root;
	__u64 iteration;
	__u32 tid;
	__u32 depth;
};

#define NW_SPANS 16384 /* module calls remembered (in the order they returned) */

/* The backward probe's own scratch (bpf/backward.bpf.h). */
struct bwd_scratch {
	struct nw_grad g;
	/*
	 * A gradient's lanes alternate between g.hist and this, added into g.hist at the end:
	 * its elements mostly fall in a few buckets, and a count waits on the store of the
	 * count before it in the same bucket.
	 */
	__u32 hist_split[NW_HIST_BUCKETS];
	__u64 edges[BWD_EDGES * 4]; /* a candidate's next_edges_, edge_size <= 32 */
	__u64 target;		    /* the node (consumer) and input being looked for */
	__u64 found;		    /* most recent producer found, its output index */
	__u32 target_nr;
	__u32 found_idx;
	__u32 nfound;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} events SEC(".maps");

/* GPU check requests: entry 0 the header, then a ring (see nwgpu.h); frozen: BPF's alone */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, NW_GPU_SLOTS + 1);
	__type(key, __u32);
	__type(value, struct nw_gpu_req);
} gpu_ring SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct thread_state);
} threads SEC(".maps");

/* LRU: a call whose return the kernel never reported must not fill the map */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct frame_key);
	__type(value, struct frame_rec);
} frames SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct code_rec);
} codes SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct seen_key);
	__type(value, __u8);
} seen SEC(".maps");

/* module -> what keeps its output finite (struct nw_keep), filled as the daemon names it */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct nw_keep);
} keep_mods SEC(".maps");

/* module -> the norm its output's check waits for (struct nw_defer), filled by the daemon */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct nw_defer);
} defer_mods SEC(".maps");

/* torch.Tensor, and &ma_used of torch's global forward (pre-)hook dicts; 0: keep_mods unused */
__u64 keep_tensor = 0;
__u64 keep_global_used[NW_KEEP_HOOKS];

/* module -> its parameters, filled by the daemon when it names the module */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct nw_params);
} params SEC(".maps");

/*
 * One struct scratch a CPU, at the CPU's number: a per-CPU array's value may not pass 32 KiB,
 * and s->buf alone is twice that (66 KiB a CPU in all: 16 MiB on 256 CPUs). The daemon
 * sizes it to the possible CPUs before the load.
 */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct scratch);
} scratch_map SEC(".maps");

/* thread -> its PyThreadState (torch 2.x: where its current Python frames start) */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u64);
} tstates SEC(".maps");

/* module -> the highest magnitude mark (nw_mag_mark) its outputs reported */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, __u32);
} marks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 12); /* resized by the daemon when captures are on */
} captures SEC(".maps");

/* module -> its buffers (_buffers), filled by the daemon when captures are on */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct nw_params);
} cap_buffers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cap_state);
} cap_state_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct bwd_thread);
} bwd_threads SEC(".maps");

/*
 * Parameter gradients, a ring of their own so that they never crowd out anomalies: each
 * one's struct nw_grad, and before it, for a gradient whose histogram the daemon counts,
 * its bytes (struct nw_grad_data chunks). One ring keeps them all in the order of the passes.
 * A gradient's bytes go there only while grad_offload is on and the ring has room for all
 * of them; else its histogram is counted in BPF.
 */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096); /* grad_ring_bytes, set by the daemon */
} grad_data SEC(".maps");

const volatile __u64 grad_ring_bytes = 0; /* grad_data's size */
const volatile __u32 grad_offload = 0;	  /* gradients' bytes may go to the daemon */

__u32 grad_data_ids = 0; /* the last nw_grad_data id given */

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u64);
	__type(value, struct gradfn_rec);
} gradfns SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct bwd_scratch);
} bwd_scratch_map SEC(".maps");

/* the last NW_SPANS module calls that made nodes, slot span_pos % NW_SPANS the next */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, NW_SPANS);
	__type(key, __u32);
	__type(value, struct call_span);
} spans SEC(".maps");

__u64 span_pos = 0; /* spans written */

static __always_inline void count(int c, __u64 n)
{
	if (c >= 0 && c < NW_C_MAX)
		__sync_fetch_and_add(&counters[c], n);
}

/* A record the `events` ring had no room for: the total and the type's own counter. */
static __always_inline void count_lost(int c)
{
	count(NW_C_LOST, 1);
	count(c, 1);
}

static __always_inline struct scratch *get_scratch(void)
{
	__u32 cpu = bpf_get_smp_processor_id();

	return bpf_map_lookup_elem(&scratch_map, &cpu);
}

static __always_inline struct cap_state *get_cap(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&cap_state_map, &zero);
}

static __always_inline struct bwd_scratch *get_bwd_scratch(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&bwd_scratch_map, &zero);
}

static __always_inline __u64 read_u64(__u64 addr)
{
	__u64 v = 0;

	bpf_probe_read_user(&v, sizeof(v), (void *)addr);
	return v;
}

/*
 * A read that must not fail where the program is sleepable (read_method is not
 * NW_READ_PROBE only there): a page the non-faulting read cannot take just then (not
 * present in the target's page tables: migrated, compacted) is read again through a
 * fault. Only for the programs that scan: the others are never sleepable. 0, or -1 (both
 * helpers zero dst when they fail).
 */
static __always_inline int read_sure(void *dst, __u32 size, __u64 addr)
{
	if (!bpf_probe_read_user(dst, size, (void *)addr))
		return 0;
	if (read_method != NW_READ_PROBE && !bpf_copy_from_user(dst, size, (void *)addr))
		return 0;
	return -1;
}

/*
 * The object a frame slot (f_executable, localsplus) holds: 3.14 keeps _PyStackRefs
 * there, the address with tag bits below its 8-byte alignment (L.stackref_mask).
 */
static __always_inline __u64 read_ref(__u64 addr)
{
	return read_u64(addr) & ~(__u64)L.stackref_mask;
}

/*
 * An autograd node's Node.next_edges_ into edges (BWD_EDGES of them at most, size bytes at
 * most): how many were read, 0 if none could be. The callers checked BL.edge_size (16 to 32
 * bytes).
 */
static __always_inline __u64 node_edges(__u64 node, __u64 *edges, __u64 size)
{
	__u64 v[2] = {}, n, len, esz = BL.edge_size;

	if (!esz || bpf_probe_read_user(v, sizeof(v), (void *)(node + BL.node_next_edges)) ||
	    v[1] < v[0])
		return 0;
	n = (v[1] - v[0]) / esz;
	if (n > BWD_EDGES)
		n = BWD_EDGES;
	len = n * esz;
	if (len > size)
		len = size;
	if (!n || bpf_probe_read_user(edges, len, (void *)v[0]))
		return 0;
	return n;
}

/* One slot of the loop's locals: the object it holds, and its first words. */
static long loop_snap_one(__u32 k, void *unused)
{
	__u64 obj;

	if (k >= NW_LOOP_SLOTS || k >= loop_nslots)
		return 1;
	obj = read_ref(loop_slots[k]);
	if (obj && bpf_probe_read_user(loop_snap.raw[k], sizeof(loop_snap.raw[k]), (void *)obj))
		obj = 0;
	loop_snap.obj[k] = obj;
	return 0;
}

/*
 * A root forward pass starts. Without any optimizer step seen (updates by hand:
 * p.data.add_(p.grad, alpha=-lr)), a backward pass since the last one was a
 * step: each is counted as the next forward pass starts, so that a forward
 * pass and the backward pass after it share a step, as with an optimizer. The
 * first optimizer step seen ends it (step_taken()).
 */
static __always_inline void iteration_started(void)
{
	__sync_fetch_and_add(&iter_started, 1);
	if (bwd_ran && !opt_stepped) {
		count(NW_C_STEPS, 1);
		step_count = ((__u64)NW_STEP_BACKWARD << NW_STEP_SHIFT) |
			     ((step_count + 1) & NW_STEP_MASK);
	}
	bwd_ran = 0;
	/* the loop's thread, whose frames the daemon searches for its step counter */
	loop_tid = (__u32)bpf_get_current_pid_tgid();
	if (loop_nslots) {
		__sync_fetch_and_add(&loop_snap.seq, 1);
		loop_snap.gen = loop_gen;
		loop_snap.nslots = loop_nslots;
		loop_snap.step = step_count;
		loop_snap.iteration = iter_started;
		bpf_loop(NW_LOOP_SLOTS, loop_snap_one, NULL, 0);
		__sync_fetch_and_add(&loop_snap.seq, 1);
	}
}

/* The forward pass (0-based) the model is in: iterations count root calls. */
static __always_inline __u64 cur_iteration(void)
{
	__u64 it = iter_started;

	return it ? it - 1 : 0;
}

#endif /* __STATE_BPF_H */
