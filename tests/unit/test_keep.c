// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * resolve/keep.c: which modules BPF may take as keeping a finite input finite, read from a
 * fake target: torch's own ReLU is vouched for (its hook dicts' ma_used words found), and
 * every way of not being torch's own is refused.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>
#include <cmocka.h>
#include "resolve/keep.h"
#include "resolve/pyobject.h"
#include "resolve/remote.h"
#include "fakemem.h"

#define TYPE_DICT 264

/* How the fake module is built: torch's ReLU unless a field says otherwise. */
struct spec {
	const char *cls;	/* the class name */
	const char *cls_module; /* its __module__ */
	const char *fn_module;	/* its forward's globals' __name__ */
	const char *fn_type;	/* the forward's type name */
	int own_forward;	/* the instance has a forward attribute */
	int hooks;		/* entries in its _forward_hooks */
	int used_lie;		/* its _forward_pre_hooks' ma_used says 5 with no entry */
	const char *base;	/* forward is this base class's, not the class's own */
};

struct built {
	uint64_t module, type, pre, post, tensor, global_pre, global_post;
};

static uint64_t cstr(struct fakemem *m, const char *s)
{
	uint64_t a = fakemem__alloc(m, strlen(s) + 1);

	fakemem__put(m, a, s, strlen(s) + 1);
	return a;
}

static uint64_t mktype(struct fakemem *m, const char *name, uint64_t dict, uint64_t base)
{
	uint64_t t = fakemem__alloc(m, 1024);

	fakemem__put64(m, t + m->l.type_name, cstr(m, name));
	fakemem__put64(m, t + m->l.type_flags, m->l.managed_dict_flag);
	fakemem__put64(m, t + TYPE_DICT, dict);
	fakemem__put64(m, t + fakemem_torch.type_base, base);
	return t;
}

/* A dict of n entries whose ma_used word says used. */
static uint64_t mkdict(struct fakemem *m, int n, const char **names, const uint64_t *vals,
		       uint64_t used)
{
	uint64_t d = fakemem__dict(m, n, names, vals);

	fakemem__put64(m, d + m->l.dict_used, used);
	return d;
}

static uint64_t mkfunc(struct fakemem *m, const char *type_name, uint64_t globals)
{
	uint64_t f = fakemem__alloc(m, 64);

	fakemem__put64(m, f + m->l.obj_type, mktype(m, type_name, 0, 0));
	fakemem__put64(m, f + m->l.func_globals, globals);
	fakemem__put64(m, f + m->l.func_code, f + 48); /* its code object, for what reads it */
	return f;
}

