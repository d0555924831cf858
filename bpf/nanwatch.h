/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Types and constants shared by the BPF programs and nanwatchd. */
#ifndef __NANWATCH_H
#define __NANWATCH_H

#define NW_MAX_DEPTH 32	 /* module nesting kept per thread; deeper calls are counted */
#define NW_MAX_DIMS 8	 /* shape entries reported */
#define NW_NAME_LEN 64	 /* class name bytes read in BPF */
#define NW_MATCH_LEN 32	 /* function / path match strings */
#define NW_KEY_LEN 32	 /* a keyword argument's or dict output's key, with its NUL */
#define NW_MAX_KWARGS 4	 /* keyword arguments of a module call looked at */
#define NW_NO_INDEX 0xff /* tensor path component unused */

/* Event types on the ring buffer. */
enum nw_event_type {
	NW_EV_ANOMALY = 1, /* a checked tensor holds NaN/±Inf */
	NW_EV_MODULE = 2,  /* first call of a (root, module) pair (sent again until queued) */
	/* on the capture ring buffer (bpf/capture.bpf.h) */
	NW_EV_CAP_TENSOR = 20, /* struct nw_cap_tensor: one tensor of the captured call */
	NW_EV_CAP_DATA = 21,   /* struct nw_cap_data: a chunk of its bytes */
	NW_EV_CAP_END = 22,    /* struct nw_cap_end: the capture is complete */
	/* the scalar backward() starts from: min_key holds its element bits, dtype its type */
	NW_EV_LOSS = 30,
	/*
	 * a module's output reached a new magnitude: max_key holds the bits of the
	 * largest |value| in the sampled words (sign cleared), with the module stack,
	 * the tensor index and the class as in an anomaly
	 */
	NW_EV_MAGNITUDE = 31,
	/*
	 * a gradient scaler's update: flags 1 if the step was skipped, dtype NW_DT_F32 and
	 * min_key the bits of the scale the step ran with (NW_DT_NONE: not read)
	 */
	NW_EV_SCALER = 32,
	NW_EV_GRAD = 10,      /* struct nw_grad: a parameter gradient's magnitude histogram */
	NW_EV_GRAD_DATA = 11, /* struct nw_grad_data: a chunk of a gradient whose histogram the
				 daemon counts (its nw_grad follows its chunks, data_id set) */
};

/*
 * The training loop's counter-named locals (daemon/session/loopstep.c) read as each root
 * forward pass begins: the daemon writes the slots' addresses (loop_slots, loop_nslots,
 * loop_gen), BPF copies what each slot points to into loop_snap. Read there, the value
 * and the step belong to the same moment however short the pass is.
 */
#define NW_LOOP_SLOTS 16
#define NW_LOOP_WORDS 6 /* words of the int object copied: header and two 30-bit digits */

struct nw_loop_snap {
	__u64 seq;	 /* odd while BPF writes it */
	__u64 gen;	 /* loop_gen of the slots read */
	__u64 step;	 /* step_count then */
	__u64 iteration; /* iter_started then */
	__u64 nslots;
	__u64 obj[NW_LOOP_SLOTS]; /* the object each slot held, 0 if unreadable */
	__u64 raw[NW_LOOP_SLOTS][NW_LOOP_WORDS];
};

/*
 * The step of every record (and BPF's step_count) is one word: the step in the
 * low NW_STEP_SHIFT bits, where it comes from (enum nw_step_source) above them,
 * so that whoever reads it gets both from the same moment.
 */
#define NW_STEP_SHIFT 56
#define NW_STEP_MASK ((1ULL << NW_STEP_SHIFT) - 1)

enum nw_step_source {
	NW_STEP_ATTACH = 0,    /* optimizer steps counted since the attach */
	NW_STEP_OPTIMIZER = 1, /* the optimizer's own count: its first parameter's state['step'] */
	NW_STEP_BACKWARD = 2, /* no optimizer step seen: backward passes counted since the attach */
};

/*
 * Bytes a scan copies out of the target at once (one bpf_probe_read_user, one loop
 * iteration). A copy has a fixed cost of about what 3-4 KiB of bytes take (the transformer
 * of make bench: return program 5.1 ms a step at 8 KiB, 3.9 ms at 32 KiB), and a copy from
 * memory rather than cache streams faster the longer it runs (a 64 MiB buffer copied alone:
 * 15.1 GB/s in 8 KiB calls, 18.2 in 32 KiB, 19.4 in 64 KiB; scanned, 11.3 GB/s at 32 KiB
 * and 12.5 at 64 KiB). The test reads the chunk back from L1 or L2. One chunk a CPU in
 * the scratch (state.bpf.h).
 */
