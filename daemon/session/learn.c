// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Layout tables a target needs and the daemon has none for: learned by running nanwatch-layout
 * with the target's own interpreter as its user (resolve/learn.c), checked against the running
 * target, and kept per user and build-id. A learned table is the target's user's word: it is
 * used for that user's processes of the same build only.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "resolve/learn.h"
#include "resolve/layout.h"
#include "resolve/pyoffsets.h"
#include "session/session_priv.h"
#include "util/clock.h"

#ifndef NW_LAYOUT_CACHE
#define NW_LAYOUT_CACHE "/var/cache/nanwatch/layouts"
#endif
#define BUILD_ID_HEX (2 * 64 + 1)
#define CACHE_PATH_MAX 1024
#define PY_TPFLAGS_LIST_SUBCLASS (1UL << 25)
#define PY_TPFLAGS_TUPLE_SUBCLASS (1UL << 26)

const char *learn_cache_dir(const struct session_opts *o)
{
	return o->layout_cache ? o->layout_cache : NW_LAYOUT_CACHE;
}

/* dir, made 0700 where missing (its parents too): it must be root's and written by no other. */
static int cache_dir(const char *path, char *why, size_t whylen)
{
	char buf[PATH_MAX], *p;
	struct stat st;
	int fd;

	if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf) || buf[0] != '/') {
		snprintf(why, whylen, "%.300s: not an absolute path", path);
		return -EINVAL;
	}
	for (p = strchr(buf + 1, '/');; p = strchr(p + 1, '/')) {
		if (p)
			*p = 0;
		if (mkdir(buf, 0700) && errno != EEXIST) {
			snprintf(why, whylen, "cannot make %.300s: %s", buf, strerror(errno));
			return -errno;
		}
		if (!p)
			break;
		*p = '/';
	}
	fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st)) {
		snprintf(why, whylen, "cannot open %.300s: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -errno;
	}
	close(fd);
	if (st.st_uid != geteuid() || (st.st_mode & 022)) {
		snprintf(why, whylen, "%.300s is not %s's alone (owner %u, mode %03o)", path,
			 geteuid() ? "this user" : "root", (unsigned)st.st_uid,
			 (unsigned)(st.st_mode & 0777));
		return -EPERM;
	}
	return 0;
}

/* A root-owned file nobody else may write, opened for reading; -errno and why otherwise. */
static int open_ours(const char *path, char *why, size_t whylen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;

	if (fd < 0) {
		snprintf(why, whylen, "cannot open %.300s: %s", path, strerror(errno));
		return -errno;
	}
	if (fstat(fd, &st) || !S_ISREG(st.st_mode) || (st.st_uid && st.st_uid != geteuid()) ||
	    (st.st_mode & 022)) {
		snprintf(why, whylen, "%.300s is not a file only root may change", path);
		close(fd);
		return -EPERM;
	}
	return fd;
}

/* The tool's schema, beside it as make install and the source tree put it. */
static int open_keys(const char *tool, char *why, size_t whylen)
{
	static const char *const rel[] = {"../share/nanwatch/layouts/layout_keys.def",
					  "../daemon/resolve/layout_keys.def"};
	char dir[PATH_MAX], path[PATH_MAX + 64], *slash;
	size_t i;

	snprintf(dir, sizeof(dir), "%s", tool);
	slash = strrchr(dir, '/');
	if (slash)
		*slash = 0;
	for (i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", slash ? dir : ".", rel[i]);
		if (!access(path, R_OK))
			return open_ours(path, why, whylen);
	}
	snprintf(why, whylen, "no layout_keys.def beside %.300s", tool);
	return -ENOENT;
}

