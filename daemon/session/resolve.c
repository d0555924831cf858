// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Resolving a watched process: its layout tables, step marker and backward keys. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "resolve/backward_layout.h"
#include "resolve/elfsym.h"
#include "resolve/layout.h"
#include "resolve/pyoffsets.h"
#include "resolve/vtable.h"
#include "session/session_priv.h"

#ifndef NW_LAYOUT_DIR
#define NW_LAYOUT_DIR "/usr/local/share/nanwatch/layouts"
#endif

/* The directory of this daemon's executable, in buf; -1 if unknown. */
static int self_dir(char *buf, size_t len)
{
	ssize_t n = readlink("/proc/self/exe", buf, len - 1);
	char *slash;

	if (n <= 0)
		return -1;
	buf[n] = 0;
	slash = strrchr(buf, '/');
	if (!slash)
		return -1;
	*slash = 0;
	return 0;
}

static const char *layouts_dir(const struct session_opts *a, char *buf, size_t len)
{
	char exe[PATH_MAX];

	if (a->layouts)
		return a->layouts;
	if (!self_dir(exe, sizeof(exe))) {
		snprintf(buf, len, "%s/../config/layouts", exe);
		if (!access(buf, R_OK))
			return buf;
	}
	return NW_LAYOUT_DIR;
}

/* nanwatch-layout beside this daemon, in ../bin (installed), or in its source tree; else by name. */
static const char *layout_tool(char *buf, size_t len)
{
	static const char *const rel[] = {"nanwatch-layout", "../bin/nanwatch-layout",
					  "../tools/nanwatch-layout"};
	char exe[PATH_MAX];
	size_t i;

	if (self_dir(exe, sizeof(exe)))
		return "nanwatch-layout";
	for (i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
		snprintf(buf, len, "%s/%s", exe, rel[i]);
		if (!access(buf, X_OK))
			return buf;
	}
	return "nanwatch-layout";
}

/*
 * The command that makes the tables a target needs: nanwatch-layout run as the target's user
 * with the Python it runs, importing the torch it runs (a virtualenv's, when the interpreter is
 * the base one). A target in another root: the same, run there.
 */
static void layout_command(const struct session *s, const char *dir, char *out, size_t len)
{
	char proc[64], where[96], tool[PATH_MAX + 32], real[PATH_MAX], import[PATH_MAX];
	char *slash;
	const char *t = layout_tool(tool, sizeof(tool));
	struct stat st;
	const char *py = strrchr(s->t.python_path, '/');
	int same_root = target__same_root(s->t.pid);

	snprintf(import, sizeof(import), "%s", s->t.torch_dir);
	slash = strrchr(import, '/');
	if (slash && slash != import)
		*slash = 0; /* the directory holding the torch package */
	snprintf(proc, sizeof(proc), "/proc/%d", s->t.pid);
	snprintf(where, sizeof(where), " inside its root (%s/root)", proc);
	if (stat(proc, &st))
		st.st_uid = 0;
	/* the image with the evaluator is the interpreter unless it is a libpython */
	py = py && !strncmp(py + 1, "python", 6) ? s->t.python_path : NULL;
	if (same_root && py) {
		snprintf(out, len,
			 "sudo -u '#%u' %.120s %.160s --python --torch --import-from %.160s -o "
			 "%.160s",
			 (unsigned)st.st_uid, py, realpath(t, real) ? real : t, import, dir);
		return;
	}
	snprintf(out, len,
		 "as uid %u%s, with %.120s%s: nanwatch-layout --python --torch --import-from "
		 "%.160s -o DIR, then copy DIR's tables into %.160s",
		 (unsigned)st.st_uid, same_root ? "" : where, py ? py : "the Python that runs it",
		 py ? "" : " (its environment's)", import, dir);
}

/* name's file offset in e, for its uprobe; 0 when it is not there (the attach says so). */
static uint64_t probe_offset(struct elfsym *e, const char *name)
{
	uint64_t addr, off;

	if (!e || !name[0] || elfsym__find(e, name, &addr) || elfsym__file_offset(e, addr, &off))
		return 0;
	return off;
}

#define METH_VARARGS_KEYWORDS 3 /* ml_flags of run_backward */
#define MAX_METHOD_DEFS 4

/*
 * run_backward's function in a stripped libtorch_python: the entry of the method table named
 * method, found in the file, its ml_meth read from the target (filled by the library's
 * initializers), as a link-time address; 0 with *why set if none, or entries disagree.
 */
