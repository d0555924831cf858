// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * What BPF's keeps_finite() needs to know a module keeps a finite input finite (keep.h).
 * Everything here is read from the target and trusted for nothing but to decide: a wrong
 * or missing answer costs a scan, never an unscanned output of anything else.
 */
#include <errno.h>
#include <string.h>
#include "resolve/keep.h"
#include "resolve/pyobject.h"
#include "resolve/remote.h"

#define KEEP_NAME 64

/*
 * The classes. NW_KEEP_FINITE, and why a finite input gives a finite output: ReLU is
 * max(x, 0) (inplace or not); a max pool's output elements are elements of its input (torch
 * sizes the output so that every window holds one, padding being -inf); the adaptive ones'
 * windows are never empty; Flatten and Unflatten view the input's data. Not kept: anything
 * that scales (a dropout's 1/(1-p) overflows a float16 near its largest value), clamps to
 * attributes (Hardtanh's bounds are the user's), or computes (sigmoid, softmax, norms).
 *
 * NW_KEEP_NORM, and why a non-finite input value gives a non-finite output: each normalizes
 * groups of its input (a batch norm's channel, a layer norm's last dimensions, a group
 * norm's group, an instance norm's channel of one sample, an RMS norm's row) by the group's
 * mean (of the values, or of their squares) and spread. A NaN or Inf in the group makes the
 * mean NaN or Inf, and every output of the group is computed from it by arithmetic alone
 * (no min, max or select): (x - mean) * rstd * weight + bias is NaN or Inf whatever the
 * weight (0 * Inf is NaN). In eval mode a batch or instance norm with running statistics
 * is x * scale + shift element by element: NaN or Inf again, where the input was. Not so:
 * convolutions and linear layers (a BLAS may skip a zero weight's product with an Inf),
 * activations that saturate (tanh, sigmoid, softmax's -Inf), dropout.
 */
static const struct {
	const char *name, *module;
	enum nw_keep_kind kind;
} kept[] = {
	{"ReLU", "torch.nn.modules.activation", NW_KEEP_FINITE},
	{"MaxPool1d", "torch.nn.modules.pooling", NW_KEEP_FINITE},
	{"MaxPool2d", "torch.nn.modules.pooling", NW_KEEP_FINITE},
	{"MaxPool3d", "torch.nn.modules.pooling", NW_KEEP_FINITE},
	{"AdaptiveMaxPool1d", "torch.nn.modules.pooling", NW_KEEP_FINITE},
	{"AdaptiveMaxPool2d", "torch.nn.modules.pooling", NW_KEEP_FINITE},
	{"AdaptiveMaxPool3d", "torch.nn.modules.pooling", NW_KEEP_FINITE},
	{"Flatten", "torch.nn.modules.flatten", NW_KEEP_FINITE},
	{"Unflatten", "torch.nn.modules.flatten", NW_KEEP_FINITE},
	{"BatchNorm1d", "torch.nn.modules.batchnorm", NW_KEEP_NORM},
	{"BatchNorm2d", "torch.nn.modules.batchnorm", NW_KEEP_NORM},
	{"BatchNorm3d", "torch.nn.modules.batchnorm", NW_KEEP_NORM},
	{"LayerNorm", "torch.nn.modules.normalization", NW_KEEP_NORM},
	{"GroupNorm", "torch.nn.modules.normalization", NW_KEEP_NORM},
	{"RMSNorm", "torch.nn.modules.normalization", NW_KEEP_NORM},
	{"InstanceNorm1d", "torch.nn.modules.instancenorm", NW_KEEP_NORM},
	{"InstanceNorm2d", "torch.nn.modules.instancenorm", NW_KEEP_NORM},
	{"InstanceNorm3d", "torch.nn.modules.instancenorm", NW_KEEP_NORM},
};

#define SEQ_NAME "Sequential"
#define SEQ_MODULE "torch.nn.modules.container"

