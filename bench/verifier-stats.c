// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * verifier-stats: load every BPF program of nanwatchd with every feature on, for each
 * pair of layout tables given, and print one line per program: NAME VERIFIED_INSNS (the
 * largest over the pairs). With --max N, exit 1 when a program needs more than N: the
 * kernel refuses a program past 1,000,000, and older kernels verify less efficiently.
 * With --limits FILE (lines "NAME MAX", '#' starts a comment), exit 1 when a program needs
 * more than its own MAX or has none: a budget per program, so one that grows past what it
 * measured fails here long before it nears --max. Nothing is attached; needs the permission
 * to load BPF programs.
 *
 *   verifier-stats [--max N] [--limits FILE] PYTHON_TABLE TORCH_TABLE [...]
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "resolve/layout.h"
#include "attach/probe.h"

#define MAX_PROGS 32

struct stats {
	char name[MAX_PROGS][64];
	uint32_t insns[MAX_PROGS];
	int n;
};

struct limits {
	char name[MAX_PROGS][64];
	long max[MAX_PROGS];
	int n;
};

/* FILE's "NAME MAX" lines into l; 0 or -1 with the reason on stderr. */
static int limits__load(const char *path, struct limits *l)
{
	char line[256], name[64];
	FILE *f = fopen(path, "r");
	int lineno = 0, ret = 0;
	long max;

	l->n = 0;
	if (!f) {
		fprintf(stderr, "verifier-stats: failed to open %s: %s\n", path, strerror(errno));
		return -1;
	}
	while (!ret && fgets(line, sizeof(line), f)) {
		char *hash = strchr(line, '#');

		lineno++;
		if (hash)
			*hash = '\0';
		if (sscanf(line, " %63s", name) != 1)
			continue;
		if (sscanf(line, " %63s %ld", name, &max) != 2 || max <= 0 || l->n == MAX_PROGS) {
			fprintf(stderr, "verifier-stats: %s:%d: expected NAME MAX\n", path, lineno);
			ret = -1;
			break;
		}
		snprintf(l->name[l->n], sizeof(l->name[0]), "%s", name);
		l->max[l->n++] = max;
	}
	fclose(f);
	return ret;
}

/* The program's own limit; 0 when the file names none. */
static long limits__get(const struct limits *l, const char *name)
{
	int i;

	for (i = 0; i < l->n; i++)
		if (!strcmp(l->name[i], name))
			return l->max[i];
	return 0;
}

static void keep(const char *name, uint32_t insns, void *ctx)
{
	struct stats *st = ctx;
	int i;

	for (i = 0; i < st->n; i++)
		if (!strcmp(st->name[i], name))
			break;
	if (i == st->n) {
		if (st->n == MAX_PROGS)
			return;
		snprintf(st->name[st->n++], sizeof(st->name[0]), "%s", name);
		st->insns[i] = 0;
	}
	if (insns > st->insns[i])
		st->insns[i] = insns;
}

struct tables {
	struct nw_layout nwl;
	struct nw_bwd_layout bl;
	struct nw_rescan rs;
	struct nw_dict_layout dict;
	int marker;
};

/* A torch table's key, 0 where it lacks it. */
static int64_t key(const struct layout *l, enum layout_key name)
{
	long long v = 0;

	layout__int(l, name, &v);
	return v;
}

/* The python table's dict layout, for BPF's own reading of _parameters. */
static void dict_layout(const struct layout *l, struct nw_dict_layout *d)
{
	*d = (struct nw_dict_layout){
		.type_flags = key(l, LK_type_flags),
		.type_dictoffset = key(l, LK_type_dictoffset),
		.type_cached_keys = key(l, LK_type_cached_keys),
		.managed_dict_flag = key(l, LK_managed_dict_flag),
		.managed_dict = key(l, LK_managed_dict),
		.managed_values = key(l, LK_managed_values),
		.managed_dict_tagged = key(l, LK_managed_dict_tagged),
		.inline_values_flag = key(l, LK_inline_values_flag),
		.inline_values_offset = key(l, LK_inline_values_offset),
		.values_valid = key(l, LK_values_valid),
		.dict_keys = key(l, LK_dict_keys),
		.dict_values = key(l, LK_dict_values),
		.keys_log2_index_bytes = key(l, LK_keys_log2_index_bytes),
		.keys_kind = key(l, LK_keys_kind),
		.keys_nentries = key(l, LK_keys_nentries),
		.keys_indices = key(l, LK_keys_indices),
		.values_items = key(l, LK_values_items),
		.keys_kind_general = key(l, LK_keys_kind_general),
		.entry_general = key(l, LK_entry_general),
		.entry_unicode = key(l, LK_entry_unicode),
		.none = 5ULL << 40,
		.on = 1,
	};
}

