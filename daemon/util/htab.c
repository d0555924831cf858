// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The one open-addressing table: power-of-two slots, at most half of them in
 * use, Fibonacci hashing (the high bits of key * 2^64/phi, which spreads
 * aligned addresses), linear probing. There is no removal: callers rebuild.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/htab.h"

#define HTAB_MIN_BITS 4 /* 16 slots to begin with */

struct htab {
	uint64_t *keys;
	unsigned char *used; /* a slot holds an entry: keys may be 0 */
	unsigned char *vals; /* val_size bytes per slot */
	size_t val_size, max, count;
	unsigned int bits; /* 1 << bits slots */
};

static size_t htab__slot(const struct htab *h, uint64_t key)
{
	size_t mask = ((size_t)1 << h->bits) - 1, i;

	i = (size_t)((key * 0x9e3779b97f4a7c15ULL) >> (64 - h->bits));
	while (h->used[i] && h->keys[i] != key)
		i = (i + 1) & mask;
	return i;
}

static int htab__alloc(struct htab *h, unsigned int bits)
{
	size_t n = (size_t)1 << bits;

	h->bits = bits;
	h->keys = calloc(n, sizeof(*h->keys));
	h->used = calloc(n, 1);
	h->vals = calloc(n, h->val_size ? h->val_size : 1);
	if (h->keys && h->used && h->vals)
		return 0;
	free(h->keys);
	free(h->used);
	free(h->vals);
	return -ENOMEM;
}

struct htab *htab__new(size_t val_size, size_t max)
{
	struct htab *h = calloc(1, sizeof(*h));

	if (!h)
		return NULL;
	h->val_size = val_size;
	h->max = max;
	if (htab__alloc(h, HTAB_MIN_BITS)) {
		free(h);
		errno = ENOMEM;
		return NULL;
	}
	return h;
}

void htab__free(struct htab *h)
{
	if (!h)
		return;
	free(h->keys);
	free(h->used);
	free(h->vals);
	free(h);
}

static int htab__grow(struct htab *h)
{
	struct htab old = *h;
	size_t i, j, n = (size_t)1 << old.bits;

	if (old.bits >= sizeof(size_t) * 8 - 2 || htab__alloc(h, old.bits + 1)) {
		*h = old;
		return -ENOMEM;
	}
	for (i = 0; i < n; i++) {
		if (!old.used[i])
			continue;
		j = htab__slot(h, old.keys[i]);
		h->used[j] = 1;
		h->keys[j] = old.keys[i];
		memcpy(h->vals + j * h->val_size, old.vals + i * h->val_size, h->val_size);
	}
	free(old.keys);
	free(old.used);
	free(old.vals);
	return 0;
}

void *htab__find(const struct htab *h, uint64_t key)
{
	size_t i;

	if (!h)
		return NULL;
	i = htab__slot(h, key);
	return h->used[i] ? h->vals + i * h->val_size : NULL;
}

void *htab__get(struct htab *h, uint64_t key, int *added)
{
	size_t i = htab__slot(h, key);

	if (added)
		*added = 0;
	if (h->used[i])
		return h->vals + i * h->val_size;
	if (h->count >= h->max) {
		errno = E2BIG;
		return NULL;
	}
	if ((h->count + 1) * 2 > (size_t)1 << h->bits) {
		if (htab__grow(h)) {
			errno = ENOMEM;
			return NULL;
		}
		i = htab__slot(h, key);
	}
	h->used[i] = 1;
	h->keys[i] = key;
	h->count++;
	if (added)
		*added = 1;
	return h->vals + i * h->val_size;
}

size_t htab__count(const struct htab *h)
{
	return h ? h->count : 0;
}

int htab__each(const struct htab *h, int (*cb)(uint64_t key, void *val, void *ctx), void *ctx)
{
	size_t i, n;
	int ret;

	if (!h)
		return 0;
	n = (size_t)1 << h->bits;
	for (i = 0; i < n; i++) {
		if (!h->used[i])
			continue;
		ret = cb(h->keys[i], h->vals + i * h->val_size, ctx);
		if (ret)
			return ret;
	}
	return 0;
}
