// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Target resolution from /proc/PID/{maps,root,environ,comm}. Every path is
 * opened through the target's root so containers and chroots work, and
 * nothing of the target's is executed: versions come from symbols in its
 * memory and from torch/version.py read as text.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include "resolve/elfsym.h"
#include "util/file.h"
#include "resolve/remote.h"
#include "resolve/target.h"

#define MAX_IMAGES 4096

struct image {
	char *path;
	uint64_t base; /* start of its offset-0 mapping */
	dev_t dev;     /* device and inode from the maps line */
	ino_t ino;
};

struct maps {
	struct image *img;
	size_t n;
};

int target__series(const char *version, char *out, size_t outlen)
{
	const char *p = version;
	size_t n;

	if (!isdigit((unsigned char)*p))
		return -EINVAL;
	while (isdigit((unsigned char)*p))
		p++;
	if (*p++ != '.' || !isdigit((unsigned char)*p))
		return -EINVAL;
	while (isdigit((unsigned char)*p))
		p++;
	n = p - version;
	if (n >= outlen)
		return -ENAMETOOLONG;
	memcpy(out, version, n);
	out[n] = 0;
	return 0;
}

static void maps_free(struct maps *m)
{
	size_t i;

	for (i = 0; i < m->n; i++)
		free(m->img[i].path);
	free(m->img);
}

static int maps_add(struct maps *m, const char *path, uint64_t start, uint64_t off, dev_t dev,
		    ino_t ino)
{
	struct image *img;
	size_t i;

	for (i = 0; i < m->n; i++) {
		if (strcmp(m->img[i].path, path))
			continue;
		if (off == 0 && (!m->img[i].base || start < m->img[i].base))
			m->img[i].base = start;
		return 0;
	}
	if (m->n >= MAX_IMAGES)
		return 0;
	img = realloc(m->img, (m->n + 1) * sizeof(*img));
	if (!img)
		return -ENOMEM;
	m->img = img;
	img[m->n].path = strdup(path);
	if (!img[m->n].path)
		return -ENOMEM;
	img[m->n].base = off == 0 ? start : 0;
	img[m->n].dev = dev;
	img[m->n].ino = ino;
	m->n++;
	return 0;
}

static int maps_read(pid_t pid, struct maps *m)
{
	char path[64], *buf, *line, *save = NULL;
	int err = 0;

	snprintf(path, sizeof(path), "/proc/%d/maps", pid);
	buf = file__read(path, TARGET_MAX_MAPS, NULL);
	if (!buf)
		return -errno;
	for (line = strtok_r(buf, "\n", &save); line && !err; line = strtok_r(NULL, "\n", &save)) {
		unsigned long long start, end, off, ino;
		unsigned int major, minor;
		int pos = 0;

		if (sscanf(line, "%llx-%llx %*s %llx %x:%x %llu %n", &start, &end, &off, &major,
			   &minor, &ino, &pos) < 6 ||
		    !pos || line[pos] != '/')
			continue;
		if (strstr(line + pos, " (deleted)"))
			continue;
		err = maps_add(m, line + pos, start, off, makedev(major, minor), ino);
	}
	free(buf);
	return err;
}

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');

	return s ? s + 1 : path;
}

/* Runtime address of a symbol in a mapped image; 0 if absent. */
static uint64_t sym_addr(struct elfsym *e, const struct image *img, const char *name)
{
	uint64_t value, first;

	if (!img->base || elfsym__find(e, name, &value) || elfsym__first_load(e, &first))
		return 0;
	return img->base - first + value;
}

/*
 * /proc/PID/maps names files as the reader sees them: a target in its own
 * mount namespace (a container) shows paths inside it, one in a plain chroot
 * shows host paths. Take the candidate whose device and inode are the mapped
 * file's; prefer the path through the target's root.
 */
