// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The tensor type of a torch whose THPVariableType is not in the symbol tables: found
 * through THPVariableClass (torch.Tensor) and its tp_base, in a fake target memory
 * (name checks, a torch not yet initialised, unreadable words) and in a real process
 * that imported torch, where the result must equal the THPVariableType symbol.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
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

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_class_fallback),
		cmocka_unit_test(test_symbol_kept),
		cmocka_unit_test(test_class_errors),
		cmocka_unit_test(test_real_torch),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
