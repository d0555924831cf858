// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Capture directories. The records capture.c assembled become one
 * directory per capture:
 *
 *   DIR/<pid>-step<N>-<layer>/manifest.json   what the layer is, how to rebuild it
 *   DIR/<pid>-step<N>-<layer>/input0.npy ...  C-order arrays numpy.load() reads
 *
 * Written as root into a directory the target's user may share, so: DIR is
 * opened with no symlink followed anywhere in its path (path.h), the
 * directory is made with mkdirat (mode 0700, never reused), files are created
 * under its fd with O_CREAT|O_EXCL|O_NOFOLLOW (mode 0600), and only once
 * everything is written is ownership given to the target's user. Module
 * attributes are read from the target with bounded process_vm_readv reads,
 * after the call; they describe the layer, the tensors are the exact data.
 */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "capture/capture_priv.h"
#include "explain/decode.h"
#include "util/dtype.h"
#include "util/file.h"
#include "util/tpath.h"
#include "output/json.h"
#include "resolve/names.h"
#include "capture/npy.h"
#include "output/event.h"
#include "output/path.h"
#include "resolve/remote.h"
#include "resolve/pyobject.h"
#include "resolve/target.h"

/* Real uid and gid of the target: who its captures belong to. */
static int target_owner(pid_t pid, uid_t *uid, gid_t *gid)
{
	char path[64], *buf, *u, *g;
	unsigned long uv, gv;

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	buf = file__read(path, 64 << 10, NULL);
	if (!buf)
		return -errno;
	u = strstr(buf, "\nUid:");
	g = strstr(buf, "\nGid:");
	if (!u || !g || sscanf(u + 5, "%lu", &uv) != 1 || sscanf(g + 5, "%lu", &gv) != 1) {
		free(buf);
		return -EINVAL;
	}
	free(buf);
	*uid = uv;
	*gid = gv;
	return 0;
}

int capture_output__open_dir(struct capture *c, char *err, size_t errlen)
{
	const struct capture_opts *o = &c->o;
	struct stat st;
	int ret;

	/* no symlink anywhere in the path, a trailing slash included */
	c->dirfd = path__open_dir(o->dir);
	if (c->dirfd < 0) {
		ret = c->dirfd;
		snprintf(err, errlen, "failed to open capture directory %.256s: %s", o->dir,
			 path__reason(ret));
		return ret;
	}
	if (fstat(c->dirfd, &st) || (st.st_mode & S_IWOTH && !(st.st_mode & S_ISVTX))) {
		snprintf(err, errlen,
			 "capture directory %.256s is world-writable without the "
			 "sticky bit: use a directory only trusted users can write",
			 o->dir);
		return -EPERM;
	}
	ret = target_owner(o->pid, &c->uid, &c->gid);
	if (ret)
		snprintf(err, errlen, "failed to read the owner of pid %d: %s", o->pid,
			 strerror(-ret));
	return ret;
}

static void sanitize(char *out, size_t len, const char *in)
{
	size_t i;

	for (i = 0; in[i] && i + 1 < len; i++) {
		char ch = in[i];

		out[i] = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
					 (ch >= '0' && ch <= '9') || ch == '.' || ch == '_' ||
					 ch == '-'
				 ? ch
				 : '_';
	}
	out[i] = 0;
	if (out[0] == '.')
		out[0] = '_'; /* never "." or ".." or a hidden name */
}