#define NW_SCAN_CHUNK 65536
#define NW_MAG_WORDS 256     /* 64-bit words of an output sampled for its magnitude */
#define NW_MAG_BINADES 4     /* a new magnitude mark every 2^4 = 16x */
#define NW_PARAMS_INDEX 0xfe /* index0 of a magnitude event about the module's parameters */
#define NW_PARAMS_KEY 1ULL   /* or-ed into a module's address: its parameters' mark */
#define NW_LOSS_NODES 15     /* autograd nodes a loss event names, from the loss down */
/*
 * A loss event's modules[1 + NW_LOSS_NODES + i]: how node i of the walk (breadth first from
 * the loss) was found. Bits 0-7: the node whose edge led to it (NW_LOSS_ROOT: the loss's own);
 * 8-15: that edge's index (the op's operand); bit 24:
 * it has one input that needs a gradient (an edge to a node, or a second edge to none); bit
 * 25: a second node's edge led to it too (a value the loss uses twice), that node in bits
 * 32-39, the edge's index in 40-47.
 */
#define NW_LOSS_ENDS 8 /* node classes a loss's walk stops at (nw_bwd_layout.end_vptr) */
#define NW_LOSS_ROOT 0xff
#define NW_LOSS_SINGLE (1U << 24)
#define NW_LOSS_ALSO (1U << 25)
/* index0 | NW_ATTR_INDEX: the place among the attributes of an object output (a dataclass)
 * that is no tuple, list or dict, the key its name */
#define NW_ATTR_INDEX 0x80

enum nw_phase {
	NW_PHASE_FORWARD = 0,  /* a module's output */
	NW_PHASE_LOSS = 1,     /* a tensor backward() starts from */
	NW_PHASE_BACKWARD = 2, /* a gradient an autograd node produced */
};

/* Our dtype ids (the target's scalar type codes map onto these via the layout). */
enum nw_dtype {
	NW_DT_NONE = 0,
	NW_DT_F16 = 1,
	NW_DT_F32 = 2,
	NW_DT_F64 = 3,
	NW_DT_BF16 = 4,
};

/* Why a tensor was not scanned (bit flags in nw_event.flags and counters). */
enum nw_skip {
	NW_SKIP_NONCONTIG = 1,	/* not dense: holes or overlaps (expanded, strided views) */
	NW_SKIP_DEVICE = 2,	/* not a CPU tensor */
	NW_SKIP_UNREADABLE = 4, /* target memory could not be read */
	NW_SKIP_DIMS = 8,	/* more dimensions than we read */
	NW_SKIP_TRUNCATED = 16, /* larger than max_scan_bytes: only a prefix scanned */
	NW_SKIP_NOSTORAGE = 32, /* no storage (sparse, meta, ...) */
	NW_SKIP_DTYPE = 64,	/* a type that may hold NaN/±Inf, not read (complex, float8) */
};

/*
 * nw_event.flags, beside enum nw_skip: a module call nested in this one was not
 * checked (nested deeper than NW_MAX_DEPTH, or its return was never reported: the
 * kernel stops reporting returns past its nesting limit), so it may have made the value.
 */
#define NW_FLAG_DEEPER 0x100

