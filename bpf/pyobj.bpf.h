/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The CPython object reader: strings, types, tuples and lists, thread states and
 * frames, and instance attribute tables, read from the target with the offsets
 * of the python layout table (L, D) and the addresses the daemon resolved (A).
 */
#ifndef __PYOBJ_BPF_H
#define __PYOBJ_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "state.bpf.h"

#define ATTRS_LOOKED 32	    /* instance attributes looked through for _parameters */
#define CHILDREN_LOOKED 256 /* entries of a _modules dict looked through for a child */

/* Compare a rodata match string with n bytes read from the target. */
static __always_inline int match_str(const volatile char *pat, const char *s, __u64 n)
{
	int i;

	for (i = 0; i < NW_MATCH_LEN; i++) {
		if (pat[i] == 0)
			return i == n;
		if (i >= n || pat[i] != s[i])
			return 0;
	}
	return 0;
}

static __always_inline __u32 pat_len(const volatile char *pat)
{
	__u32 i;

	for (i = 0; i < NW_MATCH_LEN; i++)
		if (pat[i] == 0)
			return i;
	return NW_MATCH_LEN;
}

/* Length of a compact ASCII str object, or -1 for any other string kind. */
static __always_inline long ascii_len(__u64 str)
{
	__u32 state = 0;
	__u64 len = 0;

	if (!str || bpf_probe_read_user(&state, sizeof(state), (void *)(str + L.unicode_state)))
		return -1;
	if (!(state & (1U << L.ascii_bit)) || !(state & (1U << L.compact_bit)))
		return -1;
	if (bpf_probe_read_user(&len, sizeof(len), (void *)(str + L.unicode_length)))
		return -1;
	return len;
}

/* Does the str object equal pat? */
static __noinline int str_equals(__u64 str, int which)
{
	struct scratch *s = get_scratch();
	long n = ascii_len(str);

	if (!s || n < 0 || n >= NW_MATCH_LEN)
		return 0;
	if (bpf_probe_read_user(s->str, NW_MATCH_LEN, (void *)(str + L.unicode_ascii_data)))
		return 0;
	if (which == 0)
		return match_str(L.call_func, s->str, n);
	if (which == 1)
		return match_str(L.step_func, s->str, n);
	return match_str(L.step_class, s->str, n);
}

/* Does the str object end with "/" + call_file (or equal call_file)? */
static __noinline int file_matches(__u64 str)
{
	struct scratch *s = get_scratch();
	long n = ascii_len(str);
	__u32 plen = pat_len(L.call_file);
	__u64 start;
	int i;

	if (!s || n < plen || plen == 0 || plen >= NW_MATCH_LEN)
		return 0;
	start = str + L.unicode_ascii_data + n - plen;
	if (n > plen)
		start--; /* include the separator before the suffix */
	if (bpf_probe_read_user(s->str, NW_MATCH_LEN, (void *)start))
		return 0;
	if (n > plen && s->str[0] != '/')
		return 0;
	for (i = 0; i < NW_MATCH_LEN - 1; i++) {
		if (i >= plen)
			break;
		if (s->str[i + (n > plen)] != L.call_file[i])
			return 0;
	}
	return 1;
}

/*
 * Is this object's type (or a base up to 4 levels) a type named step_class?
 * Global: verified once, not at each of its callers' loop iterations.
 */
__noinline int is_optimizer(__u64 obj)
{
	struct scratch *s = get_scratch();
	__u64 type = read_u64(obj + L.obj_type);
	int i;

	if (!s)
		return 0;
	for (i = 0; i < 5 && type; i++) {
		__u64 name = read_u64(type + L.type_name);
		long n;

		n = bpf_probe_read_user_str(s->str, NW_MATCH_LEN, (void *)name);
		if (n > 0 && match_str(L.step_class, s->str, n - 1))
			return 1;
		type = read_u64(type + L.type_base);
	}
	return 0;
}

/* Is an object of this type a tensor (torch._C._TensorBase, or derived up to 3 levels)? */
__noinline int is_tensor(__u64 type)
{
	int i;

	for (i = 0; i < 4 && type; i++) {
		if (type == A.tensor_type)
			return 1;
		type = read_u64(type + L.type_base);
	}
	return 0;
}

/* Is the object a tensor? */
static __always_inline int is_tensor_obj(__u64 obj)
{
	return is_tensor(read_u64(obj + L.obj_type));
}

#define PY_TPFLAGS_LIST_SUBCLASS (1ULL << 25)  /* list and its subclasses */
#define PY_TPFLAGS_TUPLE_SUBCLASS (1ULL << 26) /* tuple and its subclasses (a namedtuple) */