/* The two tables of the tool's output ("---" between them), parsed and matched to the target. */
static int take_output(struct session *s, char *text, struct learned *ld, char *why, size_t whylen)
{
	char *second = strstr(text, "\n---\n"), *parts[2];
	char torch_base[64], *plus;
	int i;

	if (!second) {
		snprintf(why, whylen, "nanwatch-layout printed one table, not two");
		return -EPROTO;
	}
	second[1] = 0;
	parts[0] = text;
	parts[1] = second + 5;
	snprintf(torch_base, sizeof(torch_base), "%s", s->t.torch_version);
	plus = strchr(torch_base, '+');
	if (plus)
		*plus = 0;
	for (i = 0; i < 2; i++) {
		struct layout *l =
			layout__parse("the learned table", parts[i], strlen(parts[i]), why, whylen);
		int py;
		const char *gen, *want;

		if (!l)
			return -EINVAL;
		py = !strcmp(layout__kind(l), "python");
		gen = layout__str(l, LK_generated_for);
		want = py ? s->t.python_version : torch_base;
		if (strcmp(layout__version(l), py ? s->t.python_series : s->t.torch_series) ||
		    !gen || strcmp(gen, want) || (py ? ld->text[0] : ld->text[1])) {
			snprintf(
				why, whylen,
				"nanwatch-layout measured %s %s, but pid %d runs %s (another build "
				"in its root?)",
				layout__kind(l), gen ? gen : layout__version(l), s->t.pid, want);
			layout__free(l);
			return -ESTALE;
		}
		ld->fresh[!py] = l;
		ld->text[!py] = strdup(parts[i]);
		if (!ld->text[!py])
			return -ENOMEM;
	}
	return 0;
}

/* Run the tool for s; the tables it printed into ld->fresh. */
static int run_tool(struct session *s, const char *tool, char *why, size_t whylen)
{
	struct learned *ld = &s->learned;
	char exe[PATH_MAX], import[PATH_MAX], *slash, *out = NULL;
	struct learn_req r = {.pid = s->t.pid, .id = ld->id, .tool_fd = -1, .keys_fd = -1};
	const char *base;
	size_t outlen;
	int ret;

	r.interp_fd = target__open_exe(s->t.pid, exe, sizeof(exe));
	if (r.interp_fd < 0) {
		snprintf(why, whylen, "cannot open its executable: %s", strerror(-r.interp_fd));
		return r.interp_fd;
	}
	base = strrchr(exe, '/');
	base = base ? base + 1 : exe;
	snprintf(import, sizeof(import), "%s", s->t.torch_dir);
	slash = strrchr(import, '/');
	if (strncmp(base, "python", 6) || !slash || slash == import) {
		snprintf(why, whylen, "its executable %.300s is not a Python interpreter", exe);
		ret = -ENOEXEC;
		goto cleanup;
	}
	*slash = 0;
	r.interp_path = exe;
	r.import_dir = import;
	r.timeout_ms = s->o.learn_timeout_ms;
	r.tool_fd = open_ours(tool, why, whylen);
	ret = r.tool_fd < 0 ? r.tool_fd : 0;
	if (!ret) {
		r.keys_fd = open_keys(tool, why, whylen);
		ret = r.keys_fd < 0 ? r.keys_fd : 0;
	}
	if (!ret)
		ret = learn__run(&r, &out, &outlen, why, whylen);
	if (!ret)
		ret = take_output(s, out, ld, why, whylen);
cleanup:
	free(out);
	close(r.interp_fd);
	if (r.tool_fd >= 0)
		close(r.tool_fd);
	if (r.keys_fd >= 0)
		close(r.keys_fd);
	return ret;
}