/* Counters in BPF .bss, read by the daemon for stats. */
enum nw_counter {
	NW_C_MODULE_CALLS,
	NW_C_STEPS,
	NW_C_TENSORS_SCANNED,
	NW_C_BYTES_SCANNED,
	NW_C_ANOMALIES,
	NW_C_SUPPRESSED,
	NW_C_LOST,
	NW_C_SKIP_NONCONTIG,
	NW_C_SKIP_DEVICE,
	NW_C_SKIP_UNREADABLE,
	NW_C_SKIP_DIMS,
	NW_C_TRUNCATED,
	NW_C_PROBE_HITS,
	NW_C_STACK_OVERFLOW,
	NW_C_SKIP_ITEMS,       /* tuple/list items past the ones we walk */
	NW_C_SCAN_NS,	       /* time in the scan of the bytes in NW_C_BYTES_SCANNED */
	NW_C_BWD_NODES,	       /* autograd nodes evaluated */
	NW_C_BWD_GRADS,	       /* gradients entering them scanned */
	NW_C_BWD_BYTES,	       /* bytes of those */
	NW_C_BWD_ANOMALIES,    /* non-finite gradients found */
	NW_C_BWD_PARAM_GRADS,  /* parameter gradients measured for norms */
	NW_C_BWD_NORM_SKIPPED, /* parameter gradients not measured (dtype, unreadable, size) */
	NW_C_BWD_GRADS_LOST,   /* parameter gradient histograms dropped: their ring was full */
	NW_C_RESCAN_SKIPPED,   /* module outputs not scanned again: a parent returned them as is */
	NW_C_RESCAN_BYTES,     /* their bytes */
	NW_C_UNANCHORED,   /* module calls inside a call entered before the attach: not checked */
	NW_C_STACK_HEALED, /* stack entries dropped because their return was never seen */
	/*
	 * Anomalies per phase: found = sent + suppressed + lost. NW_C_ANOMALIES and
	 * NW_C_SUPPRESSED hold the forward and loss phases, these the loss phase's
	 * share; the backward phase has NW_C_BWD_ANOMALIES and its own two.
	 */
	NW_C_LOSS_FOUND,
	NW_C_LOSS_SUPPRESSED,
	NW_C_BWD_SUPPRESSED,
	/* records the ring buffers had no room for, per type (NW_C_LOST: all on `events`) */
	NW_C_LOST_FORWARD,    /* NW_EV_ANOMALY, phase forward */
	NW_C_LOST_LOSS,	      /* NW_EV_ANOMALY, phase loss */
	NW_C_LOST_BACKWARD,   /* NW_EV_ANOMALY, phase backward */
	NW_C_LOST_MODULE,     /* NW_EV_MODULE not queued (ring full, or half full: room kept
				 * for the other records); sent again at the module's next call */
	NW_C_LOST_MARK,	      /* NW_EV_MAGNITUDE */
	NW_C_LOST_LOSS_VALUE, /* NW_EV_LOSS */
	NW_C_LOST_CAPTURE,    /* NW_EV_CAP_* on the capture ring */
	NW_C_STEP_STARTS,     /* outermost optimizer steps begun (counted at their start) */
	NW_C_SCAN_COPIES,     /* copies out of the target made to scan NW_C_BYTES_SCANNED */
	NW_C_SCALER_SKIPS,    /* steps a gradient scaler skipped (bpf/scaler.bpf.c) */
	NW_C_LOST_SCALER,     /* NW_EV_SCALER */
	NW_C_COPY_NS,	      /* time in the timed copies of the scans (NW_C_COPY_BYTES) */
	NW_C_COPY_BYTES,    /* their bytes: each tensor's first chunk, every chunk with stats on */
	NW_C_TASK_COPIES,   /* scan copies made with bpf_copy_from_user_task */
	NW_C_BWD_SCAN_NS,   /* time in the scan of the gradients in NW_C_BWD_BYTES */
	NW_C_SEQ_READS,	    /* reads of the thread's autograd sequence counter (TLS) */
	NW_C_SCRATCH_TAKEN, /* task copies whose scratch another program took while they slept */
	NW_C_RETURN_HITS,   /* runs of the frame evaluator's return program, the target's */
	NW_C_RETURN_NS,	    /* their time (with the run-time stats on) */
	NW_C_UNARMED,	    /* returns not armed: another watch's probes were being removed */
	NW_C_BWD_COPIES,    /* copies out of the target made to scan NW_C_BWD_BYTES */
	NW_C_KEPT_FINITE,   /* module outputs not scanned: finite, from a finite input (nw_keep) */
	NW_C_KEPT_BYTES,    /* their bytes */
	NW_C_BWD_OFFLOADED, /* parameter gradients whose histogram the daemon counted */
	NW_C_NORM_CHECKED, /* module outputs not scanned: the norm they went to proved them (nw_defer) */
	NW_C_NORM_BYTES,    /* their bytes */
	NW_C_FORKS,	    /* processes the target forked (with a uprobe session: on_fork) */
	NW_C_FORKS_CLEANED, /* the daemon's cleanings of them (never counted in BPF) */
	NW_C_SKIP_DTYPE,    /* tensors not scanned: NW_SKIP_DTYPE */
	NW_C_BWD_NESTED,    /* backward passes run inside another's: no loss (bpf/loss.bpf.c) */
	NW_C_VIEWS,	    /* views with holes or overlaps scanned (their span) */
	NW_C_VIEWS_EXACT, /* ... read run by run: the span held NaN/±Inf, or its copies were more */
	/* the session closed and opened again, another watch's removal being slow (never
	 * counted in BPF, see attach/probe.c) */
	NW_C_PARKED,
	NW_C_MAX,
};

/*
 * How the scanner copies a tensor's bytes out of the target (rodata read_method), chosen
 * at attach (daemon/attach/readcal.h). Anything but NW_READ_PROBE needs the scanning
 * programs loaded sleepable.
 */
enum nw_read_method {
	NW_READ_PROBE = 0, /* bpf_probe_read_user */
	NW_READ_TASK = 1,  /* bpf_copy_from_user_task */
	/*
	 * Per tensor: its first chunk by bpf_probe_read_user, timed; slower than the task
	 * method would have been (task_ns_per_page for each page it touches), the rest by the
	 * task method, and so the next tensors too, each 16th trying the first way again.
	 */
	NW_READ_ADAPTIVE = 2,
};