static uint64_t method_function(struct session *s, const char *method, const char **why)
{
	struct elfsym *e = s->t.torch_python_elf;
	uint64_t defs[MAX_METHOD_DEFS], bias = s->t.torch_python_bias, fn = 0, f;
	int n = elfsym__method_defs(e, method, METH_VARARGS_KEYWORDS, defs, MAX_METHOD_DEFS), i;

	if (n <= 0 || n > MAX_METHOD_DEFS || !bias) {
		*why = n > MAX_METHOD_DEFS ? "names a method that more than one table holds"
					   : "names a method whose entry the file does not hold";
		return 0;
	}
	for (i = 0; i < n; i++) {
		if (remote__u64(&s->remote, bias + defs[i] + 8, &f) || f <= bias ||
		    (fn && f - bias != fn)) {
			*why = "names a method whose entries hold no one function";
			return 0;
		}
		fn = f - bias;
	}
	return fn;
}

/*
 * Where run_backward (the loss) is probed: at the table's symbol or, in a stripped
 * libtorch_python, at the function its method table entry holds in the target; a uprobe goes
 * only where .eh_frame_hdr lists a function starting (never inside an instruction). Neither:
 * the loss is not read, said in one line.
 */
static void backward_site(struct session *s, const struct layout *tl)
{
	struct elfsym *e = s->t.torch_python_elf;
	const char *sym = layout__str(tl, LK_backward_symbol);
	const char *method = layout__str(tl, LK_backward_method);
	const char *why = NULL;
	uint64_t addr = 0, off = 0;

	s->backward_symbol[0] = 0;
	s->backward_offset = 0;
	if (sym) {
		snprintf(s->backward_symbol, sizeof(s->backward_symbol), "%s", sym);
		s->backward_offset = probe_offset(e, s->backward_symbol);
		return;
	}
	if (!method)
		why = "has neither backward_symbol nor backward_method";
	else if (!e)
		why = "names run_backward's method, and the target's libtorch_python is not open";
	else if ((addr = method_function(s, method, &why)) &&
		 (elfsym__function_start(e, addr) || elfsym__file_offset(e, addr, &off)))
		why = "finds run_backward's method at an address where no function starts";
	if (why) {
		fprintf(stderr, "nanwatchd: pid %d: torch-%s.yaml %s: the loss is not read\n",
			s->t.pid, layout__version(tl), why);
		return;
	}
	snprintf(s->backward_symbol, sizeof(s->backward_symbol), "%s@%#llx", method,
		 (unsigned long long)addr);
	s->backward_offset = off;
}

/* The full name of the torch table's step marker function in the target's libtorch_cpu. */
static int step_symbol(struct session *s, const char *prefix, char *err, size_t errlen)
{
	struct elfsym *e = s->t.torch_cpu_elf;
	int ret;

	s->step_symbol[0] = 0;
	if (!prefix)
		return 0;
	if (!e) {
		snprintf(err, errlen,
			 "failed to open the target's libtorch_cpu for the step marker%s%s",
			 s->t.torch_cpu_err ? ": " : "",
			 s->t.torch_cpu_err ? target__image_why(s->t.torch_cpu_err) : "");
		return -ENOENT;
	}
	ret = elfsym__find_prefix(e, prefix, s->step_symbol, sizeof(s->step_symbol));
	if (ret)
		snprintf(err, errlen, "no symbol %.60s* in %.100s", prefix, s->t.torch_cpu_path);
	s->step_offset = ret ? 0 : probe_offset(e, s->step_symbol);
	return ret;
}

/* The torch table's keys that identify a tensor already scanned; without them, no skipping. */
static void rescan_layout(struct session *s, const struct layout *tl)
{
	memset(&s->rescan, 0, sizeof(s->rescan));
	layout__fill_rescan(tl, &s->rescan, NULL, 0);
}

