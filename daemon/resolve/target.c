// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Target resolution from /proc/PID/{maps,map_files,root,environ,comm}. The images are the
 * files the process maps, opened through map_files (else by path, device and inode checked),
 * other files through the target's root so containers and chroots work; all of them are the
 * target user's to write, so they are read bounded (resolve/elfsym.c) and nothing of the
 * target's is executed: versions come from symbols in its memory and from torch/version.py
 * read as text.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* O_PATH */
#endif
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <linux/magic.h>
#include <linux/openat2.h>
#include "resolve/elfsym.h"
#include "util/file.h"
#include "resolve/remote.h"
#include "resolve/target.h"

#define MAX_IMAGES 4096

struct image {
	char *path;
	uint64_t base;	     /* start of its offset-0 mapping */
	uint64_t start, end; /* its first mapping: /proc/PID/map_files/START-END */
	dev_t dev;	     /* device and inode from the maps line */
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

static int maps_add(struct maps *m, const char *path, uint64_t start, uint64_t end, uint64_t off,
		    dev_t dev, ino_t ino)
{
	struct image *img;
	size_t i;

	for (i = 0; i < m->n; i++) {
		if (strcmp(m->img[i].path, path) || m->img[i].dev != dev || m->img[i].ino != ino)
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
	img += m->n;
	*img = (struct image){.path = strdup(path),
			      .base = off == 0 ? start : 0,
			      .start = start,
			      .end = end,
			      .dev = dev,
			      .ino = ino};
	if (!img->path)
		return -ENOMEM;
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
		err = maps_add(m, line + pos, start, end, off, makedev(major, minor), ino);
	}
	free(buf);
	return err;
}

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');

	return s ? s + 1 : path;
}

/*
 * Runtime address of a symbol in a mapped image; 0 if absent. A table that could not be read
 * (a hostile file) sets *err, the first such errno kept, for the caller to say so.
 */
static uint64_t sym_addr(struct elfsym *e, const struct image *img, const char *name, int *err)
{
	uint64_t value, first;
	int ret = elfsym__find(e, name, &value);

	if (ret && ret != -ENOENT && !*err)
		*err = ret;
	if (!img->base || ret || elfsym__first_load(e, &first))
		return 0;
	return img->base - first + value;
}

/*
 * /proc/PID/maps names files as the reader sees them: a target in its own mount namespace (a
 * container) shows paths inside it, one in a plain chroot host paths, below what its
 * /proc/PID/root link names. The path as the target sees it, in place.
 */
static void strip_root(pid_t pid, char *path, size_t len)
{
	char link[64], root[PATH_MAX];
	ssize_t n;

	snprintf(link, sizeof(link), "/proc/%d/root", pid);
	n = readlink(link, root, sizeof(root) - 1);
	if (n <= 1)
		return; /* unreadable, or "/" */
	root[n] = 0;
	if (!strncmp(path, root, n) && path[n] == '/')
		memmove(path, path + n, strnlen(path + n, len - n) + 1);
}

/* A copy of path as the target sees it, for messages. */
static const char *seen(pid_t pid, const char *path, char *buf, size_t len)
{
	snprintf(buf, len, "%s", path);
	strip_root(pid, buf, len);
	return buf;
}

static int openat2_(int dirfd, const char *path, int flags, uint64_t resolve)
{
	struct open_how how = {.flags = flags, .resolve = resolve};

	return syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
}

