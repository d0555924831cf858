// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Reading CPython objects out of the target with process_vm_readv. Every
 * size read from the target is bounded before use: the target's memory is
 * untrusted input to a root process.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* process_vm_readv */
#endif
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include "resolve/layout.h"
#include "resolve/remote.h"
#include "util/utf8.h"

static int pid_read(void *ctx, uint64_t addr, void *buf, size_t len)
{
	struct remote *r = ctx;
	struct iovec local = {.iov_base = buf, .iov_len = len};
	struct iovec remote = {.iov_base = (void *)(uintptr_t)addr, .iov_len = len};
	ssize_t n;

	if (!addr)
		return -EFAULT;
	n = process_vm_readv(r->pid, &local, 1, &remote, 1, 0);
	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -EFAULT;
}

void remote__init_pid(struct remote *r, pid_t pid)
{
	r->read = pid_read;
	r->ctx = r;
	r->pid = pid;
}

/* Where each key marked rl in layout_keys.def goes in struct remote_layout (size 0: not). */
struct rl_slot {
	unsigned short off, size;
};

#define RL_Y(n)                                                                           \
	{                                                                                 \
		offsetof(struct remote_layout, n), sizeof(((struct remote_layout *)0)->n) \
	}
#define RL_N(n)      \
	{            \
		0, 0 \
	}

static const struct rl_slot rl_slots[LK__COUNT] = {
#define LAYOUT_KEY(name, table, type, min, max, since, until, need, nwl, rl, bwd, rs, pub, note) \
	RL_##rl(name),
#include "resolve/layout_keys.def"
};

#define RL_CHECK_Y(n) _Static_assert(sizeof(((struct remote_layout *)0)->n) == 8, #n " is 64-bit");
#define RL_CHECK_N(n)
#define LAYOUT_KEY(name, table, type, min, max, since, until, need, nwl, rl, bwd, rs, pub, note) \
	RL_CHECK_##rl(name)
#include "resolve/layout_keys.def"

int remote__layout_set(struct remote_layout *out, enum layout_key key, int64_t v)
{
	if ((unsigned)key >= LK__COUNT || !rl_slots[key].size)
		return -ENOENT;
	memcpy((char *)out + rl_slots[key].off, &v, sizeof(v));
	return 0;
}

int remote__layout_from(struct remote_layout *out, const struct layout *py, char *err,
			size_t errlen)
{
	struct remote_layout tmp = {};
	int k, ret;

	if (!py || strcmp(layout__kind(py), "python")) {
		snprintf(err, errlen, "not a python layout table");
		return -EINVAL;
	}
	/* the loader made sure the table has every key its version needs; the others are 0 */
	for (k = 0; k < LK__COUNT; k++) {
		long long v = 0;

		if (!rl_slots[k].size)
			continue;
		ret = layout__int(py, k, &v);
		if (ret && ret != -ENOENT) {
			snprintf(err, errlen, "python layout: '%s' is not an integer",
				 layout_keys[k].name);
			return ret;
		}
		remote__layout_set(&tmp, k, v);
	}
	*out = tmp;
	return 0;
}

int remote__read(const struct remote *r, uint64_t addr, void *buf, size_t len)
{
	return r->read(r->ctx, addr, buf, len);
}

int remote__u64(const struct remote *r, uint64_t addr, uint64_t *v)
{
	return r->read(r->ctx, addr, v, sizeof(*v));
}

