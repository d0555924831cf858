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

#define CLASS_CACHE 64

struct class_entry {
	uint64_t vptr;
	char name[64]; /* "" : looked up, not found */
};

struct vtable_names {
	struct elfsym *elf; /* libtorch_cpu, open from the attach: the target may be gone later */
	uint64_t bias;	    /* runtime address - link-time address */
	int64_t vtable_offset;
	struct class_entry cls[CLASS_CACHE];
	int ncls;
};

struct vtable_names *vtable__open(const char *torch_cpu_file, uint64_t base, int64_t vtable_offset)
{
	struct vtable_names *v;
	struct elfsym *e;
	uint64_t first;

	e = elfsym__open(torch_cpu_file);
	if (!e)
		return NULL;
	if (elfsym__first_load(e, &first)) {
		elfsym__close(e);
		errno = ENOEXEC;
		return NULL;
	}
	v = calloc(1, sizeof(*v));
	if (!v) {
		elfsym__close(e);
		errno = ENOMEM;
		return NULL;
	}
	v->elf = e;
	v->bias = base - first;
	v->vtable_offset = vtable_offset;
	return v;
}

void vtable__free(struct vtable_names *v)
{
	if (!v)
		return;
	elfsym__close(v->elf);
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

struct find_ctx {
	uint64_t want;
	char *out;
	size_t len;
};

static int find_cb(const char *name, uint64_t addr, void *ctx)
{
	struct find_ctx *f = ctx;

	if (addr != f->want)
		return 0;
	return vtable__class_name(name, f->out, f->len) ? 0 : 1;
}

const char *vtable__class(struct vtable_names *v, uint64_t vptr)
{
	struct find_ctx f;
	struct class_entry *c;
	int i;

	if (!v || !vptr)
		return NULL;
	for (i = 0; i < v->ncls; i++)
		if (v->cls[i].vptr == vptr)
			return v->cls[i].name[0] ? v->cls[i].name : NULL;
	c = &v->cls[v->ncls < CLASS_CACHE ? v->ncls++ : CLASS_CACHE - 1];
	c->vptr = vptr;
	c->name[0] = 0;
	f.want = vptr - v->vtable_offset - v->bias;
	f.out = c->name;
	f.len = sizeof(c->name);
	if (elfsym__each(v->elf, "_ZTV", find_cb, &f) != 1)
		c->name[0] = 0;
	return c->name[0] ? c->name : NULL;
}