static int resolve_image(const struct target *t, const struct image *img, int *through_root)
{
	const char *cand[2] = {t->proc_root, ""};
	int i, pass, denied = 0;

	for (pass = 0; pass < 2; pass++) {
		for (i = 0; i < 2; i++) {
			char file[PATH_MAX + 64];
			struct stat st;

			if (snprintf(file, sizeof(file), "%s%s", cand[i], img->path) >=
			    (int)sizeof(file))
				continue;
			if (stat(file, &st)) {
				denied |= errno == EACCES;
				continue;
			}
			/* overlay filesystems may report other numbers: then take what exists */
			if (pass == 0 && (st.st_ino != img->ino || st.st_dev != img->dev))
				continue;
			*through_root = i == 0;
			return 0;
		}
	}
	return denied ? -EACCES : -ENOENT;
}

static void image_file(const struct target *t, const char *path, int through_root, char *out,
		       size_t len)
{
	const char *prefix = through_root ? t->proc_root : "";
	size_t n = strlen(prefix);

	if (n + strlen(path) + 1 > len) {
		out[0] = 0; /* too long to open: fails as a missing file */
		return;
	}
	memcpy(out, prefix, n);
	strcpy(out + n, path);
}

int target__image_file(pid_t pid, const char *path, dev_t dev, ino_t ino, char *out, size_t len)
{
	struct image img = {.path = (char *)path, .dev = dev, .ino = ino};
	struct target t = {.pid = pid};
	int root, ret;

	snprintf(t.proc_root, sizeof(t.proc_root), "/proc/%d/root", pid);
	ret = resolve_image(&t, &img, &root);
	if (ret)
		return ret;
	image_file(&t, path, root, out, len);
	return out[0] ? 0 : -ENAMETOOLONG;
}

static int open_image(struct target *t, const struct image *img, struct elfsym **e,
		      int *through_root)
{
	char file[PATH_MAX + 64];
	int err = resolve_image(t, img, through_root);

	if (err)
		return err;
	image_file(t, img->path, *through_root, file, sizeof(file));
	*e = elfsym__open(file);
	return *e ? 0 : -errno;
}

static int is_python_name(const char *path)
{
	const char *b = base_name(path);

	return !strncmp(b, "python", 6) || !strncmp(b, "libpython", 9);
}

/* Find the image exporting the frame evaluator and read the interpreter's facts from it. */
static int find_python(struct target *t, const struct maps *m, char *err, size_t errlen)
{
	const char *denied = NULL; /* a Python image the daemon may not read */
	struct remote r;
	size_t i;

	remote__init_pid(&r, t->pid);
	for (i = 0; i < m->n; i++) {
		const struct image *img = &m->img[i];
		struct elfsym *e = NULL;
		uint64_t dummy, ver_addr, ver = 0;
		int root, ret;

		if (!is_python_name(img->path))
			continue;
		ret = open_image(t, img, &e, &root);
		if (ret == -EACCES || ret == -EPERM)
			denied = img->path;
		if (ret)
			continue;
		if (elfsym__find(e, "_PyEval_EvalFrameDefault", &dummy)) {
			elfsym__close(e);
			continue;
		}
		snprintf(t->python_path, sizeof(t->python_path), "%s", img->path);
		image_file(t, img->path, root, t->python_file, sizeof(t->python_file));
		ver_addr = sym_addr(e, img, "Py_Version"); /* exported since 3.11 */
		t->tuple_type = sym_addr(e, img, "PyTuple_Type");
		t->list_type = sym_addr(e, img, "PyList_Type");
		t->none = sym_addr(e, img, "_Py_NoneStruct");
		t->runtime = sym_addr(e, img, "_PyRuntime");
		elfsym__close(e);
		if (!ver_addr || remote__u64(&r, ver_addr, &ver)) {
			snprintf(err, errlen,
				 "unsupported Python in pid %d (%s): older than 3.11 "
				 "(no Py_Version); nanwatch supports CPython 3.11+",
				 t->pid, img->path);
			return -ENOTSUP;
		}
		t->py_version_hex = ver;
		snprintf(t->python_version, sizeof(t->python_version), "%u.%u.%u",
			 (unsigned)(ver >> 24) & 0xff, (unsigned)(ver >> 16) & 0xff,
			 (unsigned)(ver >> 8) & 0xff);
		target__series(t->python_version, t->python_series, sizeof(t->python_series));
		if (!t->tuple_type || !t->list_type || !t->none) {
			snprintf(err, errlen, "failed to resolve CPython type symbols in %s",
				 img->path);
			return -ENOENT;
		}
		return 0;
	}
	if (denied) {
		/* a file its owner keeps private (a 0700 home, a virtualenv): root needs
		 * CAP_DAC_READ_SEARCH to reach it */
		snprintf(
			err, errlen,
			"failed to open pid %d (%s)'s interpreter %s: permission denied (the "
			"daemon needs CAP_DAC_READ_SEARCH to read files their owner keeps private)",
			t->pid, t->comm, denied);
		return -EACCES;
	}
	snprintf(err, errlen,
		 "pid %d (%s) is not a Python process: no mapped file exports "
		 "_PyEval_EvalFrameDefault",
		 t->pid, t->comm);
	return -ENOEXEC;
}