int remote__str(const struct remote *r, uint64_t str, char *out, size_t outlen)
{
	const struct remote_layout *l = &r->l;
	uint32_t state, kind;
	uint64_t len;
	size_t i, o = 0;
	unsigned char raw[REMOTE_MAX_STR * 4];
	int err;

	if (!outlen)
		return -EINVAL;
	out[0] = 0;
	err = r->read(r->ctx, str + l->unicode_state, &state, sizeof(state));
	if (!err)
		err = remote__u64(r, str + l->unicode_length, &len);
	if (err)
		return err;
	if (!(state & (1U << l->compact_bit)))
		return -EINVAL; /* legacy (non-compact) strings: not used for names */
	if (len > REMOTE_MAX_STR)
		len = REMOTE_MAX_STR;
	if (state & (1U << l->ascii_bit)) {
		if (len > outlen - 1)
			len = outlen - 1;
		err = r->read(r->ctx, str + l->unicode_ascii_data, out, len);
		out[err ? 0 : len] = 0;
		return err;
	}
	kind = (state >> l->unicode_kind_shift) & 7;
	if (kind != 1 && kind != 2 && kind != 4)
		return -EINVAL;
	err = r->read(r->ctx, str + l->unicode_compact_data, raw, len * kind);
	if (err)
		return err;
	for (i = 0; i < len; i++) {
		uint32_t cp;
		size_t n;

		if (kind == 1)
			cp = raw[i];
		else if (kind == 2)
			cp = raw[2 * i] | raw[2 * i + 1] << 8;
		else
			cp = raw[4 * i] | raw[4 * i + 1] << 8 | raw[4 * i + 2] << 16 |
			     (uint32_t)raw[4 * i + 3] << 24;
		n = utf8__encode(out + o, outlen - 1 - o, cp);
		if (!n)
			break;
		o += n;
	}
	out[o] = 0;
	return 0;
}

int remote__cstr(const struct remote *r, uint64_t addr, char *out, size_t outlen)
{
	size_t got = 0;

	if (!outlen)
		return -EINVAL;
	/* read in small pieces: a string near the end of a mapping must not fail whole */
	while (got < outlen - 1) {
		size_t n = outlen - 1 - got;
		char *nul;

		if (n > 32)
			n = 32;
		if (r->read(r->ctx, addr + got, out + got, n)) {
			if (got)
				break;
			out[0] = 0;
			return -EFAULT;
		}
		nul = memchr(out + got, 0, n);
		if (nul)
			return 0;
		got += n;
	}
	out[got] = 0;
	return 0;
}

/* An entry's key and value, and the address of the word that holds the value. */
typedef int (*entry_fn)(uint64_t key, uint64_t value, uint64_t slot, void *ctx);

/*
 * Shared by combined and split dicts: each entry of a keys object (and its values
 * array, or 0) that has a key and a value. A non-zero return of fn ends the walk
 * (> 0: found what it wanted).
 */
static int keys_walk(const struct remote *r, uint64_t keys, uint64_t values, entry_fn fn, void *ctx)
{
	const struct remote_layout *l = &r->l;
	uint8_t log2_index_bytes = 0, kind = 0;
	uint64_t nentries, entries, esize, i, kofs;
	int err;

	err = r->read(r->ctx, keys + l->keys_log2_index_bytes, &log2_index_bytes, 1);
	if (!err)
		err = r->read(r->ctx, keys + l->keys_kind, &kind, 1);
	if (!err)
		err = remote__u64(r, keys + l->keys_nentries, &nentries);
	if (err)
		return err;
	if (log2_index_bytes > 40 || nentries > REMOTE_MAX_ITEMS)
		return -E2BIG;
	/* entries end with (key, value); the general kind has a hash before them */
	esize = kind == l->keys_kind_general ? l->entry_general : l->entry_unicode;
	if (esize < 16 || esize > 64 || esize % 8)
		return -EINVAL;
	kofs = esize / 8 - 2;
	entries = keys + l->keys_indices + (1ULL << log2_index_bytes);
	for (i = 0; i < nentries; i++) {
		uint64_t e[8] = {}, k, v, slot = entries + i * esize + 8 * (kofs + 1);

		if (r->read(r->ctx, entries + i * esize, e, esize))
			return -EFAULT;
		k = e[kofs];
		v = e[kofs + 1];
		if (values) {
			slot = values + l->values_items + 8 * i;
			if (remote__u64(r, slot, &v))
				return -EFAULT;
		}
		if (!k || !v)
			continue; /* deleted entry, or a split slot not set on this instance */
		err = fn(k, v, slot, ctx);
		if (err)
			return err;
	}
	return 0;
}