/*
 * Offsets into the target's memory. Filled from config/layouts/ by the daemon,
 * read-only in BPF. Signed: managed-dict offsets in CPython 3.11 are negative.
 */
struct nw_layout {
	/* CPython */
	__s64 frame_code;	  /* _PyInterpreterFrame.f_code (f_executable in 3.13) */
	__s64 frame_localsplus;	  /* _PyInterpreterFrame.localsplus */
	__s64 frame_previous;	  /* _PyInterpreterFrame.previous (the caller's frame) */
	__s64 tstate_frame;	  /* PyThreadState.current_frame (3.13) or .cframe (3.11, 3.12) */
	__s64 cframe_frame;	  /* _PyCFrame.current_frame; -1: tstate_frame is the frame */
	__s64 stackref_mask;	  /* 3.14: tag bits of a frame slot's word (_PyStackRef); 0: none */
	__s64 code_name;	  /* PyCodeObject.co_name */
	__s64 code_filename;	  /* PyCodeObject.co_filename */
	__s64 obj_type;		  /* PyObject.ob_type */
	__s64 var_size;		  /* PyVarObject.ob_size */
	__s64 tuple_items;	  /* PyTupleObject.ob_item */
	__s64 list_items;	  /* PyListObject.ob_item (pointer) */
	__s64 type_name;	  /* PyTypeObject.tp_name */
	__s64 type_base;	  /* PyTypeObject.tp_base */
	__s64 unicode_length;	  /* PyASCIIObject.length */
	__s64 unicode_state;	  /* PyASCIIObject.state */
	__s64 unicode_ascii_data; /* data of a compact ASCII string */
	/* torch */
	__s64 var_borrowed;	   /* THPVariable: MaybeOwned.isBorrowed_ (byte); -1: none */
	__s64 var_tensor;	   /* THPVariable: TensorImpl* (or at::Tensor* if borrowed) */
	__s64 impl_storage;	   /* TensorImpl.storage_ (StorageImpl*) */
	__s64 impl_storage_offset; /* TensorImpl.storage_offset_ */
	__s64 impl_numel;	   /* TensorImpl.numel_ */
	__s64 impl_dtype;	   /* TensorImpl.data_type_ (u16 scalar type) */
	__s64 impl_device;	   /* TensorImpl.device_opt_ (type byte); -1: unknown */
	__s64 impl_ndim;	   /* SizesAndStrides.size_ */
	__s64 impl_sizes;	   /* SizesAndStrides inline sizes / out-of-line pointer */
	__s64 storage_data;	   /* StorageImpl data pointer */
	__u32 sizes_inline;	   /* dims stored inline (strides follow sizes) */
	__u32 ascii_bit;	   /* bit in unicode state: ascii */
	__u32 compact_bit;	   /* bit in unicode state: compact */
	__u32 self_slot;	   /* localsplus index of self in the module call */
	__u32 args_slot;	   /* localsplus index of the *args tuple */
	__u32 kwargs_slot;	   /* localsplus index of the **kwargs dict; 0: not read */
	__u32 dtype_f16;	   /* the target's scalar type codes */
	__u32 dtype_f32;
	__u32 dtype_f64;
	__u32 dtype_bf16;
	__u32 device_cpu;	       /* device type code of CPU */
	char call_func[NW_MATCH_LEN];  /* module call function: "_call_impl" */
	char call_file[NW_MATCH_LEN];  /* its file ends with this */
	char step_func[NW_MATCH_LEN];  /* optimizer step function: "step" */
	char step_class[NW_MATCH_LEN]; /* class name an optimizer derives from: "Optimizer" */
	/* profiler name prefix of a step: "Optimizer.step#"; "" off */
	char step_marker[NW_MATCH_LEN];
};

#define NW_MAX_PARAMS 8 /* parameters of one module checked at an anomaly */

/*
 * A module's own parameters (torch.nn.Parameter objects), listed by the daemon,
 * or by BPF from the module's _parameters at an anomaly the daemon was not ready for.
 */
struct nw_params {
	__u64 tensors[NW_MAX_PARAMS];
	__u32 n;
	__u32 more; /* parameters past the listed ones */
};

/*
 * CPython's instance and dict layout (the python table's, as the daemon reads
 * them), for BPF to find a module's _parameters itself when the daemon has not
 * listed them yet. on: 0 when not set (BPF then leaves that to the daemon).
 */
