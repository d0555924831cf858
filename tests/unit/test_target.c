// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The tensor type of a torch whose THPVariableType is not in the symbol tables: found
 * through THPVariableClass (torch.Tensor) and its tp_base, in a fake target memory
 * (name checks, a torch not yet initialised, unreadable words) and in a real process
 * that imported torch, where the result must equal the THPVariableType symbol.
 *
 * target__open_image on a file this process maps whose path is then given to something
 * else (a FIFO, a symbolic link to a root-only file, another file, a directory swapped for a
 * link): through map_files the mapped file is what opens; by path (map_files taken away with
 * CAP_SYS_ADMIN and CAP_CHECKPOINT_RESTORE) only the mapped file, never the substitute, and
 * nothing blocks.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/capability.h>
#include <cmocka.h>
#include "resolve/layout.h"
#include "resolve/remote.h"
#include "resolve/target.h"
#include "fakemem.h"

#define TP_NAME 24
#define TP_BASE 256

/* In the arena: THPVariableClass, torch.Tensor at +64, TensorBase at +512, names at +1024. */
#define CLASS_SYM FAKEMEM_BASE
#define TENSOR (FAKEMEM_BASE + 64)
#define TENSOR_BASE (FAKEMEM_BASE + 512)
#define NAMES (FAKEMEM_BASE + 1024)

static void fake_torch(struct fakemem *m, const char *cls_name, const char *base_name)
{
	fakemem__init(m);
	fakemem__put64(m, CLASS_SYM, TENSOR);
	fakemem__put64(m, TENSOR + TP_NAME, NAMES);
	fakemem__put(m, NAMES, cls_name, strlen(cls_name) + 1);
	fakemem__put64(m, TENSOR + TP_BASE, TENSOR_BASE);
	fakemem__put64(m, TENSOR_BASE + TP_NAME, NAMES + 64);
	fakemem__put(m, NAMES + 64, base_name, strlen(base_name) + 1);
}

static void test_class_fallback(void **state)
{
	static struct fakemem m;
	struct target t = {.pid = 42, .tensor_class = CLASS_SYM};
	struct remote r;
	char err[256] = "";
	(void)state;

	fake_torch(&m, "Tensor", "torch._C.TensorBase");
	fakemem__remote(&m, &r);
	assert_int_equal(target__tensor_type(&t, &r, TP_NAME, TP_BASE, err, sizeof(err)), 0);
	assert_int_equal(t.tensor_type, TENSOR_BASE);
	assert_string_equal(t.tensor_type_from, "THPVariableClass");

	/* torch 1.13 named it _TensorBase */
	fake_torch(&m, "Tensor", "torch._C._TensorBase");
	t.tensor_type = 0;
	assert_int_equal(target__tensor_type(&t, &r, TP_NAME, TP_BASE, err, sizeof(err)), 0);
	assert_int_equal(t.tensor_type, TENSOR_BASE);
}

static void test_symbol_kept(void **state)
{
	static struct fakemem m;
	struct target t = {.pid = 42,
			   .tensor_type = 0x1234,
			   .tensor_class = CLASS_SYM,
			   .tensor_type_from = "THPVariableType"};
	struct remote r;
	char err[256] = "";
	(void)state;

	fake_torch(&m, "Tensor", "torch._C.TensorBase");
	fakemem__remote(&m, &r);
	assert_int_equal(target__tensor_type(&t, &r, TP_NAME, TP_BASE, err, sizeof(err)), 0);
	assert_int_equal(t.tensor_type, 0x1234);
	assert_string_equal(t.tensor_type_from, "THPVariableType");
}

static void test_class_errors(void **state)
{
	static struct fakemem m;
	struct target t = {.pid = 42, .tensor_class = CLASS_SYM};
	struct remote r;
	char err[256] = "";
	(void)state;

	fakemem__remote(&m, &r);
	/* imported but torch._C not initialised: the global is still NULL */
	fake_torch(&m, "Tensor", "torch._C.TensorBase");
	fakemem__put64(&m, CLASS_SYM, 0);
	assert_int_equal(target__tensor_type(&t, &r, TP_NAME, TP_BASE, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "torch not initialised"));
	assert_int_equal(t.tensor_type, 0);

	/* a class that is not torch.Tensor, or whose base is not TensorBase */
	fake_torch(&m, "Parameter", "torch._C.TensorBase");
	assert_int_equal(target__tensor_type(&t, &r, TP_NAME, TP_BASE, err, sizeof(err)), -EINVAL);
	fake_torch(&m, "Tensor", "object");
	assert_int_equal(target__tensor_type(&t, &r, TP_NAME, TP_BASE, err, sizeof(err)), -EINVAL);
	assert_non_null(strstr(err, "failed to resolve the tensor type in pid 42"));
	assert_int_equal(t.tensor_type, 0);

	/* a pointer out of the target's memory */
	fake_torch(&m, "Tensor", "torch._C.TensorBase");
	fakemem__put64(&m, TENSOR + TP_BASE, 0x10);
	assert_int_equal(target__tensor_type(&t, &r, TP_NAME, TP_BASE, err, sizeof(err)), -EINVAL);
	t.tensor_class = FAKEMEM_BASE + FAKEMEM_SIZE;
	assert_int_equal(target__tensor_type(&t, &r, TP_NAME, TP_BASE, err, sizeof(err)), -EFAULT);
	t.tensor_class = 0; /* not exported either */
	assert_int_equal(target__tensor_type(&t, &r, TP_NAME, TP_BASE, err, sizeof(err)), -ENOENT);
	assert_int_equal(t.tensor_type, 0);
}

