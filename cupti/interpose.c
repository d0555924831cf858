// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * NANWATCH_CUPTI_LAUNCH=interpose: scans are enqueued from the launch entry
 * points themselves, an ordinary CUDA call in the launching thread, instead
 * of from inside a CUPTI callback (which CUPTI's guide does not support).
 * Every loaded object's GOT entries (JUMP_SLOT and GLOB_DAT relocations) for
 * the driver's cuLaunchKernel and cuLaunchKernelEx and the runtime's launch
 * entry points are pointed at the wrappers below, again whenever objects are
 * loaded while a daemon is connected; and a CUPTI API-exit callback on
 * cuGetProcAddress rewrites the pointer it hands out for
 * cuLaunchKernel/cuLaunchKernelEx. The runtime's entry points are
 * cudaLaunchKernel and cudaLaunchKernelExC, and __cudaLaunchKernel, which the
 * <<<>>> launches that nvcc 12.8 and later compiles call (torch 2.11's
 * kernels: on an H200 those were the only ones), each with its _ptsz twin.
 * Not seen: entry points found by dlsym on libcuda, the driver's _ptsz
 * variants, cudaLaunchCooperativeKernel, and launches made inside libcudart
 * through pointers it obtained in another way.
 */
#include <dlfcn.h>
#include <elf.h>
#include <limits.h>
#include <link.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "nwcupti.h"

#if defined(__x86_64__)
#define NWC_R_JUMP_SLOT R_X86_64_JUMP_SLOT
#define NWC_R_GLOB_DAT R_X86_64_GLOB_DAT
#elif defined(__aarch64__)
#define NWC_R_JUMP_SLOT R_AARCH64_JUMP_SLOT
#define NWC_R_GLOB_DAT R_AARCH64_GLOB_DAT
#endif

typedef nwc_curesult (*nwc_launch_fn)(CUfunction, unsigned int, unsigned int, unsigned int,
				      unsigned int, unsigned int, unsigned int, unsigned int,
				      CUstream, void **, void **);
typedef nwc_curesult (*nwc_launch_ex_fn)(const nwc_launch_config *, CUfunction, void **, void **);
typedef int (*nwc_rt_launch_fn)(const void *, nwc_dim3, nwc_dim3, void **, size_t, CUstream);
typedef int (*nwc_rt_launch_exc_fn)(const nwc_rt_launch_config *, const void *, void **);

/* The runtime's launch entry points (libcudart), in the order of rt_names. */
enum {
	NWC_RT_LAUNCH,	  /* cudaLaunchKernel */
	NWC_RT_LAUNCH_PT, /* cudaLaunchKernel_ptsz */
	NWC_RT_STUB,	  /* __cudaLaunchKernel: nvcc's <<<>>> (kernel handle, same ABI) */
	NWC_RT_STUB_PT,	  /* __cudaLaunchKernel_ptsz */
	NWC_RT_EXC,	  /* cudaLaunchKernelExC */
	NWC_RT_EXC_PT,	  /* cudaLaunchKernelExC_ptsz */
	NWC_RT_N,
};

static const char *const rt_names[NWC_RT_N] = {
	"cudaLaunchKernel",	   "cudaLaunchKernel_ptsz", "__cudaLaunchKernel",
	"__cudaLaunchKernel_ptsz", "cudaLaunchKernelExC",   "cudaLaunchKernelExC_ptsz",
};

/* The wrappers are called by the application, with no user data: this is theirs. */
static struct {
	struct nwc *g;
	nwc_launch_fn cuLaunchKernel;
	nwc_launch_ex_fn cuLaunchKernelEx;
	void *rt[NWC_RT_N];	 /* the runtime's entry points, NULL where it has none */
	int rt_resolved;	 /* rt looked up in a loaded libcudart */
	void *skip[3];		 /* load addresses of objects left alone: us, libcuda, libcupti */
	unsigned long long adds; /* dlpi_adds when last patched */
} ip;

static __thread int in_runtime; /* inside cudaLaunchKernel: its driver launch is the same one */

static void enter(CUstream s)
{
	struct nwc *g = ip.g;
	CUcontext ctx = NULL;

	if (!__atomic_load_n(&g->connected, __ATOMIC_RELAXED) || nwc_busy || in_runtime)
		return;
	nwc_busy = 1;
	__atomic_fetch_add(&g->active, 1, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&g->connected, __ATOMIC_SEQ_CST) && g->ring &&
	    !g->cu.CtxGetCurrent(&ctx) && ctx)
		nwc_launch_enter(g, ctx, s);
	__atomic_fetch_sub(&g->active, 1, __ATOMIC_RELEASE);
	nwc_busy = 0;
}