struct nw_dict_layout {
	__s64 type_flags;	     /* PyTypeObject.tp_flags */
	__s64 type_dictoffset;	     /* PyTypeObject.tp_dictoffset */
	__s64 type_cached_keys;	     /* PyHeapTypeObject.ht_cached_keys */
	__s64 managed_dict_flag;     /* Py_TPFLAGS_MANAGED_DICT */
	__s64 managed_dict;	     /* from the object: its dict (3.12: dict or values - 1) */
	__s64 managed_values;	     /* from the object: its values (3.11) */
	__s64 managed_dict_tagged;   /* 3.12: the managed_dict word is tagged */
	__s64 inline_values_flag;    /* 3.13: Py_TPFLAGS_INLINE_VALUES */
	__s64 inline_values_offset;  /* 3.13: PyDictValues in the object */
	__s64 values_valid;	     /* 3.13: PyDictValues.valid */
	__s64 type_basicsize;	     /* 3.14: tp_basicsize: the inline values after it; 0: fixed */
	__s64 dict_keys;	     /* PyDictObject.ma_keys */
	__s64 dict_values;	     /* PyDictObject.ma_values */
	__s64 keys_log2_index_bytes; /* PyDictKeysObject.dk_log2_index_bytes (byte) */
	__s64 keys_kind;	     /* PyDictKeysObject.dk_kind (byte) */
	__s64 keys_nentries;	     /* PyDictKeysObject.dk_nentries */
	__s64 keys_indices;	     /* PyDictKeysObject.dk_indices */
	__s64 values_items;	     /* PyDictValues.values */
	__s64 keys_kind_general;     /* dk_kind of (hash, key, value) entries */
	__s64 entry_general;	     /* entry sizes */
	__s64 entry_unicode;
	__u64 none; /* &_Py_NoneStruct */
	__u32 on;
	__u32 pad;
};

/* Addresses in the target, resolved from symbols by the daemon. */
struct nw_addrs {
	__u64 tuple_type;  /* &PyTuple_Type */
	__u64 list_type;   /* &PyList_Type */
	__u64 tensor_type; /* &THPVariableType (torch._C._TensorBase) */
};

#define NW_HELD_LEN (NW_MAX_DIMS * 8) /* a module record's key: the bytes of shape[] */

/*
 * Anomaly event: tensor `index0[index1]` of the output of modules[depth - 1],
 * called from modules[0] (the outermost). Largest fields first.
 */
struct nw_event {
	__u64 time_ns;		     /* bpf_ktime_get_ns */
	__u64 step;		     /* optimizer steps completed */
	__u64 iteration;	     /* outermost-module forward passes (0-based) */
	__u64 modules[NW_MAX_DEPTH]; /* phase loss: [1..NW_LOSS_NODES] the vtable pointers of
				      * the nodes that made the loss (bpf/loss.bpf.c), then
				      * how each was found (NW_LOSS_ROOT) */
	union {
		__u64 shape[NW_MAX_DIMS];
		/* NW_EV_MODULE: where its caller (parent) holds it, a C string: its key in the
		 * caller's _modules, or "holder.key" through a container the caller holds; "" if
		 * not found. The daemon names a module from these once the model is gone. */
		char held[NW_HELD_LEN];
	};
	__u64 numel;
	__u64 scanned; /* elements scanned */
	__u64 nan;
	__u64 posinf;
	__u64 neginf;
	__u64 min_key; /* nw_order_key of the finite min; ~0 if none */
	__u64 max_key; /* nw_order_key of the finite max; 0 if none */
	__u64 module;  /* the module whose call returned (NW_EV_MODULE: the module) */
	__u64 parent;  /* NW_EV_MODULE: its caller module (0 at depth 0); phase backward: the
			* vtable pointer of the node that fed `node` its input 0's gradient */
	__u32 type;    /* enum nw_event_type */
	__u32 tid;
	__u32 depth; /* entries used in modules[] */
	__u32 ndim;
	__u32 dtype;		/* enum nw_dtype */
	__u32 flags;		/* enum nw_skip */
	__u32 inputs_checked;	/* tensor inputs scanned */
	__u32 inputs_nonfinite; /* of those, how many hold NaN/±Inf */
	__u32 inputs_skipped;	/* tensor inputs that could not be scanned */
	__u32 first_iteration;	/* 1 while in the first anomalous iteration */
	__u32 params_known;	/* 1 if the daemon had listed the module's parameters */
	__u32 params_checked;	/* parameters scanned */
	__u32 params_nonfinite; /* of those, how many hold NaN/±Inf */
	__u32 params_skipped;	/* parameters that could not be scanned (or were not listed) */
	__u8 index0;		/* output[index0]; NW_NO_INDEX: output itself */
	__u8 index1;		/* output[index0][index1]; NW_NO_INDEX: none */
	__u8 phase;		/* enum nw_phase */
	__u8 step_source;	/* enum nw_step_source: set by the daemon from the step word */
	__u32 step_starts;	/* low 32 bits of NW_C_STEP_STARTS as the parameters were checked */
	char class_name[NW_NAME_LEN]; /* tp_name of the module's type */
	/* phase backward: modules[]/module/depth/class_name are the forward module that made
	 * the node (module 0: not known); these name the node */
	__u64 node;	     /* the torch::autograd::Node whose output grad[index0] is bad */
	__u64 node_vptr;     /* its vtable pointer (the daemon names the class from it) */
	__u64 consumer_vptr; /* vtable pointer of the node that received the gradient */
	__u32 producers;     /* nodes found feeding that input (1: exact) */
	__u32 input_nr;	     /* the consumer's input the gradient arrived at */
	/* phase forward, an output that is a dict: index0 is the value's place in it, and this
	 * its key ("" if not an ASCII str that fits) */
	char key[NW_KEY_LEN];
};

