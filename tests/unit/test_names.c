// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Module naming against a fake target memory laid out as CPython 3.11 does:
 * managed instance dicts (materialized or inline values), combined _modules
 * dicts, None entries, shared modules, and str keys of each kind; and the
 * 3.12 and 3.13 ways of keeping an instance's attributes. Also an optimizer's
 * step state (optstate), read through the same dicts, and the names a module's forward code
 * uses (pyobject__method_names), found through its class and bases.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include "resolve/layout.h"
#include "resolve/names.h"
#include "resolve/optstate.h"
#include "resolve/pyobject.h"
#include "resolve/remote.h"
#include "fakemem.h"

static uint64_t module_type; /* the one module type */

/* A module instance whose _modules holds the given children (materialized __dict__). */
static uint64_t mkmodule(struct fakemem *m, int n, const char **names, const uint64_t *kids)
{
	const char *attr[] = {"training", "_modules"};
	uint64_t vals[2], a = fakemem__alloc(m, 64) + 32;

	vals[0] = m->none;
	vals[1] = fakemem__dict(m, n, names, kids);
	fakemem__put64(m, a + 8, module_type);
	fakemem__put64(m, a - 24, fakemem__dict(m, 2, attr, vals));
	return a;
}

static int setup(void **state)
{
	static struct fakemem m;

	fakemem__init(&m);
	module_type = fakemem__alloc(&m, 1024);
	fakemem__put64(&m, module_type + 168, 1 << 4);
	m.none = fakemem__alloc(&m, 16);
	*state = &m;
	return 0;
}

static void test_nested_paths(void **state)
{
	struct fakemem *m = *state;
	const char *n2[] = {"norm", "attn"}, *n1[] = {"0", "1"}, *n0[] = {"embed", "blocks"};
	uint64_t norm = mkmodule(m, 0, NULL, NULL), attn = mkmodule(m, 0, NULL, NULL);
	uint64_t b0 = mkmodule(m, 2, n2, (uint64_t[]){norm, attn});
	uint64_t b1 = mkmodule(m, 0, NULL, NULL), embed = mkmodule(m, 0, NULL, NULL);
	uint64_t list = mkmodule(m, 2, n1, (uint64_t[]){b0, b1});
	uint64_t root = mkmodule(m, 2, n0, (uint64_t[]){embed, list});
	struct remote r;
	struct names *n;

	fakemem__remote(m, &r);
	n = names__new(&r);
	assert_non_null(n);
	assert_string_equal(names__path(n, root, root), "");
	assert_string_equal(names__path(n, root, embed), "embed");
	assert_string_equal(names__path(n, root, list), "blocks");
	assert_string_equal(names__path(n, root, norm), "blocks.0.norm");
	assert_string_equal(names__path(n, root, attn), "blocks.0.attn");
	assert_string_equal(names__path(n, root, b1), "blocks.1");
	/* relative to another outermost module */
	assert_string_equal(names__path(n, list, norm), "0.norm");
	assert_int_equal(names__count(n, root), 7);
	names__free(n);
}

static void test_shared_and_none(void **state)
{
	struct fakemem *m = *state;
	const char *names[] = {"a", "skip", "b"};
	uint64_t shared = mkmodule(m, 0, NULL, NULL);
	uint64_t root = mkmodule(m, 3, names, (uint64_t[]){shared, m->none, shared});
	struct remote r;
	struct names *n;

	fakemem__remote(m, &r);
	n = names__new(&r);
	/* named_modules() names a shared module once, at its first path */
	assert_string_equal(names__path(n, root, shared), "a");
	assert_int_equal(names__count(n, root), 2);
	assert_null(names__path(n, root, m->none));
	names__free(n);
}