static nwc_curesult w_cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy,
				     unsigned int gz, unsigned int bx, unsigned int by,
				     unsigned int bz, unsigned int shm, CUstream s, void **params,
				     void **extra)
{
	enter(s);
	return ip.cuLaunchKernel(f, gx, gy, gz, bx, by, bz, shm, s, params, extra);
}

static nwc_curesult w_cuLaunchKernelEx(const nwc_launch_config *config, CUfunction f, void **params,
				       void **extra)
{
	enter(config ? config->hStream : NULL);
	return ip.cuLaunchKernelEx(config, f, params, extra);
}

/* The stream a runtime launch goes to: for a _ptsz one, 0 is the thread's own default stream. */
static CUstream rt_stream(int k, CUstream s)
{
	return !s && (k == NWC_RT_LAUNCH_PT || k == NWC_RT_STUB_PT || k == NWC_RT_EXC_PT)
		       ? NWC_CU_STREAM_PER_THREAD
		       : s;
}

/* A runtime launch: the scans first, then the launch, whose driver launch is the same one. */
static int rt_launch(int k, const void *fn, nwc_dim3 grid, nwc_dim3 block, void **args, size_t shm,
		     CUstream s)
{
	nwc_rt_launch_fn real = (nwc_rt_launch_fn)ip.rt[k];
	int r;

	enter(rt_stream(k, s));
	in_runtime++;
	r = real(fn, grid, block, args, shm, s);
	in_runtime--;
	return r;
}

static int rt_launch_exc(int k, const nwc_rt_launch_config *config, const void *fn, void **args)
{
	nwc_rt_launch_exc_fn real = (nwc_rt_launch_exc_fn)ip.rt[k];
	int r;

	enter(rt_stream(k, config ? config->stream : NULL));
	in_runtime++;
	r = real(config, fn, args);
	in_runtime--;
	return r;
}

static int w_cudaLaunchKernel(const void *fn, nwc_dim3 grid, nwc_dim3 block, void **args,
			      size_t shm, CUstream s)
{
	return rt_launch(NWC_RT_LAUNCH, fn, grid, block, args, shm, s);
}

static int w_cudaLaunchKernel_ptsz(const void *fn, nwc_dim3 grid, nwc_dim3 block, void **args,
				   size_t shm, CUstream s)
{
	return rt_launch(NWC_RT_LAUNCH_PT, fn, grid, block, args, shm, s);
}

static int w___cudaLaunchKernel(const void *fn, nwc_dim3 grid, nwc_dim3 block, void **args,
				size_t shm, CUstream s)
{
	return rt_launch(NWC_RT_STUB, fn, grid, block, args, shm, s);
}

static int w___cudaLaunchKernel_ptsz(const void *fn, nwc_dim3 grid, nwc_dim3 block, void **args,
				     size_t shm, CUstream s)
{
	return rt_launch(NWC_RT_STUB_PT, fn, grid, block, args, shm, s);
}

static int w_cudaLaunchKernelExC(const nwc_rt_launch_config *config, const void *fn, void **args)
{
	return rt_launch_exc(NWC_RT_EXC, config, fn, args);
}

static int w_cudaLaunchKernelExC_ptsz(const nwc_rt_launch_config *config, const void *fn,
				      void **args)
{
	return rt_launch_exc(NWC_RT_EXC_PT, config, fn, args);
}

static void *const rt_wrappers[NWC_RT_N] = {
	(void *)w_cudaLaunchKernel,    (void *)w_cudaLaunchKernel_ptsz,
	(void *)w___cudaLaunchKernel,  (void *)w___cudaLaunchKernel_ptsz,
	(void *)w_cudaLaunchKernelExC, (void *)w_cudaLaunchKernelExC_ptsz,
};