/*
 * Backward-phase layout: torch's autograd engine. Offsets measured by
 * tools/nanwatch-layout; the probe symbol comes from the same table.
 */
/*
 * What identifies a tensor already scanned finite when a parent module returns
 * it again: its TensorImpl, data, grad_fn and version counter. Offsets from
 * the torch table; on 0 when it lacks them (every output is scanned).
 */
struct nw_rescan {
	__s64 impl_autograd_meta; /* TensorImpl.autograd_meta_ (unique_ptr) */
	__s64 meta_grad_fn;	  /* AutogradMeta.grad_fn_ (shared_ptr<Node>: Node* first) */
	__s64 impl_version;	  /* TensorImpl.version_counter_ (intrusive_ptr<VersionCounter>) */
	__s64 version_value;	  /* VersionCounter.version_ (u32) */
	__u32 on;
	__u32 pad;
};

/*
 * A module whose output is finite whenever its one input is, vouched for by the daemon
 * (daemon/resolve/keep.c: torch's own ReLU, max pools, Flatten and Unflatten, with torch's
 * own forward): map keep_mods, keyed by the module object. Its forward hook dicts, and
 * torch's global ones, must be empty: any hook, and its output is scanned as any other.
 */
#define NW_KEEP_HOOKS 2 /* _forward_pre_hooks and _forward_hooks */

enum nw_keep_kind {
	NW_KEEP_FINITE = 0, /* a finite input gives a finite output */
	/*
	 * a norm (torch's BatchNorm, LayerNorm, GroupNorm, InstanceNorm, RMSNorm): every output
	 * value of a group depends on each input value of the group through arithmetic alone
	 * (the group's mean), so one NaN or Inf among its inputs makes an output non-finite
	 */
	NW_KEEP_NORM = 1,
};

struct nw_keep {
	__u64 type; /* type(module) when vouched for: another object is not it */
	/* the words of the instance that hold its hook dicts, the dicts, their ma_used words */
	__u64 slot[NW_KEEP_HOOKS];
	__u64 dict[NW_KEEP_HOOKS];
	__u64 used[NW_KEEP_HOOKS];
	__u32 kind; /* enum nw_keep_kind */
	__u32 pad;
};

/*
 * A child of torch's own Sequential (daemon/resolve/keep.c) whose next child is a norm
 * (NW_KEEP_NORM in keep_mods): map defer_mods, keyed by the child. Sequential.forward hands
 * the child's output to the norm and runs nothing in between, so the output's scan waits
 * for the norm's: a finite norm output proves the input finite (NW_C_NORM_CHECKED); any
 * other output, and anything else the thread does first, has the input scanned as the
 * child's output after all. Both calls must come from one frame running code, torch's
 * Sequential.forward (a forward patched after the daemon vouched for it runs other code).
 */
struct nw_defer {
	__u64 type;	   /* type(child) when vouched for */
	__u64 parent;	   /* the Sequential */
	__u64 parent_type; /* its type then */
	__u64 next;	   /* the norm */
	__u64 code;	   /* torch's Sequential.forward.__code__: the code that calls them */
};

