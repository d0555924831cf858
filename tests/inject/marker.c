// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The library the injection tests load: its constructor appends the process's pid to
 * "<its own path>.loaded", so a test sees that this copy was loaded, once, into that process.
 * A library loaded by dlopen into a running process starts from a constructor like this one.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

__attribute__((constructor)) static void marker_loaded(void)
{
	char path[4200], line[32];
	Dl_info info;
	int fd, n;

	if (!dladdr((void *)marker_loaded, &info) || !info.dli_fname)
		return;
	snprintf(path, sizeof(path), "%s.loaded", info.dli_fname);
	fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
	if (fd < 0)
		return;
	n = snprintf(line, sizeof(line), "%d\n", getpid());
	if (write(fd, line, n) != n)
		n = -1;
	close(fd);
}