static void test_unknown_module_and_rewalk(void **state)
{
	struct fakemem *m = *state;
	const char *names[] = {"x"};
	uint64_t late = mkmodule(m, 0, NULL, NULL), stranger = mkmodule(m, 0, NULL, NULL);
	uint64_t root = mkmodule(m, 1, names, (uint64_t[]){stranger});
	uint64_t d, mods, keys;
	struct remote r;
	struct names *n;

	fakemem__remote(m, &r);
	n = names__new(&r);
	assert_string_equal(names__path(n, root, stranger), "x");
	assert_null(names__path(n, root, late));
	/* the model swaps its child: the next unknown module triggers a fresh walk */
	memcpy(&d, m->bytes + (root - 24 - FAKEMEM_BASE), 8);
	memcpy(&keys, m->bytes + (d + 32 - FAKEMEM_BASE), 8);
	memcpy(&mods, m->bytes + (keys + 40 + 16 + 8 - FAKEMEM_BASE), 8);
	memcpy(&keys, m->bytes + (mods + 32 - FAKEMEM_BASE), 8);
	fakemem__put64(m, keys + 40 + 8, late);
	assert_string_equal(names__path(n, root, late), "x");
	names__free(n);
}

/* root.body (mid).inner (leaf), and a module of no tree (stranger): returns root. */
static uint64_t body_inner(struct fakemem *m, uint64_t *mid, uint64_t *leaf, uint64_t *stranger)
{
	const char *n1[] = {"inner"}, *n0[] = {"body"};

	*leaf = mkmodule(m, 0, NULL, NULL);
	*stranger = mkmodule(m, 0, NULL, NULL);
	*mid = mkmodule(m, 1, n1, (uint64_t[]){*leaf});
	return mkmodule(m, 1, n0, (uint64_t[]){*mid});
}

/*
 * The target exits before its records are read: a lookup that walks again reads nothing, and
 * the names its first walk gave stay (a late anomaly of a short run keeps its layer).
 */
static void test_target_gone_keeps_names(void **state)
{
	struct fakemem *m = *state;
	uint64_t leaf, stranger, mid, root = body_inner(m, &mid, &leaf, &stranger);
	struct remote r;
	struct names *n;

	fakemem__remote(m, &r);
	n = names__new(&r);
	assert_string_equal(names__path(n, root, mid), "body");
	r.read = fakemem__gone;
	assert_null(names__path(n, root, stranger)); /* walks again: reads nothing */
	assert_string_equal(names__path(n, root, leaf), "body.inner");
	assert_int_equal(names__count(n, root), 3);
	names__free(n);
}

/*
 * A walk that reads part of the tree (a branch unreadable as the target exits): the modules
 * it reached get their paths from it, the others keep the last walk's.
 */
static void test_partial_walk_keeps_names(void **state)
{
	struct fakemem *m = *state;
	uint64_t leaf, stranger, mid, root = body_inner(m, &mid, &leaf, &stranger);
	struct remote r;
	struct names *n;

	fakemem__remote(m, &r);
	n = names__new(&r);
	assert_string_equal(names__path(n, root, leaf), "body.inner");
	fakemem__put64(m, mid - 24, 0); /* mid's __dict__ gone: its children cannot be read */
	assert_null(names__path(n, root, stranger)); /* walks again: root and mid only */
	assert_string_equal(names__path(n, root, mid), "body");
	assert_string_equal(names__path(n, root, leaf), "body.inner");
	assert_int_equal(names__count(n, root), 3);
	names__free(n);
}

/*
 * The model freed before its tree was ever read (a target that ends right after its first
 * steps, its records read late): each module is named from where its caller holds it, as the
 * probes read it at its first call; a missing link names nothing; a walk that reaches a module
 * names it as named_modules() does, whatever was held.
 */
