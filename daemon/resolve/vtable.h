/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Autograd node class names from vtable pointers into the target's libtorch_cpu. */
#ifndef __RESOLVE_VTABLE_H
#define __RESOLVE_VTABLE_H

#include <stddef.h>
#include <stdint.h>

struct elfsym;
struct vtable_names;

/*
 * The vtable symbols of libtorch_cpu (torch_cpu, which need not stay open), mapped at base; a
 * vtable pointer is vtable_offset bytes past its _ZTV symbol. NULL + errno on failure.
 */
struct vtable_names *vtable__open(struct elfsym *torch_cpu, uint64_t base, int64_t vtable_offset);
void vtable__free(struct vtable_names *v); /* accepts NULL */

/* "LogBackward0" for a node's vtable pointer; NULL if it names no class we know. */
const char *vtable__class(struct vtable_names *v, uint64_t vptr);

/* Class name from a vtable symbol: "_ZTVN5torch8autograd9generated12LogBackward0E" ->
 * "LogBackward0"; 0, or -EINVAL for a name this does not parse. */
int vtable__class_name(const char *sym, char *out, size_t len);

#endif /* __RESOLVE_VTABLE_H */
