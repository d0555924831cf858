// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Module naming: walk root's _modules dicts in the target's memory in the
 * order named_modules() does (pre-order, insertion order, each module once at
 * its first path, None entries skipped) and cache module -> path per root.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "names.h"
#include "remote.h"

struct tree {
	uint64_t root;
	uint64_t *keys;		/* open addressing, 0 = empty */
	char **paths;
	size_t cap;
	size_t count;
	int stale;		/* re-read at most once per unknown module */
};

struct names {
	const struct remote *r;
	struct tree *trees;
	size_t ntrees;
};

struct names *names__new(const struct remote *r)
{
	struct names *n = calloc(1, sizeof(*n));

	if (n)
		n->r = r;
	return n;
}

static void tree_clear(struct tree *t)
{
	size_t i;

	for (i = 0; i < t->cap; i++)
		free(t->paths[i]);
	free(t->keys);
	free(t->paths);
	t->keys = NULL;
	t->paths = NULL;
	t->cap = t->count = 0;
}

void names__free(struct names *n)
{
	size_t i;

	if (!n)
		return;
	for (i = 0; i < n->ntrees; i++)
		tree_clear(&n->trees[i]);
	free(n->trees);
	free(n);
}

static size_t slot(const struct tree *t, uint64_t key)
{
	size_t i = (key >> 4) * 0x9e3779b97f4a7c15ULL % t->cap;

	while (t->keys[i] && t->keys[i] != key)
		i = (i + 1) % t->cap;
	return i;
}

static int tree_grow(struct tree *t)
{
	struct tree bigger = {.root = t->root};
	size_t i;

	bigger.cap = t->cap ? t->cap * 2 : 64;
	bigger.keys = calloc(bigger.cap, sizeof(*bigger.keys));
	bigger.paths = calloc(bigger.cap, sizeof(*bigger.paths));
	if (!bigger.keys || !bigger.paths) {
		free(bigger.keys);
		free(bigger.paths);
		return -ENOMEM;
	}
	for (i = 0; i < t->cap; i++) {
		size_t j;

		if (!t->keys[i])
			continue;
		j = slot(&bigger, t->keys[i]);
		bigger.keys[j] = t->keys[i];
		bigger.paths[j] = t->paths[i];
	}
	free(t->keys);
	free(t->paths);
	bigger.count = t->count;
	*t = bigger;
	return 0;
}

static const char *tree_get(const struct tree *t, uint64_t key)
{
	size_t i;

	if (!t->cap)
		return NULL;
	i = slot(t, key);
	return t->keys[i] ? t->paths[i] : NULL;
}

/* Returns 1 if added, 0 if the module was already named (shared module), <0 on error. */
static int tree_add(struct tree *t, uint64_t key, const char *path)
{
	size_t i;

	if (t->count >= NAMES_MAX_MODULES)
		return -E2BIG;
	if ((t->count + 1) * 2 > t->cap && tree_grow(t))
		return -ENOMEM;
	i = slot(t, key);
	if (t->keys[i])
		return 0;
	t->paths[i] = strdup(path);
	if (!t->paths[i])
		return -ENOMEM;
	t->keys[i] = key;
	t->count++;
	return 1;
}

struct walk {
	const struct remote *r;
	struct tree *t;
	char path[NAMES_MAX_PATH];
	int depth;
};

static int visit(struct walk *w, uint64_t module);

static int child_cb(const char *key, uint64_t value, void *ctx)
{
	struct walk *w = ctx;
	size_t len = strlen(w->path), klen = strlen(key);
	int err;

	if (value == w->r->none)
		return 0;
	if (len + klen + 2 > sizeof(w->path))
		return 0;	/* path too long to name: leave this branch unnamed */
	if (len)
		w->path[len] = '.';
	memcpy(w->path + len + !!len, key, klen + 1);
	err = visit(w, value);
	w->path[len] = 0;
	return err < 0 ? err : 0;
}

static int visit(struct walk *w, uint64_t module)
{
	uint64_t children;
	int err;

	err = tree_add(w->t, module, w->path);
	if (err <= 0)
		return err;
	if (w->depth >= NAMES_MAX_DEPTH)
		return 0;
	if (remote__attr(w->r, module, "_modules", &children))
		return 0;	/* not a module we can read: named, but no children */
	w->depth++;
	err = remote__dict_each(w->r, children, child_cb, w);
	w->depth--;
	return err == -EFAULT ? 0 : err;
}

static struct tree *tree_for(struct names *n, uint64_t root)
{
	struct tree *t;
	size_t i;

	for (i = 0; i < n->ntrees; i++)
		if (n->trees[i].root == root)
			return &n->trees[i];
	t = realloc(n->trees, (n->ntrees + 1) * sizeof(*t));
	if (!t)
		return NULL;
	n->trees = t;
	t = &n->trees[n->ntrees++];
	memset(t, 0, sizeof(*t));
	t->root = root;
	t->stale = 1;
	return t;
}

static int tree_walk(const struct remote *r, struct tree *t)
{
	struct walk w = {.r = r, .t = t};

	tree_clear(t);
	t->stale = 0;
	return visit(&w, t->root);
}

const char *names__path(struct names *n, uint64_t root, uint64_t module)
{
	struct tree *t = tree_for(n, root);
	const char *p;

	if (!t)
		return NULL;
	if (t->stale)
		tree_walk(n->r, t);
	p = tree_get(t, module);
	if (p)
		return p;
	/* a module added since the last walk: read the tree again */
	tree_walk(n->r, t);
	return tree_get(t, module);
}

unsigned long names__count(struct names *n, uint64_t root)
{
	size_t i;

	for (i = 0; i < n->ntrees; i++)
		if (n->trees[i].root == root)
			return n->trees[i].count;
	return 0;
}