/*
 * A tuple's or list's items and their number; 0 if obj is neither. With subclasses, also of
 * an instance of a tuple or list subclass (a namedtuple, torch.return_types): its items are
 * where a tuple's or list's are.
 */
static __always_inline int seq_items_of(__u64 obj, __u64 *items, __u64 *n, int subclasses)
{
	__u64 type = read_u64(obj + L.obj_type), flags;

	if (type != A.tuple_type && type != A.list_type) {
		flags = subclasses && D.on && type ? read_u64(type + D.type_flags) : 0;
		if (flags & PY_TPFLAGS_TUPLE_SUBCLASS)
			type = A.tuple_type;
		else if (flags & PY_TPFLAGS_LIST_SUBCLASS)
			type = A.list_type;
		else
			return 0;
	}
	*n = read_u64(obj + L.var_size);
	if (type == A.tuple_type)
		*items = obj + L.tuple_items;
	else
		*items = read_u64(obj + L.list_items);
	return 1;
}

/* A tuple's or list's items (exact types: what captures and requests describe). */
static __always_inline int seq_items(__u64 obj, __u64 *items, __u64 *n)
{
	return seq_items_of(obj, items, n, 0);
}

/* Is the object at addr still the object of type type (not freed, not reused)? */
static __always_inline int alive(__u64 addr, __u64 type)
{
	/* ob_refcnt is the first word of every object: 0 once it was deallocated */
	__u64 refs = read_u64(addr);

	return refs && refs < (1ULL << 48) && read_u64(addr + L.obj_type) == type;
}

/* The Python frame the thread runs now (the caller, at the evaluator's entry). */
static __always_inline __u64 thread_frame(__u64 tstate)
{
	__u64 frame = read_u64(tstate + L.tstate_frame);

	if (L.cframe_frame >= 0) /* 3.11, 3.12: through the C frame's _PyCFrame */
		frame = frame ? read_u64(frame + L.cframe_frame) : 0;
	return frame;
}

/* Where an instance keeps its attributes: a keys table, and values (0: in its entries). */
static __always_inline int attr_table(__u64 obj, __u64 *keys, __u64 *values)
{
	__u64 type = read_u64(obj + L.obj_type), flags = read_u64(type + D.type_flags);
	__u64 cached = read_u64(type + D.type_cached_keys), dict = 0, w;
	__s64 off;
	__u8 valid = 0;

	*keys = 0;
	*values = 0;
	if (D.inline_values_flag && (flags & D.inline_values_flag)) {
		/* 3.13: values in the object while valid, else a materialized dict */
		off = D.type_basicsize ? (__s64)read_u64(type + D.type_basicsize)
				       : D.inline_values_offset;
		bpf_probe_read_user(&valid, 1, (void *)(obj + off + D.values_valid));
		if (valid) {
			*keys = cached;
			*values = obj + off;
		} else {
			dict = read_u64(obj + D.managed_dict);
		}
	} else if (D.managed_dict_tagged && (flags & D.managed_dict_flag)) {
		/* 3.12: bit 0 set: the values pointer - 1; else the dict */
		w = read_u64(obj + D.managed_dict);
		if (w & 1) {
			*keys = cached;
			*values = w + 1;
		} else {
			dict = w;
		}
	} else if (flags & D.managed_dict_flag) {
		/* 3.11: a dict once __dict__ was asked for, else values with the type's keys */
		dict = read_u64(obj + D.managed_dict);
		if (!dict) {
			*keys = cached;
			*values = read_u64(obj + D.managed_values);
		}
	} else {
		off = (__s64)read_u64(type + D.type_dictoffset);
		if (off > 0)
			dict = read_u64(obj + off);
	}
	if (dict) {
		*keys = read_u64(dict + D.dict_keys);
		*values = read_u64(dict + D.dict_values);
	}
	return *keys != 0;
}

static __always_inline int dict_walk(__u64 keys, __u64 values, struct dict_walk *w)
{
	__u8 log2 = 0, kind = 0;

	if (bpf_probe_read_user(&log2, 1, (void *)(keys + D.keys_log2_index_bytes)) ||
	    bpf_probe_read_user(&kind, 1, (void *)(keys + D.keys_kind)) || log2 > 40)
		return 0;
	w->n = read_u64(keys + D.keys_nentries);
	w->esize = kind == D.keys_kind_general ? D.entry_general : D.entry_unicode;
	w->entries = keys + D.keys_indices + (1ULL << log2);
	w->values = values;
	return w->esize >= 16 && w->esize <= 64;
}

