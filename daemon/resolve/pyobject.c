// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* CPython objects of the target decoded from outside (see pyobject.h). */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "resolve/remote.h"
#include "resolve/pyobject.h"

#define PY_TPFLAGS_HEAPTYPE (1UL << 9)

struct list_ctx {
	const struct remote *r;
	struct nw_params *np;
	struct py_named_list *names;
};

static int list_cb(const char *key, uint64_t value, void *ctx)
{
	struct list_ctx *l = ctx;
	int none = value == l->r->none;

	if (l->names && l->names->n < PYOBJECT_MAX_NAMED) {
		struct py_named *n = &l->names->items[l->names->n++];

		snprintf(n->name, sizeof(n->name), "%s", key);
		n->obj = none ? 0 : value;
	}
	if (l->np && !none) {
		if (l->np->n < NW_MAX_PARAMS)
			l->np->tensors[l->np->n++] = value;
		else
			l->np->more++;
	}
	return 0;
}

int pyobject__list_dict(const struct remote *r, uint64_t module, const char *attr,
			struct nw_params *np, struct py_named_list *names)
{
	struct list_ctx ctx = {r, np, names};
	uint64_t dict;
	int err;

	if (np)
		memset(np, 0, sizeof(*np));
	if (names)
		names->n = 0;
	err = remote__attr(r, module, attr, &dict);
	if (err)
		return err;
	return remote__dict_each(r, dict, list_cb, &ctx);
}

const char *pyobject__name_of(const struct py_named_list *l, uint64_t obj)
{
	int i;

	for (i = 0; i < l->n; i++)
		if (obj && l->items[i].obj == obj)
			return l->items[i].name;
	return NULL;
}

/* A static (non-heap) type's name: builtins cannot be subclassed under that name statically. */
static int builtin_type(const struct remote *r, uint64_t obj, uint64_t *type, char *name,
			size_t len)
{
	uint64_t flags, tp_name;

	if (remote__u64(r, obj + r->l.obj_type, type) ||
	    remote__u64(r, *type + r->l.type_flags, &flags) || (flags & PY_TPFLAGS_HEAPTYPE) ||
	    remote__u64(r, *type + r->l.type_name, &tp_name) || remote__cstr(r, tp_name, name, len))
		return -EINVAL;
	return 0;
}

int pyobject__long_size(uint64_t word, int tagged, int *neg)
{
	uint64_t n;

	if (tagged) {
		/* 3.12+: lv_tag = ndigits << 3 | sign (0 positive, 1 zero, 2 negative) */
		n = word >> 3;
		*neg = (word & 3) == 2;
	} else {
		/* 3.11: ob_size is the digit count, negated for a negative int */
		*neg = (int64_t)word < 0;
		n = *neg ? (uint64_t) - (int64_t)word : word;
	}
	return n > 2 ? -ERANGE : (int)n;
}

long long pyobject__long_value(const uint32_t digits[2], int n, int bits, int neg)
{
	uint32_t mask = (1u << bits) - 1;
	uint64_t v = 0;

	if (n > 0)
		v = digits[0] & mask;
	if (n > 1)
		v |= (uint64_t)(digits[1] & mask) << bits;
	return neg ? -(long long)v : (long long)v;
}

/* A small int (at most two digits: 60 bits with the 30-bit digits the tables hold). */
static int read_int(const struct remote *r, const struct pyobject_layout *pl, uint64_t obj,
		    long long *out)
{
	uint32_t digits[2] = {};
	uint64_t word;
	int n, neg;

	if (r->l.long_digit_bits < 1 || r->l.long_digit_bits > 30)
		return -ERANGE;
	if (remote__u64(r, obj + pl->l->var_size, &word))
		return -EFAULT;
	n = pyobject__long_size(word, r->l.long_tagged, &neg);
	if (n < 0 || (n && remote__read(r, obj + r->l.long_digits, digits, n * sizeof(digits[0]))))
		return -ERANGE;
	*out = pyobject__long_value(digits, n, r->l.long_digit_bits, neg);
	return 0;
}

/* A tuple of small ints. */
static int read_int_tuple(const struct remote *r, const struct pyobject_layout *pl, uint64_t v,
			  struct py_value *out)
{
	uint64_t n, i, item, itype;
	char tname[32];

	if (remote__u64(r, v + pl->l->var_size, &n) || n > PYOBJECT_MAX_TUPLE)
		return -ENOTSUP;
	for (i = 0; i < n; i++)
		if (remote__u64(r, v + pl->l->tuple_items + 8 * i, &item) ||
		    builtin_type(r, item, &itype, tname, sizeof(tname)) || strcmp(tname, "int") ||
		    read_int(r, pl, item, &out->items[i]))
			return -ENOTSUP;
	out->kind = PY_INT_TUPLE;
	out->n = n;
	return 0;
}