static void build(struct fakemem *m, const struct spec *sp, struct built *b)
{
	const char *gnames[] = {"__name__", "Tensor"}, *tnames[] = {"__module__", "forward"};
	const char *mnames[] = {"_global_forward_pre_hooks", "_global_forward_hooks", "__name__"};
	const char *inames[] = {"training", "_forward_pre_hooks", "_forward_hooks", "forward"};
	const char *hnames[] = {"0"};
	uint64_t globals, fn, tdict, base, mglobals, idict, vals[4];

	memset(b, 0, sizeof(*b));
	b->tensor = mktype(m, "Tensor", 0, 0);
	/* nn.Module: _call_impl, a function of torch.nn.modules.module with torch's hooks */
	b->global_pre = mkdict(m, 0, NULL, NULL, 0);
	b->global_post = mkdict(m, 0, NULL, NULL, 0);
	mglobals = mkdict(m, 3, mnames,
			  (uint64_t[]){b->global_pre, b->global_post,
				       fakemem__str(m, "torch.nn.modules.module", 0)},
			  3);
	base = mktype(m, "Module",
		      mkdict(m, 1, (const char *[]){"_call_impl"},
			     (uint64_t[]){mkfunc(m, "function", mglobals)}, 1),
		      0);
	globals = mkdict(m, 2, gnames,
			 (uint64_t[]){fakemem__str(m,
						   sp->fn_module ? sp->fn_module
								 : "torch.nn.modules.activation",
						   0),
				      b->tensor},
			 2);
	fn = mkfunc(m, sp->fn_type ? sp->fn_type : "function", globals);
	tdict = mkdict(m, sp->base ? 1 : 2, tnames,
		       (uint64_t[]){fakemem__str(m,
						 sp->cls_module ? sp->cls_module
								: "torch.nn.modules.activation",
						 0),
				    fn},
		       sp->base ? 1 : 2);
	if (sp->base) /* BatchNorm2d: its forward is _BatchNorm's */
		base = mktype(m, sp->base, mkdict(m, 1, tnames + 1, (uint64_t[]){fn}, 1), base);
	b->type = mktype(m, sp->cls ? sp->cls : "ReLU", tdict, base);
	b->pre = mkdict(m, 0, NULL, NULL, sp->used_lie ? 5 : 0);
	b->post = mkdict(m, sp->hooks, hnames, (uint64_t[]){m->none}, sp->hooks);
	vals[0] = m->none;
	vals[1] = b->pre;
	vals[2] = b->post;
	vals[3] = fn;
	idict = mkdict(m, sp->own_forward ? 4 : 3, inames, vals, sp->own_forward ? 4 : 3);
	b->module = fakemem__alloc(m, 64) + 32;
	fakemem__put64(m, b->module + m->l.obj_type, b->type);
	fakemem__put64(m, b->module + m->l.managed_dict, idict);
}

static int setup(void **state)
{
	static struct fakemem m;

	fakemem__init(&m);
	m.l.type_dict = TYPE_DICT;
	m.l.func_globals = 16;
	m.l.func_code = 24;
	m.l.dict_used = 16;
	m.none = fakemem__alloc(&m, 16);
	*state = &m;
	return 0;
}

static uint64_t word(struct fakemem *m, uint64_t addr)
{
	uint64_t w = 0;

	assert_int_equal(fakemem__read(m, addr, &w, sizeof(w)), 0);
	return w;
}

static int vouch(struct fakemem *m, const struct spec *sp, struct built *b, struct nw_keep *k,
		 uint64_t *tensor)
{
	struct pyobject_layout pl = {.l = &fakemem_torch};
	struct remote r;

	build(m, sp, b);
	fakemem__remote(m, &r);
	return keep__module(&r, &pl, b->module, k, tensor);
}

static void test_torch_relu(void **state)
{
	struct fakemem *m = *state;
	struct pyobject_layout pl = {.l = &fakemem_torch};
	struct spec sp = {0};
	uint64_t tensor = 0, used[NW_KEEP_HOOKS];
	struct nw_keep k;
	struct built b;
	struct remote r;

	assert_int_equal(vouch(m, &sp, &b, &k, &tensor), 0);
	assert_int_equal(k.type, b.type);
	assert_int_equal(k.dict[0], b.pre);
	assert_int_equal(k.dict[1], b.post);
	assert_int_equal(k.used[0], b.pre + 16);
	assert_int_equal(k.used[1], b.post + 16);
	/* the words BPF compares with the dicts are the instance's, holding them */
	assert_int_equal(word(m, k.slot[0]), b.pre);
	assert_int_equal(word(m, k.slot[1]), b.post);
	assert_int_equal(tensor, b.tensor);
	fakemem__remote(m, &r);
	assert_int_equal(keep__globals(&r, &pl, b.module, used), 0);
	assert_int_equal(used[0], b.global_pre + 16);
	assert_int_equal(used[1], b.global_post + 16);
	/* a hook present now is BPF's to see: the dict is still the one vouched for */
	fakemem__init(m);
	setup(state);
	sp.hooks = 1;
	assert_int_equal(vouch(m, &sp, &b, &k, &tensor), 0);
	assert_int_equal(k.used[1], b.post + 16);
}

