/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The GPU path's shared types: BPF (which writes check requests), nanwatchd
 * (which hands the request ring to the target and emits what comes back) and
 * libnanwatch_cupti.so in the target (which scans on the device).
 *
 * Requests: a BPF_F_MMAPABLE array map, `gpu_ring`, of NW_GPU_SLOTS + 1
 * entries of struct nw_gpu_req. Entry 0 is the header (struct nw_gpu_head in
 * the same 256 bytes); entries 1..NW_GPU_SLOTS are a ring: BPF takes position
 * p = head++ (atomic) and fills entry 1 + p % NW_GPU_SLOTS, seq last (= p + 1).
 * A uprobe runs in the training thread before that thread's next instruction,
 * so the request is in place before the thread's next CUDA launch. BPF writes
 * requests only while the daemon's global gpu_link is set (a library answered
 * READY); the ring itself holds nothing the daemon writes. The daemon freezes
 * the map (BPF_MAP_FREEZE) before anyone sees it and maps it read-only: only
 * BPF programs write it, a writable mapping or an update from user space is
 * refused (EPERM) to the daemon and to the library alike. The daemon passes
 * the map's fd to the library over the library's unix socket (SCM_RIGHTS);
 * the library maps it read-only. Why a map and not bpf_probe_write_user:
 * lockdown forbids the latter, and a map needs no write into the target's
 * memory at all.
 *
 * Results: the library scans on the stream of the requesting thread's most
 * recent launch, before its next launch, and sends struct nw_gpu_result back
 * over the same socket. The daemon matches a result to its request by seq
 * (reading the slot from its own mapping of the ring; a slot overwritten since
 * is counted lost).
 *
 * Everything read from the target's side is untrusted: bounded and checked. A
 * result counts only for a request BPF has written, the ring still holds, and
 * no earlier result answered; it can make findings of that target alone.
 */
#ifndef __NWGPU_H
#define __NWGPU_H

#define NW_GPU_VERSION 1
#define NW_GPU_SLOTS 4096 /* ring entries (a power of two) */
#define NW_GPU_REQ_SIZE 256

/* What a request scans. */
enum nw_gpu_role {
	NW_GPU_OUTPUT = 0, /* a module's output tensor (output[index0][index1]) */
	NW_GPU_INPUT = 1,  /* a module's input (index0): scanned only if its gate is bad */
	NW_GPU_LOSS = 2,   /* the tensor backward() starts from */
	NW_GPU_PARAM = 3,  /* a module's parameter (index0): scanned only if its gate is bad */
};

/*
 * One check request. The first 64 bytes are what the library reads; the rest is
 * the daemon's (the event context BPF had at hand), opaque to the library.
 */
struct nw_gpu_req {
	/* read by the library */
	__u64 seq;   /* ring position + 1; 0: never written. Written last */
	__u64 data;  /* device address of the first element */
	__u64 numel; /* elements to scan (dense) */
	__u64 gate;  /* seq of the request whose result gates this one; 0: none */
	__u32 tid;   /* kernel thread id of the thread that made the tensor */
	__u32 dtype; /* enum nw_dtype */
	__u8 role;   /* enum nw_gpu_role */
	__s8 device; /* CUDA device index */
	__u8 index0; /* output[index0] / input index0 / parameter index0 */
	__u8 index1; /* output[index0][index1]; NW_NO_INDEX: none */
	__u32 flags; /* enum nw_skip bits BPF already knows (truncated...) */
	__u64 reserved[2];
	/* the daemon's: the event the result becomes */
	__u64 ctx[(NW_GPU_REQ_SIZE - 64) / 8];
};

/* Entry 0 of gpu_ring: BPF's alone. */
struct nw_gpu_head {
	__u64 head;    /* next ring position BPF hands out */
	__u64 dropped; /* requests BPF did not write (no library connected) */
	__u64 pad[(NW_GPU_REQ_SIZE - 16) / 8];
};

/* Result flags (nw_gpu_result.flags). */
enum nw_gpu_rflag {
	NW_GPU_R_SCANNED = 1,	     /* the kernel ran: counts valid */
	NW_GPU_R_GATED_OUT = 2,	     /* not scanned: its gate's result was finite */
	NW_GPU_R_CAPTURING = 4,	     /* not scanned: the stream was capturing a CUDA graph */
	NW_GPU_R_DTYPE = 8,	     /* not scanned: dtype the kernel does not read */
	NW_GPU_R_NO_MEMORY = 16,     /* not scanned: no pinned result slot was free */
	NW_GPU_R_NO_STREAM = 32,     /* not scanned: the thread never launched */
	NW_GPU_R_STALE = 64,	     /* not scanned: the ring overtook it before a launch */
	NW_GPU_R_LAUNCH_ERROR = 128, /* not scanned: launching the scan kernel failed */
};

/* A result: sent for every request whose scan found NaN/±Inf, and for every
 * gated request (scanned or not), so that the daemon can tell origin. */