/* The wrapper for an imported symbol, or NULL. */
static void *wrapper_of(const char *name)
{
	int k;

	if (ip.cuLaunchKernel && !strcmp(name, "cuLaunchKernel"))
		return (void *)w_cuLaunchKernel;
	if (ip.cuLaunchKernelEx && !strcmp(name, "cuLaunchKernelEx"))
		return (void *)w_cuLaunchKernelEx;
	/* the runtime's names all start so: one compare for every other import */
	if (strncmp(name, "cuda", 4) && strncmp(name, "__cuda", 6))
		return NULL;
	for (k = 0; k < NWC_RT_N; k++)
		if (ip.rt[k] && !strcmp(name, rt_names[k]))
			return rt_wrappers[k];
	return NULL;
}

/* Write a GOT slot; one inside RELRO is made writable for the write. */
static void patch_slot(void **slot, void *value, uintptr_t relro_lo, uintptr_t relro_hi)
{
	uintptr_t page = (uintptr_t)slot & ~((uintptr_t)getpagesize() - 1);
	int ro = (uintptr_t)slot >= relro_lo && (uintptr_t)slot < relro_hi;

	if (__atomic_load_n(slot, __ATOMIC_RELAXED) == value)
		return;
	if (ro && mprotect((void *)page, getpagesize(), PROT_READ | PROT_WRITE))
		return;
	__atomic_store_n(slot, value, __ATOMIC_RELEASE);
	if (ro)
		mprotect((void *)page, getpagesize(), PROT_READ);
}

struct nwc_dyn {
	uintptr_t base;
	const ElfW(Sym) * symtab;
	const char *strtab;
	const ElfW(Rela) * rel[2];
	size_t relsz[2];
	uintptr_t relro_lo, relro_hi;
};

/* glibc relocates most d_ptr values in place, but not where _DYNAMIC is read-only */
static uintptr_t dyn_ptr(const struct nwc_dyn *d, ElfW(Addr) p)
{
	return p < d->base ? d->base + p : p;
}

static void patch_relocs(const struct nwc_dyn *d)
{
	const ElfW(Rela) * r;
	const char *name;
	size_t i, k;
	void *w;

	for (k = 0; k < 2; k++)
		for (i = 0; d->rel[k] && i < d->relsz[k] / sizeof(*r); i++) {
			r = &d->rel[k][i];
			if (ELF64_R_TYPE(r->r_info) != NWC_R_JUMP_SLOT &&
			    ELF64_R_TYPE(r->r_info) != NWC_R_GLOB_DAT)
				continue;
			name = d->strtab + d->symtab[ELF64_R_SYM(r->r_info)].st_name;
			w = wrapper_of(name);
			if (w)
				patch_slot((void **)(d->base + r->r_offset), w, d->relro_lo,
					   d->relro_hi);
		}
}

static int patch_object(struct dl_phdr_info *info, size_t size, void *data)
{
	struct nwc_dyn d = {.base = info->dlpi_addr};
	const ElfW(Dyn) *dyn = NULL, *e;
	int i;

	(void)size;
	(void)data;
	for (i = 0; i < 3; i++)
		if (ip.skip[i] && (uintptr_t)ip.skip[i] == info->dlpi_addr)
			return 0;
	if (info->dlpi_name && strstr(info->dlpi_name, "linux-vdso"))
		return 0;
	for (i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

		if (ph->p_type == PT_DYNAMIC)
			dyn = (const ElfW(Dyn) *)(d.base + ph->p_vaddr);
		if (ph->p_type == PT_GNU_RELRO) {
			d.relro_lo = d.base + ph->p_vaddr;
			d.relro_hi = d.relro_lo + ph->p_memsz;
		}
	}
	for (e = dyn; e && e->d_tag != DT_NULL; e++) {
		if (e->d_tag == DT_SYMTAB)
			d.symtab = (const ElfW(Sym) *)dyn_ptr(&d, e->d_un.d_ptr);
		else if (e->d_tag == DT_STRTAB)
			d.strtab = (const char *)dyn_ptr(&d, e->d_un.d_ptr);
		else if (e->d_tag == DT_JMPREL)
			d.rel[0] = (const ElfW(Rela) *)dyn_ptr(&d, e->d_un.d_ptr);
		else if (e->d_tag == DT_PLTRELSZ)
			d.relsz[0] = e->d_un.d_val;
		else if (e->d_tag == DT_RELA)
			d.rel[1] = (const ElfW(Rela) *)dyn_ptr(&d, e->d_un.d_ptr);
		else if (e->d_tag == DT_RELASZ)
			d.relsz[1] = e->d_un.d_val;
	}
	if (d.symtab && d.strtab)
		patch_relocs(&d);
	return 0;
}