/* A python3 that imported torch and waits on its stdin; its pid, or -1 (skipped). */
static pid_t start_torch(int *in)
{
	int tochild[2], fromchild[2];
	char line[16] = "";
	pid_t pid;

	if (access("/usr/bin/python3", X_OK) || pipe(tochild) || pipe(fromchild))
		return -1;
	pid = fork();
	if (pid == 0) {
		dup2(tochild[0], 0);
		dup2(fromchild[1], 1);
		close(tochild[0]);
		close(tochild[1]);
		close(fromchild[0]);
		close(fromchild[1]);
		execl("/usr/bin/python3", "python3", "-c",
		      "import os, sys, torch; os.write(1, b'ready'); sys.stdin.read()", NULL);
		_exit(127);
	}
	close(tochild[0]);
	close(fromchild[1]);
	*in = tochild[1];
	if (read(fromchild[0], line, sizeof(line) - 1) < 5 || strncmp(line, "ready", 5)) {
		close(fromchild[0]);
		close(*in);
		waitpid(pid, NULL, 0);
		return -1;
	}
	close(fromchild[0]);
	return pid;
}

static void test_real_torch(void **state)
{
	struct target t;
	struct remote r;
	struct layout *py;
	long long name, base;
	uint64_t symbol;
	char err[512] = "";
	int in = -1, status;
	pid_t pid;
	(void)state;

	pid = start_torch(&in);
	if (pid < 0)
		skip(); /* no torch here: the fake-memory cases above still ran */
	assert_int_equal(target__resolve(pid, &t, err, sizeof(err)), 0);
	assert_non_null(t.tensor_type_from);
	assert_string_equal(t.tensor_type_from, "THPVariableType");
	assert_int_not_equal(t.tensor_class, 0);
	py = layout__find("config/layouts", "python", t.python_series, err, sizeof(err));
	assert_non_null(py);
	assert_int_equal(layout__int(py, LK_type_name, &name), 0);
	assert_int_equal(layout__int(py, LK_type_base, &base), 0);
	layout__free(py);

	/* the class path must land on the same type the symbol names */
	symbol = t.tensor_type;
	t.tensor_type = 0;
	remote__init_pid(&r, pid);
	assert_int_equal(target__tensor_type(&t, &r, name, base, err, sizeof(err)), 0);
	assert_int_equal(t.tensor_type, symbol);
	assert_string_equal(t.tensor_type_from, "THPVariableClass");
	target__close(&t);
	close(in);
	assert_int_equal(waitpid(pid, &status, 0), pid);
}

struct mapped {
	char dir[64], sub[96], path[128], away[128];
	void *addr;
	struct stat st;
};

/* DIR/sub/lib.so, one page, mapped here; its maps facts in *m. */
static void map_file(struct mapped *m)
{
	char page[4096] = "\177ELF";
	int fd;

	snprintf(m->dir, sizeof(m->dir), "%s", "/tmp/test_target.XXXXXX");
	assert_non_null(mkdtemp(m->dir));
	snprintf(m->sub, sizeof(m->sub), "%s/sub", m->dir);
	assert_int_equal(mkdir(m->sub, 0700), 0);
	snprintf(m->path, sizeof(m->path), "%s/lib.so", m->sub);
	snprintf(m->away, sizeof(m->away), "%s/away.so", m->dir);
	fd = open(m->path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, page, sizeof(page)), (ssize_t)sizeof(page));
	m->addr = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
	assert_true(m->addr != MAP_FAILED);
	assert_int_equal(fstat(fd, &m->st), 0);
	close(fd);
}

static int open_mapped(const struct mapped *m)
{
	uint64_t a = (uint64_t)(uintptr_t)m->addr;

	return target__open_image(getpid(), m->path, a, a + 4096, m->st.st_dev, m->st.st_ino);
}

