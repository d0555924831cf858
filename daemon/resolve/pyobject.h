/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * CPython objects of the target read from outside: a module's registered dicts, small
 * builtin values (None, bool, int, float, str, tuples of ints), a class's __module__. Bounded
 * process_vm_readv reads through struct remote; nothing here trusts what it reads.
 */
#ifndef __RESOLVE_PYOBJECT_H
#define __RESOLVE_PYOBJECT_H

#include <stddef.h>
#include <stdint.h>
#include <linux/types.h>
#include "nanwatch.h"

struct remote;

#define PYOBJECT_MAX_NAMED 64 /* entries of a dict looked at */
#define PYOBJECT_MAX_TUPLE 16 /* items of a tuple value */

struct py_named {
	char name[128];
	uint64_t obj; /* 0: registered as None */
};

struct py_named_list {
	struct py_named items[PYOBJECT_MAX_NAMED];
	int n;
};

/* What reading simple values needs beyond struct remote. */
struct pyobject_layout {
	const struct nw_layout *l;
	uint64_t tuple_type; /* &PyTuple_Type in the target */
};

/*
 * module.<attr> (a dict: _parameters, _buffers, _modules): its non-None values in order into
 * np (may be NULL), every entry's name and value into names (may be NULL).
 */
int pyobject__list_dict(const struct remote *r, uint64_t module, const char *attr,
			struct nw_params *np, struct py_named_list *names);

/* The name obj is registered under in l, NULL if none. */
const char *pyobject__name_of(const struct py_named_list *l, uint64_t obj);

/* type(module).__module__ into out. */
int pyobject__class_module(const struct remote *r, uint64_t module, char *out, size_t len);

#define PYOBJECT_MAX_BASES 8	    /* classes looked up a method in: the class, its bases */
#define PYOBJECT_MAX_CODE_NAMES 256 /* names of a code object read */

/* obj is a plain Python function (builtin type "function"): not a builtin, C method or class. */
int pyobject__is_function(const struct remote *r, uint64_t obj);

/* type(obj).<method> into *fn, the class's own or its nearest base's; -ENOENT if none. */
int pyobject__method(const struct remote *r, const struct pyobject_layout *pl, uint64_t obj,
		     const char *method, uint64_t *fn);

/*
 * The names the code of the Python function type(obj).<method> uses (its co_names: the
 * globals and attributes it loads, "torch", "sqrt", "weight"), from the class or the nearest
 * base that defines it, one cb call each (a name cut at 63 bytes). -ENOTSUP without the
 * table's code_names and func_code, -ENOENT when the method is no Python function.
 */
typedef int (*pyobject_name_fn)(const char *name, void *ctx);
int pyobject__method_names(const struct remote *r, const struct pyobject_layout *pl, uint64_t obj,
			   const char *method, pyobject_name_fn cb, void *ctx);

enum py_value_kind {
	PY_NONE,
	PY_BOOL,
	PY_INT,
	PY_FLOAT,     /* finite only */
	PY_STR,	      /* str: malloc'd, freed by pyobject__value_free */
	PY_INT_TUPLE, /* items[0..n) */
};

struct py_value {
	int kind;
	long long i;
	double d;
	char *str;
	int n;
	long long items[PYOBJECT_MAX_TUPLE];
};

/* One attribute value; -ENOTSUP for anything but the simple kinds. */
int pyobject__value(const struct remote *r, const struct pyobject_layout *pl, uint64_t v,
		    struct py_value *out);
void pyobject__value_free(struct py_value *v);

/*
 * A CPython int's digit count from the word after its object header (ob_size; tagged, the
 * table's long_tagged: 3.12+ lv_tag), and its sign; -ERANGE past two digits. Then its value
 * from the digits, each of bits value bits (the table's long_digit_bits).
 */
int pyobject__long_size(uint64_t word, int tagged, int *neg);
long long pyobject__long_value(const uint32_t digits[2], int n, int bits, int neg);

#endif /* __RESOLVE_PYOBJECT_H */
