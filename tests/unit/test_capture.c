// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Capture assembly: records as the BPF side sends them turned into a directory
 * of .npy files and a manifest (modes, C order, what was left out and why),
 * the directory checks, and the pure helpers (names, ring size).
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include "capture/capture.h"
#include "explain/evidence.h"
#include "util/file.h"
#include "jsonread.h"
#include "resolve/pyobject.h"
#include "resolve/names.h"
#include "resolve/remote.h"
#include "resolve/target.h"

static int no_read(void *ctx, uint64_t addr, void *buf, size_t len)
{
	(void)ctx;
	(void)addr;
	(void)buf;
	(void)len;
	return -EFAULT; /* a target whose memory is gone: names and attrs unknown */
}

struct fixture {
	char dir[64];
	struct remote r;
	struct names *names;
	struct nw_layout l;
	struct capture *c;
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct capture_opts o = {};
	char err[256];

	if (!f)
		return -1;
	snprintf(f->dir, sizeof(f->dir), "/tmp/test_capture.XXXXXX");
	if (!mkdtemp(f->dir))
		return -1;
	f->r.read = no_read;
	f->names = names__new(&f->r);
	o.dir = f->dir;
	o.max_bytes = 1 << 20;
	o.pid = getpid();
	o.comm = "test";
	o.python_version = "3.11.2";
	o.torch_version = "1.13.0";
	o.remote = &f->r;
	o.names = f->names;
	o.layout = &f->l;
	f->c = capture__new(&o, err, sizeof(err));
	if (!f->c)
		return -1;
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	char path[256];

	capture__free(f->c);
	names__free(f->names);
	/* only what this test made, under its own mkdtemp directory */
	for (const char *n = "input0.npy\0manifest.json\0"; *n; n += strlen(n) + 1) {
		snprintf(path, sizeof(path), "%s/%d-step7-unnamed/%s", f->dir, getpid(), n);
		unlink(path);
	}
	snprintf(path, sizeof(path), "%s/%d-step7-unnamed", f->dir, getpid());
	rmdir(path);
	rmdir(f->dir);
	free(f);
	return 0;
}

static void send_tensor(struct capture *c, uint32_t index, uint32_t role, uint32_t pos0,
			uint32_t flags)
{
	struct nw_cap_tensor d = {
		.type = NW_EV_CAP_TENSOR,
		.capture = 1,
		.index = index,
		.role = role,
		.pos0 = pos0,
		.pos1 = NW_NO_INDEX,
		.scalar_type = 6,
		.elem_size = 4,
		.ndim = 2,
		.numel = 6,
		.bytes = 24,
		.obj = 0x1000 + index,
		.flags = flags,
		/* a (3, 2) float32 stored as its transpose */
		.shape = {3, 2},
		.strides = {1, 3},
	};

	if (flags & NW_CAP_NOT_TENSOR)
		d.scalar_type = NW_NO_SCALAR, d.ndim = 0, d.bytes = 0;
	assert_int_equal(capture__record(c, &d, sizeof(d)), 0);
}

static void send_data(struct capture *c, uint32_t index, uint64_t offset, const void *p,
		      uint32_t len)
{
	static struct nw_cap_data r;

	memset(&r, 0, sizeof(r));
	r.type = NW_EV_CAP_DATA;
	r.capture = 1;
	r.index = index;
	r.offset = offset;
	r.len = len;
	memcpy(r.data, p, len);
	assert_int_equal(capture__record(c, &r, sizeof(r)), 0);
}

static void send_end(struct capture *c, uint32_t ntensors)
{
	struct nw_cap_end e = {
		.type = NW_EV_CAP_END,
		.capture = 1,
		.step = 7,
		.iteration = 9,
		.module = 0x2000,
		.root = 0x3000,
		.ntensors = ntensors,
		.nargs = 2,
		.bytes = 24,
		.budget = 1 << 20,
		.index0 = NW_NO_INDEX,
		.index1 = NW_NO_INDEX,
		.class_name = "torch.nn.Thing",
	};

	assert_int_equal(capture__record(c, &e, sizeof(e)), 0);
}

