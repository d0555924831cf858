/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The BPF side: open, configure, load and attach the probes; poll their events. */
#ifndef __PROBE_H
#define __PROBE_H

#include <stddef.h>
#include <stdint.h>
#include "nanwatch.h"

struct target;
struct probe;

/* Called for each parameter gradient histogram; same rules as probe_event_fn. */
typedef int (*probe_grad_fn)(void *ctx, const struct nw_grad *g);

struct probe_opts {
	uint64_t max_scan_bytes; /* per tensor */
	uint32_t ringbuf_bytes;
	int verbose;
	int bpf_stats;		 /* keep kernel run-time stats of our programs (global toggle) */
	const char *step_symbol; /* libtorch_cpu function marking optimizer steps, or NULL */
	/* each probed function's offset in its file (resolve/elfsym.h); 0: not in the file */
	uint64_t step_offset, backward_offset, node_offset, scaler_offset;
	const char *scaler_symbol;	   /* libtorch_cpu's _amp_update_scale_ op, or NULL */
	int top_only;			   /* check only outermost module calls (mode sample) */
	int loss_only;			   /* no module probes: only the loss (mode loss) */
	const struct nw_rescan *rescan;	   /* outputs not scanned twice; NULL: every one is */
	const struct nw_dict_layout *dict; /* BPF lists unlisted parameters; NULL: it does not */
	const char *backward_symbol; /* libtorch_python's run_backward, or NULL: no loss check */
	uint64_t capture_max_bytes;  /* capture budget; 0: no capture */
	uint32_t capture_ring_bytes; /* capture ring buffer size (a power of 2 pages) */
	int c10_codes; /* the target numbers ScalarType as c10: integers copied, known finite */
	const char *node_symbol;	 /* libtorch_cpu's Engine::evaluate_function, or NULL: no
					 * backward-pass checks */
	const struct nw_bwd_layout *bwd; /* offsets for those checks */
	int backward_all;		 /* check every gradient, not only the parameters' */
	probe_grad_fn grad_cb;		 /* parameter gradient histograms (NW_EV_GRAD) */
	int gpu;			 /* write GPU check requests (bpf/gpu.bpf.h) */
	uint32_t gpu_device;		 /* for tensors of this DeviceType code */
	int64_t gpu_index_off;		 /* TensorImpl offset of the device index; -1: none */
	int read_method;		 /* how scans copy bytes (enum nw_read_method) */
	uint64_t task_ns_per_page;	 /* NW_READ_ADAPTIVE: what the task method costs a page */
	int return_probe;		 /* the evaluator's return: enum probe_return */
	uint32_t grad_ring_bytes; /* gradient bytes to count here (a power of 2); 0: in BPF */
};

/* How the frame evaluator's returns are seen. */
enum probe_return {
	PROBE_RETURN_URETPROBE, /* an entry uprobe and a uretprobe: every call's return */
	PROBE_RETURN_SESSION,	/* a uprobe session: a return armed only for the calls recorded */
	PROBE_RETURN_AUTO,	/* a session where the kernel has them, else the uretprobe */
};

/* Run time of each BPF program while bpf_stats is on; zero otherwise. */
struct probe_runtime {
	uint64_t entry_ns, entry_runs;
	uint64_t return_ns, return_runs;
	uint64_t loss_ns, loss_runs;	 /* the loss: backward()'s start */
	uint64_t node_ns, node_runs;	 /* the backward pass's nodes: gradients and norms */
	uint64_t step_ns, step_runs;	 /* the optimizer step marker (torch 2.x) */
	uint64_t scaler_ns, scaler_runs; /* a gradient scaler's updates */
};

/*
 * Called for each ring-buffer record, as the kernel delivered it (explain__record checks and
 * decodes it); return negative only for fatal errors.
 */
typedef int (*probe_event_fn)(void *ctx, const void *data, size_t size);

struct probe *probe__open(const struct target *t, const struct nw_layout *l,
			  const struct probe_opts *o, probe_event_fn cb, void *ctx, char *err,
			  size_t errlen);
void probe__close(struct probe *p);  /* detaches; accepts NULL */
void probe__detach(struct probe *p); /* removes the probes; the rings stay readable */

/* Wait up to timeout_ms for events and deliver them; 0 or a negative errno (-EINTR is normal). */
int probe__poll(struct probe *p, int timeout_ms);
int probe__fd(const struct probe *p);	   /* readable when records wait (epoll) */
int probe__consume(struct probe *p);	   /* deliver whatever is queued, without waiting */
int probe__consume_grads(struct probe *p); /* ... of the gradient ring only */
int probe__count(const struct probe *p);   /* probes attached */

/*
 * uprobe_multi links, as a watch's uprobes are where the kernel has them (probe.c, set_multi()):
 * the attach type a program is loaded with for them (-1: the kernel has none, before 6.6).
 */