/* The torch table's backward keys; a table without them leaves the backward pass unwatched. */
static int backward_layout(struct session *s, const struct layout *tl, char *err, size_t errlen)
{
	struct elfsym *e = s->t.torch_cpu_elf;
	int ret;

	s->node_symbol[0] = 0;
	if (!s->o.backward || s->o.top_only || !s->t.torch_cpu_path[0])
		return 0;
	if (!e && layout__str(tl, LK_node_symbol)) {
		snprintf(err, errlen, "failed to read %.200s: %s", s->t.torch_cpu_path,
			 target__image_why(s->t.torch_cpu_err));
		return s->t.torch_cpu_err ? s->t.torch_cpu_err : -ENOENT;
	}
	ret = backward__layout(tl, e, s->t.torch_cpu_base, &s->bwl, s->node_symbol,
			       sizeof(s->node_symbol), err, errlen);
	if (ret == -ENOENT && !s->node_symbol[0] && !layout__str(tl, LK_node_symbol))
		return 0;
	if (!ret)
		ret = layout__int(tl, LK_vtable_offset, &s->vtable_offset);
	if (ret)
		return ret;
	s->node_offset = probe_offset(e, s->node_symbol);
	/* node classes by vtable: read now, with the rest of the target's files */
	s->vt = vtable__open(e, s->t.torch_cpu_base, s->vtable_offset);
	if (!s->vt) {
		ret = -errno;
		snprintf(err, errlen, "failed to read the vtables of %.200s: %s",
			 s->t.torch_cpu_path, target__image_why(ret));
		return ret;
	}
	/* without the counter, nodes are named by the module outputs they are the grad_fn of */
	backward__seq_counter(tl, e, s->t.torch_cpu_base, &s->remote, &s->bwl);
	return 0;
}

/* The torch table's device keys for GPU tensors; -1 for each it lacks. */
static void gpu_layout(struct session *s, const struct layout *tl)
{
	if (layout__int(tl, LK_device_cuda, &s->device_cuda))
		s->device_cuda = -1;
	if (layout__int(tl, LK_device_meta, &s->device_meta))
		s->device_meta = -1;
	if (layout__int(tl, LK_impl_device_index, &s->impl_device_index))
		s->impl_device_index = -1;
}

/* Keys a table may lack, and what the watch then goes without. */
static const struct {
	enum layout_key key;
	const char *off;
} optional_keys[] = {
	{LK_code_localsplusnames, "the training loop's step counter is not read"},
	{LK_code_names, "the ops a layer's code names are not read"},
	{LK_func_code, "the ops a layer's code names are not read"},
	{LK_func_globals, "no module output is taken as finite from its input"},
	{LK_dict_used, "no module output is taken as finite from its input"},
	{LK_kwargs_slot, "keyword arguments of module calls are not read"},
	{LK_node_symbol, "the backward pass is not watched"},
	{LK_scaler_symbol, "steps a GradScaler skips are not told apart"},
	{LK_impl_version, "an output already found finite is scanned again"},
	{LK_version_value, "an output already found finite is scanned again"},
};

/* One line for each feature the tables turn off by a key they lack (a table for a new build). */
static void say_features_off(const struct session *s, const struct layout *py,
			     const struct layout *tl)
{
	const size_t n = sizeof(optional_keys) / sizeof(optional_keys[0]);
	const char *said[sizeof(optional_keys) / sizeof(optional_keys[0])];
	size_t i, j, nsaid = 0;

	for (i = 0; i < n; i++) {
		const struct layout_key_def *k = &layout_keys[optional_keys[i].key];
		const struct layout *l = k->table == LAYOUT_PY ? py : tl;

		if (layout__str(l, optional_keys[i].key))
			continue;
		for (j = 0; j < nsaid && strcmp(said[j], optional_keys[i].off); j++)
			;
		if (j < nsaid)
			continue;
		said[nsaid++] = optional_keys[i].off;
		fprintf(stderr, "nanwatchd: pid %d: %s-%s.yaml has no %s: %s\n", s->t.pid,
			layout__kind(l), layout__version(l), k->name, optional_keys[i].off);
	}
}