struct str_ctx {
	const struct remote *r;
	remote_item_fn cb;
	void *ctx;
};

static int str_entry(uint64_t k, uint64_t v, uint64_t slot, void *ctx)
{
	struct str_ctx *s = ctx;
	char key[256];

	(void)slot;
	if (remote__str(s->r, k, key, sizeof(key)))
		return 0; /* not a str key: no module name */
	return s->cb(key, v, s->ctx);
}

/* Entries with str keys, as C strings. */
static int keys_each(const struct remote *r, uint64_t keys, uint64_t values, remote_item_fn cb,
		     void *ctx)
{
	struct str_ctx s = {r, cb, ctx};
	int err = keys_walk(r, keys, values, str_entry, &s);

	return err > 0 ? 0 : err;
}

/* A dict's keys object and its values array (0: a combined dict, values in the entries). */
static int dict_parts(const struct remote *r, uint64_t dict, uint64_t *keys, uint64_t *values)
{
	int err = remote__u64(r, dict + r->l.dict_keys, keys);

	return err ? err : remote__u64(r, dict + r->l.dict_values, values);
}

int remote__dict_each(const struct remote *r, uint64_t dict, remote_item_fn cb, void *ctx)
{
	uint64_t keys, values;
	int err = dict_parts(r, dict, &keys, &values);

	return err ? err : keys_each(r, keys, values, cb, ctx);
}

struct find_ctx {
	const char *key;
	uint64_t value;
	int found;
};

static int find_cb(const char *key, uint64_t value, void *ctx)
{
	struct find_ctx *f = ctx;

	if (strcmp(key, f->key))
		return 0;
	f->value = value;
	f->found = 1;
	return 1;
}

int remote__dict_get(const struct remote *r, uint64_t dict, const char *key, uint64_t *value)
{
	struct find_ctx f = {.key = key};
	int err = remote__dict_each(r, dict, find_cb, &f);

	if (err)
		return err;
	if (!f.found)
		return -ENOENT;
	*value = f.value;
	return 0;
}

static int first_entry(uint64_t k, uint64_t v, uint64_t slot, void *ctx)
{
	(void)k;
	(void)slot;
	*(uint64_t *)ctx = v;
	return 1;
}

/* keys_walk for an entry fn wants: 0 once found, -ENOENT if none, or the walk's error. */
static int walk_find(const struct remote *r, uint64_t keys, uint64_t values, entry_fn fn, void *ctx)
{
	int err = keys_walk(r, keys, values, fn, ctx);

	return err < 0 ? err : err ? 0 : -ENOENT;
}

int remote__dict_first(const struct remote *r, uint64_t dict, uint64_t *value)
{
	uint64_t keys, values, v = 0;
	int err = dict_parts(r, dict, &keys, &values);

	if (!err)
		err = walk_find(r, keys, values, first_entry, &v);
	if (!err)
		*value = v;
	return err;
}