static int class_of(const char *name)
{
	size_t i;

	for (i = 0; i < sizeof(kept) / sizeof(kept[0]); i++)
		if (!strcmp(kept[i].name, name))
			return (int)i;
	return -1;
}

const char *keep__class_module(const char *name)
{
	int i = class_of(name);

	return i < 0 ? NULL : kept[i].module;
}

static int count_cb(const char *key, uint64_t value, void *ctx)
{
	(void)key;
	(void)value;
	++*(uint64_t *)ctx;
	return 0;
}

/*
 * &dict.ma_used, once the word there says what the dict's entries say (the table's offset
 * holds on this target): the word BPF reads for "no hook".
 */
static int used_word(const struct remote *r, uint64_t dict, uint64_t *addr)
{
	uint64_t n = 0, used;
	int err;

	if (!dict || dict == r->none)
		return -ENOENT;
	err = remote__dict_each(r, dict, count_cb, &n);
	if (err)
		return err;
	err = remote__u64(r, dict + r->l.dict_used, &used);
	if (err)
		return err;
	if (used != n)
		return -ENOENT;
	*addr = dict + r->l.dict_used;
	return 0;
}

/* The globals dict of the Python function fn (checked to be one). */
static int func_globals(const struct remote *r, uint64_t fn, uint64_t *globals)
{
	if (!pyobject__is_function(r, fn))
		return -ENOENT;
	if (remote__u64(r, fn + r->l.func_globals, globals) || !*globals)
		return -EFAULT;
	return 0;
}

/* globals["__name__"] == want */
static int globals_of(const struct remote *r, uint64_t globals, const char *want)
{
	char name[KEEP_NAME];
	uint64_t v;

	if (remote__dict_get(r, globals, "__name__", &v) || remote__str(r, v, name, sizeof(name)))
		return -ENOENT;
	return strcmp(name, want) ? -ENOENT : 0;
}

/*
 * module's class is named cls, has __module__ want, and its methods named in methods are
 * functions of that module, the class's own or a base's (a patched one has its patcher's
 * globals; the last one's globals into *globals), and the instance has no forward of its own.
 */
static int torch_class(const struct remote *r, const struct pyobject_layout *pl, uint64_t module,
		       const char *cls, const char *want, const char *const *methods, int nmethods,
		       uint64_t *type, uint64_t *globals)
{
	char name[KEEP_NAME], mod[KEEP_NAME];
	uint64_t tname, fn, v;
	int err, i;

	if (!r->l.func_globals || !r->l.dict_used)
		return -ENOENT;
	if (remote__u64(r, module + r->l.obj_type, type) ||
	    remote__u64(r, *type + r->l.type_name, &tname) ||
	    remote__cstr(r, tname, name, sizeof(name)))
		return -EFAULT;
	if (strcmp(name, cls))
		return -ENOENT;
	/* torch's class (a class of the user's named so has the user's module) */
	err = pyobject__class_module(r, module, mod, sizeof(mod));
	if (err)
		return err;
	if (strcmp(mod, want))
		return -ENOENT;
	for (i = 0; i < nmethods; i++) {
		/* the class's own or its nearest base's (BatchNorm2d's forward is _BatchNorm's) */
		if (pyobject__method(r, pl, module, methods[i], &fn))
			return -ENOENT;
		err = func_globals(r, fn, globals);
		if (err)
			return err;
		if (globals_of(r, *globals, want))
			return -ENOENT;
	}
	/* no forward of the instance's own */
	err = remote__attr(r, module, "forward", &v);
	if (err != -ENOENT)
		return err ? err : -ENOENT;
	return 0;
}

int keep__module(const struct remote *r, const struct pyobject_layout *pl, uint64_t module,
		 struct nw_keep *out, uint64_t *tensor)
{
	char cls[KEEP_NAME];
	static const char *const hooks[NW_KEEP_HOOKS] = {"_forward_pre_hooks", "_forward_hooks"};
	static const char *const forward[] = {"forward"};
	uint64_t type, name, globals, v, slot, used;
	int err, i, c;

