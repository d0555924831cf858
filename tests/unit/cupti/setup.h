/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Loading the test copy of libnanwatch_cupti.so against the mocks, in a scratch directory. */
#ifndef __NW_CUPTI_TEST_SETUP_H
#define __NW_CUPTI_TEST_SETUP_H

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "daemon.h"

struct tlib {
	char dir[64];	     /* NANWATCH_CUPTI_DIR */
	char lib[PATH_MAX];  /* the library under test */
	char sock[PATH_MAX]; /* its socket */
	void *handle;
};

/* Env for the library (mocks beside this binary), then dlopen it; injected: as the driver. */
static inline int tlib_load(struct tlib *t, int injected)
{
	char exe[PATH_MAX - 64], path[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	char *slash;

	if (n <= 0)
		return -1;
	exe[n] = 0;
	slash = strrchr(exe, '/');
	*slash = 0;
	snprintf(t->dir, sizeof(t->dir), "/tmp/nwcupti-test.XXXXXX");
	if (!mkdtemp(t->dir))
		return -1;
	snprintf(t->lib, sizeof(t->lib), "%s/libnwcupti_test.so", exe);
	snprintf(path, sizeof(path), "%s/libnwmock_cupti.so", exe);
	setenv("NANWATCH_CUPTI_LIB", path, 1);
	snprintf(path, sizeof(path), "%s/libnwmock_cuda.so", exe);
	setenv("NANWATCH_CUDA_LIB", path, 1);
	setenv("NANWATCH_CUPTI_DIR", t->dir, 1);
	setenv("NANWATCH_CUPTI_DRAIN_MS", "50", 1);
	if (injected)
		setenv("CUDA_INJECTION64_PATH", t->lib, 1);
	else
		unsetenv("CUDA_INJECTION64_PATH");
	t->handle = dlopen(t->lib, RTLD_NOW | RTLD_LOCAL);
	return t->handle ? 0 : -1;
}

/* The worker made its socket (it does so right after starting), in a directory of its own. */
static inline int tlib_wait_socket(struct tlib *t)
{
	int i;

	for (i = 0; i < 20000; i++) {
		if (!td_sock_find(t->dir, (int)getpid(), t->sock, sizeof(t->sock)))
			return 0;
		usleep(1000);
	}
	return -1;
}

/* As the CUDA driver does: InitializeInjection must answer 1; then its socket appears. */
static inline int tlib_initialize(struct tlib *t)
{
	int (*init)(void);

	*(void **)&init = dlsym(t->handle, "InitializeInjection");
	if (!init || init() != 1)
		return -1;
	return tlib_wait_socket(t);
}

/* The library's socket, its directory and ours go; the worker is left blocked in poll. */
static inline void tlib_cleanup(struct tlib *t)
{
	char *slash;

	unlink(t->sock);
	slash = strrchr(t->sock, '/');
	if (slash) {
		*slash = 0;
		rmdir(t->sock);
	}
	rmdir(t->dir);
}

#endif /* __NW_CUPTI_TEST_SETUP_H */
