// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * nanwatch: learn nn.Module call boundaries from the CPython frame evaluator
 * and scan every module output for NaN/±Inf, with integer work only.
 *
 * A module call is a frame of the layout's call function (Module._call_impl)
 * entered from C: the call goes through the type's tp_call slot, so CPython
 * 3.11+ cannot inline it. Its return value is the module's output, and the
 * frame's locals (self, *args) are still alive when the evaluator returns:
 * the caller clears the frame only afterwards.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "nanwatch.h"
#include "nwfloat.h"

#define CHUNK_WORDS	1024			/* 8 KiB read per loop iteration */
#define CHUNK_BYTES	(CHUNK_WORDS * 8)
#define MAX_ITEMS	8			/* tuple/list items looked at per level */
#define STR_READ	64
#define NW_ANCHOR_FRAMES 64			/* caller frames looked at for an older module call */

enum code_kind {
	CODE_OTHER = 0,
	CODE_MODULE = 1,
	CODE_STEP = 2,
};

const volatile __u32 targ_tgid = 0;
const volatile __u64 max_scan_bytes = 1ULL << 30;
const volatile __u32 step_by_marker = 0;	/* steps come from uprobe_step_marker instead */
const volatile __u32 top_only = 0;		/* mode sample: check outermost calls only */
const volatile __u32 loss_only = 0;		/* mode loss: no module probes, the loss only */
const volatile struct nw_rescan RS = {};
const volatile struct nw_layout L = {};
const volatile struct nw_addrs A = {};
const volatile struct nw_dict_layout D = {};

__u64 counters[NW_C_MAX] = {};
__u32 stopped = 0;		/* set by the daemon before it removes the probes: every count stops at once */
__u32 execed = 0;		/* the target called execve: its image, and every probe's file, are gone */
__u64 step_count = 0;		/* step word (NW_STEP_SHIFT): optimizer steps completed */
__u64 step_opt = 0;		/* the optimizer whose state gives the step: the first seen */
__u64 step_impl = 0;		/* TensorImpl of its first parameter's state['step'] (daemon) */
__u64 step_other = 0;		/* another optimizer that stepped since step_opt last did */
__u64 iter_started = 0;		/* root forward passes started */
__u64 root_module = 0;		/* the model: see note_root() */
__u64 root_type = 0;		/* its type when it became the model */
__u64 first_iter_p1 = 0;	/* first anomalous iteration + 1; 0: none yet */
__u64 last_iter_p1 = 0;		/* last iteration that reported + 1 */
__u64 fwd_bad_iter_p1 = 0;	/* last iteration with a non-finite module output or loss + 1 */

/* A module output scanned finite: see struct nw_rescan. impl 0: none. */
struct fingerprint {
	__u64 impl, data, bytes, grad_fn;
	__u32 version;
	__u32 pad;
};

struct thread_state {
	__u64 stack[NW_MAX_DEPTH];
	/* per call in the stack: the stack pointer its return will have (frame_key.sp) */
	__u64 sp[NW_MAX_DEPTH];
	/* per call in the stack: the output of its last child to return, if finite */
	struct fingerprint kid[NW_MAX_DEPTH];
	/* per call in the stack: a call nested in it was never checked (NW_FLAG_DEEPER) */
	__u8 unchecked[NW_MAX_DEPTH];
	__u32 depth;
	__u32 step_depth;
};

struct frame_key {
	__u64 sp;
	__u32 tid;
	__u32 pad;
};

struct frame_rec {
	__u64 args[MAX_ITEMS];	/* positional arguments, taken at entry: 3.12+ clears the frame first */
	__u32 nargs;
	__u32 kind;
	__u32 depth;
	__u32 pad;
};

struct code_rec {
	__u64 name;	/* co_name seen when classified: a reused address must match it */
	__u32 kind;
	__u32 pad;
};

struct seen_key {
	__u64 root;
	__u64 module;
};

struct tensor_info {
	__u64 impl;		/* the TensorImpl */
	__u64 data;
	__u64 bytes;
	__u64 numel;
	__u64 shape[NW_MAX_DIMS];
	__u64 strides[NW_MAX_DIMS];
	__u32 ndim;
	__u32 dtype;
	__u32 flags;
	__u32 pad;
};

struct scan_ctx {
	__u64 addr;
	__u64 bytes;
	__u64 acc;
	__u64 elems;		/* elements in the whole tensor */
	__u64 nan, posinf, neginf;
	__u64 min_key, max_key;
	struct nw_lanes lanes;
	struct nw_fmt fmt;
	__u64 elem;		/* elements classified so far */
	__u32 words;		/* words in the current chunk */
	__u64 mag;		/* sample_max's running maximum */
	__u32 size;		/* element size */
	__u32 err;
	__u32 pad;
};

struct scratch {
	__u64 buf[CHUNK_WORDS];
	__u64 args[MAX_ITEMS];	/* the returning call's positional arguments */
	__u32 nargs;
	__u32 pad;
	struct nw_event ev;
	struct tensor_info ti;
	struct fingerprint fp;	/* of s->ti, when it has a grad_fn */
	struct fingerprint kid;	/* the returning call's last child's finite output */
	__u32 single;		/* the returning call's output is one tensor */
	__u32 deeper;		/* NW_FLAG_DEEPER for this call's events, or 0 */
	__u32 out_ok;		/* ... fingerprinted and finite */
	struct scan_ctx c;
	struct nw_params np;	/* a module's parameters as list_params found them */
	char str[STR_READ];
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);
} events SEC(".maps");

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

/* module -> its parameters, filled by the daemon when it names the module */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct nw_params);
} params SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
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
	__u32 zero = 0;

	return bpf_map_lookup_elem(&scratch_map, &zero);
}

static __always_inline __u64 read_u64(__u64 addr)
{
	__u64 v = 0;

	bpf_probe_read_user(&v, sizeof(v), (void *)addr);
	return v;
}

/* Compare a rodata match string with n bytes read from the target. */
static __always_inline int match_str(const volatile char *pat, const char *s, __u64 n)
{
	int i;

	for (i = 0; i < NW_MATCH_LEN; i++) {
		if (pat[i] == 0)
			return i == n;
		if (i >= n || pat[i] != s[i])
			return 0;
	}
	return 0;
}

static __always_inline __u32 pat_len(const volatile char *pat)
{
	__u32 i;

	for (i = 0; i < NW_MATCH_LEN; i++)
		if (pat[i] == 0)
			return i;
	return NW_MATCH_LEN;
}

/* Length of a compact ASCII str object, or -1 for any other string kind. */
static __always_inline long ascii_len(__u64 str)
{
	__u32 state = 0;
	__u64 len = 0;

	if (!str || bpf_probe_read_user(&state, sizeof(state), (void *)(str + L.unicode_state)))
		return -1;
	if (!(state & (1U << L.ascii_bit)) || !(state & (1U << L.compact_bit)))
		return -1;
	if (bpf_probe_read_user(&len, sizeof(len), (void *)(str + L.unicode_length)))
		return -1;
	return len;
}

/* Does the str object equal pat? */
static __noinline int str_equals(__u64 str, int which)
{
	struct scratch *s = get_scratch();
	long n = ascii_len(str);

	if (!s || n < 0 || n >= NW_MATCH_LEN)
		return 0;
	if (bpf_probe_read_user(s->str, NW_MATCH_LEN, (void *)(str + L.unicode_ascii_data)))
		return 0;
	if (which == 0)
		return match_str(L.call_func, s->str, n);
	if (which == 1)
		return match_str(L.step_func, s->str, n);
	return match_str(L.step_class, s->str, n);
}