static void test_held_names_after_the_model_is_freed(void **state)
{
	struct fakemem *m = *state;
	uint64_t leaf, stranger, mid, root = body_inner(m, &mid, &leaf, &stranger);
	uint64_t layer = mkmodule(m, 0, NULL, NULL), orphan = mkmodule(m, 0, NULL, NULL);
	uint64_t live_root, live_mid, live_leaf, live_stranger;
	struct remote r;
	struct names *n;

	fakemem__remote(m, &r);
	n = names__new(&r);
	fakemem__put64(m, root - 24, 0); /* freed: its __dict__ cleared */
	assert_int_equal(names__held(n, root, mid, root, "body"), 0);
	assert_int_equal(names__held(n, root, leaf, mid, "inner"), 0);
	assert_int_equal(names__held(n, root, layer, mid, "layers.3"),
			 0);						  /* through a ModuleList */
	assert_int_equal(names__held(n, root, orphan, stranger, "x"), 0); /* stranger: no record */
	assert_int_equal(names__held(n, root, stranger, 0, "y"), -EINVAL);
	assert_int_equal(names__held(n, root, stranger, root, ""), -EINVAL);
	assert_string_equal(names__path(n, root, root), "");
	assert_string_equal(names__path(n, root, leaf), "body.inner");
	assert_string_equal(names__path(n, root, mid), "body");
	assert_string_equal(names__path(n, root, layer), "body.layers.3");
	assert_null(names__path(n, root, orphan));
	assert_null(names__path(n, root, stranger));
	/* a record read again (a module first called under another caller) replaces the first */
	assert_int_equal(names__held(n, root, orphan, mid, "later"), 0);
	assert_string_equal(names__path(n, root, orphan), "body.later");
	names__free(n);

	/* a readable tree: the walk's paths, not the records' */
	live_root = body_inner(m, &live_mid, &live_leaf, &live_stranger);
	n = names__new(&r);
	assert_int_equal(names__held(n, live_root, live_leaf, live_mid, "wrong"), 0);
	assert_string_equal(names__path(n, live_root, live_leaf), "body.inner");
	names__free(n);
}

static void test_inline_values(void **state)
{
	struct fakemem *m = *state;
	const char *names[] = {"only"};
	uint64_t child = mkmodule(m, 0, NULL, NULL);
	uint64_t mods = fakemem__dict(m, 1, names, (uint64_t[]){child});
	uint64_t type2 = fakemem__alloc(m, 1024), keys[2], values = fakemem__alloc(m, 16),
		 root = fakemem__alloc(m, 64) + 32;
	struct remote r;
	struct names *n;

	/* 3.11 before __dict__ is touched: values beside the object, keys shared by the type */
	fakemem__put64(m, type2 + 168, 1 << 4);
	keys[0] = fakemem__str(m, "training", 0);
	keys[1] = fakemem__str(m, "_modules", 0);
	fakemem__put64(m, type2 + 880, fakemem__keys(m, 2, keys, NULL));
	fakemem__put64(m, values + 0, m->none);
	fakemem__put64(m, values + 8, mods);
	fakemem__put64(m, root + 8, type2);
	fakemem__put64(m, root - 32, values);
	fakemem__remote(m, &r);
	n = names__new(&r);
	assert_string_equal(names__path(n, root, child), "only");
	names__free(n);
}

static void test_inline_values_313(void **state)
{
	struct fakemem *m = *state;
	const char *names[] = {"layer"};
	uint64_t child = mkmodule(m, 0, NULL, NULL);
	uint64_t mods = fakemem__dict(m, 1, names, (uint64_t[]){child});
	uint64_t type3 = fakemem__alloc(m, 1024), keys[2], root = fakemem__alloc(m, 96) + 32;
	struct remote r;
	struct names *n;

	/* 3.13: PyDictValues inside the object after its header; values[] after 4 flag bytes */
	fakemem__put64(m, type3 + 168, 1 << 4 | 1 << 2);
	keys[0] = fakemem__str(m, "training", 0);
	keys[1] = fakemem__str(m, "_modules", 0);
	fakemem__put64(m, type3 + 880, fakemem__keys(m, 2, keys, NULL));
	fakemem__put64(m, root + 8, type3);
	fakemem__put8(m, root + 16 + 3, 1); /* valid */
	fakemem__put64(m, root + 16 + 8, m->none);
	fakemem__put64(m, root + 16 + 16, mods);
	fakemem__remote(m, &r);
	r.l.inline_values_flag = 1 << 2;
	r.l.inline_values_offset = 16;
	r.l.values_valid = 3;
	r.l.values_items = 8;
	n = names__new(&r);
	assert_string_equal(names__path(n, root, child), "layer");
	names__free(n);
	/* once the values are no longer valid, the managed dict holds the attributes */
	fakemem__put8(m, root + 16 + 3, 0);
	n = names__new(&r);
	assert_null(names__path(n, root, child));
	names__free(n);
}