/* The torch package directory, as the daemon can open it: where torch/_C.*.so is mapped from. */
static int torch_dir(struct target *t, const struct maps *m, char *out, size_t len)
{
	size_t i;

	for (i = 0; i < m->n; i++) {
		const char *p = m->img[i].path, *b = base_name(p);
		char dir[PATH_MAX];
		size_t dirlen = b - p;
		int root;

		if (strncmp(b, "_C.", 3) || dirlen < 7 || strncmp(b - 7, "/torch/", 7))
			continue;
		if (dirlen >= sizeof(dir) || resolve_image(t, &m->img[i], &root))
			return -ENOENT;
		memcpy(dir, p, dirlen - 1);
		dir[dirlen - 1] = 0;
		image_file(t, dir, root, out, len);
		return 0;
	}
	return -ENOENT;
}

/* The quoted value of a line `__version__ = '1.13.0a0'` (not `__all__ = ['__version__']`). */
static char *version_line(char *buf)
{
	char *p;

	for (p = buf; p; p = strchr(p, '\n')) {
		char *v;

		p += *p == '\n';
		if (strncmp(p, "__version__", 11))
			continue;
		v = p + 11;
		v += strspn(v, " \t");
		if (*v++ != '=')
			continue;
		v += strspn(v, " \t");
		if (*v == '\'' || *v == '"')
			return v;
	}
	return NULL;
}

/* torch/version.py, read as text, never run. dir is a path the daemon can open. */
static int torch_version(struct target *t, const char *dir, char *err, size_t errlen)
{
	char file[PATH_MAX + 128], *buf, *p, *q;
	size_t n;

	snprintf(file, sizeof(file), "%s/version.py", dir);
	buf = file__read(file, 64 << 10, &n);
	if (!buf) {
		snprintf(err, errlen, "failed to read %s: %s", file, strerror(errno));
		return -ENOENT;
	}
	p = version_line(buf);
	q = p ? strchr(p + 1, *p) : NULL;
	if (!q || q - p - 1 <= 0 || (size_t)(q - p - 1) >= sizeof(t->torch_version)) {
		free(buf);
		snprintf(err, errlen, "failed to parse torch version in %s", file);
		return -EINVAL;
	}
	memcpy(t->torch_version, p + 1, q - p - 1);
	t->torch_version[q - p - 1] = 0;
	free(buf);
	if (target__series(t->torch_version, t->torch_series, sizeof(t->torch_series))) {
		snprintf(err, errlen, "unrecognised torch version '%s'", t->torch_version);
		return -EINVAL;
	}
	return 0;
}

static void find_torch_cpu(struct target *t, const struct maps *m)
{
	size_t i;

	for (i = 0; i < m->n; i++) {
		int root;

		if (strncmp(base_name(m->img[i].path), "libtorch_cpu.so", 15) ||
		    resolve_image(t, &m->img[i], &root))
			continue;
		image_file(t, m->img[i].path, root, t->torch_cpu_file, sizeof(t->torch_cpu_file));
		t->torch_cpu_base = m->img[i].base;
		return;
	}
}