/* Where an instance keeps its attributes: a dict, or split values with the type's keys. */
static int instance_dict(const struct remote *r, uint64_t obj, uint64_t *dictp, uint64_t *valuesp,
			 uint64_t *keysp)
{
	const struct remote_layout *l = &r->l;
	uint64_t type, flags, dict = 0, values = 0, keys = 0;
	int64_t dictoff;
	int err;

	err = remote__u64(r, obj + l->obj_type, &type);
	if (!err)
		err = remote__u64(r, type + l->type_flags, &flags);
	if (err)
		return err;
	if (l->inline_values_flag && (flags & l->inline_values_flag)) {
		/*
		 * 3.13: values live in the object while valid; else a materialized dict.
		 * 3.14: after the type's basic size (a builtin's subclass has its fields first).
		 */
		uint8_t valid = 0;
		uint64_t start = l->inline_values_offset;

		if (l->type_basicsize)
			err = remote__u64(r, type + l->type_basicsize, &start);
		if (!err && start > 4096)
			err = -ERANGE;
		values = obj + start;
		if (!err)
			err = r->read(r->ctx, values + l->values_valid, &valid, 1);
		if (!err && valid)
			err = remote__u64(r, type + l->type_cached_keys, &keys);
		else if (!err)
			err = remote__u64(r, obj + l->managed_dict, &dict);
		if (!valid)
			values = 0;
	} else if (l->managed_dict_tagged && (flags & l->managed_dict_flag)) {
		/*
		 * 3.12: one word, PyDictOrValues: bit 0 set, it is the values pointer - 1
		 * (_PyDictOrValues_GetValues adds the 1 back: values are 8-aligned, so
		 * clearing bit 0 would not undo it); else the dict pointer, maybe NULL.
		 */
		uint64_t word;

		err = remote__u64(r, obj + l->managed_dict, &word);
		if (!err && (word & 1)) {
			values = word + 1;
			err = remote__u64(r, type + l->type_cached_keys, &keys);
		} else if (!err) {
			dict = word;
		}
	} else if (flags & l->managed_dict_flag) {
		/* 3.11: the dict exists only once __dict__ was asked for; else inline values */
		err = remote__u64(r, obj + l->managed_dict, &dict);
		if (!err && !dict) {
			err = remote__u64(r, obj + l->managed_values, &values);
			if (!err)
				err = remote__u64(r, type + l->type_cached_keys, &keys);
		}
	} else {
		err = remote__u64(r, type + l->type_dictoffset, (uint64_t *)&dictoff);
		if (!err && dictoff <= 0)
			err = -ENOENT;
		if (!err)
			err = remote__u64(r, obj + dictoff, &dict);
	}
	if (err)
		return err;
	if (!dict && !(values && keys))
		return -ENOENT;
	*dictp = dict;
	*valuesp = values;
	*keysp = keys;
	return 0;
}

int remote__attrs_each(const struct remote *r, uint64_t obj, remote_item_fn cb, void *ctx)
{
	uint64_t dict, values, keys;
	int err = instance_dict(r, obj, &dict, &values, &keys);

	if (err)
		return err;
	if (dict)
		return remote__dict_each(r, dict, cb, ctx);
	return keys_each(r, keys, values, cb, ctx);
}

int remote__attr(const struct remote *r, uint64_t obj, const char *key, uint64_t *value)
{
	struct find_ctx f = {.key = key};
	int err;

	err = remote__attrs_each(r, obj, find_cb, &f);
	if (err)
		return err;
	if (!f.found)
		return -ENOENT;
	*value = f.value;
	return 0;
}

struct slot_ctx {
	const struct remote *r;
	const char *key;
	uint64_t value, slot;
};

static int slot_entry(uint64_t k, uint64_t v, uint64_t slot, void *ctx)
{
	struct slot_ctx *f = ctx;
	char key[256];

	if (remote__str(f->r, k, key, sizeof(key)) || strcmp(key, f->key))
		return 0;
	f->value = v;
	f->slot = slot;
	return 1;
}

int remote__attr_slot(const struct remote *r, uint64_t obj, const char *key, uint64_t *value,
		      uint64_t *slot)
{
	struct slot_ctx f = {.r = r, .key = key};
	uint64_t dict, values, keys;
	int err = instance_dict(r, obj, &dict, &values, &keys);

	if (!err && dict)
		err = dict_parts(r, dict, &keys, &values);
	if (!err)
		err = walk_find(r, keys, values, slot_entry, &f);
	if (err)
		return err;
	*value = f.value;
	*slot = f.slot;
	return 0;
}