/* Does the str object end with "/" + call_file (or equal call_file)? */
static __noinline int file_matches(__u64 str)
{
	struct scratch *s = get_scratch();
	long n = ascii_len(str);
	__u32 plen = pat_len(L.call_file);
	__u64 start;
	int i;

	if (!s || n < plen || plen == 0 || plen >= NW_MATCH_LEN)
		return 0;
	start = str + L.unicode_ascii_data + n - plen;
	if (n > plen)
		start--;	/* include the separator before the suffix */
	if (bpf_probe_read_user(s->str, NW_MATCH_LEN, (void *)start))
		return 0;
	if (n > plen && s->str[0] != '/')
		return 0;
	for (i = 0; i < NW_MATCH_LEN - 1; i++) {
		if (i >= plen)
			break;
		if (s->str[i + (n > plen)] != L.call_file[i])
			return 0;
	}
	return 1;
}

/* Is this object's type (or a base up to 4 levels) a type named step_class? */
static __noinline int is_optimizer(__u64 obj)
{
	struct scratch *s = get_scratch();
	__u64 type = read_u64(obj + L.obj_type);
	int i;

	if (!s)
		return 0;
	for (i = 0; i < 5 && type; i++) {
		__u64 name = read_u64(type + L.type_name);
		long n;

		n = bpf_probe_read_user_str(s->str, NW_MATCH_LEN, (void *)name);
		if (n > 0 && match_str(L.step_class, s->str, n - 1))
			return 1;
		type = read_u64(type + L.type_base);
	}
	return 0;
}

static __always_inline int is_tensor(__u64 type)
{
	int i;

	for (i = 0; i < 4 && type; i++) {
		if (type == A.tensor_type)
			return 1;
		type = read_u64(type + L.type_base);
	}
	return 0;
}

static int classify(__u64 code, __u64 frame)
{
	struct code_rec rec = {}, *r;
	__u64 name = read_u64(code + L.code_name);

	if (!name)
		return CODE_OTHER;
	r = bpf_map_lookup_elem(&codes, &code);
	if (r && r->name == name)
		return r->kind;
	rec.name = name;
	if (str_equals(name, 0) && file_matches(read_u64(code + L.code_filename)))
		rec.kind = CODE_MODULE;
	else if (!step_by_marker && str_equals(name, 1) &&
		 is_optimizer(read_u64(frame + L.frame_localsplus + 8 * L.self_slot)))
		rec.kind = CODE_STEP;
	bpf_map_update_elem(&codes, &code, &rec, BPF_ANY);
	return rec.kind;
}

/* Keep the *args tuple's items: the caller still holds them when the call returns. */
static __always_inline void capture_args(struct frame_rec *rec, __u64 frame)
{
	__u64 args = read_u64(frame + L.frame_localsplus + 8 * L.args_slot);
	__u64 n;

	if (!args || read_u64(args + L.obj_type) != A.tuple_type)
		return;
	n = read_u64(args + L.var_size);
	if (n > MAX_ITEMS)
		n = MAX_ITEMS;
	if (n && !bpf_probe_read_user(rec->args, n * 8, (void *)(args + L.tuple_items)))
		rec->nargs = n;
}

/* never written: a new thread's state starts as this (too big for the BPF stack) */
static struct thread_state zero_thread;

static __always_inline struct thread_state *get_thread(__u32 tid)
{
	struct thread_state *ts = bpf_map_lookup_elem(&threads, &tid);

	if (ts)
		return ts;
	bpf_map_update_elem(&threads, &tid, &zero_thread, BPF_NOEXIST);
	return bpf_map_lookup_elem(&threads, &tid);
}

static __always_inline __u64 cur_iteration(void)
{
	__u64 it = iter_started;

	return it ? it - 1 : 0;
}

/*
 * First call of this module under this root: tell the daemon so it can name it
 * and list its parameters early. Marked seen only once the record is queued: a
 * record the ring had no room for is sent again at the module's next call. A
 * model's first forward sends one per module; they may fill only half the ring,
 * so that anomalies, marks and losses queued meanwhile still find room.
 */
static __noinline int note_module(__u64 root, __u64 module, __u64 parent, __u32 depth)
{
	struct seen_key key = {.root = root, .module = module};
	struct scratch *s;
	__u8 one = 1;
	__u64 type;

	if (bpf_map_lookup_elem(&seen, &key))
		return 0;
	if (bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) + sizeof(struct nw_event) >
	    bpf_ringbuf_query(&events, BPF_RB_RING_SIZE) / 2) {
		count_lost(NW_C_LOST_MODULE);
		return 0;
	}
	s = get_scratch();
	if (!s)
		return 0;
	__builtin_memset(&s->ev, 0, sizeof(s->ev));
	s->ev.type = NW_EV_MODULE;
	s->ev.time_ns = bpf_ktime_get_ns();
	s->ev.module = module;
	s->ev.parent = parent;
	s->ev.modules[0] = root;
	s->ev.depth = depth;
	s->ev.tid = (__u32)bpf_get_current_pid_tgid();
	type = read_u64(module + L.obj_type);
	bpf_probe_read_user_str(s->ev.class_name, NW_NAME_LEN, (void *)read_u64(type + L.type_name));
	if (bpf_ringbuf_output(&events, &s->ev, sizeof(s->ev), 0)) {
		count_lost(NW_C_LOST_MODULE);
		return 0;
	}
	bpf_map_update_elem(&seen, &key, &one, BPF_ANY);
	return 0;
}

/*
 * Drop the calls this thread's stack holds whose return was never seen (the kernel
 * stops reporting returns past its nesting limit for return probes). A new call runs
 * below every call still running, so a kept call whose sp is at or below the new
 * one's has returned. Returns the depth the new call is pushed at.
 */
static __always_inline __u32 heal(struct thread_state *ts, __u64 sp)
{
	__u32 depth = ts->depth;
	int i;

	for (i = 0; i < NW_MAX_DEPTH; i++) {
		if (i >= depth)
			break;
		if (ts->sp[i] <= sp) {
			count(NW_C_STACK_HEALED, depth - i);
			/* the dropped call returned unchecked: its caller cannot be its origin */
			if (i > 0)
				ts->unchecked[(i - 1) & (NW_MAX_DEPTH - 1)] = 1;
			return i;
		}
	}
	return depth;
}

/* The Python frame the thread runs now (the caller, at the evaluator's entry). */
static __always_inline __u64 thread_frame(__u64 tstate)
{
	__u64 frame = read_u64(tstate + L.tstate_frame);

	if (L.cframe_frame >= 0)	/* 3.11, 3.12: through the C frame's _PyCFrame */
		frame = frame ? read_u64(frame + L.cframe_frame) : 0;
	return frame;
}

struct walk_ctx {
	__u64 frame;
	int inside;
};

static long walk_frame(__u32 i, void *data)
{
	struct walk_ctx *w = data;
	__u64 code;

	if (!w->frame)
		return 1;
	code = read_u64(w->frame + L.frame_code);
	if (code && classify(code, w->frame) == CODE_MODULE) {
		w->inside = 1;
		return 1;
	}
	w->frame = read_u64(w->frame + L.frame_previous);
	return 0;
}

/*
 * Is this outermost-looking call made inside a module call this thread entered
 * before the probes were attached? Its callers' Python frames say so. The entered
 * frame's previous is set only inside the evaluator: the caller's frame is the
 * one the thread state holds as running.
 */