struct nw_bwd_layout {
	__s64 impl_autograd_meta; /* TensorImpl.autograd_meta_ (unique_ptr) */
	__s64 meta_grad_fn;	  /* AutogradMeta.grad_fn_ (shared_ptr<Node>: Node* first) */
	__s64 node_next_edges;	  /* Node.next_edges_ (std::vector<Edge>: begin, end) */
	__s64 edge_size;	  /* sizeof(Edge) */
	__s64 edge_input_nr;	  /* Edge.input_nr (u32) */
	__s64 acc_variable;	  /* AccumulateGrad.variable (at::Tensor: TensorImpl*) */
	__s64 inputbuf_items;	  /* InputBuffer.buffer (std::vector<Variable>: begin, end) */
	__u64 acc_vptr;		  /* runtime vtable pointer of AccumulateGrad (daemon) */
	/*
	 * Node.sequence_nr_, and where the thread's at::sequence_number counter is: its
	 * library's glibc TLS module id and the offset in that module's block (daemon,
	 * daemon/resolve/seqtls.c). seq_modid 0: not known, nodes are named by outputs only.
	 */
	__s64 node_sequence_nr;
	__u64 seq_modid;
	__u64 seq_offset;
	/*
	 * Runtime vtable pointers of the nodes that make a module's output (AddmmBackward0,
	 * MmBackward0, ConvolutionBackward0, a native norm's; daemon, 0: none): the loss's walk
	 * names them and does not go past them into the model.
	 */
	__u64 end_vptr[NW_LOSS_ENDS];
};

#define NW_HIST_BUCKETS 1024			/* float32 exponent and the top 2 mantissa bits */
#define NW_HIST_NONFINITE (NW_HIST_BUCKETS - 4) /* buckets from here: exponent all ones */

/*
 * A parameter gradient as it enters AccumulateGrad (summed over its uses):
 * counts of |g| per bucket (bucket b holds |g| in [2^(b/4-127)(1+(b%4)/4), next),
 * b = bits 21..30 of the float32 pattern; bucket 0 also holds zeros and subnormals,
 * buckets 1020..1023 Inf and NaN).
 */
struct nw_grad {
	__u32 type; /* NW_EV_GRAD, first as in nw_grad_data: the records of one ring */
	__u32 tid;
	__u64 time_ns;
	__u64 step;
	__u64 iteration;
	__u64 param; /* the parameter's TensorImpl* */
	__u64 numel;
	__u64 scanned; /* elements counted in hist */
	__u32 dtype;
	__u32 flags; /* enum nw_skip */
	__u32 hist[NW_HIST_BUCKETS];
	__u64 lost; /* parameter gradients not measured so far: GRADS_LOST + NORM_SKIPPED counts */
	/*
	 * Not 0: hist is empty, the daemon counts it from the NW_EV_GRAD_DATA records of this
	 * id (data_chunks of them, before this record on the same ring).
	 */
	__u32 data_id;
	__u32 data_chunks;
};

/*
 * A chunk of a parameter gradient's bytes on the gradient data ring, the histogram left to
 * the daemon: copying them there costs the target's thread about half of counting them
 * (the bench transformer's gradients: 2.8 -> 1.6 ms a step). Followed by `bytes` bytes of data (elements of dtype, float32 or bfloat16).
 */
struct nw_grad_data {
	__u32 type; /* NW_EV_GRAD_DATA */
	__u32 tid;
	__u32 id;    /* the gradient's: its nw_grad's data_id */
	__u32 bytes; /* of data that follow */
	__u32 dtype;
	__u32 index; /* the chunk's, from 0 */
};

/*
 * Capture for offline reproduction: the first origin anomaly's call, copied in
 * BPF while it is still on the stack. Records on the capture ring buffer, in
 * order: for each tensor one NW_EV_CAP_TENSOR then its NW_EV_CAP_DATA chunks,
 * then one NW_EV_CAP_END.
 */
#define NW_CAP_CHUNK 8192     /* data bytes per record */
#define NW_CAP_MAX_TENSORS 40 /* tensors described per capture */
#define NW_CAP_OPS 16	      /* autograd nodes of the captured call named (nw_cap_end.ops) */
#define NW_NO_SCALAR 0xffff   /* nw_cap_tensor.scalar_type: not a tensor */

enum nw_cap_role {
	NW_CAP_INPUT = 0,  /* positional argument pos0 (item pos1 of a tuple/list one) */
	NW_CAP_PARAM = 1,  /* _parameters entry pos0 */
	NW_CAP_BUFFER = 2, /* _buffers entry pos0 */
	NW_CAP_OUTPUT = 3, /* output[pos0][pos1] (NW_NO_INDEX: unused) */
	NW_CAP_KWARG = 4, /* keyword argument key (item pos1 of a tuple/list one); pos0 its order */
};

/* Why a described tensor has no data (nw_cap_tensor.flags), besides enum nw_skip. */
enum nw_cap_flag {
	NW_CAP_OVER_BUDGET = 1 << 8,  /* would pass the capture's byte budget: not copied */
	NW_CAP_NOT_TENSOR = 1 << 9,   /* a positional argument that is not a tensor */
	NW_CAP_UNSUPPORTED = 1 << 10, /* a dtype we do not copy (complex, quantized, ...) */
};