/* Entry i's key and value (entries end with key, value; split tables keep values apart). */
static __always_inline void dict_entry(const struct dict_walk *w, __u32 i, __u64 *k, __u64 *v)
{
	__u64 e = w->entries + i * w->esize;

	*k = read_u64(e + w->esize - 16);
	*v = w->values ? read_u64(w->values + D.values_items + 8 * i) : read_u64(e + w->esize - 8);
}

#define PY_TPFLAGS_UNICODE_SUBCLASS (1ULL << 28) /* str and its subclasses */
#define PY_TPFLAGS_DICT_SUBCLASS (1ULL << 29)	 /* dict and its subclasses (OrderedDict, ...) */

/* Is obj a str (or of a str subclass)? Needs the dict layout's tp_flags offset. */
static __always_inline int is_str(__u64 obj)
{
	__u64 type = read_u64(obj + L.obj_type);

	return D.on && type && (read_u64(type + D.type_flags) & PY_TPFLAGS_UNICODE_SUBCLASS);
}

/* Is obj a dict, or of a dict subclass (a ModelOutput)? Its table into w. */
static __always_inline int dict_items(__u64 obj, struct dict_walk *w)
{
	__u64 type;

	if (!D.on || !obj)
		return 0;
	type = read_u64(obj + L.obj_type);
	if (!type || !(read_u64(type + D.type_flags) & PY_TPFLAGS_DICT_SUBCLASS))
		return 0;
	return dict_walk(read_u64(obj + D.dict_keys), read_u64(obj + D.dict_values), w);
}

static __always_inline int same_chars(const char *a, const char *lit, int n)
{
	int i;

	for (i = 0; i < n; i++)
		if (a[i] != lit[i])
			return 0;
	return 1;
}

/* The module attributes a list is read from (attr_list). */
enum attr_name {
	ATTR_PARAMETERS, /* "_parameters" */
	ATTR_BUFFERS,	 /* "_buffers" */
	ATTR_MODULES,	 /* "_modules" */
};

/* Is the str object the attribute name which (enum attr_name)? Global: verified once. */
__noinline int is_list_name(__u64 str, int which)
{
	struct scratch *s = get_scratch();
	long n = ascii_len(str);

	if (!s || n != (which == ATTR_PARAMETERS ? 11 : 8) ||
	    bpf_probe_read_user(s->str, 16, (void *)(str + L.unicode_ascii_data)))
		return 0;
	if (which == ATTR_PARAMETERS)
		return same_chars(s->str, "_parameters", 11);
	return which == ATTR_BUFFERS ? same_chars(s->str, "_buffers", 8)
				     : same_chars(s->str, "_modules", 8);
}

/* Instance attribute i: is it the dict looked for? (a bpf_loop callback) */
static long find_list(__u32 i, void *ctx)
{
	struct scratch *s = get_scratch();
	struct attr_find *f;
	__u64 k, v;

	if (!s)
		return 1;
	f = &s->af;
	if (i >= f->w.n)
		return 1;
	dict_entry(&f->w, i, &k, &v);
	if (k && v && is_list_name(k, f->which)) {
		f->found = v;
		return 1;
	}
	return 0;
}

/* The dict a module holds as its attribute which (enum attr_name), or 0. */
static __always_inline __u64 attr_list(__u64 module, int which)
{
	struct scratch *s = get_scratch();
	struct attr_find *f;
	__u64 keys, values;

	if (!s || !D.on || !attr_table(module, &keys, &values))
		return 0;
	f = &s->af; /* off the stack, as held_key's */
	__builtin_memset(f, 0, sizeof(*f));
	f->which = which;
	if (!dict_walk(keys, values, &f->w))
		return 0;
	bpf_loop(ATTRS_LOOKED, find_list, NULL, 0);
	return f->found;
}

/* Entry i of a _parameters (_buffers) dict into s->np (a bpf_loop callback). */
static long keep_param(__u32 i, void *ctx)
{
	struct dict_walk *w = ctx;
	struct scratch *s = get_scratch();
	__u64 k, v;

	if (!s || i >= w->n)
		return 1;
	dict_entry(w, i, &k, &v);
	if (!k || !v || v == D.none)
		return 0; /* deleted, or a parameter registered as None */
	if (s->np.n < NW_MAX_PARAMS)
		s->np.tensors[s->np.n++ & (NW_MAX_PARAMS - 1)] = v;
	else
		s->np.more++;
	return 0;
}

/*
 * The module's own parameters (buffers: its buffers) read here, from its
 * _parameters (_buffers) dict, into s->np: for a module the daemon has not
 * listed yet (its first call, or its record still queued), so they are scanned
 * (and captured) at the anomaly all the same. Returns 1 if listed. The entries
 * are looked at in bpf_loop callbacks: each verified once, not once an entry.
 */