	memset(out, 0, sizeof(*out));
	if (!r->l.func_globals || !r->l.dict_used)
		return -ENOENT;
	if (remote__u64(r, module + r->l.obj_type, &type) ||
	    remote__u64(r, type + r->l.type_name, &name) || remote__cstr(r, name, cls, sizeof(cls)))
		return -EFAULT;
	c = class_of(cls);
	if (c < 0)
		return -ENOENT;
	err = torch_class(r, pl, module, cls, kept[c].module, forward, 1, &type, &globals);
	if (err)
		return err;
	if (remote__dict_get(r, globals, "Tensor", tensor) || !*tensor)
		return -ENOENT;
	/* the hook dicts, and the words that hold them: replaced, they are not these */
	for (i = 0; i < NW_KEEP_HOOKS; i++) {
		if (remote__attr_slot(r, module, hooks[i], &v, &slot) || used_word(r, v, &used))
			return -ENOENT;
		out->slot[i] = slot;
		out->dict[i] = v;
		out->used[i] = used;
	}
	out->type = type;
	out->kind = kept[c].kind;
	return 0;
}

struct seq_walk {
	const struct remote *r;
	uint64_t prev; /* the child before, 0: none */
	int n;
	keep_pair_fn cb;
	void *ctx;
};

static int seq_child(const char *key, uint64_t value, void *ctx)
{
	struct seq_walk *w = ctx;
	int err = 0;

	(void)key;
	if (++w->n > KEEP_MAX_CHILDREN)
		return 1;
	if (value == w->r->none)
		return 0; /* skipped by the iteration (torch's __iter__ yields it, the call fails) */
	if (w->prev)
		err = w->cb(w->ctx, w->prev, value);
	w->prev = value;
	return err;
}

int keep__sequence(const struct remote *r, const struct pyobject_layout *pl, uint64_t module,
		   keep_pair_fn cb, void *ctx, struct nw_defer *parent)
{
	static const char *const methods[] = {"__iter__", "forward"};
	struct seq_walk w = {.r = r, .cb = cb, .ctx = ctx};
	uint64_t type, globals, children, fn, code;
	int err;

	memset(parent, 0, sizeof(*parent));
	err = torch_class(r, pl, module, SEQ_NAME, SEQ_MODULE, methods, 2, &type, &globals);
	if (err)
		return err;
	/* the code BPF sees running in the frame that calls the children */
	if (!r->l.func_code || pyobject__method(r, pl, module, "forward", &fn) ||
	    remote__u64(r, fn + r->l.func_code, &code) || !code)
		return -ENOENT;
	parent->parent = module;
	parent->parent_type = type;
	parent->code = code;
	if (remote__attr(r, module, "_modules", &children))
		return -ENOENT;
	return remote__dict_each(r, children, seq_child, &w);
}

int keep__globals(const struct remote *r, const struct pyobject_layout *pl, uint64_t module,
		  uint64_t used[NW_KEEP_HOOKS])
{
	static const char *const names[NW_KEEP_HOOKS] = {"_global_forward_pre_hooks",
							 "_global_forward_hooks"};
	uint64_t fn, globals, dict;
	int err, i;

	if (!r->l.func_globals || !r->l.dict_used)
		return -ENOENT;
	err = pyobject__method(r, pl, module, "_call_impl", &fn);
	if (!err)
		err = func_globals(r, fn, &globals);
	if (!err)
		err = globals_of(r, globals, "torch.nn.modules.module");
	for (i = 0; !err && i < NW_KEEP_HOOKS; i++) {
		err = remote__dict_get(r, globals, names[i], &dict);
		if (!err)
			err = used_word(r, dict, &used[i]);
	}
	return err;
}