static __noinline int inside_old_call(__u64 tstate)
{
	struct walk_ctx w = {.frame = thread_frame(tstate)};

	bpf_loop(NW_ANCHOR_FRAMES, walk_frame, &w, 0);
	return w.inside;
}

/* Is the module at addr still the object of type type (not freed, not reused)? */
static __always_inline int alive(__u64 addr, __u64 type)
{
	/* ob_refcnt is the first word of every object: 0 once it was deallocated */
	__u64 refs = read_u64(addr);

	return refs && refs < (1ULL << 48) && read_u64(addr + L.obj_type) == type;
}

/*
 * The outermost module of this call (stack[0]) calls a child: the first such module is
 * the model, whose calls count iterations. A model that was freed (sweeps, k-fold:
 * a new model each round) hands that role to the next one.
 */
static __always_inline void note_root(__u64 top)
{
	__u64 old = root_module;

	if (top == old || (old && alive(old, root_type)))
		return;
	if (__sync_val_compare_and_swap(&root_module, old, top) != old)
		return;
	root_type = read_u64(top + L.obj_type);
	/* this call is the new model's first forward pass */
	__sync_fetch_and_add(&iter_started, 1);
}

/* The first optimizer seen stepping: the daemon (reading step_opt) looks for its step count. */
static __always_inline void note_optimizer(__u64 opt)
{
	if (opt && !step_opt)
		__sync_val_compare_and_swap(&step_opt, 0, opt);
}

/* Push a module call on the thread's stack; 0 when it is not to be tracked. */
static __always_inline int push_call(struct thread_state *ts, struct frame_rec *rec,
				     __u64 tstate, __u64 sp, __u32 tid, __u64 self)
{
	__u32 depth = heal(ts, sp);

	if (depth == 0 && inside_old_call(tstate)) {
		count(NW_C_UNANCHORED, 1);
		ts->depth = 0;
		return 0;
	}
	rec->depth = depth;
	if (depth < NW_MAX_DEPTH) {
		ts->stack[depth] = self;
		ts->sp[depth] = sp;
		ts->kid[depth].impl = 0;	/* no child of this call has returned yet */
		ts->unchecked[depth] = 0;
	} else {
		/* kept nowhere, so never checked: say so at the deepest kept call */
		count(NW_C_STACK_OVERFLOW, 1);
		ts->unchecked[NW_MAX_DEPTH - 1] = 1;
	}
	ts->depth = depth + 1;
	if (depth == 0 && self == root_module)
		__sync_fetch_and_add(&iter_started, 1);
	else if (depth == 1)
		note_root(ts->stack[0]);
	if (depth == 0 && step_by_marker)
		bpf_map_update_elem(&tstates, &tid, &tstate, BPF_ANY);
	return 1;
}

SEC("uprobe")
int BPF_KPROBE(uprobe_eval_frame, void *tstate, void *frame, int throwflag)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct frame_rec rec = {};
	struct frame_key key = {};
	struct thread_state *ts;
	__u64 code, self;
	__u32 depth;
	int kind;

	if ((id >> 32) != targ_tgid || throwflag || stopped)
		return 0;
	count(NW_C_PROBE_HITS, 1);
	code = read_u64((__u64)frame + L.frame_code);
	if (!code)
		return 0;
	kind = classify(code, (__u64)frame);
	if (kind == CODE_OTHER)
		return 0;
	ts = get_thread((__u32)id);
	if (!ts)
		return 0;
	rec.kind = kind;
	key.sp = PT_REGS_SP(ctx) + 8;	/* the stack pointer once the return address is popped */
	key.tid = (__u32)id;
	if (kind == CODE_STEP) {
		rec.depth = ts->step_depth++;
		/* the optimizer, for the return: its state has the step then */
		rec.args[0] = read_u64((__u64)frame + L.frame_localsplus + 8 * L.self_slot);
		if (!rec.depth)
			note_optimizer(rec.args[0]);
		if (rec.depth == 0)
			count(NW_C_STEP_STARTS, 1);
		bpf_map_update_elem(&frames, &key, &rec, BPF_ANY);
		return 0;
	}
	self = read_u64((__u64)frame + L.frame_localsplus + 8 * L.self_slot);
	if (!push_call(ts, &rec, (__u64)tstate, key.sp, key.tid, self))
		return 0;
	depth = rec.depth;
	capture_args(&rec, (__u64)frame);
	count(NW_C_MODULE_CALLS, 1);
	bpf_map_update_elem(&frames, &key, &rec, BPF_ANY);
	note_module(ts->stack[0], self, depth > 0 && depth <= NW_MAX_DEPTH ? ts->stack[(depth - 1) & (NW_MAX_DEPTH - 1)] : 0, depth);
	return 0;
}

/*
 * The target replaced its image: its interpreter and our probes' targets are gone.
 * A flag, not a ring record: the daemon reads it at every poll, and it cannot be lost.
 */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	if (BPF_CORE_READ(p, tgid) == targ_tgid)
		execed = 1;
	return 0;
}

static __always_inline __u32 map_dtype(__u16 st)
{
	if (st == L.dtype_f32)
		return NW_DT_F32;
	if (st == L.dtype_f64)
		return NW_DT_F64;
	if (st == L.dtype_f16)
		return NW_DT_F16;
	if (st == L.dtype_bf16)
		return NW_DT_BF16;
	return NW_DT_NONE;
}

/*
 * Does the tensor cover one block of memory without holes or overlaps, in
 * some order of its dimensions? Then a flat scan of numel elements from its
 * first element sees exactly its elements: counts and min/max do not depend
 * on the order (contiguous, transposed, channels_last all qualify).
 */
__noinline int tensor_dense(void)
{
	struct scratch *s = get_scratch();
	__u32 ndim;
	int d, e;

	if (!s)
		return 0;
	ndim = s->ti.ndim;
	/* sorted by stride, each stride must be the product of the smaller dims' sizes */
	for (d = 0; d < NW_MAX_DIMS; d++) {
		__u64 sd, prod = 1;

		if (d >= ndim)
			break;
		if (s->ti.shape[d] <= 1)
			continue;
		sd = s->ti.strides[d];
		for (e = 0; e < NW_MAX_DIMS; e++) {
			__u64 se, ze;

			if (e >= ndim)
				break;
			se = s->ti.strides[e];
			ze = s->ti.shape[e];
			if (e == d || ze <= 1)
				continue;
			if (se == sd)
				return 0;	/* two dims on one stride: overlap */
			if (se < sd)
				prod *= ze;
		}
		if (sd != prod)
			return 0;
	}
	return 1;
}

/*
 * Read a tensor object's metadata into s->ti. Returns 0 for a scannable float
 * tensor, 1 for a tensor that cannot be NaN (integers, bool), -1 otherwise
 * (ti.flags says why).
 */
__noinline int read_impl(__u64 impl);

__noinline int read_tensor(__u64 obj)
{
	__u64 impl;
	__u8 borrowed = 0;

	if (L.var_borrowed >= 0)	/* -1: a plain at::Tensor, never borrowed */
		bpf_probe_read_user(&borrowed, 1, (void *)(obj + L.var_borrowed));
	impl = read_u64(obj + L.var_tensor);
	if (borrowed)
		impl = read_u64(impl);	/* a borrowed at::Tensor: its first word is the TensorImpl */
	return read_impl(impl);
}