static int find_torch(struct target *t, const struct maps *m, char *err, size_t errlen)
{
	char dir[PATH_MAX];
	size_t i;

	for (i = 0; i < m->n; i++) {
		const struct image *img = &m->img[i];
		struct elfsym *e = NULL;
		int root;

		/* pip wheels map torch/lib/libtorch_python.so; Debian a versioned .so.1.13.0 */
		if (strncmp(base_name(img->path), "libtorch_python.so", 18))
			continue;
		snprintf(t->torch_path, sizeof(t->torch_path), "%s", img->path);
		if (open_image(t, img, &e, &root)) {
			snprintf(err, errlen, "failed to open %s in pid %d's root", img->path,
				 t->pid);
			return -ENOENT;
		}
		t->tensor_type = sym_addr(e, img, "THPVariableType");
		t->tensor_class = sym_addr(e, img, "THPVariableClass");
		elfsym__close(e);
		image_file(t, img->path, root, t->torch_python_file, sizeof(t->torch_python_file));
		if (!t->tensor_type && !t->tensor_class) {
			snprintf(err, errlen,
				 "failed to resolve THPVariableType or THPVariableClass "
				 "in %s",
				 img->path);
			return -ENOENT;
		}
		if (t->tensor_type)
			t->tensor_type_from = "THPVariableType";
		find_torch_cpu(t, m);
		if (torch_dir(t, m, dir, sizeof(dir))) {
			snprintf(err, errlen, "pid %d maps %s but no torch/_C module", t->pid,
				 img->path);
			return -ENOENT;
		}
		return torch_version(t, dir, err, errlen);
	}
	snprintf(err, errlen, "pid %d (%s) runs Python %s but has not loaded torch", t->pid,
		 t->comm, t->python_version);
	return -ENOENT;
}

/* Does the type at addr have a tp_name ending in suffix? */
static int type_named(const struct remote *r, uint64_t type, int64_t type_name, const char *suffix)
{
	char name[128];
	uint64_t p;
	size_t n, k = strlen(suffix);

	if (remote__u64(r, type + type_name, &p) || remote__cstr(r, p, name, sizeof(name)))
		return 0;
	n = strlen(name);
	return n >= k && !strcmp(name + n - k, suffix);
}

int target__tensor_type(struct target *t, const struct remote *r, int64_t type_name,
			int64_t type_base, char *err, size_t errlen)
{
	uint64_t cls = 0, base = 0;
	int ret;

	if (t->tensor_type)
		return 0;
	ret = t->tensor_class ? remote__u64(r, t->tensor_class, &cls) : -ENOENT;
	if (ret || !cls) {
		snprintf(err, errlen, "failed to read THPVariableClass in pid %d: %s", t->pid,
			 ret ? strerror(-ret) : "NULL (torch not initialised yet)");
		return ret ? ret : -ENOENT;
	}
	if (!type_named(r, cls, type_name, "Tensor") || remote__u64(r, cls + type_base, &base) ||
	    !base || !type_named(r, base, type_name, "TensorBase")) {
		snprintf(err, errlen,
			 "failed to resolve the tensor type in pid %d: "
			 "THPVariableClass is not torch.Tensor with a TensorBase base",
			 t->pid);
		return -EINVAL;
	}
	t->tensor_type = base;
	t->tensor_type_from = "THPVariableClass";
	return 0;
}

/* A rank or size: a whole decimal 0..INT_MAX, else -1. */
static int env_int(const char *v)
{
	char *end;
	long n;

	errno = 0;
	n = strtol(v, &end, 10);
	if (errno || end == v || *end || n < 0 || n > INT_MAX)
		return -1;
	return n;
}

/*
 * Where launchers put a rank, best first: torch's own (torchrun, mp launchers, ours), then
 * Open MPI's, MPICH/PMI's and Slurm's, for ranks mpirun or srun start directly. An agent that
 * srun started and that sets RANK for its workers still names them by RANK.
 */
static const char *const env_keys[3][4] = {
	{"RANK=", "OMPI_COMM_WORLD_RANK=", "PMI_RANK=", "SLURM_PROCID="},
	{"LOCAL_RANK=", "OMPI_COMM_WORLD_LOCAL_RANK=", "MPI_LOCALRANKID=", "SLURM_LOCALID="},
	{"WORLD_SIZE=", "OMPI_COMM_WORLD_SIZE=", "PMI_SIZE=", "SLURM_NTASKS="},
};

