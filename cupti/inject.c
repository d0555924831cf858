// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * libnanwatch_cupti.so's entry points. Loaded by the CUDA driver through
 * CUDA_INJECTION64_PATH, which calls InitializeInjection at CUDA's
 * initialisation; or dlopen'ed into a running process (nanwatchd --inject),
 * where the constructor starts CUPTI late from the worker thread. Either way
 * the library only finds libcuda and libcupti (dlopen/dlsym: no link-time
 * CUDA dependency), subscribes to the kernel-launch callbacks and starts the
 * worker; everything else waits for a daemon (worker.c). Nothing here may
 * abort the process: every failure degrades to "not checked" and a notice.
 *
 * Environment:
 *   NANWATCH_CUPTI_LIB       libcupti to load (else: one already loaded, the
 *                            one beside libcuda, the loader's search, CUDA's
 *                            lib directories, the torch wheel's nvidia/cu13/lib)
 *   NANWATCH_CUDA_LIB        libcuda to load (else libcuda.so.1)
 *   NANWATCH_CUPTI_DIR       where the socket's own directory is made (an
 *                            absolute path; else /tmp)
 *   NANWATCH_CUPTI_DRAIN_MS  a request whose thread did not launch again
 *                            within this is scanned by the worker (200)
 *   NANWATCH_CUPTI_LAUNCH    callback (the default: enqueue from the CUPTI
 *                            launch callback, the way that passed the hang
 *                            test on an H200) or interpose (interpose.c)
 */
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <link.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "nwcupti.h"

static struct nwc nwc_lib = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.listen_fd = -1,
	.wake_fd = -1,
};
static int nwc_started;

/* The launch entry points whose API enter enqueues scans. */
static const CUpti_CallbackId nwc_launch_cbids[] = {
	NWC_CBID_cuLaunchKernel,
	NWC_CBID_cuLaunchKernel_ptsz,
	NWC_CBID_cuLaunchKernelEx,
	NWC_CBID_cuLaunchKernelEx_ptsz,
	NWC_CBID_cuLaunchCooperativeKernel,
	NWC_CBID_cuLaunchCooperativeKernel_ptsz,
};

/*
 * Every CUPTI callback. Idle (no daemon): one relaxed load and return. Our own
 * scan launches fire it too: nwc_busy makes them do nothing. active lets the
 * worker wait until no callback reads the ring before it unmaps it.
 */
static void nwc_callback(void *ud, nwc_cupti_domain domain, CUpti_CallbackId cbid, const void *data)
{
	const nwc_callback_data *cb = data;
	struct nwc *g = ud;

	if (!__atomic_load_n(&g->connected, __ATOMIC_RELAXED)) {
		/* interpose mode's only callback: cuGetProcAddress's exit */
		if (cbid == NWC_CBID_cuGetProcAddress || cbid == NWC_CBID_cuGetProcAddress_v2)
			nwc_ip_procaddr(data);
		return;
	}
	if (cbid == NWC_CBID_cuGetProcAddress || cbid == NWC_CBID_cuGetProcAddress_v2) {
		nwc_ip_procaddr(data);
		return;
	}
	if (domain != NWC_CUPTI_CB_DOMAIN_DRIVER_API || !cb ||
	    cb->callbackSite != NWC_CUPTI_API_ENTER || nwc_busy)
		return;
	nwc_busy = 1;
	__atomic_fetch_add(&g->active, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&g->connected, __ATOMIC_SEQ_CST) && g->ring)
		nwc_on_launch(g, cbid, cb);
	__atomic_fetch_sub(&g->active, 1, __ATOMIC_RELEASE);
	nwc_busy = 0;
}

static void *open_cuda(void)
{
	const char *p = getenv("NANWATCH_CUDA_LIB");
	void *h;

	if (p && *p)
		return dlopen(p, RTLD_NOW | RTLD_LOCAL);
	h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
	return h ? h : dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
}

static void *open_in(const char *dir, size_t dirlen, const char *name)
{
	char path[PATH_MAX];

	if (snprintf(path, sizeof(path), "%.*s/%s", (int)dirlen, dir, name) >= (int)sizeof(path))
		return NULL;
	return dlopen(path, RTLD_NOW | RTLD_LOCAL);
}

/* A loaded torch's site-packages: its wheel of CUDA 13 libraries holds libcupti. */
static int find_wheel(struct dl_phdr_info *info, size_t size, void *data)
{
	const char *n = info->dlpi_name, *at;
	void **h = data;

	(void)size;
	if (*h || !n || !(at = strstr(n, "/site-packages/")))
		return 0;
	at += strlen("/site-packages");
	*h = open_in(n, at - n, "nvidia/cu13/lib/libcupti.so.13");
	return *h != NULL;
}