int learn_tables(struct session *s, const char *tool, struct layout **py, struct layout **tl,
		 char *err, size_t errlen)
{
	struct learned *ld = &s->learned;
	const char *cache = learn_cache_dir(&s->o);
	struct elfsym *elf[2] = {s->t.python_elf, s->t.torch_python_elf};
	const char *kind[2] = {"python", "torch"};
	const char *series[2] = {s->t.python_series, s->t.torch_series};
	struct layout **have[2] = {py, tl};
	char why[512], dir[CACHE_PATH_MAX + 16], id[BUILD_ID_HEX];
	int ret, i, cached = 1;
	uid_t owner;
	double t0;

	ret = learn__identity(s->t.pid, &ld->id, &owner);
	if (ret) {
		snprintf(err, errlen, "cannot learn tables for pid %d: its identity: %s", s->t.pid,
			 strerror(-ret));
		return ret;
	}
	ld->owner = owner;
	if (strlen(cache) > CACHE_PATH_MAX) {
		snprintf(err, errlen, "layout cache path longer than %d bytes", CACHE_PATH_MAX);
		return -ENAMETOOLONG;
	}
	snprintf(dir, sizeof(dir), "%s/%u", cache, (unsigned)owner);
	/* root processes share the uid 0 cache only in our root: root in a container (no user
	 * namespace) is uid 0 too, but must not reach the host's watches */
	ld->keep = owner || target__same_root(s->t.pid);
	if (!ld->keep) {
		cached = 0;
		fprintf(stderr,
			"nanwatchd: pid %d: a root process in a root of its own (a container): "
			"what "
			"is learned for it is not kept\n",
			s->t.pid);
	}
	ret = ld->keep ? cache_dir(dir, why, sizeof(why)) : 0;
	if (ret) {
		snprintf(err, errlen, "cannot learn tables for pid %d: layout cache: %.400s",
			 s->t.pid, why);
		return ret;
	}
	for (i = 0; i < 2; i++) {
		if (*have[i])
			continue;
		ld->wanted[i] = 1;
		if (!ld->keep)
			continue;
		if (elfsym__build_id(elf[i], id, sizeof(id))) {
			cached = 0; /* no build-id: learned at each attach */
			continue;
		}
		snprintf(ld->path[i], sizeof(ld->path[i]), "%s/%s-%s-%s.yaml", dir, kind[i],
			 series[i], id);
		*have[i] = layout__load(ld->path[i], why, sizeof(why));
		if (!*have[i] && errno != ENOENT) {
			fprintf(stderr, "nanwatchd: pid %d: %s: learning it again\n", s->t.pid,
				why);
			unlink(ld->path[i]);
		}
		if (!*have[i])
			cached = 0;
	}
	if (cached) {
		fprintf(stderr, "nanwatchd: pid %d: layout tables learned before for uid %u: %s\n",
			s->t.pid, (unsigned)owner, dir);
		return 0;
	}
	fprintf(stderr,
		"nanwatchd: pid %d: no %s table for %s %s: learning it as uid %u inside the "
		"process's root (nanwatch-layout, at most %u s)\n",
		s->t.pid, !*py ? "python" : "torch", !*py ? "Python" : "torch",
		!*py ? s->t.python_version : s->t.torch_version, (unsigned)ld->id.uid,
		s->o.learn_timeout_ms / 1000);
	t0 = clock__now();
	ret = run_tool(s, tool, why, sizeof(why));
	/* the resolve's time budget is for reading the target's files: not this wait */
	if (s->t.budget.deadline_ns)
		s->t.budget.deadline_ns += (uint64_t)((clock__now() - t0) * 1e9);
	if (ret) {
		snprintf(err, errlen, "cannot learn layout tables for pid %d: %.450s", s->t.pid,
			 why);
		return ret;
	}
	for (i = 0; i < 2; i++) {
		if (*have[i] || !ld->fresh[i])
			continue;
		*have[i] = ld->fresh[i];
		ld->fresh[i] = NULL;
		ld->learned[i] = 1;
	}
	fprintf(stderr, "nanwatchd: pid %d: learned in %.1f s\n", s->t.pid, clock__now() - t0);
	return 0;
}

/* Every offset the target publishes (_Py_DebugOffsets) is the learned table's measurement. */
static int agrees_published(struct session *s, const struct layout *py, char *why, size_t whylen)
{
	uint64_t words[PYOFFSETS_WORDS];
	int k;

	if (!s->t.runtime || remote__read(&s->remote, s->t.runtime, words, sizeof(words)))
		return 0; /* before 3.13: nothing published */
	for (k = 0; k < LK__COUNT; k++) {
		long long word, v;

		if (layout__debug_word(py, k, &word) || layout__int(py, k, &v) || word < 0 ||
		    word >= PYOFFSETS_WORDS)
			continue;
		if ((uint64_t)v != words[word]) {
			snprintf(why, whylen, "%s is %lld, the process publishes %llu",
				 layout_keys[k].name, v, (unsigned long long)words[word]);
			return -EINVAL;
		}
	}
	return 0;
}