__noinline int list_params(__u64 module, int buffers)
{
	struct scratch *s = get_scratch();
	__u64 list = attr_list(module, buffers ? ATTR_BUFFERS : ATTR_PARAMETERS);
	struct dict_walk w;

	if (!s || !list ||
	    !dict_walk(read_u64(list + D.dict_keys), read_u64(list + D.dict_values), &w))
		return 0;
	__builtin_memset(&s->np, 0, sizeof(s->np));
	bpf_loop(ATTRS_LOOKED, keep_param, &w, 0);
	if (w.n > ATTRS_LOOKED)
		s->np.more += w.n - ATTRS_LOOKED;
	return 1;
}

/* A module's _modules dict, or 0. Global: verified once. */
__noinline __u64 modules_of(__u64 module)
{
	return attr_list(module, ATTR_MODULES);
}

/* Entry i of a _modules dict: is it the child? (a bpf_loop callback) */
static long find_child(__u32 i, void *ctx)
{
	struct scratch *s = get_scratch();
	struct child_find *f;
	__u64 k, v;

	if (!s)
		return 1;
	f = &s->kf;
	if (i >= f->w.n)
		return 1;
	dict_entry(&f->w, i, &k, &v);
	if (k && v == f->child) {
		f->key = k;
		return 1;
	}
	return 0;
}

/* The key (a str) under which a _modules dict holds child; 0 if not. Global: verified once. */
__noinline __u64 child_key(__u64 modules, __u64 child)
{
	struct scratch *s = get_scratch();
	struct child_find *f;

	if (!s || !modules)
		return 0;
	f = &s->kf; /* held_key's walk uses s->cf meanwhile */
	__builtin_memset(f, 0, sizeof(*f));
	f->child = child;
	if (!dict_walk(read_u64(modules + D.dict_keys), read_u64(modules + D.dict_values), &f->w)) {
		f->w.n = 0; /* nothing to look through, here or in held_key */
		return 0;
	}
	bpf_loop(CHILDREN_LOOKED, find_child, NULL, 0);
	return f->key;
}

/* Entry i of a _modules dict: does the module there hold the child? (a bpf_loop callback) */
static long find_holder(__u32 i, void *ctx)
{
	struct scratch *s = get_scratch();
	struct child_find *f;
	__u64 k, v, key;

	if (!s)
		return 1;
	f = &s->cf;
	if (i >= f->w.n)
		return 1;
	dict_entry(&f->w, i, &k, &v);
	if (!k || !v || v == D.none)
		return 0;
	key = child_key(modules_of(v), f->child);
	if (!key)
		return 0;
	f->key = key;
	f->holder_key = k;
	return 1;
}

/*
 * Where parent holds module: its key in parent._modules, else "holder.key" for a container
 * parent holds (a ModuleList, a ModuleDict, a Sequential it indexes: modules never called
 * themselves), written to out as a C string ("" if neither, or a key too long or not ASCII).
 */
static __always_inline void held_key(struct scratch *s, __u64 parent, __u64 module, char *out)
{
	struct child_find *f = &s->cf; /* off the stack: the walks' calls nest deep */
	__u64 modules = modules_of(parent), key;
	long n1, n2;

	out[0] = 0;
	if (!modules)
		return;
	key = child_key(modules, module);
	if (key) {
		n1 = ascii_len(key);
		if (n1 > 0 && n1 < NW_HELD_LEN)
			bpf_probe_read_user_str(out, NW_HELD_LEN,
						(void *)(key + L.unicode_ascii_data));
		return;
	}
	*f = s->kf; /* child_key's walk of the same dict (n 0 if it could not read it), no key */
	bpf_loop(CHILDREN_LOOKED, find_holder, NULL, 0);
	if (!f->key)
		return;
	n1 = ascii_len(f->holder_key);
	n2 = ascii_len(f->key);
	if (n1 <= 0 || n1 >= NW_HELD_LEN / 2 || n2 <= 0 || n2 >= NW_HELD_LEN / 2)
		return;
	if (bpf_probe_read_user_str(out, NW_HELD_LEN / 2,
				    (void *)(f->holder_key + L.unicode_ascii_data)) != n1 + 1) {
		out[0] = 0;
		return;
	}
	out[n1 & (NW_HELD_LEN / 2 - 1)] = '.';
	if (bpf_probe_read_user_str(out + (n1 & (NW_HELD_LEN / 2 - 1)) + 1, NW_HELD_LEN / 2,
				    (void *)(f->key + L.unicode_ascii_data)) != n2 + 1)
		out[0] = 0;
}

#endif /* __PYOBJ_BPF_H */