/* The two tables' offsets, as the daemon hands them to BPF; 0 or a negative errno. */
static int fill(const char *py, const char *torch, struct tables *t, char *err, size_t errlen)
{
	const char *paths[] = {py, torch};
	struct layout *l = NULL;
	int i, ret = 0;

	memset(t, 0, sizeof(*t));
	for (i = 0; i < 2 && !ret; i++) {
		layout__free(l);
		l = layout__load(paths[i], err, errlen);
		if (!l)
			return -errno;
		ret = layout__fill(l, &t->nwl, err, errlen);
		if (!i)
			dict_layout(l, &t->dict);
	}
	if (!ret) {
		t->bl = (struct nw_bwd_layout){
			.impl_autograd_meta = key(l, LK_impl_autograd_meta),
			.meta_grad_fn = key(l, LK_meta_grad_fn),
			.node_next_edges = key(l, LK_node_next_edges),
			.edge_size = key(l, LK_edge_size),
			.edge_input_nr = key(l, LK_edge_input_nr),
			.acc_variable = key(l, LK_acc_variable),
			.inputbuf_items = key(l, LK_inputbuf_items),
		};
		t->rs = (struct nw_rescan){.impl_autograd_meta = key(l, LK_impl_autograd_meta),
					   .meta_grad_fn = key(l, LK_meta_grad_fn),
					   .impl_version = key(l, LK_impl_version),
					   .version_value = key(l, LK_version_value),
					   .on = 1};
	}
	layout__free(l);
	t->marker = t->nwl.step_marker[0] != 0;
	return ret;
}

static int usage(void)
{
	fprintf(stderr, "usage: verifier-stats [--max N] [--limits FILE] PYTHON_TABLE TORCH_TABLE "
			"[PYTHON_TABLE TORCH_TABLE ...]\n");
	return 2;
}

/* 1 when the program is over a limit (said on stderr), else 0. */
static int over_limits(const char *name, uint32_t insns, long max, const struct limits *l)
{
	long own = l ? limits__get(l, name) : 0;

	if (max && insns > max) {
		fprintf(stderr,
			"verifier-stats: %s needs %u verified instructions, more than %ld\n", name,
			insns, max);
		return 1;
	}
	if (l && !own) {
		fprintf(stderr, "verifier-stats: %s has no limit in the limits file: add one\n",
			name);
		return 1;
	}
	if (own && insns > own) {
		fprintf(stderr,
			"verifier-stats: %s needs %u verified instructions, more than its "
			"limit %ld: find what grew, or raise the limit and say why\n",
			name, insns, own);
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct stats st = {.n = 0};
	struct limits lim, *l = NULL;
	long max = 0, worst = -1;
	char err[512];
	int i, a = 1, over = 0;

	while (argc - a > 2 && argv[a][0] == '-') {
		if (!strcmp(argv[a], "--max")) {
			max = strtol(argv[a + 1], NULL, 10);
		} else if (!strcmp(argv[a], "--limits")) {
			if (limits__load(argv[a + 1], &lim))
				return 1;
			l = &lim;
		} else {
			return usage();
		}
		a += 2;
	}
	if (max < 0 || argc - a < 2 || (argc - a) % 2)
		return usage();
	for (; a < argc; a += 2) {
		struct tables t;

		if (fill(argv[a], argv[a + 1], &t, err, sizeof(err)) ||
		    probe__verifier_stats(&t.nwl, &t.bl, &t.rs, &t.dict, t.marker, keep, &st, err,
					  sizeof(err))) {
			fprintf(stderr, "verifier-stats: %s\n", err);
			return 1;
		}
	}
	for (i = 0; i < st.n; i++) {
		printf("%s %u\n", st.name[i], st.insns[i]);
		if (worst < 0 || st.insns[i] > st.insns[worst])
			worst = i;
		over |= over_limits(st.name[i], st.insns[i], max, l);
	}
	if (worst >= 0 && (max || l))
		printf("verifier-stats: %d programs, largest %s %u, limit %ld%s: %s\n", st.n,
		       st.name[worst], st.insns[worst], max, l ? " and each program's own" : "",
		       over ? "over" : "ok");
	return over;
}
