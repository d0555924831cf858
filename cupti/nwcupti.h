/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * libnanwatch_cupti.so's internals, shared by its C files: the driver and
 * CUPTI entry points it found by dlsym, the state of one library instance,
 * and the request/result codecs (proto.c) the unit tests also drive.
 */
#ifndef __NW_CUPTI_H
#define __NW_CUPTI_H

#include <linux/types.h>
#include <pthread.h>
#include <stdint.h>

#include "cuabi.h"
#include "nwgpu.h"
#include "scan.h"

/* Nothing but InitializeInjection leaves the library (it says so itself). */
#pragma GCC visibility push(hidden)

/* The scan kernel's fatbin, embedded in the library by the build. */
extern const unsigned char nw_scan_fatbin[];
extern const size_t nw_scan_fatbin_size;

#define NWC_OUTS 4096	   /* pinned result slots (struct nw_scan_out) */
#define NWC_THREADS 256	   /* launching threads followed */
#define NWC_CTXS 16	   /* CUDA contexts prepared */
#define NWC_STREAMS 256	   /* streams with a scratch, per context */
#define NWC_HOSTRES 1024   /* results decided on the host, waiting to be sent */
#define NWC_DRAIN_MS 200   /* default: a request older than this is enqueued by the worker */
#define NWC_NOTICE_MAX 240 /* bytes of one notice line */

/* Driver entry points (dlsym; the _v2 names cuda.h maps the plain ones to). */
struct nwc_cu {
	nwc_curesult (*DriverGetVersion)(int *);
	nwc_curesult (*DeviceGetCount)(int *);
	nwc_curesult (*DeviceGet)(CUdevice *, int);
	nwc_curesult (*DevicePrimaryCtxGetState)(CUdevice, unsigned int *, int *);
	nwc_curesult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
	nwc_curesult (*CtxPushCurrent)(CUcontext);
	nwc_curesult (*CtxPopCurrent)(CUcontext *);
	nwc_curesult (*ModuleLoadData)(CUmodule *, const void *);
	nwc_curesult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
	nwc_curesult (*MemHostAlloc)(void **, size_t, unsigned int);
	nwc_curesult (*MemHostGetDevicePointer)(CUdeviceptr *, void *, unsigned int);
	nwc_curesult (*MemAlloc)(CUdeviceptr *, size_t);
	nwc_curesult (*MemsetD8)(CUdeviceptr, unsigned char, size_t);
	nwc_curesult (*StreamIsCapturing)(CUstream, int *);
	nwc_curesult (*CtxGetCurrent)(CUcontext *);
	nwc_curesult (*LaunchKernel)(CUfunction, unsigned int, unsigned int, unsigned int,
				     unsigned int, unsigned int, unsigned int, unsigned int,
				     CUstream, void **, void **);
};

struct nwc_cupti {
	nwc_cuptiresult (*Subscribe)(CUpti_SubscriberHandle *, nwc_callback_fn, void *);
	nwc_cuptiresult (*EnableCallback)(uint32_t, CUpti_SubscriberHandle, nwc_cupti_domain,
					  CUpti_CallbackId);
	nwc_cuptiresult (*Unsubscribe)(CUpti_SubscriberHandle);
};

/* A request as the library uses it (the first 64 bytes of struct nw_gpu_req). */
struct nwc_req {
	__u64 seq;
	__u64 data;
	__u64 numel;
	__u64 gate;
	__u32 tid;
	__u32 dtype;
	__u8 role;
	__s8 device;
};

enum nwc_ctx_state {
	NWC_CTX_WANTED = 1, /* seen in a launch, not prepared yet */
	NWC_CTX_READY = 2,
	NWC_CTX_FAILED = 3,
};

/* A context the scan kernel is loaded in. */
struct nwc_ctx {
	CUcontext ctx;
	int state; /* enum nwc_ctx_state (atomic) */
	CUfunction fn;
	CUdeviceptr scratch; /* NWC_STREAMS struct nw_scan_scratch */
	CUdeviceptr flags;   /* NWC_OUTS __u32: each result slot's verdict, for what it gates */
	CUstream streams[NWC_STREAMS];
	int nstreams;
};

/* A thread that launched since the library started. */
struct nwc_thread {
	int tid;
	int stream_known; /* atomic: stream and ctx set */
	CUstream stream;  /* of its most recent launch */
	CUcontext ctx;
	__u64 cursor; /* ring position it has looked up to (its own) */
	__u64 epoch;  /* the connection cursor belongs to */
};

/* Where a ring position's request went (seqmap, indexed by position % NW_GPU_SLOTS). */
enum nwc_seq_state {
	NWC_SEQ_INFLIGHT = 1, /* scan enqueued: out slot idx */
	NWC_SEQ_BAD = 2,      /* scanned: not finite */
	NWC_SEQ_GOOD = 3,     /* scanned: finite, or gated out */
	NWC_SEQ_SKIPPED = 4,  /* not scanned */
};

struct nwc_seq {
	__u64 seq;
	int state;
	int idx;
};