static char *read_all(const char *path, size_t *len, mode_t *mode)
{
	struct stat st;
	char *buf;

	assert_int_equal(lstat(path, &st), 0);
	*mode = st.st_mode & 07777;
	buf = file__read(path, 1 << 20, len);
	assert_non_null(buf);
	return buf;
}

static void test_assemble(void **state)
{
	struct fixture *f = *state;
	float data[6] = {1, 2, 3, 4, 5, 6}, want[6] = {1, 4, 2, 5, 3, 6}, junk[2] = {9, 9};
	char sub[PATH_MAX], path[PATH_MAX + 32], err[128];
	const struct jv *t;
	struct jv *man;
	struct stat st;
	size_t len;
	mode_t mode;
	char *buf;

	send_tensor(f->c, 0, NW_CAP_INPUT, 0, 0);
	send_data(f->c, 0, 0, data, 16);
	send_data(f->c, 0, 16, data + 4, 8);
	send_data(f->c, 0, 20, junk, 8); /* past the tensor's bytes: ignored */
	send_tensor(f->c, 1, NW_CAP_INPUT, 1, NW_CAP_NOT_TENSOR);
	send_tensor(f->c, 2, NW_CAP_PARAM, 0, 0); /* its data never arrives: lost */
	send_tensor(f->c, 3, NW_CAP_OUTPUT, NW_NO_INDEX, NW_CAP_OVER_BUDGET);
	assert_null(capture__path(f->c));
	send_end(f->c, 4);
	assert_null(capture__error(f->c));
	snprintf(sub, sizeof(sub), "%s/%d-step7-unnamed", f->dir, getpid());
	assert_non_null(capture__path(f->c));
	assert_string_equal(capture__path(f->c), sub);
	assert_int_equal(lstat(sub, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0700);

	snprintf(path, sizeof(path), "%s/input0.npy", sub);
	buf = read_all(path, &len, &mode);
	assert_int_equal(mode, 0600);
	assert_int_equal(len, 128 + sizeof(want));
	assert_non_null(strstr(buf + 10, "'descr': '<f4', 'fortran_order': False, "
					 "'shape': (3, 2), }"));
	assert_memory_equal(buf + 128, want, sizeof(want));
	free(buf);

	snprintf(path, sizeof(path), "%s/manifest.json", sub);
	buf = read_all(path, &len, &mode);
	assert_int_equal(mode, 0600);
	man = jv__parse(buf, len, err, sizeof(err));
	assert_non_null(man);
	assert_string_equal(jv__string(jv__get(man, "schema")), CAPTURE_SCHEMA);
	assert_string_equal(jv__string(jv__get(man, "module")), "Thing");
	assert_true(jv__is_null(jv__get(man, "layer")));
	t = jv__get(man, "tensors");
	assert_int_equal(jv__len(t), 4);
	assert_string_equal(jv__string(jv__get(jv__index(t, 0), "file")), "input0.npy");
	assert_string_equal(jv__string(jv__get(jv__index(t, 0), "name")), "input[0]");
	assert_string_equal(jv__string(jv__get(jv__index(t, 1), "skipped")), "not_tensor");
	assert_string_equal(jv__string(jv__get(jv__index(t, 2), "skipped")), "lost");
	assert_string_equal(jv__string(jv__get(jv__index(t, 3), "skipped")), "budget");
	assert_true(jv__is_null(jv__get(jv__index(t, 3), "file")));
	{
		int b = 0;

		assert_int_equal(jv__bool(jv__get(man, "truncated"), &b), 0);
		assert_true(b);
	}
	jv__free(man);
	free(buf);

	/* the evidence, from the tensors whose data arrived, in C order: rows (1,4) (2,5) (3,6) */
	{
		const struct evidence_facts *x = capture__facts(f->c);

		assert_non_null(x);
		assert_int_equal(x->n, 1);
		assert_int_equal(x->module, 0x2000);
		assert_int_equal(x->iteration, 9);
		assert_string_equal(x->t[0].name, "input[0]");
		assert_int_equal(x->t[0].rows, 3);
		assert_true(x->t[0].max == 6 && x->t[0].min == 1);
	}

	/* one capture per watch: a second one is not written */
	send_tensor(f->c, 0, NW_CAP_INPUT, 0, 0);
	send_data(f->c, 0, 0, data, 24);
	send_end(f->c, 1);
	assert_string_equal(capture__path(f->c), sub);
}

/* A capture without a directory (facts only), reading no remote memory. */
static struct capture *facts_capture(void)
{
	static struct remote r = {.read = no_read};
	struct capture_opts o = {.max_bytes = 1 << 20, .pid = getpid(), .comm = "test"};
	struct capture *c;
	char err[128];

	o.remote = &r;
	c = capture__new(&o, err, sizeof(err));
	assert_non_null(c);
	return c;
}

/* Without a directory: nothing written, the facts still taken. */
static void test_facts_only(void **state)
{
	/* stored transposed: C-order rows (0, 0) (2, 5) (3, 6) */
	float data[6] = {0, 2, 3, 0, 5, 6};
	const struct evidence_facts *x;
	struct capture *c = facts_capture();

	(void)state;
	assert_null(capture__facts(c));
	send_tensor(c, 0, NW_CAP_INPUT, 0, 0);
	send_data(c, 0, 0, data, 24);
	send_end(c, 1);
	assert_null(capture__path(c));
	assert_null(capture__error(c));
	x = capture__facts(c);
	assert_non_null(x);
	assert_int_equal(x->n, 1);
	assert_int_equal(x->t[0].zero_rows, 1);
	assert_int_equal(x->t[0].zeros, 2);
	capture__free(c);
}

/* An empty tensor (a dimension of 0) has facts, of no values; one whose data is lost has none. */
static void test_facts_empty(void **state)
{
	struct nw_cap_tensor d = {
		.type = NW_EV_CAP_TENSOR,
		.capture = 1,
		.index = 0,
		.role = NW_CAP_INPUT,
		.pos1 = NW_NO_INDEX,
		.scalar_type = 6,
		.elem_size = 4,
		.ndim = 3,
		.numel = 0,
		.bytes = 0,
		.obj = 0x1000,
		.shape = {4, 0, 8},
		.strides = {8, 8, 1},
	};
	const struct evidence_facts *x;
	struct capture *c = facts_capture();

	(void)state;
	assert_int_equal(capture__record(c, &d, sizeof(d)), 0);
	send_tensor(c, 1, NW_CAP_INPUT, 1, 0); /* its data never arrives */
	send_end(c, 2);
	x = capture__facts(c);
	assert_non_null(x);
	assert_int_equal(x->n, 1);
	assert_string_equal(x->t[0].name, "input[0]");
	assert_int_equal(x->t[0].numel, 0);
	assert_int_equal(x->t[0].ndim, 3);
	/* numel that the shape does not give: no facts */
	capture__free(c);
	c = facts_capture();
	d.numel = 3;
	assert_int_equal(capture__record(c, &d, sizeof(d)), 0);
	send_end(c, 1);
	x = capture__facts(c);
	assert_non_null(x);
	assert_int_equal(x->n, 0);
	capture__free(c);
}

static void test_refuses_dirs(void **state)
{
	char dir[] = "/tmp/test_capture_dir.XXXXXX", link[64], err[256];
	struct capture_opts o = {.max_bytes = 1, .pid = getpid()};
	struct capture *c;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(link, sizeof(link), "%s.lnk", dir);
	assert_int_equal(symlink(dir, link), 0);
	o.dir = link;
	c = capture__new(&o, err, sizeof(err));
	assert_null(c);
	assert_int_equal(errno, ELOOP);
	assert_non_null(strstr(err, "symlink"));
	assert_int_equal(chmod(dir, 0777), 0);
	o.dir = dir;
	assert_null(capture__new(&o, err, sizeof(err)));
	assert_non_null(strstr(err, "world-writable"));
	assert_int_equal(chmod(dir, 01777), 0); /* sticky, as /tmp: accepted */
	c = capture__new(&o, err, sizeof(err));
	assert_non_null(c);
	capture__free(c);
	unlink(link);
	rmdir(dir);
}

static void test_names(void **state)
{
	struct nw_cap_tensor d = {.role = NW_CAP_INPUT, .pos0 = 1, .pos1 = NW_NO_INDEX};
	char buf[64];

	(void)state;
	assert_int_equal(capture__dirname(buf, sizeof(buf), 42, 3, "blocks.0.norm"), 0);
	assert_string_equal(buf, "42-step3-blocks.0.norm");
	assert_int_equal(capture__dirname(buf, sizeof(buf), 42, 3, ""), 0);
	assert_string_equal(buf, "42-step3-root");
	assert_int_equal(capture__dirname(buf, sizeof(buf), 42, 3, NULL), 0);
	assert_string_equal(buf, "42-step3-unnamed");
	/* a module name is the target's data: no separators, nothing hidden or relative */
	assert_int_equal(capture__dirname(buf, sizeof(buf), 1, 0, "../a/b c"), 0);
	assert_string_equal(buf, "1-step0-_._a_b_c");
	assert_int_equal(capture__dirname(buf, 8, 1, 0, "long"), -ENAMETOOLONG);

	assert_int_equal(capture__filename(buf, sizeof(buf), &d, NULL), 0);
	assert_string_equal(buf, "input1.npy");
	d.pos1 = 2;
	assert_int_equal(capture__filename(buf, sizeof(buf), &d, NULL), 0);
	assert_string_equal(buf, "input1_2.npy");
	d.role = NW_CAP_PARAM;
	assert_int_equal(capture__filename(buf, sizeof(buf), &d, "in_proj/weight"), 0);
	assert_string_equal(buf, "param.in_proj_weight.npy");
	d.role = NW_CAP_BUFFER;
	assert_int_equal(capture__filename(buf, sizeof(buf), &d, ".hidden"), 0);
	assert_string_equal(buf, "buffer._hidden.npy");
	d.role = NW_CAP_OUTPUT;
	d.pos0 = NW_NO_INDEX;
	assert_int_equal(capture__filename(buf, sizeof(buf), &d, NULL), 0);
	assert_string_equal(buf, "output.npy");
	d.pos0 = 1;
	d.pos1 = 0;
	assert_int_equal(capture__filename(buf, sizeof(buf), &d, NULL), 0);
	assert_string_equal(buf, "output1_0.npy");
	/* a dataclass's field: its place among the attributes, named by its name */
	d.pos0 = NW_ATTR_INDEX | 1;
	d.pos1 = NW_NO_INDEX;
	snprintf(d.key, sizeof(d.key), "%s", "logits");
	assert_int_equal(capture__filename(buf, sizeof(buf), &d, NULL), 0);
	assert_string_equal(buf, "output1.npy");
	capture__tensor_name(buf, sizeof(buf), &d, NULL);
	assert_string_equal(buf, "output.logits");
	memset(d.key, 0, sizeof(d.key));

	/* a keyword argument: its key is the target's bytes, maybe unterminated */
	d.role = NW_CAP_KWARG;
	d.pos0 = 1;
	d.pos1 = NW_NO_INDEX;
	snprintf(d.key, sizeof(d.key), "%s", "key_padding_mask");
	assert_int_equal(capture__filename(buf, sizeof(buf), &d, NULL), 0);
	assert_string_equal(buf, "kwarg1.key_padding_mask.npy");
	capture__tensor_name(buf, sizeof(buf), &d, NULL);
	assert_string_equal(buf, "key_padding_mask");
	d.pos1 = 2;
	assert_int_equal(capture__filename(buf, sizeof(buf), &d, NULL), 0);
	assert_string_equal(buf, "kwarg1_2.key_padding_mask.npy");
	capture__tensor_name(buf, sizeof(buf), &d, NULL);
	assert_string_equal(buf, "key_padding_mask[2]");
	memset(d.key, 'k', sizeof(d.key));
	d.key[0] = '.';
	d.key[1] = '/';
	capture__tensor_name(buf, sizeof(buf), &d, NULL);
	assert_int_equal(strlen(buf), sizeof(d.key) + 3);
	assert_int_equal(capture__filename(buf, sizeof(buf), &d, NULL), 0);
	assert_memory_equal(buf, "kwarg1_2.__kkk", 14);
	memset(d.key, 0, sizeof(d.key));
	capture__tensor_name(buf, sizeof(buf), &d, NULL);
	assert_string_equal(buf, "kwarg[1]");
	assert_int_equal(capture__filename(buf, sizeof(buf), &d, NULL), 0);
	assert_string_equal(buf, "kwarg1_2.unnamed.npy");
}

static void test_ring_bytes(void **state)
{
	(void)state;
	/* the default budget fits a 64 MiB ring, records and headers included */
	assert_int_equal(capture__ring_bytes(CAPTURE_DEFAULT_BYTES), 64u << 20);
	assert_int_equal(capture__ring_bytes(64ull << 20), 128u << 20);
	assert_int_equal(capture__ring_bytes(200), 512u << 10);
	assert_int_equal(capture__ring_bytes(512ull << 20), 1u << 30); /* the largest budget */
	assert_int_equal(capture__ring_bytes(4ull << 30), 0);
}

static void test_pylong(void **state)
{
	uint32_t one[2] = {1, 0}, big[2] = {5, 1};
	int neg;

	(void)state;
	/* 3.11: ob_size 0 is zero, 1 one digit, -1 one digit negative */
	assert_int_equal(pyobject__long_size(0, 0, &neg), 0);
	assert_int_equal(pyobject__long_value(one, 0, 30, neg), 0);
	assert_int_equal(pyobject__long_size(1, 0, &neg), 1);
	assert_int_equal(pyobject__long_value(one, 1, 30, neg), 1);
	assert_int_equal(pyobject__long_size((uint64_t)-1, 0, &neg), 1);
	assert_true(neg);
	assert_int_equal(pyobject__long_value(one, 1, 30, neg), -1);
	assert_int_equal(pyobject__long_size(2, 0, &neg), 2);
	assert_int_equal(pyobject__long_value(big, 2, 30, neg), (1LL << 30) + 5);
	assert_int_equal(pyobject__long_size(3, 0, &neg), -ERANGE);
	/* 3.12+ (long_tagged): lv_tag; True is 1 << 3, False (zero) is sign 1, -1 is 1 << 3 | 2 */
	assert_int_equal(pyobject__long_size(1 << 3, 1, &neg), 1);
	assert_false(neg);
	assert_int_equal(pyobject__long_size(1, 1, &neg), 0);
	assert_int_equal(pyobject__long_size(1 << 3 | 2, 1, &neg), 1);
	assert_int_equal(pyobject__long_value(one, 1, 30, neg), -1);
	assert_int_equal(pyobject__long_size(2 << 3 | 2, 1, &neg), 2);
	assert_int_equal(pyobject__long_value(big, 2, 30, neg), -((1LL << 30) + 5));
	assert_int_equal(pyobject__long_size(3 << 3, 1, &neg), -ERANGE);
}

/* A target's memory for test_pyvalue: types, names and one object at a time. */
#define PYMEM_BASE 0x100000ULL
static uint8_t pymem[2048];

static int pymem_read(void *ctx, uint64_t addr, void *buf, size_t len)
{
	(void)ctx;
	if (addr < PYMEM_BASE || addr - PYMEM_BASE > sizeof(pymem) ||
	    len > sizeof(pymem) - (addr - PYMEM_BASE))
		return -EFAULT;
	memcpy(buf, pymem + (addr - PYMEM_BASE), len);
	return 0;
}

static void pyput(uint64_t addr, const void *v, size_t n)
{
	memcpy(pymem + (addr - PYMEM_BASE), v, n);
}

static void pyput64(uint64_t addr, uint64_t v)
{
	pyput(addr, &v, sizeof(v));
}

/* ints and floats laid out as each shipped python table says, read back as values */
static void test_pyvalue(void **state)
{
	static const char *const versions[] = {"3.11", "3.12", "3.13"};
	static const long long ints[] = {0, 1, -7, (1LL << 40) + 3, -(1LL << 59) - 1};
	const uint64_t int_type = PYMEM_BASE, float_type = PYMEM_BASE + 512,
		       obj = PYMEM_BASE + 1536;
	struct pyobject_layout pl;
	struct py_value pv;
	struct nw_layout nwl;
	struct layout *py;
	struct remote r;
	char err[256];
	size_t v, i;

	(void)state;
	for (v = 0; v < sizeof(versions) / sizeof(versions[0]); v++) {
		int tagged = strcmp(versions[v], "3.11") != 0;
		double d = -2.5;

		py = layout__find("config/layouts", "python", versions[v], err, sizeof(err));
		if (!py)
			fail_msg("%s", err);
		memset(&r, 0, sizeof(r));
		memset(&nwl, 0, sizeof(nwl));
		r.read = pymem_read;
		assert_int_equal(remote__layout_from(&r.l, py, err, sizeof(err)), 0);
		assert_int_equal(layout__fill(py, &nwl, err, sizeof(err)), 0);
		layout__free(py);
		/* CPython 3.11 to 3.13 on x86-64: what the readers took for granted before */
		assert_int_equal(r.l.long_digits, nwl.var_size + 8);
		assert_int_equal(r.l.long_digit_bits, 30);
		assert_int_equal(r.l.long_tagged, tagged);
		assert_int_equal(r.l.float_value, nwl.var_size);
		assert_int_equal(r.l.type_dict, nwl.type_base + 8);
		pl = (struct pyobject_layout){.l = &nwl, .tuple_type = 1};

		memset(pymem, 0, sizeof(pymem));
		r.none = PYMEM_BASE + 1024;
		pyput(PYMEM_BASE + 1040, "int", 4);
		pyput(PYMEM_BASE + 1048, "float", 6);
		pyput64(int_type + r.l.type_name, PYMEM_BASE + 1040);
		pyput64(float_type + r.l.type_name, PYMEM_BASE + 1048);
		pyput64(obj + r.l.obj_type, int_type);
		for (i = 0; i < sizeof(ints) / sizeof(ints[0]); i++) {
			uint64_t mag = ints[i] < 0 ? -(uint64_t)ints[i] : (uint64_t)ints[i];
			uint32_t digits[2] = {mag & 0x3fffffff, mag >> 30};
			int n = mag ? (digits[1] ? 2 : 1) : 0;
			uint64_t size = ints[i] < 0 ? -(uint64_t)n : (uint64_t)n;

			if (tagged)
				size = (uint64_t)n << 3 | (ints[i] < 0 ? 2 : !ints[i]);
			pyput64(obj + nwl.var_size, size);
			pyput(obj + r.l.long_digits, digits, sizeof(digits));
			assert_int_equal(pyobject__value(&r, &pl, obj, &pv), 0);
			assert_int_equal(pv.kind, PY_INT);
			assert_true(pv.i == ints[i]);
		}
		/* three digits: more than a small int */
		pyput64(obj + nwl.var_size, tagged ? 3 << 3 : 3);
		assert_int_equal(pyobject__value(&r, &pl, obj, &pv), -ENOTSUP);

		pyput64(obj + r.l.obj_type, float_type);
		pyput(obj + r.l.float_value, &d, sizeof(d));
		assert_int_equal(pyobject__value(&r, &pl, obj, &pv), 0);
		assert_int_equal(pv.kind, PY_FLOAT);
		assert_true(pv.d == -2.5);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_assemble, setup, teardown),
		cmocka_unit_test(test_facts_only),
		cmocka_unit_test(test_facts_empty),
		cmocka_unit_test(test_refuses_dirs),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_ring_bytes),
		cmocka_unit_test(test_pylong),
		cmocka_unit_test(test_pyvalue),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