int capture__dirname(char *buf, size_t len, pid_t pid, uint64_t step, const char *layer)
{
	char safe[96];
	int n;

	if (!layer)
		snprintf(safe, sizeof(safe), "unnamed");
	else if (!*layer)
		snprintf(safe, sizeof(safe), "root");
	else
		sanitize(safe, sizeof(safe), layer);
	n = snprintf(buf, len, "%d-step%llu-%s", pid, (unsigned long long)step, safe);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* A keyword argument's key as BPF copied it: NUL-terminated here whatever the record holds. */
static const char *kwarg_key(const struct nw_cap_tensor *d, char *buf, size_t len)
{
	size_t n = strnlen(d->key, sizeof(d->key));

	if (len < 1)
		return "";
	if (n >= len)
		n = len - 1;
	memcpy(buf, d->key, n);
	buf[n] = 0;
	return buf;
}

/* An output's place in what the call returned (a tuple, a list, a dict, an object's attributes). */
static unsigned int out_place(unsigned int pos0)
{
	return pos0 == NW_NO_INDEX ? pos0 : pos0 & ~NW_ATTR_INDEX;
}

/* Is an output's pos0 a place among an object's attributes (NW_ATTR_INDEX)? */
static int out_attr(const struct nw_cap_tensor *d)
{
	return d->role == NW_CAP_OUTPUT && d->pos0 != NW_NO_INDEX && (d->pos0 & NW_ATTR_INDEX);
}

int capture__filename(char *buf, size_t len, const struct nw_cap_tensor *d, const char *name)
{
	char safe[96];
	int n;

	switch (d->role) {
	case NW_CAP_INPUT:
		if (d->pos1 == NW_NO_INDEX)
			n = snprintf(buf, len, "input%u.npy", d->pos0);
		else
			n = snprintf(buf, len, "input%u_%u.npy", d->pos0, d->pos1);
		break;
	case NW_CAP_KWARG: {
		char key[NW_KEY_LEN + 1];

		sanitize(safe, sizeof(safe), *kwarg_key(d, key, sizeof(key)) ? key : "unnamed");
		if (d->pos1 == NW_NO_INDEX)
			n = snprintf(buf, len, "kwarg%u.%s.npy", d->pos0, safe);
		else
			n = snprintf(buf, len, "kwarg%u_%u.%s.npy", d->pos0, d->pos1, safe);
		break;
	}
	case NW_CAP_PARAM:
	case NW_CAP_BUFFER:
		sanitize(safe, sizeof(safe), name && *name ? name : "unnamed");
		n = snprintf(buf, len, "%s.%s.npy", d->role == NW_CAP_PARAM ? "param" : "buffer",
			     safe);
		break;
	case NW_CAP_OUTPUT:
		if (d->pos0 == NW_NO_INDEX)
			n = snprintf(buf, len, "output.npy");
		else if (d->pos1 == NW_NO_INDEX)
			n = snprintf(buf, len, "output%u.npy", out_place(d->pos0));
		else
			n = snprintf(buf, len, "output%u_%u.npy", out_place(d->pos0), d->pos1);
		break;
	default:
		return -EINVAL;
	}
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* ------------------------------------------------------------- manifest */

static const struct pyobject_layout *py_layout(const struct capture *c, struct pyobject_layout *pl)
{
	*pl = (struct pyobject_layout){.l = c->o.layout, .tuple_type = c->o.tuple_type};
	return pl;
}

static int class_module(const struct capture *c, uint64_t module, char *out, size_t len)
{
	return pyobject__class_module(c->o.remote, module, out, len);
}

/* One attribute value into the manifest; -ENOTSUP for anything but simple values. */
static int write_value(const struct capture *c, struct json *j, const char *key, uint64_t v)
{
	struct pyobject_layout pl;
	struct py_value pv;
	int i;

	if (pyobject__value(c->o.remote, py_layout(c, &pl), v, &pv))
		return -ENOTSUP;
	switch (pv.kind) {
	case PY_NONE:
		json__null(j, key);
		break;
	case PY_BOOL:
		json__bool(j, key, pv.i != 0);
		break;
	case PY_INT:
		json__int(j, key, pv.i);
		break;
	case PY_FLOAT:
		json__double(j, key, pv.d);
		break;
	case PY_STR:
		json__string(j, key, pv.str);
		break;
	default:
		json__array_begin(j, key);
		for (i = 0; i < pv.n; i++)
			json__int(j, NULL, pv.items[i]);
		json__array_end(j);
	}
	pyobject__value_free(&pv);
	return 0;
}

struct attrs_ctx {
	const struct capture *c;
	struct json *j;
	char skipped[CAPTURE_MAX_ATTRS][64];
	int nskipped, n;
};

static int attr_cb(const char *key, uint64_t value, void *ctx)
{
	struct attrs_ctx *a = ctx;

	if (a->n++ >= CAPTURE_MAX_ATTRS)
		return 1;
	if (write_value(a->c, a->j, key, value) && a->nskipped < CAPTURE_MAX_ATTRS)
		snprintf(a->skipped[a->nskipped++], sizeof(a->skipped[0]), "%s", key);
	return 0;
}

/* ------------------------------------------------------------------ files */

/* Create name under the capture's directory, 0600, never through a link or over a file. */
static int write_file(int dirfd, const char *name, const void *head, size_t hlen, const void *data,
		      size_t len)
{
	int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	const char *parts[2] = {head, data};
	size_t lens[2] = {hlen, len};
	int i, err = 0;

	if (fd < 0)
		return -errno;
	for (i = 0; i < 2 && !err; i++) {
		size_t off = 0;

		while (off < lens[i]) {
			ssize_t w = write(fd, parts[i] + off, lens[i] - off);

			if (w < 0 && errno == EINTR)
				continue;
			if (w <= 0) {
				err = w < 0 ? -errno : -EIO;
				break;
			}
			off += w;
		}
	}
	if (!err && fchmod(fd, 0600))
		err = -errno;
	if (close(fd) && !err)
		err = -errno;
	return err;
}

static int write_npy(int dirfd, const char *file, const struct pending *p, const struct dtype *dt)
{
	char head[NPY_HEADER_MAX];
	void *out;
	int hlen, err;

	hlen = npy__header(head, sizeof(head), dt->descr, p->d.shape, p->d.ndim);
	if (hlen < 0)
		return hlen;
	out = malloc(p->d.bytes ? p->d.bytes : 1);
	if (!out)
		return -ENOMEM;
	err = npy__c_order(out, p->buf, dt->size, p->d.ndim, p->d.shape, p->d.strides, p->d.numel);
	if (!err)
		err = write_file(dirfd, file, head, hlen, out, p->d.bytes);
	free(out);
	return err;
}

static const char *role_name(uint32_t role)
{
	static const char *names[] = {"input", "param", "buffer", "output", "kwarg"};

	return role < sizeof(names) / sizeof(names[0]) ? names[role] : "unknown";
}

static const char *skip_reason(uint32_t flags)
{
	if (flags & NW_CAP_OVER_BUDGET)
		return "budget";
	if (flags & NW_CAP_NOT_TENSOR)
		return "not_tensor";
	if (flags & NW_CAP_UNSUPPORTED)
		return "dtype";
	if (flags & NW_SKIP_NONCONTIG)
		return "noncontiguous";
	if (flags & NW_SKIP_DEVICE)
		return "device";
	if (flags & NW_SKIP_DIMS)
		return "dims";
	if (flags & NW_SKIP_NOSTORAGE)
		return "no_storage";
	return "unreadable";
}

void capture__tensor_name(char *buf, size_t len, const struct nw_cap_tensor *d, const char *name)
{
	const char *base = d->role == NW_CAP_OUTPUT ? "output" : "input";
	char key[NW_KEY_LEN + 1];

	if (d->role == NW_CAP_PARAM || d->role == NW_CAP_BUFFER)
		snprintf(buf, len, "%s", name ? name : "?");
	else if (d->role == NW_CAP_KWARG && !*kwarg_key(d, key, sizeof(key)))
		snprintf(buf, len, "kwarg[%u]", d->pos0); /* a key BPF could not read */
	else if (d->role == NW_CAP_KWARG && d->pos1 == NW_NO_INDEX)
		snprintf(buf, len, "%s", key);
	else if (d->role == NW_CAP_KWARG)
		snprintf(buf, len, "%s[%u]", key, d->pos1);
	else /* an output that is a dict's value has its key */
		tpath__format(buf, len, base, d->pos0, d->pos1, d->key, sizeof(d->key));
}

/* One manifest entry; writes the .npy when the data is whole. Returns 1 if it was left out. */
static int write_tensor(int dirfd, struct json *j, const struct pending *p,
			const struct py_named_list *params, const struct py_named_list *buffers)
{
	const struct nw_cap_tensor *d = &p->d;
	const struct dtype *dt =
		d->scalar_type == NW_NO_SCALAR ? NULL : dtype__scalar(d->scalar_type);
	const char *name = d->role == NW_CAP_PARAM    ? pyobject__name_of(params, d->obj)
			   : d->role == NW_CAP_BUFFER ? pyobject__name_of(buffers, d->obj)
						      : NULL;
	char file[160], label[160];
	const char *why = NULL;
	uint32_t i;

	capture__tensor_name(label, sizeof(label), d, name);
	if (d->flags)
		why = skip_reason(d->flags);
	else if (!dt || dt->size != d->elem_size)
		why = "dtype";
	else if (d->bytes % dt->size || d->bytes / dt->size != d->numel)
		why = "invalid"; /* never write numel elements into a smaller buffer */
	else if (!pending_whole(p))
		why = "lost";
	else if (capture__filename(file, sizeof(file), d, name) || write_npy(dirfd, file, p, dt))
		why = "write";
	json__object_begin(j, NULL);
	json__string(j, "role", role_name(d->role));
	json__string(j, "name", label);
	if (d->role == NW_CAP_KWARG) {
		char key[NW_KEY_LEN + 1];

		json__string(j, "key", kwarg_key(d, key, sizeof(key)));
	}
	if (d->role == NW_CAP_OUTPUT)
		json__bool(j, "attribute", out_attr(d));
	json__array_begin(j, "index");
	if (d->role != NW_CAP_PARAM && d->role != NW_CAP_BUFFER) {
		if (d->pos0 != NW_NO_INDEX)
			json__uint(j, NULL, out_place(d->pos0));
		if (d->pos1 != NW_NO_INDEX)
			json__uint(j, NULL, d->pos1);
	}
	json__array_end(j);
	json__string(j, "file", why ? NULL : file);
	json__string(j, "skipped", why);
	if (d->scalar_type != NW_NO_SCALAR && d->ndim <= NW_MAX_DIMS) {
		json__string(j, "dtype", dt ? dt->name : NULL);
		json__array_begin(j, "shape");
		for (i = 0; i < d->ndim; i++)
			json__uint(j, NULL, d->shape[i]);
		json__array_end(j);
		json__array_begin(j, "strides");
		for (i = 0; i < d->ndim; i++)
			json__uint(j, NULL, d->strides[i]);
		json__array_end(j);
		json__uint(j, "storage_offset", d->storage_offset);
		json__uint(j, "bytes", d->bytes);
	}
	json__object_end(j);
	return why && strcmp(why, "not_tensor");
}

/*
 * Parameters and buffers the module has but the BPF side did not know of yet
 * (the daemon lists them at the module's first call, asynchronously): listed
 * as not captured, so the manifest never looks complete when it is not.
 */
static int write_unlisted(struct json *j, const struct py_named_list *l, const char *role,
			  const struct capture *c)
{
	int i, k, n = 0;

	for (i = 0; i < l->n; i++) {
		int seen = !l->items[i].obj;

		for (k = 0; k < NW_CAP_MAX_TENSORS && !seen; k++)
			seen = c->t[k].have && c->t[k].d.obj == l->items[i].obj &&
			       (c->t[k].d.role == NW_CAP_PARAM || c->t[k].d.role == NW_CAP_BUFFER);
		if (seen)
			continue;
		json__object_begin(j, NULL);
		json__string(j, "role", role);
		json__string(j, "name", l->items[i].name);
		json__array_begin(j, "index");
		json__array_end(j);
		json__null(j, "file");
		json__string(j, "skipped", "unlisted");
		json__object_end(j);
		n++;
	}
	return n;
}

static void write_names(struct json *j, const char *key, const struct py_named_list *l)
{
	int i;

	json__array_begin(j, key);
	for (i = 0; i < l->n; i++)
		if (!l->items[i].obj)
			json__string(j, NULL, l->items[i].name);
	json__array_end(j);
}

/* Everything written: hand the directory and its files to the target's user. */
static int give(const struct capture *c, int dirfd)
{
	int fd = dup(dirfd), err = 0;
	struct dirent *de;
	DIR *d;

	if (fd < 0)
		return -errno;
	d = fdopendir(fd);
	if (!d) {
		close(fd);
		return -errno;
	}
	while ((de = readdir(d))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (fchownat(dirfd, de->d_name, c->uid, c->gid, AT_SYMLINK_NOFOLLOW) && !err)
			err = -errno;
	}
	closedir(d);
	if (!err && (fchmod(dirfd, 0700) || fchown(dirfd, c->uid, c->gid)))
		err = -errno;
	return err;
}

/* The names of the module's child modules: a layer with children is not rebuilt generically. */
static void write_children(const struct capture *c, struct json *j, uint64_t module,
			   struct py_named_list *scratch)
{
	int i;

	json__array_begin(j, "children");
	if (!pyobject__list_dict(c->o.remote, module, "_modules", NULL, scratch))
		for (i = 0; i < scratch->n; i++)
			if (scratch->items[i].obj)
				json__string(j, NULL, scratch->items[i].name);
	json__array_end(j);
}

/* The capture's step as the events name it, and its source (FINDING_STEP_*). */
static uint64_t cap_step(const struct capture *c, const struct nw_cap_end *e, int *source)
{
	uint64_t step = e->step & NW_STEP_MASK;

	*source = decode__step_source(e->step);
	return c->o.step_of ? c->o.step_of(c->o.step_ctx, step, source) : step;
}

static int make_dir(struct capture *c, const struct nw_cap_end *e, const char *layer, char *name,
		    size_t len)
{
	char base[200];
	int i, err, source;

	err = capture__dirname(base, sizeof(base), c->o.pid, cap_step(c, e, &source), layer);
	if (err)
		return err;
	for (i = 0; i < 100; i++) {
		if (i)
			snprintf(name, len, "%s-%d", base, i + 1);
		else
			snprintf(name, len, "%s", base);
		if (!mkdirat(c->dirfd, name, 0700))
			return openat(c->dirfd, name,
				      O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (errno != EEXIST)
			return -errno;
	}
	return -EEXIST;
}

static void manifest_head(struct capture *c, struct json *j, const struct nw_cap_end *e,
			  const char *layer)
{
	char cls[NW_NAME_LEN + 1], mod[256], tensor[48];
	const char *dot;
	uint64_t step;
	int source;

	memcpy(cls, e->class_name, NW_NAME_LEN);
	cls[NW_NAME_LEN] = 0;
	dot = strrchr(cls, '.');
	tpath__format(tensor, sizeof(tensor), "output", e->index0, e->index1, e->key,
		      sizeof(e->key));
	json__string(j, "schema", CAPTURE_SCHEMA);
	json__int(j, "pid", c->o.pid);
	json__string(j, "comm", c->o.comm);
	json__string(j, "python", c->o.python_version);
	json__string(j, "torch", c->o.torch_version);
	step = cap_step(c, e, &source);
	json__uint(j, "step", step);
	json__string(j, "step_source", output__step_source(source));
	json__uint(j, "iteration", e->iteration);
	json__string(j, "iteration_source", "attach");
	json__string(j, "layer", layer);
	json__string(j, "module", dot ? dot + 1 : cls);
	json__string(j, "class_module", class_module(c, e->module, mod, sizeof(mod)) ? NULL : mod);
	json__string(j, "tensor", tensor);
	json__uint(j, "nargs", e->nargs);
	json__uint(j, "bytes", e->bytes);
	json__uint(j, "max_bytes", e->budget);
}

int capture_output__write(struct capture *c, const struct nw_cap_end *e)
{
	const char *layer = names__path(c->o.names, e->root, e->module);
	struct py_named_list *params = calloc(2, sizeof(*params)), *buffers = params + 1;
	struct attrs_ctx *a = calloc(1, sizeof(*a));
	char name[256];
	struct json j = {};
	int dirfd = -1, err, i, truncated = e->truncated || e->lost;

	if (!params || !a || json__init(&j, 1 << 16)) {
		err = -ENOMEM;
		goto cleanup;
	}
	pyobject__list_dict(c->o.remote, e->module, "_parameters", NULL, params);
	pyobject__list_dict(c->o.remote, e->module, "_buffers", NULL, buffers);
	dirfd = make_dir(c, e, layer, name, sizeof(name));
	if (dirfd < 0) {
		err = dirfd;
		goto cleanup;
	}
	json__object_begin(&j, NULL);
	manifest_head(c, &j, e, layer);
	json__array_begin(&j, "tensors");
	for (i = 0; i < NW_CAP_MAX_TENSORS && (uint32_t)i < e->ntensors; i++)
		if (c->t[i].have && write_tensor(dirfd, &j, &c->t[i], params, buffers))
			truncated = 1;
	if (write_unlisted(&j, params, "param", c) + write_unlisted(&j, buffers, "buffer", c))
		truncated = 1;
	json__array_end(&j);
	write_names(&j, "params_none", params);
	write_names(&j, "buffers_none", buffers);
	write_children(c, &j, e->module, params);
	json__object_begin(&j, "attrs");
	a->c = c;
	a->j = &j;
	remote__attrs_each(c->o.remote, e->module, attr_cb, a);
	json__object_end(&j);
	json__array_begin(&j, "attrs_skipped");
	for (i = 0; i < a->nskipped; i++)
		json__string(&j, NULL, a->skipped[i]);
	json__array_end(&j);
	json__bool(&j, "truncated", truncated);
	json__object_end(&j);
	err = json__str(&j)
		      ? write_file(dirfd, "manifest.json", json__str(&j), json__len(&j), "\n", 1)
		      : -ENOMEM;
	if (!err)
		err = give(c, dirfd);
	if (!err)
		snprintf(c->path, sizeof(c->path), "%s/%s", c->dir, name);
cleanup:
	if (dirfd >= 0)
		close(dirfd);
	json__free(&j);
	free(params);
	free(a);
	return err;
}