/*
 * 3.14: the values after the type's basic size (a module that subclasses a builtin has the
 * builtin's fields first), with the shipped python-3.14 table's tp_basicsize offset.
 */
static void test_inline_values_314(void **state)
{
	struct fakemem *m = *state;
	const char *names[] = {"layer"};
	uint64_t child = mkmodule(m, 0, NULL, NULL);
	uint64_t mods = fakemem__dict(m, 1, names, (uint64_t[]){child});
	uint64_t type3 = fakemem__alloc(m, 1024), keys[2], root = fakemem__alloc(m, 128) + 32;
	struct layout *py;
	struct remote r;
	struct names *n;
	long long basicsize;
	char err[256];

	py = layout__find("config/layouts", "python", "3.14", err, sizeof(err));
	if (!py)
		fail_msg("%s", err);
	assert_int_equal(layout__int(py, LK_type_basicsize, &basicsize), 0);
	layout__free(py);
	fakemem__remote(m, &r);
	r.l.inline_values_flag = 1 << 2;
	r.l.inline_values_offset = 16;
	r.l.values_valid = 3;
	r.l.values_items = 8;
	r.l.type_basicsize = basicsize;
	fakemem__put64(m, type3 + 168, 1 << 4 | 1 << 2);
	fakemem__put64(m, type3 + basicsize, 40); /* PyObject head + 3 words */
	keys[0] = fakemem__str(m, "training", 0);
	keys[1] = fakemem__str(m, "_modules", 0);
	fakemem__put64(m, type3 + 880, fakemem__keys(m, 2, keys, NULL));
	fakemem__put64(m, root + 8, type3);
	fakemem__put8(m, root + 40 + 3, 1); /* valid */
	fakemem__put64(m, root + 40 + 8, m->none);
	fakemem__put64(m, root + 40 + 16, mods);
	n = names__new(&r);
	assert_string_equal(names__path(n, root, child), "layer");
	names__free(n);
	/* read at the fixed offset after the head, as 3.13 does: not found */
	r.l.type_basicsize = 0;
	n = names__new(&r);
	assert_null(names__path(n, root, child));
	names__free(n);
}