/* A loaded libcudart's path (copied out: no dlopen under dl_iterate_phdr's lock). */
static int find_runtime(struct dl_phdr_info *info, size_t size, void *data)
{
	char *path = data;

	(void)size;
	if (!info->dlpi_name || !strstr(info->dlpi_name, "/libcudart.so") ||
	    strlen(info->dlpi_name) >= PATH_MAX)
		return 0;
	strcpy(path, info->dlpi_name);
	return 1;
}

/*
 * The runtime's launch entry points: in the global scope, or (torch loads its
 * libraries RTLD_LOCAL, from a Python extension) in a loaded libcudart.
 */
static void resolve_runtime(void)
{
	char path[PATH_MAX] = "";
	void *h = NULL;
	int k;

	if (!dlsym(RTLD_DEFAULT, rt_names[NWC_RT_LAUNCH])) {
		if (!dl_iterate_phdr(find_runtime, path) ||
		    !(h = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD)))
			return;
	}
	for (k = 0; k < NWC_RT_N; k++)
		ip.rt[k] = dlsym(h ? h : RTLD_DEFAULT, rt_names[k]);
	if (h)
		dlclose(h);
	ip.rt_resolved = 1;
}

static int count_adds(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)size;
	*(unsigned long long *)data = info->dlpi_adds;
	return 1;
}

/* Patch every loaded object if any was loaded since the last time; 1 if it did. */
int nwc_ip_patch(void)
{
	unsigned long long adds = 0;

	if (!ip.g)
		return 0;
	dl_iterate_phdr(count_adds, &adds);
	if (adds == ip.adds)
		return 0;
	ip.adds = adds;
	if (!ip.rt_resolved)
		resolve_runtime();
	dl_iterate_phdr(patch_object, NULL);
	return 1;
}

static void *load_base(void *addr)
{
	Dl_info info;

	return addr && dladdr(addr, &info) ? info.dli_fbase : NULL;
}

/* The real entry points, then the GOTs; cuda is libcuda's handle. */
int nwc_ip_init(struct nwc *g, void *cuda)
{
#ifdef NWC_R_JUMP_SLOT
	ip.cuLaunchKernel = (nwc_launch_fn)g->cu.LaunchKernel;
	*(void **)&ip.cuLaunchKernelEx = dlsym(cuda, "cuLaunchKernelEx");
	ip.skip[0] = load_base((void *)nwc_ip_init);
	ip.skip[1] = load_base((void *)g->cu.LaunchKernel);
	ip.skip[2] = load_base(g->cupti.Subscribe ? (void *)g->cupti.Subscribe : NULL);
	ip.g = g;
	nwc_ip_patch();
	return 0;
#else
	(void)g;
	(void)cuda;
	return -1;
#endif
}

/* API exit of cuGetProcAddress: hand out the wrappers instead of the launch entry points. */
void nwc_ip_procaddr(const nwc_callback_data *cb)
{
	const nwc_procaddr_params *p = cb->functionParams;

	if (!ip.g || cb->callbackSite != NWC_CUPTI_API_EXIT || !p || !p->pfn || !*p->pfn)
		return;
	if (*p->pfn == (void *)ip.cuLaunchKernel)
		*p->pfn = (void *)w_cuLaunchKernel;
	else if (ip.cuLaunchKernelEx && *p->pfn == (void *)ip.cuLaunchKernelEx)
		*p->pfn = (void *)w_cuLaunchKernelEx;
}