/* One pinned result slot's bookkeeping. */
struct nwc_slot {
	__u64 seq;
	const struct nwc_ctx *c; /* where it was scanned (its verdict is in c->flags) */
	int refs;		 /* itself while in flight + gated scans reading it */
	int gate_idx;		 /* slot of its gate, -1: none */
	int gated;
	int loss; /* a loss request: its result is sent even when finite */
	int done;
};

enum nwc_notice {
	NWC_N_OTHER_SUB = 1,
	NWC_N_CAPTURING = 2,
	NWC_N_DTYPE = 4,
	NWC_N_NO_MEMORY = 8,
	NWC_N_NO_CUPTI = 16,
	NWC_N_NO_KERNEL = 32,
	NWC_N_PROCADDR = 64,
};

struct nwc {
	struct nwc_cu cu;
	struct nwc_cupti cupti;
	CUpti_SubscriberHandle sub;
	__u32 state;	    /* enum nw_gpu_state */
	__u32 mode;	    /* enum nw_gpu_mode: NANWATCH_CUPTI_LAUNCH */
	int cuda_driver;    /* cuDriverGetVersion */
	int drain_ms;	    /* NANWATCH_CUPTI_DRAIN_MS */
	char sock_dir[108]; /* mkdtemp's, holding sock_path alone */
	char sock_path[108];
	int owner_pid; /* the process that made sock_dir and sock_path */
	int listen_fd;
	int wake_fd; /* eventfd: a context is wanted */
	pthread_t worker;
	int worker_started;

	/* the connection: connected and active are read by every launch callback */
	int connected;
	int active; /* callbacks inside the ring now */
	__u64 epoch;
	const struct nw_gpu_req *ring; /* NW_GPU_SLOTS + 1 entries, read-only */
	size_t ring_len;
	__u64 start_pos;	      /* ring head at HELLO */
	__u64 wpos;		      /* positions below this are claimed or given up (worker's) */
	__u64 taken[NW_GPU_SLOTS];    /* seq claimed at each ring index */
	__u64 seen_pos[NW_GPU_SLOTS]; /* worker: position + 1 it first saw unclaimed there */
	__u64 seen_ns[NW_GPU_SLOTS];  /* and when */

	pthread_mutex_t lock; /* the members below */
	struct nwc_ctx ctxs[NWC_CTXS];
	int nctxs;
	struct nw_scan_out *outs; /* NWC_OUTS, pinned mapped */
	struct nwc_slot slots[NWC_OUTS];
	int free_slots[NWC_OUTS];
	int nfree;
	int inflight[NWC_OUTS];
	int ninflight;
	struct nwc_seq seqmap[NW_GPU_SLOTS];
	struct nw_gpu_result hostres[NWC_HOSTRES];
	int nhostres;

	struct nwc_thread threads[NWC_THREADS];
	int nthreads; /* atomic */

	__u64 stats[NW_GPU_S_MAX]; /* atomic */
	__u32 notices;		   /* enum nwc_notice wanted (atomic) */
	__u32 notices_sent;	   /* this connection's */
};

/* proto.c: decoding and encoding, no state */
int nwc_req_read(const struct nw_gpu_req *ring, __u64 pos, struct nwc_req *out);
int nwc_dtype_size(__u32 dtype);
int nwc_hello_check(const void *buf, size_t len);
void nwc_result_from_out(const struct nw_scan_out *o, __u64 seq, struct nw_gpu_result *r);
int nwc_result_wanted(const struct nw_gpu_result *r, int gated, int loss);
size_t nwc_msg_results(void *buf, size_t cap, const struct nw_gpu_result *r, size_t n,
		       size_t *used);
size_t nwc_msg_put(void *buf, size_t cap, __u32 type, const void *body, size_t len);
unsigned int nwc_scan_blocks(__u64 numel);

/* inject.c */
int nwc_start(struct nwc *g, int late);

/* launch.c: the request consumer and scan enqueue */
void nwc_on_launch(struct nwc *g, CUpti_CallbackId cbid, const nwc_callback_data *cb);
void nwc_launch_enter(struct nwc *g, CUcontext ctx, CUstream s);
void nwc_drain_stale(struct nwc *g, __u64 now_ns);
void nwc_host_result(struct nwc *g, __u64 seq, __u32 flags);
struct nwc_ctx *nwc_ctx_find(struct nwc *g, CUcontext ctx, int add);
size_t nwc_collect(struct nwc *g, struct nw_gpu_result *res, size_t cap);
int nwc_inflight(struct nwc *g);
extern __thread int nwc_busy;
extern int nwc_fork_gen;

/* interpose.c: NANWATCH_CUPTI_LAUNCH=interpose */
int nwc_ip_init(struct nwc *g, void *cuda);
int nwc_ip_patch(void);
void nwc_ip_procaddr(const nwc_callback_data *cb);

/* worker.c */
void *nwc_worker_main(void *arg);
int nwc_ctx_prepare(struct nwc *g, struct nwc_ctx *c);
void nwc_wake(struct nwc *g);
void nwc_notice(struct nwc *g, __u32 which);
__u64 nwc_now_ns(void);

#pragma GCC visibility pop

#endif /* __NW_CUPTI_H */