/* The fd is the mapped file: 0, else 1. */
static int is_mapped(int fd, const struct mapped *m)
{
	struct stat st;
	int bad = fd < 0 || fstat(fd, &st) || st.st_ino != m->st.st_ino;

	if (fd >= 0)
		close(fd);
	return bad;
}

/* Put substitute kind k (0 FIFO, 1 link to a root-only file, 2 another file) at the path. */
static int put_substitute(const struct mapped *m, int k)
{
	int fd;

	unlink(m->path);
	if (k == 0)
		return mkfifo(m->path, 0600);
	if (k == 1)
		return symlink("/etc/shadow", m->path);
	fd = open(m->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	return fd < 0 ? -1 : close(fd);
}

/*
 * Each substitute at the path in turn (the mapped file renamed away): through map_files the
 * mapped file opens (by_path 0); by path, each is refused. 0, or the step that went wrong.
 */
static int substitutes(const struct mapped *m, int by_path)
{
	int k, fd;

	for (k = 0; k < 3; k++) {
		if (put_substitute(m, k))
			return 10 * k + 1;
		fd = open_mapped(m); /* O_PATH first: the FIFO is never opened, nothing waits */
		if (!by_path && is_mapped(fd, m))
			return 10 * k + 2;
		if (by_path && fd != -ESTALE && !(k == 1 && fd == -ELOOP))
			return 10 * k + 3;
	}
	unlink(m->path);
	return 0;
}

/* Without CAP_SYS_ADMIN and CAP_CHECKPOINT_RESTORE no map_files: the path, checked. */
static int by_path(const struct mapped *m)
{
	struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct d[2];
	char moved[128];
	int ret;

	if (syscall(SYS_capget, &h, d))
		return 1;
	d[0].effective &= ~(1u << CAP_SYS_ADMIN);
	d[1].effective &= ~(1u << (CAP_CHECKPOINT_RESTORE - 32));
	if (syscall(SYS_capset, &h, d))
		return 2;
	ret = substitutes(m, 1);
	if (ret)
		return 100 + ret;
	if (rename(m->away, m->path) || is_mapped(open_mapped(m), m))
		return 3; /* the mapped file back at its path: that one opens */
	/* a directory on the path swapped for a link to a copy of it */
	snprintf(moved, sizeof(moved), "%s.d", m->sub);
	if (rename(m->sub, moved) || symlink(moved, m->sub))
		return 4;
	ret = open_mapped(m) == -ELOOP ? 0 : 5;
	unlink(m->sub);
	return rename(moved, m->sub) ? 6 : ret;
}

/* _Py_DebugOffsets' free_threaded word, read from a process's memory (this one's). */
static void test_free_threaded(void **state)
{
	uint64_t runtime[3];
	struct remote r;

	(void)state;
	remote__init_pid(&r, getpid());
	memcpy(&runtime[0], "xdebugpy", 8);
	runtime[1] = 0x030e08f0; /* 3.14.8 final */
	runtime[2] = 1;
	assert_int_equal(target__free_threaded(&r, (uint64_t)(uintptr_t)runtime), 1);
	runtime[2] = 0;
	assert_int_equal(target__free_threaded(&r, (uint64_t)(uintptr_t)runtime), 0);
	runtime[2] = 1;
	memcpy(&runtime[0], "xdebugpX", 8); /* no cookie (3.12): never taken for one */
	assert_int_equal(target__free_threaded(&r, (uint64_t)(uintptr_t)runtime), 0);
	assert_int_equal(target__free_threaded(&r, 0), 0);
	assert_int_equal(target__free_threaded(&r, 8), 0); /* unreadable */
}

static void test_image_swapped(void **state)
{
	struct mapped m;
	int status;
	pid_t pid;
	(void)state;

	if (geteuid())
		skip(); /* map_files needs CAP_SYS_ADMIN */
	map_file(&m);
	assert_int_equal(is_mapped(open_mapped(&m), &m), 0);
	assert_int_equal(rename(m.path, m.away), 0);
	alarm(20); /* a FIFO opened for reading would wait for a writer */
	assert_int_equal(substitutes(&m, 0), 0);
	pid = fork();
	if (pid == 0)
		_exit(by_path(&m));
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status));
	assert_int_equal(WEXITSTATUS(status), 0);
	alarm(0);
	/* a mapping gone is not looked for at its path (the child put the file back there) */
	assert_int_equal(munmap(m.addr, 4096), 0);
	assert_int_equal(open_mapped(&m), -ENOENT);
	unlink(m.path);
	rmdir(m.sub);
	rmdir(m.dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_class_fallback), cmocka_unit_test(test_symbol_kept),
		cmocka_unit_test(test_class_errors),   cmocka_unit_test(test_real_torch),
		cmocka_unit_test(test_image_swapped),  cmocka_unit_test(test_free_threaded),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
