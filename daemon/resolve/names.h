/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Module paths as root.named_modules() names them, read from the target's _modules dicts. */
#ifndef __NAMES_H
#define __NAMES_H

#include <stdint.h>

struct remote;
struct names;

#define NAMES_MAX_MODULES 100000
#define NAMES_MAX_DEPTH 64
#define NAMES_MAX_PATH 1024

struct names *names__new(const struct remote *r);
void names__free(struct names *n);

/*
 * Path of module under root ("" for root itself), or NULL if root's module
 * tree does not hold it. Trees are cached per root and re-read once when a
 * module is not found (the model may have changed).
 */
const char *names__path(struct names *n, uint64_t root, uint64_t module);

/*
 * Where module's caller (parent, under root) holds it: key in parent's _modules, or
 * "holder.key" through a container parent holds, as the probes read it at the module's
 * first call. names__path falls back on these for a module the walk of root's tree does
 * not reach, the model freed meanwhile: parent's path + "." + key. -EINVAL for no parent
 * or an empty key.
 */
int names__held(struct names *n, uint64_t root, uint64_t module, uint64_t parent, const char *key);

/* Number of modules known under root (after a walk), for stats. */
unsigned long names__count(struct names *n, uint64_t root);

#endif /* __NAMES_H */