/* 3.12: one tagged word before the object, read with the shipped python-3.12 table */
static void test_tagged_dict_or_values_312(void **state)
{
	struct fakemem *m = *state;
	const char *names[] = {"block"}, *attr[] = {"training", "_modules"};
	struct layout *py;
	struct remote r;
	struct names *n;
	uint64_t child, mods, type4, keys[2], prefix, values, root, d, v;
	char err[256];

	memset(&r, 0, sizeof(r));
	r.read = fakemem__read;
	r.ctx = m;
	r.none = m->none;
	py = layout__find("config/layouts", "python", "3.12", err, sizeof(err));
	if (!py)
		fail_msg("%s", err);
	assert_int_equal(remote__layout_from(&r.l, py, err, sizeof(err)), 0);
	layout__free(py);
	assert_int_equal(r.l.managed_dict_tagged, 1);
	assert_int_equal(r.l.managed_dict, -24);
	assert_int_equal(r.l.managed_values, 0);
	assert_int_equal(r.l.values_items, 0);
	assert_int_equal(r.l.inline_values_flag, 0);
	/* the strs, dicts and modules below are laid out with this table's offsets */
	m->l.unicode_ascii_data = r.l.unicode_ascii_data;
	m->l.unicode_compact_data = r.l.unicode_compact_data;
	assert_int_equal(r.l.unicode_state, 32);
	assert_int_equal(r.l.unicode_length, 16);
	assert_int_equal(r.l.obj_type, 8);
	assert_int_equal(r.l.type_flags, 168);
	assert_int_equal(r.l.dict_keys, 32);
	assert_int_equal(r.l.keys_nentries, 24);
	assert_int_equal(r.l.keys_indices, 32);

	/* a child whose word is a dict pointer (mkmodule: dict at -24, bit 0 clear) */
	child = mkmodule(m, 0, NULL, NULL);
	mods = fakemem__dict(m, 1, names, (uint64_t[]){child});
	type4 = fakemem__alloc(m, 1024);
	fakemem__put64(m, type4 + 168, 1 << 4);
	keys[0] = fakemem__str(m, attr[0], 0);
	keys[1] = fakemem__str(m, attr[1], 0);
	fakemem__put64(m, type4 + r.l.type_cached_keys, fakemem__keys(m, 2, keys, NULL));
	/* new_values(2): prefix of 8 bytes (order 1, 0; used 2; prefix size 8), then values[] */
	prefix = fakemem__alloc(m, 8 + 2 * 8);
	values = prefix + 8;
	fakemem__put8(m, values - 1, 8);
	fakemem__put8(m, values - 2, 2);
	fakemem__put8(m, values - 3, 0);
	fakemem__put8(m, values - 4, 1);
	fakemem__put64(m, values + r.l.values_items, m->none);
	fakemem__put64(m, values + r.l.values_items + 8, mods);
	root = fakemem__alloc(m, 64) + 32;
	fakemem__put64(m, root + 8, type4);
	/* _PyDictOrValues_SetValues: the word is values - 1 (bit 0 set; values is 8-aligned) */
	fakemem__put64(m, root + r.l.managed_dict, values - 1);
	assert_int_equal(remote__attr(&r, root, "_modules", &v), 0);
	assert_int_equal(v, mods);
	assert_int_equal(remote__attr(&r, root, "training", &v), 0);
	assert_int_equal(v, m->none);
	assert_int_equal(remote__attr(&r, root, "missing", &v), -ENOENT);
	n = names__new(&r);
	assert_string_equal(names__path(n, root, child), "block");
	names__free(n);

	/* __dict__ asked for: the word is now the dict pointer that took over the values */
	d = fakemem__dict(m, 2, attr, (uint64_t[]){m->none, mods});
	fakemem__put64(m, root + r.l.managed_dict, d);
	v = 0;
	assert_int_equal(remote__attr(&r, root, "_modules", &v), 0);
	assert_int_equal(v, mods);
	n = names__new(&r);
	assert_string_equal(names__path(n, root, child), "block");
	names__free(n);

	/* no dict and no values */
	fakemem__put64(m, root + r.l.managed_dict, 0);
	assert_int_equal(remote__attr(&r, root, "_modules", &v), -ENOENT);
	n = names__new(&r);
	assert_null(names__path(n, root, child));
	names__free(n);
}

static void test_wide_keys_and_bad_memory(void **state)
{
	struct fakemem *m = *state;
	uint64_t child = mkmodule(m, 0, NULL, NULL), keys[1], vals[1], root, d;
	struct remote r;
	struct names *n;
	char buf[64];

	keys[0] = fakemem__str(m, "wide", 1);
	vals[0] = child;
	d = fakemem__alloc(m, 48);
	fakemem__put64(m, d + 32, fakemem__keys(m, 1, keys, vals));
	root = mkmodule(m, 0, NULL, NULL);
	fakemem__remote(m, &r);
	assert_int_equal(remote__str(&r, keys[0], buf, sizeof(buf)), 0);
	assert_string_equal(buf, "wide");
	/* a module pointer into unmapped memory: named if it is the root, no children */
	n = names__new(&r);
	assert_string_equal(names__path(n, 0xdead0000, 0xdead0000), "");
	assert_null(names__path(n, root, child));
	names__free(n);
}

/* A dict of the general kind (hash, key, value entries): keys that are not str. */
static uint64_t mkgeneral(struct fakemem *m, int n, const uint64_t *keys, const uint64_t *vals)
{
	uint64_t k = fakemem__alloc(m, 32 + 8 + 24 * n), d = fakemem__alloc(m, 48);
	int i;

	fakemem__put8(m, k + 9, 3);
	fakemem__put8(m, k + 10, 0);
	fakemem__put64(m, k + 24, n);
	for (i = 0; i < n; i++) {
		fakemem__put64(m, k + 40 + 24 * i + 8, keys[i]);
		fakemem__put64(m, k + 40 + 24 * i + 16, vals[i]);
	}
	fakemem__put64(m, d + 32, k);
	return d;
}