static void test_not_torchs_own(void **state)
{
	const struct spec refused[] = {
		{.cls = "Conv2d", .cls_module = "torch.nn.modules.conv"}, /* not a kept class */
		{.cls_module = "__main__"},				  /* the user's ReLU */
		{.fn_module = "__main__"},		   /* nn.ReLU.forward patched */
		{.fn_type = "builtin_function_or_method"}, /* not a Python function */
		{.own_forward = 1},			   /* the instance's own forward */
		{.used_lie = 1},			   /* ma_used is not where the table says */
	};
	struct fakemem *m = *state;
	uint64_t tensor;
	struct nw_keep k;
	struct built b;
	size_t i;

	for (i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		setup(state);
		assert_int_equal(vouch(m, &refused[i], &b, &k, &tensor), -ENOENT);
	}
	/* a table without the offsets vouches for nothing */
	setup(state);
	m->l.func_globals = 0;
	assert_int_equal(vouch(m, &(struct spec){0}, &b, &k, &tensor), -ENOENT);
}

static void test_norm(void **state)
{
	struct spec sp = {.cls = "BatchNorm2d",
			  .cls_module = "torch.nn.modules.batchnorm",
			  .fn_module = "torch.nn.modules.batchnorm",
			  .base = "_BatchNorm"};
	struct fakemem *m = *state;
	uint64_t tensor = 0;
	struct nw_keep k;
	struct built b;

	/* a norm's forward found in its base, a function of the class's module */
	assert_int_equal(vouch(m, &sp, &b, &k, &tensor), 0);
	assert_int_equal(k.kind, NW_KEEP_NORM);
	assert_int_equal(k.type, b.type);
	assert_int_equal(tensor, b.tensor);
	/* the base's forward patched: its globals are the patcher's */
	setup(state);
	sp.fn_module = "__main__";
	assert_int_equal(vouch(m, &sp, &b, &k, &tensor), -ENOENT);
	/* torch's ReLU is of the other kind */
	setup(state);
	assert_int_equal(vouch(m, &(struct spec){0}, &b, &k, &tensor), 0);
	assert_int_equal(k.kind, NW_KEEP_FINITE);
}

struct pairs {
	int n;
	uint64_t child[4], next[4];
};

static int pair_cb(void *ctx, uint64_t child, uint64_t next)
{
	struct pairs *p = ctx;

	if (p->n < 4) {
		p->child[p->n] = child;
		p->next[p->n] = next;
	}
	p->n++;
	return 0;
}

/* A Sequential of three children (0 for None), as spec says of its class and instance. */
static uint64_t mkseq(struct fakemem *m, const struct spec *sp, const uint64_t kids[3],
		      uint64_t *type)
{
	const char *tnames[] = {"__module__", "__iter__", "forward"};
	const char *inames[] = {"training", "_modules", "forward"};
	const char *knames[] = {"0", "1", "2"};
	const char *mod = sp->cls_module ? sp->cls_module : "torch.nn.modules.container";
	uint64_t globals, fn, obj, vals[3], children[3];
	int i;

	globals = mkdict(m, 1, (const char *[]){"__name__"},
			 (uint64_t[]){fakemem__str(m, sp->fn_module ? sp->fn_module : mod, 0)}, 1);
	fn = mkfunc(m, "function", globals);
	*type = mktype(m, sp->cls ? sp->cls : "Sequential",
		       mkdict(m, 3, tnames, (uint64_t[]){fakemem__str(m, mod, 0), fn, fn}, 3),
		       mktype(m, "Module", mkdict(m, 0, NULL, NULL, 0), 0));
	for (i = 0; i < 3; i++)
		children[i] = kids[i] ? kids[i] : m->none;
	vals[0] = m->none;
	vals[1] = mkdict(m, 3, knames, children, 3);
	vals[2] = fn;
	obj = fakemem__alloc(m, 64) + 32;
	fakemem__put64(m, obj + m->l.obj_type, *type);
	fakemem__put64(m, obj + m->l.managed_dict,
		       mkdict(m, sp->own_forward ? 3 : 2, inames, vals, sp->own_forward ? 3 : 2));
	return obj;
}