static void *open_cupti(void *cuda)
{
	static const char *const dirs[] = {
		"/usr/local/cuda/extras/CUPTI/lib64",
		"/usr/local/cuda/lib64",
		"/usr/local/cuda/targets/x86_64-linux/lib",
	};
	const char *p = getenv("NANWATCH_CUPTI_LIB"), *slash;
	struct link_map *lm = NULL;
	void *h;
	size_t i;

	if (p && *p)
		return dlopen(p, RTLD_NOW | RTLD_LOCAL);
	h = dlopen("libcupti.so.13", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
	if (!h && cuda && !dlinfo(cuda, RTLD_DI_LINKMAP, &lm) && lm && lm->l_name &&
	    (slash = strrchr(lm->l_name, '/')))
		h = open_in(lm->l_name, slash - lm->l_name, "libcupti.so.13");
	if (!h)
		h = dlopen("libcupti.so.13", RTLD_NOW | RTLD_LOCAL);
	for (i = 0; !h && i < sizeof(dirs) / sizeof(dirs[0]); i++)
		h = open_in(dirs[i], strlen(dirs[i]), "libcupti.so.13");
	if (!h)
		dl_iterate_phdr(find_wheel, &h);
	return h;
}

#define SYM(h, dst, name) (*(void **)&(dst) = dlsym(h, name), (dst) != NULL)

static int load_cuda(struct nwc *g, void *h)
{
	struct nwc_cu *cu = &g->cu;

	return SYM(h, cu->DriverGetVersion, "cuDriverGetVersion") &&
	       SYM(h, cu->DeviceGetCount, "cuDeviceGetCount") &&
	       SYM(h, cu->DeviceGet, "cuDeviceGet") &&
	       SYM(h, cu->DevicePrimaryCtxGetState, "cuDevicePrimaryCtxGetState") &&
	       SYM(h, cu->DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain") &&
	       SYM(h, cu->CtxPushCurrent, "cuCtxPushCurrent_v2") &&
	       SYM(h, cu->CtxPopCurrent, "cuCtxPopCurrent_v2") &&
	       SYM(h, cu->ModuleLoadData, "cuModuleLoadData") &&
	       SYM(h, cu->ModuleGetFunction, "cuModuleGetFunction") &&
	       SYM(h, cu->MemHostAlloc, "cuMemHostAlloc") &&
	       SYM(h, cu->MemHostGetDevicePointer, "cuMemHostGetDevicePointer_v2") &&
	       SYM(h, cu->MemAlloc, "cuMemAlloc_v2") && SYM(h, cu->MemsetD8, "cuMemsetD8_v2") &&
	       SYM(h, cu->StreamIsCapturing, "cuStreamIsCapturing") &&
	       SYM(h, cu->CtxGetCurrent, "cuCtxGetCurrent") &&
	       SYM(h, cu->LaunchKernel, "cuLaunchKernel");
}

/* The CUPTI callbacks a mode needs: the launches, or cuGetProcAddress's exit. */
static void enable_callbacks(struct nwc *g)
{
	static const CUpti_CallbackId procaddr[] = {NWC_CBID_cuGetProcAddress,
						    NWC_CBID_cuGetProcAddress_v2};
	const CUpti_CallbackId *ids = nwc_launch_cbids;
	size_t i, n = sizeof(nwc_launch_cbids) / sizeof(nwc_launch_cbids[0]);

	if (g->mode == NW_GPU_MODE_INTERPOSE) {
		ids = procaddr;
		n = sizeof(procaddr) / sizeof(procaddr[0]);
	}
	for (i = 0; i < n; i++)
		g->cupti.EnableCallback(1, g->sub, NWC_CUPTI_CB_DOMAIN_DRIVER_API, ids[i]);
}

/* Find both libraries and subscribe; the outcome goes to g->state and notices. */
static void attach_cupti(struct nwc *g)
{
	void *cuda = open_cuda(), *cupti;
	nwc_cuptiresult r;
	int syms;

	if (!cuda || !load_cuda(g, cuda)) {
		nwc_notice(g, NWC_N_NO_CUPTI);
		return;
	}
	if (g->cu.DriverGetVersion(&g->cuda_driver))
		g->cuda_driver = 0;
	cupti = open_cupti(cuda);
	syms = cupti && SYM(cupti, g->cupti.Subscribe, "cuptiSubscribe") &&
	       SYM(cupti, g->cupti.EnableCallback, "cuptiEnableCallback");
	/* the GOTs need no CUPTI: interposing works beside another subscriber */
	if (g->mode == NW_GPU_MODE_INTERPOSE && nwc_ip_init(g, cuda))
		g->mode = NW_GPU_MODE_CALLBACK;
	if (!syms) {
		nwc_notice(g, NWC_N_NO_CUPTI);
		return;
	}
	r = g->cupti.Subscribe(&g->sub, nwc_callback, g);
	if (r == NWC_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
		g->state |= NW_GPU_ST_OTHER_SUB;
		nwc_notice(g, g->mode == NW_GPU_MODE_INTERPOSE ? NWC_N_PROCADDR : NWC_N_OTHER_SUB);
		return;
	}
	if (r != NWC_CUPTI_SUCCESS) {
		nwc_notice(g, NWC_N_NO_CUPTI);
		return;
	}
	enable_callbacks(g);
	g->state |= NW_GPU_ST_SUBSCRIBED;
}

static void *late_main(void *arg)
{
	attach_cupti(arg);
	return nwc_worker_main(arg);
}

static void *early_main(void *arg)
{
	return nwc_worker_main(arg);
}

static void nwc_atfork_child(void)
{
	/* the worker did not come along; the parent's daemon is not ours */
	__atomic_store_n(&nwc_lib.connected, 0, __ATOMIC_SEQ_CST);
	__atomic_fetch_add(&nwc_fork_gen, 1, __ATOMIC_RELAXED);
	nwc_lib.worker_started = 0;
	if (nwc_lib.listen_fd >= 0)
		close(nwc_lib.listen_fd);
	nwc_lib.listen_fd = -1;
}

static void nwc_atexit(void)
{
	if (nwc_lib.owner_pid != getpid() || !nwc_lib.sock_path[0])
		return;
	unlink(nwc_lib.sock_path);
	rmdir(nwc_lib.sock_dir);
}

/* Keep the library mapped for the worker's lifetime, whoever dlclose()s it. */
static void pin_self(void)
{
	Dl_info info;

	if (dladdr((void *)pin_self, &info) && info.dli_fname)
		dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
}

/* Once per process: subscribe now (injection) or from the worker (late), start the worker. */
int nwc_start(struct nwc *g, int late)
{
	sigset_t all, old;
	const char *ms = getenv("NANWATCH_CUPTI_DRAIN_MS");
	const char *launch = getenv("NANWATCH_CUPTI_LAUNCH");
	int err;

	if (__atomic_exchange_n(&nwc_started, 1, __ATOMIC_SEQ_CST))
		return 0;
	pin_self();
	g->drain_ms = ms && atoi(ms) > 0 ? atoi(ms) : NWC_DRAIN_MS;
	g->mode = launch && !strcmp(launch, "interpose") ? NW_GPU_MODE_INTERPOSE
							 : NW_GPU_MODE_CALLBACK;
	g->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (late)
		g->state |= NW_GPU_ST_LATE;
	else
		attach_cupti(g);
	pthread_atfork(NULL, NULL, nwc_atfork_child);
	atexit(nwc_atexit);
	/* the worker takes none of the process's signals */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	err = pthread_create(&g->worker, NULL, late ? late_main : early_main, g);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (err)
		return -err;
	g->worker_started = 1;
	pthread_detach(g->worker);
	return 0;
}

/* CUDA_INJECTION64_PATH: called by the driver at CUDA initialisation. */
__attribute__((visibility("default"))) int InitializeInjection(void)
{
	nwc_start(&nwc_lib, 0);
	return 1;
}

/* Loaded by the driver for CUDA_INJECTION64_PATH (InitializeInjection follows)? */
static int loaded_for_injection(void)
{
	const char *env = getenv("CUDA_INJECTION64_PATH");
	char a[PATH_MAX], b[PATH_MAX];
	Dl_info info;

	if (!env || !*env || !dladdr((void *)loaded_for_injection, &info) || !info.dli_fname)
		return 0;
	return realpath(env, a) && realpath(info.dli_fname, b) && !strcmp(a, b);
}

/* dlopen'ed into a running process: start late (CUPTI may start at any time). */
__attribute__((constructor)) static void nwc_ctor(void)
{
	if (!loaded_for_injection())
		nwc_start(&nwc_lib, 1);
}
