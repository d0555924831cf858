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
 * The classes, and why a finite input gives a finite output: ReLU is max(x, 0) (inplace or
 * not); a max pool's output elements are elements of its input (torch sizes the output so
 * that every window holds one, padding being -inf); the adaptive ones' windows are never
 * empty; Flatten and Unflatten view the input's data. Not kept: anything that scales
 * (a dropout's 1/(1-p) overflows a float16 near its largest value), clamps to attributes
 * (Hardtanh's bounds are the user's), or computes (sigmoid, softmax, norms).
 */
static const struct {
	const char *name, *module;
} kept[] = {
	{"ReLU", "torch.nn.modules.activation"},
	{"MaxPool1d", "torch.nn.modules.pooling"},
	{"MaxPool2d", "torch.nn.modules.pooling"},
	{"MaxPool3d", "torch.nn.modules.pooling"},
	{"AdaptiveMaxPool1d", "torch.nn.modules.pooling"},
	{"AdaptiveMaxPool2d", "torch.nn.modules.pooling"},
	{"AdaptiveMaxPool3d", "torch.nn.modules.pooling"},
	{"Flatten", "torch.nn.modules.flatten"},
	{"Unflatten", "torch.nn.modules.flatten"},
};

const char *keep__class_module(const char *name)
{
	size_t i;

	for (i = 0; i < sizeof(kept) / sizeof(kept[0]); i++)
		if (!strcmp(kept[i].name, name))
			return kept[i].module;
	return NULL;
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

int keep__module(const struct remote *r, uint64_t module, struct nw_keep *out, uint64_t *tensor)
{
	char cls[KEEP_NAME], mod[KEEP_NAME];
	static const char *const hooks[NW_KEEP_HOOKS] = {"_forward_pre_hooks", "_forward_hooks"};
	uint64_t type, name, dict, fn, globals, v, slot, used;
	const char *want;
	int err, i;

	memset(out, 0, sizeof(*out));
	if (!r->l.func_globals || !r->l.dict_used)
		return -ENOENT;
	if (remote__u64(r, module + r->l.obj_type, &type) ||
	    remote__u64(r, type + r->l.type_name, &name) || remote__cstr(r, name, cls, sizeof(cls)))
		return -EFAULT;
	want = keep__class_module(cls);
	if (!want)
		return -ENOENT;
	/* torch's class (a class of the user's named so has the user's module) */
	err = pyobject__class_module(r, module, mod, sizeof(mod));
	if (err)
		return err;
	if (strcmp(mod, want))
		return -ENOENT;
	/* its own forward, a function of that module (a patched one has its patcher's globals) */
	if (remote__u64(r, type + r->l.type_dict, &dict) || !dict ||
	    remote__dict_get(r, dict, "forward", &fn))
		return -ENOENT;
	err = func_globals(r, fn, &globals);
	if (err)
		return err;
	if (globals_of(r, globals, want) || remote__dict_get(r, globals, "Tensor", tensor) ||
	    !*tensor)
		return -ENOENT;
	/* no forward of the instance's own */
	err = remote__attr(r, module, "forward", &v);
	if (err != -ENOENT)
		return err ? err : -ENOENT;
	/* the hook dicts, and the words that hold them: replaced, they are not these */
	for (i = 0; i < NW_KEEP_HOOKS; i++) {
		if (remote__attr_slot(r, module, hooks[i], &v, &slot) || used_word(r, v, &used))
			return -ENOENT;
		out->slot[i] = slot;
		out->dict[i] = v;
		out->used[i] = used;
	}
	out->type = type;
	return 0;
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
