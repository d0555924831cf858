// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Module naming: walk root's _modules dicts in the target's memory in the
 * order named_modules() does (pre-order, insertion order, each module once at
 * its first path, None entries skipped) and cache module -> path per root.
 * A module the walk cannot reach (the model freed before the daemon read it:
 * a target that ends right after its first steps) is named from where each of
 * its callers holds it, as the probes read it at the module's first call.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "util/htab.h"
#include "resolve/names.h"
#include "resolve/remote.h"

struct tree {
	uint64_t root;
	struct htab *paths; /* module -> char *path; NULL before the first walk */
	struct htab *held;  /* module -> struct held: where its caller holds it */
	int stale;	    /* re-read at most once per unknown module */
};

/* Where a module's caller holds it, as the probes read it at its first call. */
struct held {
	uint64_t parent;
	char *key; /* "key" in the caller's _modules, or "holder.key" */
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

static int free_path(uint64_t key, void *val, void *ctx)
{
	(void)key;
	(void)ctx;
	free(*(char **)val);
	return 0;
}

static void tree_clear(struct tree *t)
{
	htab__each(t->paths, free_path, NULL);
	htab__free(t->paths);
	t->paths = NULL;
}

static int free_held(uint64_t key, void *val, void *ctx)
{
	(void)key;
	(void)ctx;
	free(((struct held *)val)->key);
	return 0;
}

void names__free(struct names *n)
{
	size_t i;

	if (!n)
		return;
	for (i = 0; i < n->ntrees; i++) {
		tree_clear(&n->trees[i]);
		htab__each(n->trees[i].held, free_held, NULL);
		htab__free(n->trees[i].held);
	}
	free(n->trees);
	free(n);
}

static const char *tree_get(const struct tree *t, uint64_t key)
{
	char **p = htab__find(t->paths, key);

	return p ? *p : NULL;
}

/* Returns 1 if added, 0 if the module was already named (shared module), <0 on error. */
static int tree_add(struct tree *t, uint64_t key, const char *path)
{
	char **p;
	int added;

	if (htab__count(t->paths) >= NAMES_MAX_MODULES)
		return -E2BIG;
	if (!t->paths && !(t->paths = htab__new(sizeof(char *), NAMES_MAX_MODULES)))
		return -ENOMEM;
	p = htab__get(t->paths, key, &added);
	if (!p)
		return -errno;
	if (!added)
		return 0;
	*p = strdup(path);
	return *p ? 1 : -ENOMEM;
}

struct walk {
	const struct remote *r;
	struct tree *t;
	char path[NAMES_MAX_PATH];
	int depth;
};

static int visit(struct walk *w, uint64_t module);

/* path (len bytes of size) + "." + key, "." left out after "": its new length, or -1 if too long. */
static long path_append(char *path, size_t size, size_t len, const char *key)
{
	size_t klen = strlen(key);

	if (len + klen + 2 > size)
		return -1;
	if (len)
		path[len++] = '.';
	memcpy(path + len, key, klen + 1);
	return len + klen;
}

static int child_cb(const char *key, uint64_t value, void *ctx)
{
	struct walk *w = ctx;
	size_t len = strlen(w->path);
	int err;

	if (value == w->r->none)
		return 0;
	if (path_append(w->path, sizeof(w->path), len, key) < 0)
		return 0; /* path too long to name: leave this branch unnamed */
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
		return 0; /* not a module we can read: named, but no children */
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

static int keep_old(uint64_t key, void *val, void *ctx)
{
	struct tree *fresh = ctx;

	if (!htab__find(fresh->paths, key))
		tree_add(fresh, key, *(char **)val);
	return 0;
}

/*
 * Walk t's root again into a new table, where each module has the path it has now; a module
 * it did not reach keeps the last walk's (the target exiting, or a part of its memory
 * unreadable, during the walk: a late anomaly of an exited target still gets the names its
 * first calls were given, and so does a module of a branch a walk could not read).
 */
static int tree_walk(const struct remote *r, struct tree *t)
{
	struct tree fresh = {.root = t->root};
	struct walk w = {.r = r, .t = &fresh};
	int err = visit(&w, t->root);

	t->stale = 0;
	if (t->paths && fresh.paths)
		htab__each(t->paths, keep_old, &fresh);
	if (!fresh.paths)
		return err;
	tree_clear(t);
	t->paths = fresh.paths;
	return err;
}

int names__held(struct names *n, uint64_t root, uint64_t module, uint64_t parent, const char *key)
{
	struct tree *t = tree_for(n, root);
	struct held *h;
	char *copy;

	if (!t)
		return -ENOMEM;
	if (!parent || !key[0] || strlen(key) >= NAMES_MAX_PATH)
		return -EINVAL;
	if (!t->held && !(t->held = htab__new(sizeof(*h), NAMES_MAX_MODULES)))
		return -ENOMEM;
	copy = strdup(key);
	h = copy ? htab__get(t->held, module, NULL) : NULL;
	if (!h) {
		free(copy);
		return copy ? -errno : -ENOMEM;
	}
	free(h->key);
	h->parent = parent;
	h->key = copy;
	return 0;
}

/*
 * module's path from where each caller up to the root holds it (names__held), added to
 * the tree: NULL if a link is missing (a record lost, a module held in no _modules dict).
 */
static const char *held_path(struct tree *t, uint64_t module)
{
	const struct held *chain[NAMES_MAX_DEPTH];
	const char *base = NULL;
	char path[NAMES_MAX_PATH];
	uint64_t m = module;
	int n = 0;
	long len;

	while (!(base = tree_get(t, m))) {
		const struct held *h = t->held ? htab__find(t->held, m) : NULL;

		if (!h || n == NAMES_MAX_DEPTH)
			return NULL;
		chain[n++] = h;
		m = h->parent;
	}
	len = strlen(base);
	if (len >= (long)sizeof(path))
		return NULL;
	memcpy(path, base, len + 1);
	while (n--) {
		len = path_append(path, sizeof(path), len, chain[n]->key);
		if (len < 0)
			return NULL;
	}
	if (tree_add(t, module, path) < 0)
		return NULL;
	return tree_get(t, module);
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
	p = tree_get(t, module);
	return p ? p : held_path(t, module);
}

unsigned long names__count(struct names *n, uint64_t root)
{
	size_t i;

	for (i = 0; i < n->ntrees; i++)
		if (n->trees[i].root == root)
			return htab__count(n->trees[i].paths);
	return 0;
}
