/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Bounded reads of another process's memory, and the few CPython objects we read there. */
#ifndef __REMOTE_H
#define __REMOTE_H

#include <stdint.h>
#include <stddef.h>
#include <sys/types.h>
#include "resolve/layout.h"

/* CPython offsets user space needs (from the python layout table; field names are its keys). */
struct remote_layout {
	int64_t obj_type;
	int64_t type_flags;
	int64_t type_dictoffset;
	int64_t type_cached_keys;
	int64_t managed_dict_flag;
	int64_t managed_dict;
	int64_t managed_values;
	int64_t dict_keys;
	int64_t dict_values;
	int64_t keys_log2_index_bytes;
	int64_t keys_kind;
	int64_t keys_nentries;
	int64_t keys_indices;
	int64_t values_items;
	int64_t keys_kind_general; /* dk_kind of (hash, key, value) entries */
	int64_t entry_general;	   /* entry sizes: (hash, key, value) */
	int64_t entry_unicode;	   /* (key, value) */
	int64_t unicode_length;
	int64_t unicode_state;
	int64_t unicode_ascii_data;
	int64_t unicode_compact_data;
	int64_t unicode_kind_shift;
	int64_t ascii_bit;
	int64_t compact_bit;
	int64_t type_name;
	int64_t type_dict;
	int64_t code_localsplusnames;	 /* 0: not in the table */
	int64_t code_names, func_code;	 /* 0: not in the table */
	int64_t func_globals, dict_used; /* 0: not in the table */
	/* int and float objects: the digits (uint32s of long_digit_bits), the double */
	int64_t long_digits;
	int64_t long_digit_bits;
	int64_t float_value;
	/* 3.12+: an int's size word is lv_tag (digit count << 3 | sign); 0: ob_size */
	int64_t long_tagged;
	/* 3.13+: attribute values inline after the object header; 0 when absent */
	int64_t inline_values_flag;   /* Py_TPFLAGS_INLINE_VALUES */
	int64_t inline_values_offset; /* from the object to its PyDictValues */
	int64_t values_valid;	      /* PyDictValues.valid byte */
	int64_t type_basicsize;	      /* 3.14: tp_basicsize, where they start; 0: at the offset */
	/* 3.12: the word at managed_dict is a dict pointer, or (bit 0 set) values - 1; 0: not */
	int64_t managed_dict_tagged;
};

/* Reads len bytes at addr into buf; returns 0 or a negative errno. */
typedef int (*remote_read_fn)(void *ctx, uint64_t addr, void *buf, size_t len);

struct remote {
	remote_read_fn read;
	void *ctx;
	pid_t pid;
	uint64_t none; /* &_Py_NoneStruct */
	struct remote_layout l;
};

#define REMOTE_MAX_STR 1024    /* bytes of a str we read */
#define REMOTE_MAX_ITEMS 65536 /* dict entries we look at */

/* A remote reading process pid's memory with process_vm_readv. */
void remote__init_pid(struct remote *r, pid_t pid);
/* The keys of a python table that layout_keys.def sends to struct remote_layout (rl). */
int remote__layout_from(struct remote_layout *out, const struct layout *py, char *err,
			size_t errlen);
/* Store v into the struct remote_layout field of key: -ENOENT if key has none. */
int remote__layout_set(struct remote_layout *out, enum layout_key key, int64_t v);

int remote__read(const struct remote *r, uint64_t addr, void *buf, size_t len);
int remote__u64(const struct remote *r, uint64_t addr, uint64_t *v);

/* A str object as UTF-8 (NUL-terminated, truncated to outlen - 1); -EINVAL if not a str we read. */
int remote__str(const struct remote *r, uint64_t str, char *out, size_t outlen);

/* A NUL-terminated C string at addr (at most outlen - 1 bytes). */
int remote__cstr(const struct remote *r, uint64_t addr, char *out, size_t outlen);

/* Call cb for each (key, value) of a dict in insertion order; stops when cb returns non-zero. */
typedef int (*remote_item_fn)(const char *key, uint64_t value, void *ctx);
int remote__dict_each(const struct remote *r, uint64_t dict, remote_item_fn cb, void *ctx);

/* dict[key] for a str key; -ENOENT if absent. */
int remote__dict_get(const struct remote *r, uint64_t dict, const char *key, uint64_t *value);

/* The value of a dict's first entry in insertion order, whatever its key; -ENOENT if empty. */
int remote__dict_first(const struct remote *r, uint64_t dict, uint64_t *value);

/* obj.__dict__[key] for an instance; -ENOENT if absent. */
int remote__attr(const struct remote *r, uint64_t obj, const char *key, uint64_t *value);

/*
 * obj.__dict__[key] for an instance, and the address of the word that holds it (in the
 * dict's entries or the instance's values; it moves when the dict is resized): -ENOENT if
 * absent.
 */
int remote__attr_slot(const struct remote *r, uint64_t obj, const char *key, uint64_t *value,
		      uint64_t *slot);

/* Call cb for each of an instance's attributes (its __dict__), as remote__dict_each does. */
int remote__attrs_each(const struct remote *r, uint64_t obj, remote_item_fn cb, void *ctx);

#endif /* __REMOTE_H */