/* pid's root, for paths of its to be resolved inside it (RESOLVE_IN_ROOT); -errno if none. */
static int root_fd(pid_t pid)
{
	char root[64];
	int fd;

	snprintf(root, sizeof(root), "/proc/%d/root", pid);
	fd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

/*
 * Before Linux 6.8 the maps line of a file on overlayfs gave the inode underneath (the path
 * and the file itself are the overlay's, whose device differs). Through map_files, the
 * kernel's link to the mapping itself, that one difference is taken as the same file: the
 * inode number equal, the file on overlayfs. Never for a file found by its path.
 */
static int overlay_alias(int pathfd, const struct stat *st, ino_t ino)
{
	struct statfs fs;

	return st->st_ino == ino && !fstatfs(pathfd, &fs) && fs.f_type == OVERLAYFS_SUPER_MAGIC;
}

/* Reopen pathfd for reading if it is the mapped file (dev, ino). */
static int reopen_mapped(int pathfd, dev_t dev, ino_t ino, int via_map_files)
{
	struct stat st;

	if (fstat(pathfd, &st)) {
		int err = -errno;

		close(pathfd);
		return err;
	}
	if ((st.st_dev != dev || st.st_ino != ino) &&
	    !(via_map_files && S_ISREG(st.st_mode) && overlay_alias(pathfd, &st, ino))) {
		close(pathfd);
		return -ESTALE;
	}
	return file__reopen(pathfd, &st);
}

/* The path below pid's root, through no symbolic link: nothing but the name is trusted. */
static int open_by_path(pid_t pid, const char *path, dev_t dev, ino_t ino)
{
	char in[PATH_MAX];
	int rootfd, fd, err;

	if (snprintf(in, sizeof(in), "%s", path) >= (int)sizeof(in))
		return -ENAMETOOLONG;
	strip_root(pid, in, sizeof(in));
	rootfd = root_fd(pid);
	if (rootfd < 0)
		return rootfd;
	fd = openat2_(rootfd, in, O_PATH | O_NOFOLLOW | O_CLOEXEC,
		      RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS);
	err = errno;
	close(rootfd);
	return fd < 0 ? -err : reopen_mapped(fd, dev, ino, 0);
}

int target__open_image(pid_t pid, const char *path, uint64_t start, uint64_t end, dev_t dev,
		       ino_t ino)
{
	char link[96];
	int fd;

	snprintf(link, sizeof(link), "/proc/%d/map_files/%llx-%llx", pid, (unsigned long long)start,
		 (unsigned long long)end);
	/* O_PATH: the link followed opens nothing (a device's driver, a FIFO) */
	fd = open(link, O_PATH | O_CLOEXEC);
	if (fd >= 0)
		return reopen_mapped(fd, dev, ino, 1);
	/* opening map_files takes CAP_SYS_ADMIN (or CAP_CHECKPOINT_RESTORE) */
	if (errno != EPERM && errno != EACCES)
		return -errno; /* ENOENT: unmapped since; the path is not looked at then */
	return open_by_path(pid, path, dev, ino);
}

const char *target__image_why(int err)
{
	switch (-err) {
	case ESTALE:
		return "not the file the process maps (replaced since it was mapped)";
	case EINVAL:
		return "not a regular file";
	case EISDIR:
		return "a directory";
	case ENOEXEC:
		return "not an ELF file the daemon reads (malformed, headers pointing out of the "
		       "file, or a table with holes)";
	case EFBIG:
		return "larger than the daemon reads (over 1024 sections, a 32 MiB symbol table, "
		       "96 MiB of names, or the resolve's 128 MiB)";
	case ETIME:
		return "reading it took longer than the resolve's 5 s";
	case EIO:
		return "it changed while it was read";
	case ENOENT:
		return "no longer mapped";
	case ELOOP:
		return "a symbolic link on its path";
	default:
		return strerror(-err);
	}
}

static int open_image(struct target *t, const struct image *img, struct elfsym **e)
{
	int fd = target__open_image(t->pid, img->path, img->start, img->end, img->dev, img->ino);

	if (fd < 0)
		return fd;
	*e = elfsym__open_fd(fd, &t->budget);
	return *e ? 0 : -errno;
}

void target__close(struct target *t)
{
	elfsym__close(t->python_elf);
	elfsym__close(t->torch_python_elf);
	elfsym__close(t->torch_cpu_elf);
	t->python_elf = t->torch_python_elf = t->torch_cpu_elf = NULL;
}

static int is_python_name(const char *path)
{
	const char *b = base_name(path);

	return !strncmp(b, "python", 6) || !strncmp(b, "libpython", 9);
}

/* _Py_DebugOffsets at _PyRuntime: the cookie "xdebugpy", the version, then free_threaded. */
int target__free_threaded(const struct remote *r, uint64_t runtime)
{
	uint64_t w[3];

	return runtime && !remote__read(r, runtime, w, sizeof(w)) &&
	       !memcmp(&w[0], "xdebugpy", 8) && w[2];
}

/* The interpreter's facts from its image e: the evaluator's offset, types, the version. */
static int python_facts(struct target *t, struct elfsym *e, const struct image *img, uint64_t eval,
			char *err, size_t errlen)
{
	uint64_t ver_addr, ver = 0;
	char shown[PATH_MAX];
	struct remote r;
	int bad = 0;

	seen(t->pid, img->path, shown, sizeof(shown));
	remote__init_pid(&r, t->pid);
	if (elfsym__file_offset(e, eval, &t->eval_offset)) {
		snprintf(err, errlen, "failed to place _PyEval_EvalFrameDefault in %s: %s", shown,
			 "outside the file's loaded segments");
		return -ENOEXEC;
	}
	ver_addr = sym_addr(e, img, "Py_Version", &bad); /* exported since 3.11 */
	t->tuple_type = sym_addr(e, img, "PyTuple_Type", &bad);
	t->list_type = sym_addr(e, img, "PyList_Type", &bad);
	t->none = sym_addr(e, img, "_Py_NoneStruct", &bad);
	t->runtime = sym_addr(e, img, "_PyRuntime", &bad);
	if (bad) {
		snprintf(err, errlen, "failed to read pid %d's %s: %s", t->pid, shown,
			 target__image_why(bad));
		return bad;
	}
	if (!ver_addr || remote__u64(&r, ver_addr, &ver)) {
		snprintf(err, errlen,
			 "unsupported Python in pid %d (%s): older than 3.11 "
			 "(no Py_Version); nanwatch supports CPython 3.11+",
			 t->pid, shown);
		return -ENOTSUP;
	}
	t->py_version_hex = ver;
	snprintf(t->python_version, sizeof(t->python_version), "%u.%u.%u",
		 (unsigned)(ver >> 24) & 0xff, (unsigned)(ver >> 16) & 0xff,
		 (unsigned)(ver >> 8) & 0xff);
	target__series(t->python_version, t->python_series, sizeof(t->python_series));
	if (target__free_threaded(&r, t->runtime)) {
		snprintf(err, errlen,
			 "unsupported Python %s in pid %d (%s): a free-threaded build "
			 "(_Py_DebugOffsets.free_threaded); nanwatch reads the default build's "
			 "objects and frames (no per-object thread id, shared reference "
			 "counts, one bytecode per code object): run it under the default "
			 "python%s",
			 t->python_version, t->pid, shown, t->python_series);
		return -ENOTSUP;
	}
	if (!t->tuple_type || !t->list_type || !t->none) {
		snprintf(err, errlen, "failed to resolve CPython type symbols in %s", shown);
		return -ENOENT;
	}
	return 0;
}

/* No image exports the evaluator: say why, naming an image refused (ret) if there was one. */
static int no_python(struct target *t, const struct image *refused, int ret, char *err,
		     size_t errlen)
{
	if (refused && (ret == -EACCES || ret == -EPERM)) {
		/* a file its owner keeps private (a 0700 home, a virtualenv): root needs
		 * CAP_DAC_READ_SEARCH to reach it */
		snprintf(
			err, errlen,
			"failed to open pid %d (%s)'s interpreter %s: permission denied (the "
			"daemon needs CAP_DAC_READ_SEARCH to read files their owner keeps private)",
			t->pid, t->comm, refused->path);
		return -EACCES;
	}
	if (refused) {
		snprintf(err, errlen,
			 "pid %d (%s): no readable mapped file exports _PyEval_EvalFrameDefault; "
			 "refused %s: %s",
			 t->pid, t->comm, refused->path, target__image_why(ret));
		return ret;
	}
	snprintf(err, errlen,
		 "pid %d (%s) is not a Python process: no mapped file exports "
		 "_PyEval_EvalFrameDefault",
		 t->pid, t->comm);
	return -ENOEXEC;
}

/* Find the image exporting the frame evaluator and read the interpreter's facts from it. */
static int find_python(struct target *t, const struct maps *m, char *err, size_t errlen)
{
	const struct image *refused = NULL; /* a Python image the daemon did not read */
	int refused_err = 0;
	size_t i;

	for (i = 0; i < m->n; i++) {
		const struct image *img = &m->img[i];
		struct elfsym *e = NULL;
		uint64_t eval;
		int ret;

		if (!is_python_name(img->path))
			continue;
		ret = open_image(t, img, &e);
		if (!ret)
			ret = elfsym__find(e, "_PyEval_EvalFrameDefault", &eval);
		if (ret) {
			/* permission first: what the user can do something about */
			if (ret != -ENOENT && (!refused || ret == -EACCES || ret == -EPERM)) {
				refused = img;
				refused_err = ret;
			}
			elfsym__close(e);
			continue;
		}
		snprintf(t->python_path, sizeof(t->python_path), "%s", img->path);
		t->python_elf = e;
		return python_facts(t, e, img, eval, err, errlen);
	}
	return no_python(t, refused, refused_err, err, errlen);
}

/* The torch package directory as the target sees it: where torch/_C.*.so is mapped from. */
static int torch_dir(struct target *t, const struct maps *m, char *out, size_t len)
{
	size_t i;

	for (i = 0; i < m->n; i++) {
		const char *p = m->img[i].path, *b = base_name(p);
		size_t dirlen = b - p;

		if (strncmp(b, "_C.", 3) || dirlen < 7 || strncmp(b - 7, "/torch/", 7))
			continue;
		if (dirlen > len)
			return -ENOENT;
		memcpy(out, p, dirlen - 1);
		out[dirlen - 1] = 0;
		strip_root(t->pid, out, len);
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

/* dir/version.py below the target's root, through no symbolic link; errno set on failure. */
static char *read_version_py(struct target *t, const char *file, size_t *n)
{
	int rootfd = root_fd(t->pid), err;
	char *buf;

	if (rootfd < 0) {
		errno = -rootfd;
		return NULL;
	}
	buf = file__read_in(rootfd, file, 64 << 10, n);
	err = errno;
	close(rootfd);
	errno = err;
	return buf;
}

/* torch/version.py, read as text, never run. dir is the package as the target sees it. */
static int torch_version(struct target *t, const char *dir, char *err, size_t errlen)
{
	char file[PATH_MAX + 128], *buf, *p, *q;
	size_t n;

	snprintf(file, sizeof(file), "%s/version.py", dir);
	buf = read_version_py(t, file, &n);
	if (!buf) {
		snprintf(err, errlen, "failed to read %s in pid %d's root: %s%s", file, t->pid,
			 strerror(errno),
			 errno == EACCES ? " (the daemon needs CAP_DAC_READ_SEARCH to read files "
					   "their owner keeps private)"
					 : "");
		return errno == EACCES ? -EACCES : -ENOENT;
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

/* libtorch_cpu, opened now (its tables are read when first looked up); why not in torch_cpu_err. */
static void find_torch_cpu(struct target *t, const struct maps *m)
{
	size_t i;

	for (i = 0; i < m->n; i++) {
		if (strncmp(base_name(m->img[i].path), "libtorch_cpu.so", 15))
			continue;
		snprintf(t->torch_cpu_path, sizeof(t->torch_cpu_path), "%s", m->img[i].path);
		t->torch_cpu_base = m->img[i].base;
		t->torch_cpu_err = open_image(t, &m->img[i], &t->torch_cpu_elf);
		return;
	}
}

static int find_torch(struct target *t, const struct maps *m, char *err, size_t errlen)
{
	char dir[PATH_MAX], shown[PATH_MAX];
	uint64_t first;
	size_t i;

	for (i = 0; i < m->n; i++) {
		const struct image *img = &m->img[i];
		int ret;

		/* pip wheels map torch/lib/libtorch_python.so; Debian a versioned .so.1.13.0 */
		if (strncmp(base_name(img->path), "libtorch_python.so", 18))
			continue;
		snprintf(t->torch_path, sizeof(t->torch_path), "%s", img->path);
		seen(t->pid, img->path, shown, sizeof(shown));
		ret = open_image(t, img, &t->torch_python_elf);
		if (ret) {
			snprintf(err, errlen, "failed to read pid %d's %s: %s", t->pid, shown,
				 target__image_why(ret));
			return ret;
		}
		if (img->base && !elfsym__first_load(t->torch_python_elf, &first))
			t->torch_python_bias = img->base - first;
		t->tensor_type = sym_addr(t->torch_python_elf, img, "THPVariableType", &ret);
		t->tensor_class = sym_addr(t->torch_python_elf, img, "THPVariableClass", &ret);
		if (ret) {
			snprintf(err, errlen, "failed to read pid %d's %s: %s", t->pid, shown,
				 target__image_why(ret));
			return ret;
		}
		if (!t->tensor_type && !t->tensor_class) {
			snprintf(err, errlen,
				 "failed to resolve THPVariableType or THPVariableClass "
				 "in %s",
				 shown);
			return -ENOENT;
		}
		if (t->tensor_type)
			t->tensor_type_from = "THPVariableType";
		find_torch_cpu(t, m);
		if (torch_dir(t, m, dir, sizeof(dir))) {
			snprintf(err, errlen, "pid %d maps %s but no torch/_C module", t->pid,
				 shown);
			return -ENOENT;
		}
		snprintf(t->torch_dir, sizeof(t->torch_dir), "%s", dir);
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
	elfsym__budget(&t->budget, ELFSYM_BUDGET_BYTES, ELFSYM_BUDGET_MS);
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
		strip_root(pid, t->python_path, sizeof(t->python_path));
		strip_root(pid, t->torch_path, sizeof(t->torch_path));
		strip_root(pid, t->torch_cpu_path, sizeof(t->torch_cpu_path));
	}
cleanup:
	if (ret)
		target__close(t); /* a failed resolve holds nothing open */
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

int target__open_exe(pid_t pid, char *path, size_t len)
{
	char link[64];
	ssize_t n;
	int fd;

	snprintf(link, sizeof(link), "/proc/%d/exe", pid);
	n = readlink(link, path, len - 1);
	if (n <= 0)
		return n ? -errno : -ENOENT;
	path[n] = 0;
	strip_root(pid, path, len);
	fd = open(link, O_RDONLY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

int target__alive(const struct target *t)
{
	return kill(t->pid, 0) == 0 || errno == EPERM;
}

int target__same_root(pid_t pid)
{
	char path[64];
	struct stat a, b;

	snprintf(path, sizeof(path), "/proc/%d/root", pid);
	return !stat(path, &a) && !stat("/", &b) && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}