/* The same, from a c10::TensorImpl* (an at::Tensor's only word). */
__noinline int read_impl(__u64 impl)
{
	struct scratch *s = get_scratch();
	__u64 storage, data, off, ndim = 0;
	__u64 sizes[NW_MAX_DIMS] = {}, strides[NW_MAX_DIMS] = {};
	__u8 device = 0;
	__u16 st = 0;
	__u32 size;
	int i;

	if (!s)
		return -1;
	__builtin_memset(&s->ti, 0, sizeof(s->ti));
	s->ti.impl = impl;
	if (!impl || bpf_probe_read_user(&st, sizeof(st), (void *)(impl + L.impl_dtype))) {
		s->ti.flags = NW_SKIP_UNREADABLE;
		return -1;
	}
	s->ti.dtype = map_dtype(st);
	if (s->ti.dtype == NW_DT_NONE)
		return 1;
	size = nw_dtype_size(s->ti.dtype);
	s->ti.numel = read_u64(impl + L.impl_numel);
	ndim = read_u64(impl + L.impl_ndim);
	if (ndim > NW_MAX_DIMS) {
		s->ti.flags = NW_SKIP_DIMS;
		s->ti.ndim = NW_MAX_DIMS;
		return -1;
	}
	s->ti.ndim = ndim;
	if (ndim <= L.sizes_inline) {
		bpf_probe_read_user(sizes, sizeof(sizes), (void *)(impl + L.impl_sizes));
		bpf_probe_read_user(strides, sizeof(strides),
				    (void *)(impl + L.impl_sizes + 8 * L.sizes_inline));
	} else {
		__u64 p = read_u64(impl + L.impl_sizes);

		bpf_probe_read_user(sizes, sizeof(sizes), (void *)p);
		bpf_probe_read_user(strides, sizeof(strides), (void *)(p + 8 * ndim));
	}
	for (i = 0; i < NW_MAX_DIMS; i++) {
		if (i < ndim) {
			s->ti.shape[i] = sizes[i];
			s->ti.strides[i] = strides[i];
		}
	}
	if (!tensor_dense())
		s->ti.flags |= NW_SKIP_NONCONTIG;
	if (s->ti.flags)
		return -1;
	if (L.impl_device >= 0) {
		bpf_probe_read_user(&device, 1, (void *)(impl + L.impl_device));
		if (device != L.device_cpu) {
			s->ti.flags = NW_SKIP_DEVICE;
			return -1;
		}
	}
	storage = read_u64(impl + L.impl_storage);
	data = storage ? read_u64(storage + L.storage_data) : 0;
	if (!data) {
		s->ti.flags = s->ti.numel ? NW_SKIP_NOSTORAGE : 0;
		return s->ti.numel ? -1 : 1;
	}
	off = read_u64(impl + L.impl_storage_offset);
	s->ti.data = data + off * size;
	s->ti.bytes = s->ti.numel * size;
	if (s->ti.bytes > max_scan_bytes) {
		s->ti.bytes = max_scan_bytes - max_scan_bytes % 8;
		s->ti.flags |= NW_SKIP_TRUNCATED;
	}
	return 0;
}

/* Read chunk idx into s->buf; returns the number of 64-bit words (the last one zero-padded). */
static __always_inline int read_chunk(struct scratch *s, __u32 idx)
{
	struct scan_ctx *c = &s->c;
	__u64 off = (__u64)idx * CHUNK_BYTES, n;
	__u32 words, tail, i;

	if (off >= c->bytes)
		return 0;
	n = c->bytes - off;
	if (n > CHUNK_BYTES)
		n = CHUNK_BYTES;
	if (n == 0 || bpf_probe_read_user(s->buf, n, (void *)(c->addr + off))) {
		c->err = 1;
		return 0;
	}
	words = (n + 7) / 8;
	c->words = words;
	tail = n % 8;
	if (tail && words > 0 && words <= CHUNK_WORDS)
		s->buf[(words - 1) & (CHUNK_WORDS - 1)] &= (1ULL << (tail * 8)) - 1;
	/* the word scan goes 8 at a time: zeros (finite) after the data, not the last chunk's */
	for (i = 0; i < 7; i++)
		if (words + i < CHUNK_WORDS && (words + i) % 8)
			s->buf[(words + i) & (CHUNK_WORDS - 1)] = 0;
	return words;
}

