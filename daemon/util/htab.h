/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * An open-addressing hash table on u64 keys (object addresses in the target):
 * linear probing, fixed-size values stored in the table, a bounded number of
 * entries. Any key is valid, 0 included.
 */
#ifndef __HTAB_H
#define __HTAB_H

#include <stddef.h>
#include <stdint.h>

struct htab;

/* A table of values of val_size bytes holding at most max entries; NULL with errno set. */
struct htab *htab__new(size_t val_size, size_t max);
void htab__free(struct htab *h);

/* The value stored for key, or NULL. */
void *htab__find(const struct htab *h, uint64_t key);

/*
 * The value stored for key, added zeroed if absent (*added, when not NULL, says
 * which). NULL with errno E2BIG when the table holds max entries, or ENOMEM.
 * Adding may move values: pointers from earlier calls are then stale.
 */
void *htab__get(struct htab *h, uint64_t key, int *added);

/* Entries in the table; 0 for NULL. */
size_t htab__count(const struct htab *h);

/* Each entry in table order until cb returns non-zero, which is then returned. */
int htab__each(const struct htab *h, int (*cb)(uint64_t key, void *val, void *ctx), void *ctx);

#endif /* __HTAB_H */
