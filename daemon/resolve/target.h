/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Target resolution: which interpreter and torch a process runs, found through its own root. */
#ifndef __TARGET_H
#define __TARGET_H

#include <limits.h>
#include <stdint.h>
#include <sys/types.h>
#include "resolve/elfsym.h"

/*
 * The images below are open from the resolve to the attach: the very files the process maps
 * (through /proc/PID/map_files, else by path with device and inode checked), read through the
 * one budget, their descriptors what the uprobes are attached to. target__close closes them.
 */
struct target {
	pid_t pid;
	char comm[32];
	char proc_root[64];	    /* /proc/PID/root: the target's files, whatever its mount ns */
	char python_path[PATH_MAX]; /* image exporting the frame evaluator, as the target sees it */
	char torch_path[PATH_MAX];  /* libtorch_python.so, as the target sees it */
	char torch_cpu_path[PATH_MAX]; /* libtorch_cpu.so, as the target sees it ("" if unmapped) */
	char torch_dir[PATH_MAX];      /* the torch package directory, as the target sees it */
	struct elfsym *python_elf;     /* the interpreter image */
	struct elfsym *torch_python_elf;
	uint64_t torch_python_bias;   /* runtime - link-time address in it; 0: unknown */
	struct elfsym *torch_cpu_elf; /* NULL: unmapped, or not readable (torch_cpu_err) */
	int torch_cpu_err;	      /* why torch_cpu_elf is NULL although mapped; 0 if unmapped */
	struct elfsym_budget budget;  /* what one resolve may read of the target's files */
	uint64_t eval_offset;	      /* _PyEval_EvalFrameDefault's file offset in python_elf */
	char python_version[16];      /* "3.11.2" */
	char python_series[8];	      /* "3.11" */
	char torch_version[64];	      /* "1.13.0a0" */
	char torch_series[16];	      /* "1.13" */
	/* the job: TORCHELASTIC_RUN_ID, else SLURM_JOB_ID, from the environment; "" if unset */
	char job[128];
	/* RANK, LOCAL_RANK, WORLD_SIZE from the environment (else Open MPI's, PMI's or Slurm's
	 * variables); -1 if unset or not an integer */
	int rank, local_rank, world_size;
	uint64_t py_version_hex; /* Py_Version: PY_VERSION_HEX */
	uint64_t runtime;	 /* &_PyRuntime (0 if not exported) */
	uint64_t tuple_type;	 /* runtime addresses in the target */
	uint64_t list_type;
	uint64_t none;
	uint64_t tensor_type;	      /* torch._C.TensorBase (0 until target__tensor_type) */
	uint64_t tensor_class;	      /* &THPVariableClass (0 if not exported) */
	const char *tensor_type_from; /* the symbol tensor_type came from */
	uint64_t torch_cpu_base; /* where libtorch_cpu's file offset 0 is mapped (0: unknown) */
};

#define TARGET_MAX_MAPS (8u << 20) /* bytes of /proc/PID/maps we read */

/*
 * Fill t for pid. On failure returns a negative errno and writes a one-line
 * reason to err: no such process, not Python, no torch, unsupported version.
 */
int target__resolve(pid_t pid, struct target *t, char *err, size_t errlen);

struct remote;

/*
 * Make t->tensor_type the address of torch._C.TensorBase. Builds that keep THPVariableType
 * static (torch 2.11 wheels) still export THPVariableClass, a PyObject * to torch.Tensor set
 * when torch is imported: its tp_base (type_base) is TensorBase, checked by tp_name
 * (type_name). Bounded reads through r; on failure a negative errno and a line in err.
 */
int target__tensor_type(struct target *t, const struct remote *r, int64_t type_name,
			int64_t type_base, char *err, size_t errlen);

/* Close the images t holds (after the attach, or a failed resolve); t stays readable. */
void target__close(struct target *t);

/*
 * A file the process maps, opened for reading: the one its /proc/PID/maps line names (path,
 * one mapping [start, end), device and inode), through /proc/PID/map_files (the kernel's own
 * link to the mapped file); where the daemon may not use that (it needs CAP_SYS_ADMIN), by
 * the path below the process's root, through no symbolic link. Either way only a regular file
 * whose device and inode are the line's, opened without blocking; no other file at the path is
 * ever opened. A descriptor, or a negative errno: -ESTALE (another file than the mapped one),
 * -EINVAL (not a regular file), -ENOENT (unmapped since), -EACCES.
 */
int target__open_image(pid_t pid, const char *path, uint64_t start, uint64_t end, dev_t dev,
		       ino_t ino);

/* Why an image could not be opened or read (an errno of target__open_image or elfsym). */
const char *target__image_why(int err);

/* Read t->pid's rank, local rank, world size and job from /proc/PID/environ (unset: -1, ""). */
void target__read_env(struct target *t);

/* The process (thread group) pid belongs to: pid itself for a process, its leader for a thread. */
pid_t target__tgid(pid_t pid);

/* Is the process still there (and the same one)? */
int target__alive(const struct target *t);

/*
 * Is pid's root (/proc/PID/root) the daemon's own? 1 if so; 0 if it is another (a container,
 * a chroot) or cannot be seen.
 */
int target__same_root(pid_t pid);

/*
 * pid's executable: a read-only descriptor of the very file (through /proc/PID/exe) and, in
 * path, its name as the target sees it. -errno if it cannot be opened.
 */
int target__open_exe(pid_t pid, char *path, size_t len);

/* Parse "X.Y..." into "X.Y"; -EINVAL if it does not start that way. */
int target__series(const char *version, char *out, size_t outlen);

/*
 * 1 if the interpreter whose _PyRuntime is at runtime is a free-threaded build (3.13t, 3.14t:
 * _Py_DebugOffsets says so); 0 if not, or if it publishes no offsets (before 3.13).
 */
int target__free_threaded(const struct remote *r, uint64_t runtime);

#endif /* __TARGET_H */