/* One NAME=VALUE against the keys: the value kept if its key ranks better than the last. */
static void env_rank_var(const char *p, int *vals[3], int prio[3])
{
	size_t f, k, n;

	for (f = 0; f < 3; f++) {
		for (k = 0; k < 4 && (int)k < prio[f]; k++) {
			n = strlen(env_keys[f][k]);
			if (!strncmp(p, env_keys[f][k], n)) {
				*vals[f] = env_int(p + n);
				prio[f] = k;
				return;
			}
		}
	}
}

void target__read_env(struct target *t)
{
	char path[64], *buf, *p, slurm[sizeof(t->job)] = "";
	int *vals[3] = {&t->rank, &t->local_rank, &t->world_size}, prio[3] = {4, 4, 4};
	size_t n;

	t->rank = t->local_rank = t->world_size = -1;
	t->job[0] = 0;
	snprintf(path, sizeof(path), "/proc/%d/environ", t->pid);
	buf = file__read(path, 1 << 20, &n);
	if (!buf)
		return;
	for (p = buf; p < buf + n; p += strlen(p) + 1) {
		if (!strncmp(p, "TORCHELASTIC_RUN_ID=", 20))
			snprintf(t->job, sizeof(t->job), "%s", p + 20);
		else if (!strncmp(p, "SLURM_JOB_ID=", 13))
			snprintf(slurm, sizeof(slurm), "%s", p + 13);
		else
			env_rank_var(p, vals, prio);
	}
	if (!t->job[0])
		memcpy(t->job, slurm, sizeof(slurm));
	free(buf);
}

static int read_comm(struct target *t, char *err, size_t errlen)
{
	char path[64], *buf;

	snprintf(path, sizeof(path), "/proc/%d/comm", t->pid);
	buf = file__read(path, 256, NULL);
	if (!buf) {
		if (errno == ENOENT)
			snprintf(err, errlen, "no such process: %d", t->pid);
		else
			snprintf(err, errlen, "failed to read %s: %s", path, strerror(errno));
		return errno == ENOENT ? -ESRCH : -errno;
	}
	buf[strcspn(buf, "\n")] = 0;
	snprintf(t->comm, sizeof(t->comm), "%s", buf);
	free(buf);
	return 0;
}

/* Paths as the target sees them: a plain chroot's maps show host paths below its root. */
static void strip_root(const struct target *t, char *path, size_t len)
{
	char link[64], root[PATH_MAX];
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/%d/root", t->pid);
	n = readlink(link, root, sizeof(root) - 1);
	if (n <= 1)
		return; /* unreadable, or "/" */
	root[n] = 0;
	if (!strncmp(path, root, n) && path[n] == '/')
		memmove(path, path + n, strnlen(path + n, len - n) + 1);
}

int target__resolve(pid_t pid, struct target *t, char *err, size_t errlen)
{
	struct maps m = {};
	int ret;

	memset(t, 0, sizeof(*t));
	t->pid = pid;
	if (pid <= 0) {
		snprintf(err, errlen, "invalid pid %d", pid);
		return -EINVAL;
	}
	ret = read_comm(t, err, errlen);
	if (ret)
		return ret;
	snprintf(t->proc_root, sizeof(t->proc_root), "/proc/%d/root", pid);
	ret = maps_read(pid, &m);
	if (ret) {
		snprintf(err, errlen, "failed to read /proc/%d/maps: %s", pid, strerror(-ret));
		goto cleanup;
	}
	ret = find_python(t, &m, err, errlen);
	if (!ret)
		ret = find_torch(t, &m, err, errlen);
	if (!ret) {
		target__read_env(t);
		strip_root(t, t->python_path, sizeof(t->python_path));
		strip_root(t, t->torch_path, sizeof(t->torch_path));
	}
cleanup:
	maps_free(&m);
	return ret;
}

pid_t target__tgid(pid_t pid)
{
	char path[64], *buf, *p;
	long tgid = -1;

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	buf = file__read(path, 64 << 10, NULL);
	if (!buf)
		return -errno;
	p = strstr(buf, "\nTgid:");
	if (p)
		tgid = strtol(p + 6, NULL, 10);
	free(buf);
	return tgid > 0 && tgid <= INT_MAX ? (pid_t)tgid : -EINVAL;
}

int target__alive(const struct target *t)
{
	return kill(t->pid, 0) == 0 || errno == EPERM;
}