/* The type of obj (or obj itself, a type) is named name, with flag set in its flags. */
static int type_is(struct session *s, uint64_t obj, int of, const char *name, uint64_t flag,
		   char *why, size_t whylen)
{
	const struct remote_layout *l = &s->remote.l;
	uint64_t type = obj, flags = 0, p;
	char got[32] = "";

	if ((of && remote__u64(&s->remote, obj + l->obj_type, &type)) ||
	    remote__u64(&s->remote, type + l->type_name, &p) ||
	    remote__cstr(&s->remote, p, got, sizeof(got)) ||
	    remote__u64(&s->remote, type + l->type_flags, &flags) || strcmp(got, name) ||
	    (flags & flag) != flag) {
		snprintf(why, whylen, "%s reads as type '%.31s' (flags %#llx)", name, got,
			 (unsigned long long)flags);
		return -EINVAL;
	}
	return 0;
}

int learn_verify(struct session *s, const struct layout *py, char *err, size_t errlen)
{
	struct learned *ld = &s->learned;
	char why[256];
	int ret = 0, i;

	if (!ld->wanted[0] && !ld->wanted[1])
		return 0;
	if (ld->wanted[0])
		ret = agrees_published(s, py, why, sizeof(why));
	if (!ret && s->t.none)
		ret = type_is(s, s->t.none, 1, "NoneType", 0, why, sizeof(why));
	if (!ret && s->t.tuple_type)
		ret = type_is(s, s->t.tuple_type, 0, "tuple", PY_TPFLAGS_TUPLE_SUBCLASS, why,
			      sizeof(why));
	if (!ret && s->t.list_type)
		ret = type_is(s, s->t.list_type, 0, "list", PY_TPFLAGS_LIST_SUBCLASS, why,
			      sizeof(why));
	if (ret) {
		for (i = 0; i < 2; i++)
			if (ld->wanted[i] && ld->path[i][0])
				unlink(ld->path[i]); /* never used again */
		snprintf(err, errlen,
			 "the layout table learned for pid %d does not agree with the process: %s",
			 s->t.pid, why);
		return ret;
	}
	if (!ld->learned[0] && !ld->learned[1])
		return 0;
	if (!ld->path[0][0] && !ld->path[1][0]) {
		fprintf(stderr, "nanwatchd: pid %d: the learned tables agree with the process%s\n",
			s->t.pid, ld->keep ? " (no build-id: not kept)" : "");
		return 0;
	}
	for (i = 0; i < 2; i++) {
		char tmp[PATH_MAX + 16];
		int fd;
		size_t n;

		if (!ld->learned[i] || !ld->path[i][0] || !ld->text[i])
			continue;
		snprintf(tmp, sizeof(tmp), "%s.tmp", ld->path[i]);
		unlink(tmp);
		fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		n = strlen(ld->text[i]);
		if (fd < 0 || write(fd, ld->text[i], n) != (ssize_t)n || fsync(fd) ||
		    rename(tmp, ld->path[i])) {
			fprintf(stderr, "nanwatchd: pid %d: not cached (%.300s): %s\n", s->t.pid,
				ld->path[i], strerror(errno));
			unlink(tmp);
		}
		if (fd >= 0)
			close(fd);
	}
	fprintf(stderr,
		"nanwatchd: pid %d: the learned tables agree with the process; kept for uid %u's "
		"processes of the same build in %s/%u\n",
		s->t.pid, (unsigned)ld->owner, learn_cache_dir(&s->o), (unsigned)ld->owner);
	return 0;
}

void learned_free(struct learned *ld)
{
	int i;

	for (i = 0; i < 2; i++) {
		layout__free(ld->fresh[i]);
		free(ld->text[i]);
	}
	memset(ld, 0, sizeof(*ld));
}