static int read_str(const struct remote *r, uint64_t v, struct py_value *out)
{
	out->str = malloc(REMOTE_MAX_STR * 4 + 1);
	if (!out->str || remote__str(r, v, out->str, REMOTE_MAX_STR * 4 + 1)) {
		free(out->str);
		out->str = NULL;
		return -ENOTSUP;
	}
	out->kind = PY_STR;
	return 0;
}

int pyobject__value(const struct remote *r, const struct pyobject_layout *pl, uint64_t v,
		    struct py_value *out)
{
	char tname[32];
	uint64_t type;

	memset(out, 0, sizeof(*out));
	if (v == r->none) {
		out->kind = PY_NONE;
		return 0;
	}
	if (builtin_type(r, v, &type, tname, sizeof(tname)))
		return -ENOTSUP;
	if (!strcmp(tname, "bool") || !strcmp(tname, "int")) {
		if (read_int(r, pl, v, &out->i))
			return -ENOTSUP;
		out->kind = tname[0] == 'b' ? PY_BOOL : PY_INT;
		return 0;
	}
	if (!strcmp(tname, "float")) {
		if (remote__read(r, v + r->l.float_value, &out->d, sizeof(out->d)) ||
		    !isfinite(out->d))
			return -ENOTSUP;
		out->kind = PY_FLOAT;
		return 0;
	}
	if (!strcmp(tname, "str"))
		return read_str(r, v, out);
	if (type != pl->tuple_type)
		return -ENOTSUP;
	return read_int_tuple(r, pl, v, out);
}

void pyobject__value_free(struct py_value *v)
{
	free(v->str);
	v->str = NULL;
}

/* type(module).__module__, from the type's dict. */
int pyobject__class_module(const struct remote *r, uint64_t module, char *out, size_t len)
{
	struct py_named_list *l = NULL;
	uint64_t type, dict, value = 0;
	struct list_ctx ctx = {r, NULL, NULL};
	int err, i;

	out[0] = 0;
	if (remote__u64(r, module + r->l.obj_type, &type) ||
	    remote__u64(r, type + r->l.type_dict, &dict) || !dict)
		return -EFAULT;
	l = calloc(1, sizeof(*l));
	if (!l)
		return -ENOMEM;
	ctx.names = l;
	err = remote__dict_each(r, dict, list_cb, &ctx);
	for (i = 0; !err && i < l->n; i++)
		if (!strcmp(l->items[i].name, "__module__"))
			value = l->items[i].obj;
	free(l);
	if (err || !value)
		return err ? err : -ENOENT;
	return remote__str(r, value, out, len);
}

int pyobject__method(const struct remote *r, const struct pyobject_layout *pl, uint64_t obj,
		     const char *method, uint64_t *fn)
{
	uint64_t type, dict;
	int depth;

	if (remote__u64(r, obj + r->l.obj_type, &type))
		return -EFAULT;
	for (depth = 0; type && depth < PYOBJECT_MAX_BASES; depth++) {
		if (!remote__u64(r, type + r->l.type_dict, &dict) && dict &&
		    !remote__dict_get(r, dict, method, fn))
			return 0;
		if (remote__u64(r, type + pl->l->type_base, &type))
			return -EFAULT;
	}
	return -ENOENT;
}

int pyobject__is_function(const struct remote *r, uint64_t obj)
{
	uint64_t type;
	char tname[32];

	return !builtin_type(r, obj, &type, tname, sizeof(tname)) && !strcmp(tname, "function");
}

int pyobject__method_names(const struct remote *r, const struct pyobject_layout *pl, uint64_t obj,
			   const char *method, pyobject_name_fn cb, void *ctx)
{
	uint64_t fn, ftype, code, names, n, i, item;
	char tname[32], name[64];
	int err;

	if (!r->l.code_names || !r->l.func_code)
		return -ENOTSUP;
	err = pyobject__method(r, pl, obj, method, &fn);
	if (err)
		return err;
	/* a plain Python function (a builtin, a C method or a descriptor has no co_names) */
	if (!pyobject__is_function(r, fn) || remote__u64(r, fn + r->l.func_code, &code) || !code ||
	    remote__u64(r, code + r->l.code_names, &names) ||
	    builtin_type(r, names, &ftype, tname, sizeof(tname)) || ftype != pl->tuple_type ||
	    remote__u64(r, names + pl->l->var_size, &n))
		return -ENOENT;
	for (i = 0; i < n && i < PYOBJECT_MAX_CODE_NAMES; i++) {
		if (remote__u64(r, names + pl->l->tuple_items + 8 * i, &item) ||
		    remote__str(r, item, name, sizeof(name)))
			continue;
		err = cb(name, ctx);
		if (err)
			return err;
	}
	return 0;
}