/* OR the detector over the first `words` words of s->buf. */
static __always_inline int fast_words(int words)
{
	struct scratch *s = get_scratch();
	__u64 acc = 0, m, a;
	int j;

	if (!s)
		return 0;
	m = s->c.lanes.mask;
	a = s->c.lanes.add;
	/*
	 * (w & mask) + add never carries out of a lane, so OR-ing the sums and
	 * testing the lanes' top bits once at the end is the same as testing
	 * every word: three instructions a word. read_chunk zero-pads to 8 words.
	 */
	for (j = 0; j < CHUNK_WORDS; j += 8) {
		if (j >= words)
			break;
		acc |= (s->buf[j] & m) + a;
		acc |= (s->buf[j + 1] & m) + a;
		acc |= (s->buf[j + 2] & m) + a;
		acc |= (s->buf[j + 3] & m) + a;
		acc |= (s->buf[j + 4] & m) + a;
		acc |= (s->buf[j + 5] & m) + a;
		acc |= (s->buf[j + 6] & m) + a;
		acc |= (s->buf[j + 7] & m) + a;
	}
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

		if (k >= lanes || c->elem >= c->elems)
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

/* Read and scan chunk idx; stops the loop (returns 1) at the end or on a read error. */
__noinline int scan_chunk(__u32 idx, int full)
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
		fast_words(words);
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

#define SCAN_GRAD 2	/* scan_tensor(SCAN_GRAD): the fast pass, counted as a backward gradient */

/* Scan s->ti's data. Returns 1 if some element is NaN/±Inf, 0 if all finite, -1 if unreadable. */
__noinline int scan_tensor(int full)
{
	struct scratch *s = get_scratch();
	struct scan_ctx *c;
	__u32 chunks;

	if (!s || s->ti.dtype == NW_DT_NONE)
		return -1;
	c = &s->c;
	__builtin_memset(c, 0, sizeof(*c));
	c->addr = s->ti.data;
	c->bytes = s->ti.bytes;
	c->size = nw_dtype_size(s->ti.dtype);
	if (!c->size)
		return -1;
	c->elems = c->bytes / c->size;
	c->min_key = ~0ULL;
	nw_lanes_for(s->ti.dtype, &c->lanes);
	nw_fmt_for(s->ti.dtype, &c->fmt);
	chunks = (c->bytes + CHUNK_BYTES - 1) / CHUNK_BYTES;
	if (full == 1) {
		bpf_loop(chunks, full_chunk, NULL, 0);
		s->ev.nan = c->nan;
		s->ev.posinf = c->posinf;
		s->ev.neginf = c->neginf;
		s->ev.min_key = c->min_key;
		s->ev.max_key = c->max_key;
		s->ev.scanned = c->elems;
		c->acc = c->nan | c->posinf | c->neginf;
	} else {
		__u64 t0 = bpf_ktime_get_ns();

		bpf_loop(chunks, fast_chunk, NULL, 0);
		if (!full)	/* the time of the bytes in NW_C_BYTES_SCANNED */
			count(NW_C_SCAN_NS, bpf_ktime_get_ns() - t0);
	}
	if (c->err) {
		count(NW_C_SKIP_UNREADABLE, 1);
		return -1;
	}
	if (!full) {
		count(NW_C_TENSORS_SCANNED, 1);
		count(NW_C_BYTES_SCANNED, c->bytes);
	} else if (full == SCAN_GRAD) {
		count(NW_C_BWD_GRADS, 1);
		count(NW_C_BWD_BYTES, c->bytes);
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
}

/* Check one input object (a tensor, or a tuple/list of tensors) into the event's input counts. */
__noinline int check_input(__u64 obj)
{
	struct scratch *s = get_scratch();
	int r;

	if (!s || !is_tensor(read_u64(obj + L.obj_type)))
		return 0;
	r = read_tensor(obj);
	if (r == 1)
		return 0;
	if (r == 0)
		r = scan_tensor(0);
	if (r < 0) {
		s->ev.inputs_skipped++;
		return 0;
	}
	s->ev.inputs_checked++;
	if (r > 0)
		s->ev.inputs_nonfinite++;
	return 0;
}

static __always_inline int seq_items(__u64 obj, __u64 *items, __u64 *n)
{
	__u64 type = read_u64(obj + L.obj_type);

	if (type != A.tuple_type && type != A.list_type)
		return 0;
	*n = read_u64(obj + L.var_size);
	if (type == A.tuple_type)
		*items = obj + L.tuple_items;
	else
		*items = read_u64(obj + L.list_items);
	return 1;
}

/* The module's positional arguments, as taken when the call was entered. */
static __always_inline int check_inputs(struct scratch *s)
{
	int i, j;

	for (i = 0; i < MAX_ITEMS; i++) {
		__u64 obj, sub = 0, m = 0;

		if (i >= s->nargs)
			break;
		obj = s->args[i];
		if (seq_items(obj, &sub, &m)) {
			for (j = 0; j < MAX_ITEMS; j++) {
				if (j >= m)
					break;
				check_input(read_u64(sub + 8 * j));
			}
		} else {
			check_input(obj);
		}
	}
	return 0;
}

/* Where an instance keeps its attributes: a keys table, and values (0: in its entries). */
static __always_inline int attr_table(__u64 obj, __u64 *keys, __u64 *values)
{
	__u64 type = read_u64(obj + L.obj_type), flags = read_u64(type + D.type_flags);
	__u64 cached = read_u64(type + D.type_cached_keys), dict = 0, w;
	__s64 off;
	__u8 valid = 0;

	*keys = 0;
	*values = 0;
	if (D.inline_values_flag && (flags & D.inline_values_flag)) {
		/* 3.13: values in the object while valid, else a materialized dict */
		bpf_probe_read_user(&valid, 1, (void *)(obj + D.inline_values_offset + D.values_valid));
		if (valid) {
			*keys = cached;
			*values = obj + D.inline_values_offset;
		} else {
			dict = read_u64(obj + D.managed_dict);
		}
	} else if (D.managed_dict_tagged && (flags & D.managed_dict_flag)) {
		/* 3.12: bit 0 set: the values pointer - 1; else the dict */
		w = read_u64(obj + D.managed_dict);
		if (w & 1) {
			*keys = cached;
			*values = w + 1;
		} else {
			dict = w;
		}
	} else if (flags & D.managed_dict_flag) {
		/* 3.11: a dict once __dict__ was asked for, else values with the type's keys */
		dict = read_u64(obj + D.managed_dict);
		if (!dict) {
			*keys = cached;
			*values = read_u64(obj + D.managed_values);
		}
	} else {
		off = (__s64)read_u64(type + D.type_dictoffset);
		if (off > 0)
			dict = read_u64(obj + off);
	}
	if (dict) {
		*keys = read_u64(dict + D.dict_keys);
		*values = read_u64(dict + D.dict_values);
	}
	return *keys != 0;
}

struct dict_walk {
	__u64 entries, values, n, esize;
};

static __always_inline int dict_walk(__u64 keys, __u64 values, struct dict_walk *w)
{
	__u8 log2 = 0, kind = 0;

	if (bpf_probe_read_user(&log2, 1, (void *)(keys + D.keys_log2_index_bytes)) ||
	    bpf_probe_read_user(&kind, 1, (void *)(keys + D.keys_kind)) || log2 > 40)
		return 0;
	w->n = read_u64(keys + D.keys_nentries);
	w->esize = kind == D.keys_kind_general ? D.entry_general : D.entry_unicode;
	w->entries = keys + D.keys_indices + (1ULL << log2);
	w->values = values;
	return w->esize >= 16 && w->esize <= 64;
}

/* Entry i's key and value (entries end with key, value; split tables keep values apart). */
static __always_inline void dict_entry(const struct dict_walk *w, __u32 i, __u64 *k, __u64 *v)
{
	__u64 e = w->entries + i * w->esize;

	*k = read_u64(e + w->esize - 16);
	*v = w->values ? read_u64(w->values + D.values_items + 8 * i) : read_u64(e + w->esize - 8);
}

#define ATTRS_LOOKED 32	/* instance attributes looked through for _parameters */

static __always_inline int same_chars(const char *a, const char *lit, int n)
{
	int i;

	for (i = 0; i < n; i++)
		if (a[i] != lit[i])
			return 0;
	return 1;
}

/* Is the str object "_parameters" (buffers: "_buffers")? */
static __always_inline int is_list_name(__u64 str, int buffers)
{
	struct scratch *s = get_scratch();
	long n = ascii_len(str);

	if (!s || n != (buffers ? 8 : 11) ||
	    bpf_probe_read_user(s->str, 16, (void *)(str + L.unicode_ascii_data)))
		return 0;
	return buffers ? same_chars(s->str, "_buffers", 8) : same_chars(s->str, "_parameters", 11);
}

/*
 * The module's own parameters (buffers: its buffers) read here, from its
 * _parameters (_buffers) dict, into s->np: for a module the daemon has not
 * listed yet (its first call, or its record still queued), so they are scanned
 * (and captured) at the anomaly all the same. Returns 1 if listed.
 */
__noinline int list_params(__u64 module, int buffers)
{
	struct scratch *s = get_scratch();
	struct dict_walk w = {};
	__u64 keys, values, k, v, dict = 0;
	__u32 i;

	if (!s || !D.on || !attr_table(module, &keys, &values) || !dict_walk(keys, values, &w))
		return 0;
	for (i = 0; i < ATTRS_LOOKED && i < w.n; i++) {
		dict_entry(&w, i, &k, &v);
		if (k && v && is_list_name(k, buffers)) {
			dict = v;
			break;
		}
	}
	if (!dict || !dict_walk(read_u64(dict + D.dict_keys), read_u64(dict + D.dict_values), &w))
		return 0;
	__builtin_memset(&s->np, 0, sizeof(s->np));
	for (i = 0; i < ATTRS_LOOKED && i < w.n; i++) {
		dict_entry(&w, i, &k, &v);
		if (!k || !v || v == D.none)
			continue;	/* deleted, or a parameter registered as None */
		if (s->np.n < NW_MAX_PARAMS)
			s->np.tensors[s->np.n++ & (NW_MAX_PARAMS - 1)] = v;
		else
			s->np.more++;
	}
	if (w.n > ATTRS_LOOKED)
		s->np.more += w.n - ATTRS_LOOKED;
	return 1;
}

/*
 * The module's own parameters, scanned now: a moment later the optimizer may
 * have written NaN into them, or overwritten NaN with something else. Not
 * listed by the daemon yet: read from the module here (list_params); failing
 * that the daemon checks them when it gets the event, and the steps begun by
 * now (step_starts) tell it whether an update may have come in between.
 */
__noinline int check_params(__u64 module)
{
	struct scratch *s = get_scratch();
	struct nw_params *p = bpf_map_lookup_elem(&params, &module);
	int i, r;

	if (!s)
		return 0;
	s->ev.step_starts = (__u32)counters[NW_C_STEP_STARTS];
	if (!p && list_params(module, 0)) {
		/* kept for the next calls, and the capture of this one */
		bpf_map_update_elem(&params, &module, &s->np, BPF_NOEXIST);
		p = &s->np;
	}
	if (!p)
		return 0;
	s->ev.params_known = 1;
	s->ev.params_skipped = p->more;
	for (i = 0; i < NW_MAX_PARAMS; i++) {
		if (i >= p->n)
			break;
		if (!is_tensor(read_u64(p->tensors[i] + L.obj_type))) {
			s->ev.params_skipped++;
			continue;
		}
		r = read_tensor(p->tensors[i]);
		if (r == 1)
			continue;
		if (r == 0)
			r = scan_tensor(0);
		if (r < 0) {
			s->ev.params_skipped++;
			continue;
		}
		s->ev.params_checked++;
		if (r > 0)
			s->ev.params_nonfinite++;
	}
	return 0;
}

/*
 * max(a, b) without a branch, for values below 2^63: a branch per element
 * would give the verifier a state per path and the loop would never verify.
 */
static __always_inline __u64 umax63(__u64 a, __u64 b)
{
	__u64 mask = -((a - b) >> 63);	/* all ones when a < b */

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

/* The event's tensor fields from s->ti. */
static __always_inline void ev_tensor(struct scratch *s)
{
	int i;

	s->ev.dtype = s->ti.dtype;
	s->ev.ndim = s->ti.ndim;
	s->ev.numel = s->ti.numel;
	s->ev.flags = s->ti.flags | s->deeper;
	for (i = 0; i < NW_MAX_DIMS; i++)
		s->ev.shape[i] = s->ti.shape[i];
}

/*
 * Send a magnitude event for key (a module, or module | NW_PARAMS_KEY) if mark
 * is one it never reached. s->ev holds the call's stack; the caller set the
 * tensor fields. Returns 1 if sent.
 */
static __always_inline int send_mark(struct scratch *s, __u64 key, __u32 mark, __u64 bits)
{
	__u32 *old = bpf_map_lookup_elem(&marks, &key);
	__u64 type;

	if (old && *old >= mark)
		return 0;
	bpf_map_update_elem(&marks, &key, &mark, BPF_ANY);
	s->ev.type = NW_EV_MAGNITUDE;
	s->ev.max_key = bits;
	type = read_u64(s->ev.module + L.obj_type);
	bpf_probe_read_user_str(s->ev.class_name, NW_NAME_LEN, (void *)read_u64(type + L.type_name));
	s->ev.time_ns = bpf_ktime_get_ns();
	if (bpf_ringbuf_output(&events, &s->ev, sizeof(s->ev), 0))
		count_lost(NW_C_LOST_MARK);
	s->ev.type = NW_EV_ANOMALY;
	s->ev.max_key = 0;
	return 1;
}

/*
 * A finite output just scanned: sample its magnitude from the chunk still in
 * s->buf and report the module when it reaches a mark it never reached: the
 * run-up "large, huge, Inf" shows before the overflow, a healthy run is quiet.
 */
__noinline int note_magnitude(__u32 idx0, __u32 idx1)
{
	struct scratch *s = get_scratch();
	__u32 mark, words;
	__u64 mx;

	if (!s || s->ev.phase != NW_PHASE_FORWARD || !s->c.size)
		return 0;
	mx = sample_max();
	mark = nw_mag_mark(mx, s->ti.dtype);
	if (!mark)
		return 0;
	words = s->c.words < NW_MAG_WORDS ? s->c.words : NW_MAG_WORDS;
	s->ev.index0 = idx0;
	s->ev.index1 = idx1;
	ev_tensor(s);
	s->ev.scanned = (__u64)words * 8 / s->c.size;
	send_mark(s, s->ev.module, mark, mx);
	return 0;
}

/*
 * The same for the module's parameters, listed by the daemon: the first 2 KiB
 * of each is sampled at every call, so a run of updates that blows the
 * weights up shows before they overflow. Marks keyed by module | NW_PARAMS_KEY.
 */
__noinline int note_param_magnitude(__u64 module)
{
	struct scratch *s = get_scratch();
	struct nw_params *p = bpf_map_lookup_elem(&params, &module);
	__u32 best = 0, dtype = 0, mark;
	__u64 best_bits = 0, bits, n, sampled = 0;
	int i;

	if (!s || !p)
		return 0;
	for (i = 0; i < NW_MAX_PARAMS; i++) {
		if (i >= p->n)
			break;
		if (!is_tensor(read_u64(p->tensors[i] + L.obj_type)) || read_tensor(p->tensors[i]))
			continue;
		n = s->ti.bytes;
		if (n > NW_MAG_WORDS * 8)
			n = NW_MAG_WORDS * 8;
		n &= ~7ULL;
		if (n == 0 || n > NW_MAG_WORDS * 8 ||
		    bpf_probe_read_user(s->buf, n, (void *)s->ti.data))
			continue;
		s->c.words = n / 8;
		s->c.size = nw_dtype_size(s->ti.dtype);
		if (s->c.size)
			sampled += n / s->c.size;
		bits = sample_max();
		mark = nw_mag_mark(bits, s->ti.dtype);
		if (mark > best) {
			best = mark;
			best_bits = bits;
			dtype = s->ti.dtype;
		}
	}
	if (!best)
		return 0;
	s->ev.index0 = NW_PARAMS_INDEX;
	s->ev.index1 = NW_NO_INDEX;
	s->ev.dtype = dtype;
	s->ev.ndim = 0;
	s->ev.numel = 0;
	s->ev.scanned = sampled;
	send_mark(s, module | NW_PARAMS_KEY, best, best_bits);
	return 0;
}

static __always_inline int should_report(__u64 iter, __u32 phase)
{
	__u64 first = first_iter_p1, last;

	if (!first) {
		__sync_val_compare_and_swap(&first_iter_p1, 0, iter + 1);
		first = first_iter_p1;
		last_iter_p1 = first;
	}
	if (first == iter + 1)
		return 1;
	last = last_iter_p1;
	if (last != iter + 1 && __sync_val_compare_and_swap(&last_iter_p1, last, iter + 1) == last)
		return 1;
	count(NW_C_SUPPRESSED, 1);
	if (phase == NW_PHASE_LOSS)
		count(NW_C_LOSS_SUPPRESSED, 1);
	return 0;
}

#include "capture.bpf.h"
#include "backward.bpf.h"

/*
 * Fingerprint s->ti into s->fp. Returns 1 when it can identify the tensor: it
 * has a grad_fn (in a forward with autograd each op's output has its own node,
 * alive as long as the graph), so another tensor cannot take its place at the
 * same addresses; an in-place change moves the version (and the grad_fn).
 */
static __always_inline int fingerprint(struct scratch *s)
{
	__u64 meta = read_u64(s->ti.impl + RS.impl_autograd_meta), vc;
	__u32 version = 0;

	s->fp.impl = s->ti.impl;
	s->fp.data = s->ti.data;
	s->fp.bytes = s->ti.bytes;
	s->fp.grad_fn = meta ? read_u64(meta + RS.meta_grad_fn) : 0;
	vc = read_u64(s->ti.impl + RS.impl_version);
	if (!s->fp.grad_fn || !vc ||
	    bpf_probe_read_user(&version, sizeof(version), (void *)(vc + RS.version_value)))
		return 0;
	s->fp.version = version;
	return 1;
}

static __always_inline int same_fp(const struct fingerprint *a, const struct fingerprint *b)
{
	return a->impl == b->impl && a->data == b->data && a->bytes == b->bytes &&
	       a->grad_fn == b->grad_fn && a->version == b->version;
}

/*
 * Check one output tensor; on NaN/±Inf fill s->ev (the caller set the module
 * stack, and the call's arguments in s->args) and send it.
 */
__noinline int check_output(__u64 obj, __u32 idx0, __u32 idx1)
{
	struct scratch *s = get_scratch();
	__u64 iter, type;
	int r, known;

	if (!s)
		return 0;
	r = read_tensor(obj);
	if (r < 0)
		count_skip(s->ti.flags);
	if (r != 0)
		return 0;
	known = RS.on && s->ev.phase == NW_PHASE_FORWARD && fingerprint(s);
	if (known && s->kid.impl && same_fp(&s->kid, &s->fp)) {
		/* the last child returned this very tensor, finite, and nothing changed it */
		count(NW_C_RESCAN_SKIPPED, 1);
		count(NW_C_RESCAN_BYTES, s->ti.bytes);
		s->out_ok = 1;
		return 0;
	}
	r = scan_tensor(0);
	if (r == 0) {
		note_magnitude(idx0, idx1);
		s->out_ok = known;
	}
	if (r <= 0)
		return 0;
	count(NW_C_ANOMALIES, 1);
	if (s->ev.phase == NW_PHASE_LOSS)
		count(NW_C_LOSS_FOUND, 1);
	iter = s->ev.iteration;
	fwd_bad_iter_p1 = iter + 1;	/* its backward pass only propagates this */
	if (!should_report(iter, s->ev.phase))
		return 0;
	s->ev.first_iteration = first_iter_p1 == iter + 1;
	s->ev.index0 = idx0;
	s->ev.index1 = idx1;
	ev_tensor(s);
	scan_tensor(1);
	s->ev.inputs_checked = 0;
	s->ev.inputs_nonfinite = 0;
	s->ev.inputs_skipped = 0;
	check_inputs(s);
	check_params(s->ev.module);
	/* the first anomaly, when it is an origin: copy the call while it is on the stack */
	if (capture_wanted(s))
		capture_layer(obj, idx0, idx1);
	type = read_u64(s->ev.module + L.obj_type);
	bpf_probe_read_user_str(s->ev.class_name, NW_NAME_LEN, (void *)read_u64(type + L.type_name));
	s->ev.time_ns = bpf_ktime_get_ns();
	if (bpf_ringbuf_output(&events, &s->ev, sizeof(s->ev), 0))
		count_lost(s->ev.phase == NW_PHASE_LOSS ? NW_C_LOST_LOSS : NW_C_LOST_FORWARD);
	return 1;
}

/* Walk a module's return value: a tensor, or a tuple/list of them nested one level. */
__noinline int check_result(__u64 ret)
{
	__u64 items = 0, n = 0;
	int i, j;

	if (is_tensor(read_u64(ret + L.obj_type))) {
		note_grad_fn(ret);
		check_output(ret, NW_NO_INDEX, NW_NO_INDEX);
		return 0;
	}
	if (!seq_items(ret, &items, &n))
		return 0;
	if (n > MAX_ITEMS)
		count(NW_C_SKIP_ITEMS, n - MAX_ITEMS);
	for (i = 0; i < MAX_ITEMS; i++) {
		__u64 obj, sub = 0, m = 0;

		if (i >= n)
			break;
		obj = read_u64(items + 8 * i);
		if (is_tensor(read_u64(obj + L.obj_type))) {
			note_grad_fn(obj);
			check_output(obj, i, NW_NO_INDEX);
		} else if (seq_items(obj, &sub, &m)) {
			if (m > MAX_ITEMS)
				count(NW_C_SKIP_ITEMS, m - MAX_ITEMS);
			for (j = 0; j < MAX_ITEMS; j++) {
				__u64 o;

				if (j >= m)
					break;
				o = read_u64(sub + 8 * j);
				if (is_tensor(read_u64(o + L.obj_type)))
					check_output(o, i, j);
			}
		}
	}
	return 0;
}

static __always_inline void fill_stack(struct scratch *s, struct thread_state *ts, __u32 depth)
{
	int i;

	__builtin_memset(&s->ev, 0, sizeof(s->ev));
	s->ev.type = NW_EV_ANOMALY;
	s->ev.tid = (__u32)bpf_get_current_pid_tgid();
	s->ev.step = step_count;
	s->ev.iteration = cur_iteration();
	s->ev.depth = depth + 1 > NW_MAX_DEPTH ? NW_MAX_DEPTH : depth + 1;
	for (i = 0; i < NW_MAX_DEPTH; i++)
		s->ev.modules[i] = i <= depth ? ts->stack[i] : 0;
	s->ev.module = ts->stack[depth < NW_MAX_DEPTH ? depth : NW_MAX_DEPTH - 1];
}

/* The value of an integral float (bits of a float with mbits mantissa bits); -1 if not one. */
static __always_inline long float_count(__u64 bits, __u32 mbits, __u32 ebits)
{
	__u64 bias = (1ULL << (ebits - 1)) - 1, e, m;

	if (!bits)
		return 0;
	if (bits >> (mbits + ebits))
		return -1;	/* negative */
	e = (bits >> mbits) & ((1ULL << ebits) - 1);
	if (e < bias || e - bias > 52)
		return -1;	/* below 1, huge, Inf or NaN */
	e -= bias;
	m = (bits & ((1ULL << mbits) - 1)) | (1ULL << mbits);
	if (e >= mbits)
		return m << (e - mbits);
	if (m & ((1ULL << (mbits - e)) - 1))
		return -1;	/* not an integer */
	return m >> (mbits - e);
}

/* Steps the tracked optimizer completed: its state['step'] tensor; -1 if not known. */
static __noinline long step_state(void)
{
	struct scratch *s = get_scratch();
	__u64 impl = step_impl, bits = 0;

	if (!s || !impl || read_impl(impl) != 0 || s->ti.numel != 1)
		return -1;
	if (s->ti.dtype == NW_DT_F32) {
		if (bpf_probe_read_user(&bits, 4, (void *)s->ti.data))
			return -1;
		return float_count(bits, 23, 8);
	}
	if (s->ti.dtype == NW_DT_F64) {
		if (bpf_probe_read_user(&bits, 8, (void *)s->ti.data))
			return -1;
		return float_count(bits, 52, 11);
	}
	return -1;
}

/*
 * An optimizer step of opt (0: not known), counted as it starts (at_start 1: its
 * state does not include it yet) or as it returns. The tracked optimizer's state
 * sets the step; without it the step counts on from the attach, beginning with the
 * first whole forward pass watched, as iterations do (a step run before it, while
 * the probes were being attached, would put one count ahead of the other). Another
 * optimizer's step leaves it (a GAN's two optimizers), unless that one steps
 * twice in a row: it replaced the tracked one (a new run, a new fold), whose
 * state the daemon then looks up.
 */
static __noinline int step_taken(__u64 opt, __u32 at_start)
{
	long v = -1;

	if (!iter_started)
		return 0;
	count(NW_C_STEPS, 1);
	if (opt && opt != step_opt && step_opt) {
		if (opt != step_other) {
			step_other = opt;
			if (step_count >> NW_STEP_SHIFT)
				return 0;
		} else {
			step_opt = opt;
			step_impl = 0;
		}
	}
	if (opt && opt == step_opt) {
		step_other = 0;
		v = step_state();
	}
	if (v >= 0) {
		step_count = ((__u64)NW_STEP_OPTIMIZER << NW_STEP_SHIFT) |
			     ((v + at_start) & NW_STEP_MASK);
		return 0;
	}
	__sync_fetch_and_add(&step_count, 1);
	return 0;
}

/*
 * torch 2.x: the optimizer whose step opened the marker. Python 3.13 runs the
 * step wrapper inline, so it is found among the first locals of the thread's
 * current frames (the wrapper's self); 0 if not.
 */
static __noinline __u64 marker_optimizer(__u32 tid)
{
	__u64 *tstate = bpf_map_lookup_elem(&tstates, &tid);
	__u64 frame;
	int i, j;

	if (!tstate)
		return 0;
	frame = thread_frame(*tstate);
	for (i = 0; i < 8 && frame; i++) {
		for (j = 0; j < 4; j++) {
			__u64 obj = read_u64(frame + L.frame_localsplus + 8 * j);

			if (obj && is_optimizer(obj))
				return obj;
		}
		frame = read_u64(frame + L.frame_previous);
	}
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(uretprobe_eval_frame, void *ret)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct frame_key key = {};
	struct thread_state *ts;
	struct frame_rec *r, rec;
	struct scratch *s;

	if ((id >> 32) != targ_tgid || stopped)
		return 0;
	key.sp = PT_REGS_SP(ctx);
	key.tid = (__u32)id;
	r = bpf_map_lookup_elem(&frames, &key);
	if (!r)
		return 0;
	rec = *r;
	bpf_map_delete_elem(&frames, &key);
	ts = bpf_map_lookup_elem(&threads, &key.tid);
	if (!ts)
		return 0;
	if (rec.kind == CODE_STEP) {
		ts->step_depth = rec.depth;
		if (rec.depth == 0 && ret)
			step_taken(rec.args[0], 0);
		return 0;
	}
	/* a call the stack no longer holds (healed away, see heal()) is not ours to pop */
	if (rec.depth < NW_MAX_DEPTH && (rec.depth >= ts->depth || ts->sp[rec.depth] != key.sp))
		return 0;
	/* a child still on the stack never returned as far as we saw: it went unchecked */
	if (rec.depth < NW_MAX_DEPTH && ts->depth > rec.depth + 1)
		ts->unchecked[rec.depth] = 1;
	ts->depth = rec.depth;	/* pop, exactly to where this call was pushed */
	if (!ret || rec.depth >= NW_MAX_DEPTH || (top_only && rec.depth > 0))
		return 0;
	s = get_scratch();
	if (!s)
		return 0;
	fill_stack(s, ts, rec.depth);
	s->deeper = ts->unchecked[rec.depth] ? NW_FLAG_DEEPER : 0;
	__builtin_memcpy(s->args, rec.args, sizeof(s->args));
	s->nargs = rec.nargs;
	s->kid = ts->kid[rec.depth];
	s->fp.impl = 0;
	s->single = is_tensor(read_u64((__u64)ret + L.obj_type));
	s->out_ok = 0;
	check_result((__u64)ret);
	s->deeper = 0;		/* ev_tensor() of other programs must not see it */
	if (rec.depth > 0) {
		/* what this call hands its parent: remembered only while the parent runs */
		if (s->single && s->out_ok)
			ts->kid[(rec.depth - 1) & (NW_MAX_DEPTH - 1)] = s->fp;
		else
			ts->kid[(rec.depth - 1) & (NW_MAX_DEPTH - 1)].impl = 0;
	}
	note_param_magnitude(s->ev.module);
	return 0;
}

/*
 * torch 2.x: Optimizer.step runs inside record_function("Optimizer.step#<class>.step"),
 * whose C++ entry gets the name as a std::string (pointer, length first). It returns an
 * intrusive_ptr, a class returned through a hidden first argument: the name is the second.
 */
SEC("uprobe")
int BPF_KPROBE(uprobe_step_marker, void *ret_slot, void *name)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct {
		__u64 ptr;
		__u64 len;
	} str = {};
	char buf[NW_MATCH_LEN] = {};
	__u32 plen = pat_len(L.step_marker);
	__u64 opt;
	int i;

	if ((id >> 32) != targ_tgid || stopped || !plen || plen >= NW_MATCH_LEN)
		return 0;
	if (bpf_probe_read_user(&str, sizeof(str), name) || str.len < plen)
		return 0;
	if (bpf_probe_read_user(buf, plen & (NW_MATCH_LEN - 1), (void *)str.ptr))
		return 0;
	for (i = 0; i < NW_MATCH_LEN; i++) {
		if (i >= plen)
			break;
		if (buf[i] != L.step_marker[i])
			return 0;
	}
	/* counted as the step starts: no module runs inside a step but an LBFGS closure */
	count(NW_C_STEP_STARTS, 1);
	opt = marker_optimizer((__u32)id);
	note_optimizer(opt);
	step_taken(opt, 1);
	return 0;
}

/* The value of a scalar loss (s->ti, as check_output read it), for the loss trend. */
static __always_inline void send_loss(struct scratch *s)
{
	__u64 bits = 0;
	__u32 size = nw_dtype_size(s->ti.dtype);
	void *p = (void *)s->ti.data;

	if (s->ti.numel != 1 || s->ti.flags || !size || size > sizeof(bits) ||
	    bpf_probe_read_user(&bits, size, p))
		return;
	s->ev.type = NW_EV_LOSS;
	s->ev.dtype = s->ti.dtype;
	s->ev.min_key = bits;
	s->ev.time_ns = bpf_ktime_get_ns();
	if (bpf_ringbuf_output(&events, &s->ev, sizeof(s->ev), 0))
		count_lost(NW_C_LOST_LOSS_VALUE);
}

/*
 * The loss, however it was computed: backward() hands the engine's
 * run_backward(self, args, kwargs) a tuple whose first item is the tuple of
 * tensors to differentiate. A log(0) in a hand-written loss shows here, at
 * the step it happens, before the optimizer spreads it into the weights.
 */
SEC("uprobe")
int BPF_KPROBE(uprobe_run_backward, void *engine, void *args)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u64 tensors, items = 0, n = 0, type, iteration = 0;
	struct scratch *s;
	int i;

	if ((id >> 32) != targ_tgid || stopped || !args)
		return 0;
	type = read_u64((__u64)args + L.obj_type);
	if (type != A.tuple_type)
		return 0;
	tensors = read_u64((__u64)args + L.tuple_items);
	if (!seq_items(tensors, &items, &n))
		return 0;
	s = get_scratch();
	if (!s)
		return 0;
	count(NW_C_PROBE_HITS, 1);
	if (loss_only) {
		iteration = __sync_fetch_and_add(&iter_started, 1);
		if (!step_by_marker) {
			step_count = iteration + 1;	/* what the stats call steps */
			count(NW_C_STEPS, 1);
		}
	}
	for (i = 0; i < 4; i++) {
		__u64 obj;

		if (i >= n)
			break;
		obj = read_u64(items + 8 * i);
		if (!is_tensor(read_u64(obj + L.obj_type)))
			continue;
		__builtin_memset(&s->ev, 0, sizeof(s->ev));
		s->ev.type = NW_EV_ANOMALY;
		s->ev.phase = NW_PHASE_LOSS;
		s->ev.tid = (__u32)id;
		s->ev.step = step_count;
		s->ev.iteration = cur_iteration();
		if (loss_only) {
			/* no module probes: each backward is an iteration, and without a step marker
			 * (torch 1.x) a step too */
			s->ev.iteration = iteration;
			if (!step_by_marker)
				s->ev.step = iteration;
		}
		s->nargs = 0;
		check_output(obj, n > 1 ? i : NW_NO_INDEX, NW_NO_INDEX);
		if (i == 0)
			send_loss(s);
	}
	return 0;
}

char LICENSE[] SEC("license") = "Dual BSD/GPL";