/* An object of a type named name (its tp_name a C string). */
static uint64_t mkobj(struct fakemem *m, const char *name)
{
	uint64_t type = fakemem__alloc(m, 64), cname = fakemem__alloc(m, 32),
		 o = fakemem__alloc(m, 64);

	fakemem__put(m, cname, name, strlen(name) + 1);
	fakemem__put64(m, type + 24, cname);
	fakemem__put64(m, o + 8, type);
	return o;
}

/* An optimizer whose state maps a parameter to {"exp_avg": ..., "step": step}. */
static uint64_t mkoptimizer(struct fakemem *m, uint64_t step, int params)
{
	const char *pnames[] = {"exp_avg", "step"}, *attr[] = {"defaults", "state"};
	uint64_t pdict = fakemem__dict(m, step ? 2 : 1, pnames, (uint64_t[]){m->none, step});
	uint64_t state = mkgeneral(m, params, (uint64_t[]){0, 0xabc0}, (uint64_t[]){0, pdict});
	uint64_t a = fakemem__alloc(m, 64) + 32;

	fakemem__put64(m, a + 8, module_type);
	fakemem__put64(m, a - 24, fakemem__dict(m, 2, attr, (uint64_t[]){m->none, state}));
	return a;
}

static void test_optimizer_step_state(void **state)
{
	struct fakemem *m = *state;
	struct optstate_layout ol = {.var_borrowed = 16, .var_tensor = 24};
	uint64_t tensor = mkobj(m, "Tensor"), borrowed = mkobj(m, "Tensor"), impl = 0;
	uint64_t slot = fakemem__alloc(m, 16), number = mkobj(m, "int");
	struct remote r;

	fakemem__remote(m, &r);
	fakemem__put64(m, tensor + 24, 0x7f0012345678);
	/* the first entry deleted (a parameter removed): the next one is the first */
	assert_int_equal(optstate__step_impl(&r, &ol, mkoptimizer(m, tensor, 2), &impl), 0);
	assert_int_equal(impl, 0x7f0012345678);
	fakemem__put8(m, borrowed + 16, 1); /* a borrowed at::Tensor: its first word */
	fakemem__put64(m, borrowed + 24, slot);
	fakemem__put64(m, slot, 0x7f00aaaa0000);
	assert_int_equal(optstate__step_impl(&r, &ol, mkoptimizer(m, borrowed, 2), &impl), 0);
	assert_int_equal(impl, 0x7f00aaaa0000);
	/* no step taken yet (empty state), no 'step' kept (SGD), a step that is a number */
	assert_int_equal(optstate__step_impl(&r, &ol, mkoptimizer(m, tensor, 1), &impl), -ENOENT);
	assert_int_equal(optstate__step_impl(&r, &ol, mkoptimizer(m, 0, 2), &impl), -ENOENT);
	assert_int_equal(optstate__step_impl(&r, &ol, mkoptimizer(m, number, 2), &impl), -EINVAL);
	/* unreadable memory: an error, never a guess */
	assert_true(optstate__step_impl(&r, &ol, 0x10, &impl) < 0);
	assert_int_equal(impl, 0x7f00aaaa0000);
}

/* A static type (flags 0) named name: function, tuple, builtin_function_or_method. */
static uint64_t mkstatic(struct fakemem *m, const char *name)
{
	uint64_t t = fakemem__alloc(m, 512);

	fakemem__put64(m, t + m->l.type_name, fakemem__str(m, name, 0) + m->l.unicode_ascii_data);
	return t;
}

struct seen {
	char names[8][16];
	int n;
};

static int see(const char *name, void *ctx)
{
	struct seen *s = ctx;

	if (s->n < 8)
		snprintf(s->names[s->n++], sizeof(s->names[0]), "%s", name);
	return 0;
}

