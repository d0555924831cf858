/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * A fake target memory for the unit tests: one bounded arena at FAKEMEM_BASE that a
 * struct remote reads (outside it a read fails as an unmapped address does), an
 * allocator, writers, and builders of CPython str and dict objects laid out with the
 * arena's remote_layout (CPython 3.11 unless a test changes it). Also the torch
 * tensor offsets the tests lay their tensors out with.
 */
#ifndef __FAKEMEM_H
#define __FAKEMEM_H

#include <stddef.h>
#include <stdint.h>
#include <linux/types.h>
#include "nanwatch.h"
#include "resolve/remote.h"

#define FAKEMEM_BASE 0x100000ULL
#define FAKEMEM_SIZE (1 << 16)

struct fakemem {
	unsigned char bytes[FAKEMEM_SIZE];
	uint64_t top;		/* bytes handed out by fakemem__alloc */
	uint64_t none;		/* the None object, where a test made one */
	struct remote_layout l; /* the offsets the str and dict builders write with */
};

/* torch 1.13-like tensor offsets; only their consistency matters here */
extern const struct nw_layout fakemem_torch;

/* Empties m and sets its layout to CPython 3.11's. */
void fakemem__init(struct fakemem *m);
/* struct remote's read callback, ctx a struct fakemem: -EFAULT outside the arena. */
int fakemem__read(void *ctx, uint64_t addr, void *buf, size_t len);
/* struct remote's read callback of a target that exited: -ESRCH, as process_vm_readv says. */
int fakemem__gone(void *ctx, uint64_t addr, void *buf, size_t len);
/* r reads m with m's layout and None. */
void fakemem__remote(struct fakemem *m, struct remote *r);
/* n zeroed bytes, 16-aligned; fails the test when the arena is full. */
uint64_t fakemem__alloc(struct fakemem *m, size_t n);
void fakemem__put(struct fakemem *m, uint64_t addr, const void *v, size_t n);
void fakemem__put64(struct fakemem *m, uint64_t addr, uint64_t v);
void fakemem__put8(struct fakemem *m, uint64_t addr, uint8_t v);
/* A compact str: ASCII, or kind 2 (UCS-2) when wide is set. */
uint64_t fakemem__str(struct fakemem *m, const char *s, int wide);
/*
 * A dict keys object with n entries and 8 index bytes: of unicode kind with the values
 * in its entries when vals is given, of split kind (values kept elsewhere) when NULL.
 */
uint64_t fakemem__keys(struct fakemem *m, int n, const uint64_t *keys, const uint64_t *vals);
/* A combined or split dict whose keys are the ASCII strs of names (n at most 16). */
uint64_t fakemem__dict(struct fakemem *m, int n, const char **names, const uint64_t *vals);

#endif /* __FAKEMEM_H */