static int walk(struct fakemem *m, const struct spec *sp, const uint64_t kids[3], struct pairs *p,
		struct nw_defer *d, uint64_t *obj, uint64_t *type)
{
	struct pyobject_layout pl = {.l = &fakemem_torch};
	struct remote r;

	memset(p, 0, sizeof(*p));
	*obj = mkseq(m, sp, kids, type);
	fakemem__remote(m, &r);
	return keep__sequence(&r, &pl, *obj, pair_cb, p, d);
}

static void test_sequence(void **state)
{
	const struct spec refused[] = {
		{.cls = "ModuleList"},	    /* not a Sequential */
		{.cls_module = "__main__"}, /* the user's Sequential */
		{.fn_module = "__main__"},  /* Sequential.forward or __iter__ patched */
		{.own_forward = 1},	    /* the instance's own forward */
	};
	struct fakemem *m = *state;
	uint64_t kids[3], obj, type;
	struct nw_defer d;
	struct pairs p;
	size_t i;

	for (i = 0; i < 3; i++)
		kids[i] = fakemem__alloc(m, 64);
	/* each child and the next, in _modules' order */
	assert_int_equal(walk(m, &(struct spec){0}, kids, &p, &d, &obj, &type), 0);
	assert_int_equal(p.n, 2);
	assert_int_equal(p.child[0], kids[0]);
	assert_int_equal(p.next[0], kids[1]);
	assert_int_equal(p.child[1], kids[1]);
	assert_int_equal(p.next[1], kids[2]);
	assert_int_equal(d.parent, obj);
	assert_int_equal(d.parent_type, type);
	assert_int_not_equal(d.code, 0); /* forward's __code__, BPF's test of the caller */
	/* a None child is no call's */
	kids[1] = 0;
	assert_int_equal(walk(m, &(struct spec){0}, kids, &p, &d, &obj, &type), 0);
	assert_int_equal(p.n, 1);
	assert_int_equal(p.child[0], kids[0]);
	assert_int_equal(p.next[0], kids[2]);
	kids[1] = kids[2];
	for (i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		assert_int_equal(walk(m, &refused[i], kids, &p, &d, &obj, &type), -ENOENT);
		assert_int_equal(p.n, 0);
	}
}

static void test_classes(void **state)
{
	(void)state;
	assert_string_equal(keep__class_module("ReLU"), "torch.nn.modules.activation");
	assert_string_equal(keep__class_module("MaxPool2d"), "torch.nn.modules.pooling");
	assert_string_equal(keep__class_module("AdaptiveMaxPool3d"), "torch.nn.modules.pooling");
	assert_string_equal(keep__class_module("Unflatten"), "torch.nn.modules.flatten");
	assert_null(keep__class_module("Dropout"));
	assert_null(keep__class_module("Hardtanh"));
	assert_null(keep__class_module("Sigmoid"));
	assert_string_equal(keep__class_module("BatchNorm2d"), "torch.nn.modules.batchnorm");
	assert_string_equal(keep__class_module("LayerNorm"), "torch.nn.modules.normalization");
	assert_string_equal(keep__class_module("InstanceNorm1d"), "torch.nn.modules.instancenorm");
	assert_null(keep__class_module("Conv2d"));
	assert_null(keep__class_module("Linear"));
	assert_null(keep__class_module("SyncBatchNorm"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_torch_relu, setup),
		cmocka_unit_test_setup(test_not_torchs_own, setup),
		cmocka_unit_test_setup(test_norm, setup),
		cmocka_unit_test_setup(test_sequence, setup),
		cmocka_unit_test(test_classes),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