struct nw_gpu_result {
	__u64 seq;     /* the request's */
	__u64 scanned; /* elements scanned */
	__u64 nan;
	__u64 posinf;
	__u64 neginf;
	__u64 min_key; /* nw_order_key of the finite min; ~0 if none */
	__u64 max_key; /* nw_order_key of the finite max; 0 if none */
	__u32 flags;   /* enum nw_gpu_rflag */
	__u32 pad;
};

/*
 * Socket messages, SOCK_SEQPACKET, each starting with struct nw_gpu_msg. The
 * library listens at NW_GPU_SOCK_NAME (mode 0600) in a directory of its own
 * that mkdtemp makes (mode 0700) from NW_GPU_SOCK_DIR_FMT with its pid, in
 * $NANWATCH_CUPTI_DIR (an absolute path) or /tmp: a name nobody can foresee,
 * so no other user can take it first or connect to it. The daemon does not
 * guess the path: it takes the target's own listening sockets from the
 * target's fd table (pidfd_getfd), one whose bound name ends in
 * NW_GPU_SOCK_DIR_PREFIX.../NW_GPU_SOCK_NAME and whose listener is the target
 * itself (SO_PEERPIDFD), and connects to that name through /proc/PID/root,
 * only while the target maps the library. After connecting it checks the peer
 * again (SO_PEERPIDFD: the target's struct pid, not a reusable number;
 * SO_PEERCRED: the target's uid), then sends HELLO with the ring's fd, and
 * reads READY, then RESULT, STATS and NOTICE messages until either side
 * closes. Closing the socket puts the library back to idle.
 */
#define NW_GPU_SOCK_DIR_PREFIX ".nanwatch-cupti-"
#define NW_GPU_SOCK_DIR_FMT "%s/" NW_GPU_SOCK_DIR_PREFIX "%d.XXXXXX" /* mkdtemp's template */
#define NW_GPU_SOCK_NAME "cupti.sock"
#define NW_GPU_MSG_MAX 4096 /* bytes of one message, header included */

enum nw_gpu_msg_type {
	NW_GPU_MSG_HELLO = 1,  /* daemon → library: struct nw_gpu_hello + SCM_RIGHTS ring fd */
	NW_GPU_MSG_READY = 2,  /* library → daemon: struct nw_gpu_ready */
	NW_GPU_MSG_RESULT = 3, /* library → daemon: struct nw_gpu_result[n] */
	NW_GPU_MSG_STATS = 4,  /* library → daemon: __u64[NW_GPU_S_MAX] */
	NW_GPU_MSG_NOTICE = 5, /* library → daemon: one line of text, said once */
};

struct nw_gpu_msg {
	__u32 type; /* enum nw_gpu_msg_type */
	__u32 len;  /* bytes after this header */
};

struct nw_gpu_hello {
	__u32 version;	/* NW_GPU_VERSION */
	__u32 slots;	/* NW_GPU_SLOTS */
	__u32 req_size; /* NW_GPU_REQ_SIZE */
	__u32 pad;
};

enum nw_gpu_mode {
	NW_GPU_MODE_CALLBACK = 1,  /* scans enqueued from CUPTI launch callbacks */
	NW_GPU_MODE_INTERPOSE = 2, /* scans enqueued from interposed launch entry points */
};

/* READY.state bits */
enum nw_gpu_state {
	NW_GPU_ST_SUBSCRIBED = 1, /* CUPTI callbacks on */
	NW_GPU_ST_OTHER_SUB = 2,  /* another CUPTI subscriber holds it: launches not seen */
	NW_GPU_ST_KERNEL = 4,	  /* the scan kernel is loaded */
	NW_GPU_ST_PINNED = 8,	  /* pinned result memory allocated */
	NW_GPU_ST_LATE = 16,	  /* loaded into a running process (--inject) */
};

struct nw_gpu_ready {
	__u32 version;	   /* NW_GPU_VERSION */
	__u32 mode;	   /* enum nw_gpu_mode */
	__u32 state;	   /* enum nw_gpu_state */
	__u32 devices;	   /* CUDA devices seen */
	__s32 cuda_driver; /* cuDriverGetVersion, 0 if not known */
	__u32 pad;
};

/* Library counters (STATS message, cumulative since READY). */
enum nw_gpu_stat {
	NW_GPU_S_REQUESTS,     /* requests taken from the ring */
	NW_GPU_S_SCANS,	       /* scan kernels launched */
	NW_GPU_S_BYTES,	       /* bytes those scanned */
	NW_GPU_S_RESULTS,      /* results sent */
	NW_GPU_S_CAPTURING,    /* skipped: graph capture in progress */
	NW_GPU_S_DTYPE,	       /* skipped: dtype */
	NW_GPU_S_NO_MEMORY,    /* skipped: no pinned result slot */
	NW_GPU_S_STALE,	       /* skipped: overtaken in the ring */
	NW_GPU_S_LAUNCH_ERROR, /* skipped: the scan launch failed */
	NW_GPU_S_GATED_OUT,    /* gated requests not needed */
	NW_GPU_S_LAUNCHES,     /* the target's own launches seen */
	NW_GPU_S_MAX,
};

#endif /* __NWGPU_H */
