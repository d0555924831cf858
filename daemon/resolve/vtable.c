// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Autograd node classes from their vtable pointers: the _ZTV symbol of libtorch_cpu that a
 * pointer points into (vtable_offset bytes past the symbol, after the offset-to-top and
 * typeinfo words), demangled to the class's own name.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "resolve/elfsym.h"
#include "resolve/vtable.h"

#define VTABLE_MAX_CLASSES (1u << 20) /* libtorch_cpu of torch 2.6 has about 12000 */

struct class_entry {
	uint64_t addr; /* link-time address of the _ZTV symbol */
	uint32_t name; /* offset in names */
};

/*
 * Every vtable symbol of the file, read once and sorted by address (looked up by binary
 * search, as libbpf-tools' syms__map_addr): the file itself is not kept open, nor its tables.
 */
struct vtable_names {
	struct class_entry *cls;
	size_t n, cap;
	char *names;
	size_t names_len, names_cap;
	uint64_t bias; /* runtime address - link-time address */
	int64_t vtable_offset;
};

static int grow(void **p, size_t *cap, size_t want, size_t size)
{
	size_t n = *cap ? *cap : 256;
	void *q;

	while (n < want)
		n *= 2;
	if (n == *cap)
		return 0;
	q = realloc(*p, n * size);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = n;
	return 0;
}

static int add_cb(const char *sym, uint64_t addr, void *ctx)
{
	struct vtable_names *v = ctx;
	char name[64];
	size_t len;

	if (vtable__class_name(sym, name, sizeof(name)))
		return 0;
	if (v->n >= VTABLE_MAX_CLASSES)
		return -EFBIG;
	len = strlen(name) + 1;
	if (grow((void **)&v->cls, &v->cap, v->n + 1, sizeof(*v->cls)) ||
	    grow((void **)&v->names, &v->names_cap, v->names_len + len, 1))
		return -ENOMEM;
	memcpy(v->names + v->names_len, name, len);
	v->cls[v->n++] = (struct class_entry){.addr = addr, .name = v->names_len};
	v->names_len += len;
	return 0;
}

/* By address; of two at one address, the first read (.dynsym before .symtab) first. */
static int cmp_class(const void *a, const void *b)
{
	const struct class_entry *x = a, *y = b;

	if (x->addr != y->addr)
		return x->addr < y->addr ? -1 : 1;
	return x->name < y->name ? -1 : x->name > y->name;
}

struct vtable_names *vtable__open(struct elfsym *torch_cpu, uint64_t base, int64_t vtable_offset)
{
	struct vtable_names *v;
	uint64_t first;
	int ret;

	if (!torch_cpu || elfsym__first_load(torch_cpu, &first)) {
		errno = ENOEXEC;
		return NULL;
	}
	v = calloc(1, sizeof(*v));
	if (!v)
		return NULL;
	v->bias = base - first;
	v->vtable_offset = vtable_offset;
	ret = elfsym__each(torch_cpu, "_ZTV", add_cb, v);
	if (ret < 0) {
		vtable__free(v);
		errno = -ret;
		return NULL;
	}
	if (v->n)
		qsort(v->cls, v->n, sizeof(*v->cls), cmp_class);
	return v;
}

void vtable__free(struct vtable_names *v)
{
	if (!v)
		return;
	free(v->cls);
	free(v->names);
	free(v);
}

/* <len><id>: the identifier at *p, advancing past it; NULL if malformed. */
static const char *source_name(const char **p, size_t *n)
{
	char *end;
	unsigned long len = strtoul(*p, &end, 10);
	const char *id = end;

	if (end == *p || !len || strlen(id) < len)
		return NULL;
	*n = len;
	*p = id + len;
	return id;
}

int vtable__class_name(const char *sym, char *out, size_t len)
{
	const char *p = sym + 4, *id = NULL, *last = NULL;
	size_t n = 0, lastn = 0;

	if (strncmp(sym, "_ZTV", 4))
		return -EINVAL;
	if (*p == 'N') {
		p++;
		while (*p && *p != 'E') {
			id = source_name(&p, &n);
			if (!id)
				return -EINVAL;
			last = id;
			lastn = n;
		}
		if (*p != 'E')
			return -EINVAL;
	} else {
		last = source_name(&p, &lastn);
	}
	if (!last || lastn >= len)
		return -EINVAL;
	memcpy(out, last, lastn);
	out[lastn] = 0;
	return 0;
}

const char *vtable__class(struct vtable_names *v, uint64_t vptr)
{
	size_t lo = 0, hi;
	uint64_t want;

	if (!v || !vptr || !v->n)
		return NULL;
	want = vptr - v->vtable_offset - v->bias;
	hi = v->n;
	while (lo < hi) { /* the first entry at or past want */
		size_t mid = lo + (hi - lo) / 2;

		if (v->cls[mid].addr < want)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < v->n && v->cls[lo].addr == want ? v->names + v->cls[lo].name : NULL;
}