int load_layouts(struct session *s, char *err, size_t errlen)
{
	char dirbuf[PATH_MAX + 32], why[512], cmd[1024], tool[PATH_MAX + 32];
	const char *dir = layouts_dir(&s->o, dirbuf, sizeof(dirbuf));
	struct layout *py = NULL, *tl = NULL;
	char pywhy[512] = "", tlwhy[512] = "";
	int ret = -ENOTSUP;

	py = layout__find(dir, "python", s->t.python_series, pywhy, sizeof(pywhy));
	if (!py && errno != ENOENT) {
		snprintf(err, errlen, "%s", pywhy); /* a table there, but refused: say why */
		goto cleanup;
	}
	tl = layout__find(dir, "torch", s->t.torch_series, tlwhy, sizeof(tlwhy));
	if (!tl && errno != ENOENT) {
		snprintf(err, errlen, "%s", tlwhy);
		goto cleanup;
	}
	if ((!py || !tl) && s->o.learn_layouts) {
		char real[PATH_MAX];
		const char *t = layout_tool(tool, sizeof(tool));

		ret = learn_tables(s, realpath(t, real) ? real : t, &py, &tl, err, errlen);
		if (ret)
			goto cleanup;
		ret = -ENOTSUP;
	}
	if (!py) {
		layout_command(s, dir, cmd, sizeof(cmd));
		snprintf(err, errlen,
			 "unsupported Python %s in pid %d: no layout table "
			 "python-%s.yaml in %.160s (%.120s); make it with: %.700s",
			 s->t.python_version, s->t.pid, s->t.python_series, dir, pywhy, cmd);
		goto cleanup;
	}
	if (!tl) {
		layout_command(s, dir, cmd, sizeof(cmd));
		snprintf(err, errlen,
			 "unsupported torch %s in pid %d: no layout table "
			 "torch-%s.yaml in %.160s (%.120s); make it with: %.700s",
			 s->t.torch_version, s->t.pid, s->t.torch_series, dir, tlwhy, cmd);
		goto cleanup;
	}
	memset(&s->nwl, 0, sizeof(s->nwl));
	backward_site(s, tl);
	snprintf(s->scaler_symbol, sizeof(s->scaler_symbol), "%s",
		 layout__str(tl, LK_scaler_symbol) ? layout__str(tl, LK_scaler_symbol) : "");
	s->scaler_offset = probe_offset(s->t.torch_cpu_elf, s->scaler_symbol);
	ret = step_symbol(s, layout__str(tl, LK_step_symbol_prefix), why, sizeof(why));
	if (!ret)
		ret = backward_layout(s, tl, why, sizeof(why));
	if (!ret)
		rescan_layout(s, tl);
	if (!ret)
		ret = layout__fill(py, &s->nwl, why, sizeof(why));
	if (!ret)
		ret = layout__fill(tl, &s->nwl, why, sizeof(why));
	if (!ret)
		ret = remote__layout_from(&s->remote.l, py, why, sizeof(why));
	if (ret) {
		snprintf(err, errlen, "bad layout table in %.256s: %.200s", dir, why);
		goto cleanup;
	}
	ret = pyoffsets__apply(&s->remote, s->t.runtime, s->t.py_version_hex, py, &s->nwl,
			       &s->remote.l, why, sizeof(why));
	if (ret < 0) {
		snprintf(err, errlen, "unsupported Python %s in pid %d: %.200s",
			 s->t.python_version, s->t.pid, why);
		goto cleanup;
	}
	s->published = ret;
	ret = learn_verify(s, py, err, errlen);
	if (ret)
		goto cleanup;
	gpu_layout(s, tl);
	say_features_off(s, py, tl);
cleanup:
	layout__free(py);
	layout__free(tl);
	learned_free(&s->learned);
	return ret;
}

/* The python table's dict layout, for BPF to read a module's _parameters itself. */
void dict_layout(const struct session *s, struct nw_dict_layout *d)
{
	const struct remote_layout *l = &s->remote.l;

	*d = (struct nw_dict_layout){
		.type_flags = l->type_flags,
		.type_dictoffset = l->type_dictoffset,
		.type_cached_keys = l->type_cached_keys,
		.managed_dict_flag = l->managed_dict_flag,
		.managed_dict = l->managed_dict,
		.managed_values = l->managed_values,
		.managed_dict_tagged = l->managed_dict_tagged,
		.inline_values_flag = l->inline_values_flag,
		.inline_values_offset = l->inline_values_offset,
		.values_valid = l->values_valid,
		.type_basicsize = l->type_basicsize,
		.dict_keys = l->dict_keys,
		.dict_values = l->dict_values,
		.keys_log2_index_bytes = l->keys_log2_index_bytes,
		.keys_kind = l->keys_kind,
		.keys_nentries = l->keys_nentries,
		.keys_indices = l->keys_indices,
		.values_items = l->values_items,
		.keys_kind_general = l->keys_kind_general,
		.entry_general = l->entry_general,
		.entry_unicode = l->entry_unicode,
		.none = s->t.none,
		.on = 1,
	};
}