int probe__multi_type(void);

struct bpf_program;
struct bpf_link;

/*
 * One uprobe of prog (loaded with probe__multi_type()'s attach type where that is one) at
 * offset of the file open at file_fd, for process pid alone, a return probe with ret: a
 * uprobe_multi link where the kernel has them (its descriptor in *fd; *link untouched), else
 * a perf uprobe (in *link; *fd untouched). A perf uprobe's removal waits for the returns
 * pending on the node holding the kernel's trace event lock, which every perf uprobe's attach
 * takes; a link's holds nothing. 0 or a negative errno.
 */
int probe__uprobe(struct bpf_program *prog, int file_fd, unsigned long offset, int pid, int ret,
		  struct bpf_link **link, int *fd);

/*
 * Records reach probe_event_fn and probe_grad_fn with the step decoded: the step
 * alone in step, where it comes from in nw_event.step_source.
 */

/* Totals kept by the BPF programs. */
void probe__counters(const struct probe *p, uint64_t out[NW_C_MAX]);
uint64_t probe__steps(const struct probe *p); /* optimizer steps seen since the attach */
uint64_t probe__iterations(const struct probe *p);
uint64_t probe__model(const struct probe *p); /* the model's object address; 0: none yet */
int probe__execed(const struct probe *p);     /* the target called execve since the attach */
int probe__runtime(const struct probe *p, struct probe_runtime *rt);

/* The current step, and where it comes from (enum nw_step_source) in *source. */
uint64_t probe__step(const struct probe *p, int *source);

/* Where the training loop is now: its thread, and what BPF read from its counter's slots. */
struct probe_loop {
	uint64_t step_word;	  /* BPF's step word now */
	uint32_t tid;		  /* the thread that began the last root forward pass */
	uint64_t tstate;	  /* its PyThreadState; 0: not known */
	int snap_ok;		  /* snap holds a whole copy (not one BPF was writing) */
	struct nw_loop_snap snap; /* the loop slots as the last root forward pass began */
};
void probe__loop(const struct probe *p, struct probe_loop *out);

/* The addresses BPF reads as each root forward pass begins (n <= NW_LOOP_SLOTS), gen theirs. */
void probe__loop_slots(struct probe *p, const uint64_t *slots, int n, uint64_t gen);

/* The first optimizer seen stepping (its object in the target), 0 if none yet. */
uint64_t probe__optimizer(const struct probe *p);

/* Where that optimizer's step count is: a 0-dim tensor's TensorImpl (0: none). */
void probe__set_step_state(struct probe *p, uint64_t impl);

/*
 * Load every program with every feature on, attaching nothing, and call fn with each
 * program's name and the instructions the verifier processed; 0 or a negative errno.
 */
int probe__verifier_stats(const struct nw_layout *l, const struct nw_bwd_layout *bl,
			  const struct nw_rescan *rs, const struct nw_dict_layout *dict,
			  int step_by_marker,
			  void (*fn)(const char *name, uint32_t insns, void *ctx), void *ctx,
			  char *err, size_t errlen);

/* Tell the BPF side which parameter objects belong to a module. */
int probe__set_params(struct probe *p, uint64_t module, const struct nw_params *np);

/* Tell the BPF side a module keeps a finite input finite (resolve/keep.h). */
int probe__set_keep(struct probe *p, uint64_t module, const struct nw_keep *k);

/* module's output check may wait for the norm d names (struct nw_defer): 0 or -errno. */
int probe__set_defer(struct probe *p, uint64_t module, const struct nw_defer *d);

/*
 * Turn keeps_finite() on: torch's global hook dicts' ma_used words, then torch.Tensor (the
 * switch, written last).
 */
void probe__keep_on(struct probe *p, uint64_t tensor, const uint64_t used[NW_KEEP_HOOKS]);

/* Tell the BPF side which buffer objects belong to a module (for captures). */
int probe__set_buffers(struct probe *p, uint64_t module, const struct nw_params *np);

/* The capture ring buffer's map fd. */
int probe__capture_fd(const struct probe *p);

/* How the evaluator's returns are seen, as attached: PROBE_RETURN_SESSION or _URETPROBE. */
int probe__return_probe(const struct probe *p);

/*
 * With a uprobe session, at every tick: the processes the target forked since the last look
 * are cleaned of the frame evaluator's breakpoint, in a thread of the probe's own.
 */
void probe__tick(struct probe *p);

/* How the scans copy the target's bytes (enum nw_read_method), as loaded. */
int probe__read_method(const struct probe *p);

/* The GPU request ring's map fd (BPF_F_MMAPABLE, bpf/nwgpu.h), frozen at the load. */
int probe__gpu_ring_fd(const struct probe *p);

/* Whether BPF writes GPU requests (a library answered READY); off after the load. */
void probe__gpu_link(struct probe *p, int on);

#endif /* __PROBE_H */