struct nw_cap_tensor {
	__u64 shape[NW_MAX_DIMS];
	__u64 strides[NW_MAX_DIMS]; /* in elements */
	__u64 obj;		    /* the tensor object (names params and buffers) */
	__u64 storage_offset;	    /* in elements */
	__u64 numel;
	__u64 bytes;   /* of its dense block: numel * elem_size; 0 if no data */
	__u32 type;    /* NW_EV_CAP_TENSOR */
	__u32 capture; /* capture id (1: the first) */
	__u32 index;   /* 0, 1, ... in the capture */
	__u32 role;    /* enum nw_cap_role */
	__u32 pos0, pos1;
	__u32 scalar_type; /* the target's ScalarType code; NW_NO_SCALAR */
	__u32 elem_size;
	__u32 ndim;
	__u32 flags;	      /* enum nw_skip, enum nw_cap_flag: why no data */
	char key[NW_KEY_LEN]; /* NW_CAP_KWARG: its keyword ("" if not an ASCII str that fits);
			       * NW_CAP_OUTPUT: a dict output's key, as nw_event.key */
};

struct nw_cap_data {
	__u64 offset; /* into the tensor's dense block */
	__u32 type;   /* NW_EV_CAP_DATA */
	__u32 capture;
	__u32 index;
	__u32 len; /* bytes used of data */
	__u8 data[NW_CAP_CHUNK];
};

struct nw_cap_end {
	__u64 time_ns;
	__u64 step;
	__u64 iteration;
	__u64 module;
	__u64 root;   /* modules[0] of the anomaly: names the module */
	__u64 bytes;  /* data bytes copied */
	__u64 budget; /* capture_max_bytes */
	__u32 type;   /* NW_EV_CAP_END */
	__u32 capture;
	__u32 ntensors;	  /* NW_EV_CAP_TENSOR records sent */
	__u32 nargs;	  /* positional arguments of the call */
	__u32 truncated;  /* some tensor was left out for the budget, or a record lost */
	__u32 lost;	  /* records the ring buffer had no room for */
	__u8 index0;	  /* the output tensor that went bad: output[index0][index1] */
	__u8 index1;	  /* (a dict's value: output[index0] is the one with key, below) */
	__u8 ops_more;	  /* the walk stopped at NW_CAP_OPS nodes with more to see */
	__u8 ops_partial; /* a node had an input that needs no gradient: ops on it left no node */
	__u32 nops;
	char class_name[NW_NAME_LEN];
	/*
	 * The operations the call ran on its way to the bad output: the vtable pointers of the
	 * autograd nodes reachable from the output's grad_fn, breadth first (the output's own
	 * node first), not going past the grad_fns of the call's tensor arguments (made before
	 * it) nor into AccumulateGrad (a parameter). Empty without autograd (no_grad, eval). Ops
	 * on tensors that need no gradient (the batch itself, in a first layer) leave no node.
	 */
	__u64 ops[NW_CAP_OPS];
	char key[NW_KEY_LEN]; /* a dict output's key, as the anomaly's (nw_event.key) */
	/*
	 * Each op's place in ops of the node whose edge the walk found it by (an input of that
	 * op: exp(clamp(x)) has clamp's parent at exp), 0xff for the output's own node. A node
	 * several ops take has the first of them.
	 */
	__u8 op_parent[NW_CAP_OPS];
};

/*
 * The daemon's part of a GPU check request (nw_gpu_req.ctx in nwgpu.h): what BPF had at
 * hand when it wrote the request, for the anomaly event the result may become. The
 * library never reads it. A module output that gates its call's input and parameter
 * requests gets ngated and the counts of what it could not request written after them.
 */
struct nw_gpu_ctx {
	__u64 step;	 /* step word (NW_STEP_SHIFT) */
	__u64 iteration; /* outermost-module forward passes (0-based) */
	__u64 root;	 /* modules[0] of the call: names the module */
	__u64 module;	 /* the module whose call returned; 0: the loss */
	__u64 shape[NW_MAX_DIMS];
	__u32 depth; /* the call's depth + 1 */
	__u32 ndim;
	__u32 flags;	      /* NW_FLAG_DEEPER */
	__u32 ngated;	      /* requests gated on this one (its call's inputs and parameters) */
	__u32 inputs_unknown; /* tensor inputs not requested (not on the GPU, unreadable) */
	__u32 params_unknown; /* parameters not requested (or past the listed ones) */
	__u8 phase;	      /* enum nw_phase */
	__u8 params_known;    /* the module's parameters were listed */
	__u8 gating;	      /* ngated and the unknown counts are final */
	__u8 pad[5];
	char class_name[NW_NAME_LEN]; /* tp_name of the module's type */
};

#endif /* __NANWATCH_H */