static void test_method_names(void **state)
{
	struct fakemem *m = *state;
	const char *used[] = {"torch", "sqrt", "std"}, *fwd[] = {"forward"}, *other[] = {"eps"};
	uint64_t fn_type = mkstatic(m, "function"), tuple_type = mkstatic(m, "tuple");
	uint64_t c_type = mkstatic(m, "builtin_function_or_method");
	uint64_t tup = fakemem__alloc(m, 24 + 8 * 3), code = fakemem__alloc(m, 128);
	uint64_t fn = fakemem__alloc(m, 64), base = fakemem__alloc(m, 512);
	uint64_t cls = fakemem__alloc(m, 512), obj = fakemem__alloc(m, 32);
	struct nw_layout nwl = {.obj_type = 8, .var_size = 16, .tuple_items = 24, .type_base = 256};
	struct pyobject_layout pl = {.l = &nwl, .tuple_type = tuple_type};
	struct seen s = {};
	struct remote r;
	int i;

	m->l.type_dict = 264;
	m->l.code_names = 32;
	m->l.func_code = 48;
	fakemem__remote(m, &r);
	/* code.co_names = ("torch", "sqrt", "std"); fn.__code__ = code */
	fakemem__put64(m, tup + 8, tuple_type);
	fakemem__put64(m, tup + 16, 3);
	for (i = 0; i < 3; i++)
		fakemem__put64(m, tup + 24 + 8 * i, fakemem__str(m, used[i], 0));
	fakemem__put64(m, code + 32, tup);
	fakemem__put64(m, fn + 8, fn_type);
	fakemem__put64(m, fn + 48, code);
	/* class Norm(Base): Base defines forward, Norm only eps; obj is a Norm */
	fakemem__put64(m, base + 264, fakemem__dict(m, 1, fwd, &fn));
	fakemem__put64(m, cls + 264, fakemem__dict(m, 1, other, &m->none));
	fakemem__put64(m, cls + 256, base);
	fakemem__put64(m, obj + 8, cls);
	assert_int_equal(pyobject__method_names(&r, &pl, obj, "forward", see, &s), 0);
	assert_int_equal(s.n, 3);
	assert_string_equal(s.names[0], "torch");
	assert_string_equal(s.names[2], "std");
	/* no such method in the class or its bases */
	assert_int_equal(pyobject__method_names(&r, &pl, obj, "backward", see, &s), -ENOENT);
	/* a method that is no Python function (a C method): no co_names */
	fakemem__put64(m, fn + 8, c_type);
	assert_int_equal(pyobject__method_names(&r, &pl, obj, "forward", see, &s), -ENOENT);
	fakemem__put64(m, fn + 8, fn_type);
	/* co_names not a tuple, or past the arena */
	fakemem__put64(m, tup + 8, fn_type);
	assert_int_equal(pyobject__method_names(&r, &pl, obj, "forward", see, &s), -ENOENT);
	fakemem__put64(m, tup + 8, tuple_type);
	fakemem__put64(m, code + 32, FAKEMEM_BASE + FAKEMEM_SIZE);
	assert_int_equal(pyobject__method_names(&r, &pl, obj, "forward", see, &s), -ENOENT);
	/* a class whose bases loop back to it: bounded */
	fakemem__put64(m, base + 256, cls);
	assert_int_equal(pyobject__method_names(&r, &pl, obj, "backward", see, &s), -ENOENT);
	/* a table without the keys */
	r.l.code_names = 0;
	assert_int_equal(pyobject__method_names(&r, &pl, obj, "forward", see, &s), -ENOTSUP);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_nested_paths, setup),
		cmocka_unit_test_setup(test_shared_and_none, setup),
		cmocka_unit_test_setup(test_unknown_module_and_rewalk, setup),
		cmocka_unit_test_setup(test_target_gone_keeps_names, setup),
		cmocka_unit_test_setup(test_partial_walk_keeps_names, setup),
		cmocka_unit_test_setup(test_held_names_after_the_model_is_freed, setup),
		cmocka_unit_test_setup(test_inline_values, setup),
		cmocka_unit_test_setup(test_inline_values_313, setup),
		cmocka_unit_test_setup(test_inline_values_314, setup),
		cmocka_unit_test_setup(test_tagged_dict_or_values_312, setup),
		cmocka_unit_test_setup(test_wide_keys_and_bad_memory, setup),
		cmocka_unit_test_setup(test_optimizer_step_state, setup),
		cmocka_unit_test_setup(test_method_names, setup),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
