/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Symbol look-up in the target's ELF files, and link-time address to file offset. */
#ifndef __ELFSYM_H
#define __ELFSYM_H

#include <stdint.h>
#include <stddef.h>

struct elfsym;

/* Open an ELF file (read-only, bounded); NULL + errno on failure. */
struct elfsym *elfsym__open(const char *path);
void elfsym__close(struct elfsym *e);

/* Link-time address of a defined symbol from .dynsym or .symtab; -ENOENT if absent. */
int elfsym__find(struct elfsym *e, const char *name, uint64_t *addr);

/* Full name of the first defined symbol starting with prefix; -ENOENT if none fits in len. */
int elfsym__find_prefix(struct elfsym *e, const char *prefix, char *name, size_t len);

/*
 * Link-time address that the file's offset 0 is mapped at (first PT_LOAD):
 * runtime address = link-time address + (start of the offset-0 mapping - this).
 */
int elfsym__first_load(struct elfsym *e, uint64_t *vaddr);

/*
 * Call fn for every defined symbol starting with prefix (.dynsym, then .symtab: a name
 * may come twice); a non-zero return stops the walk and is returned.
 */
typedef int (*elfsym_fn)(const char *name, uint64_t addr, void *ctx);
int elfsym__each(struct elfsym *e, const char *prefix, elfsym_fn fn, void *ctx);

#endif /* __ELFSYM_H */
