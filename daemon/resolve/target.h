/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* Target resolution: which interpreter and torch a process runs, found through its own root. */
#ifndef __TARGET_H
#define __TARGET_H

#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

struct target {
	pid_t pid;
	char comm[32];
	char proc_root[64];	    /* /proc/PID/root: the target's files, whatever its mount ns */
	char python_path[PATH_MAX]; /* image exporting the frame evaluator, as the target sees it */
	char python_file[PATH_MAX]; /* the same file reached through proc_root */
	char torch_path[PATH_MAX];  /* libtorch_python.so, as the target sees it */
	/* libtorch_cpu.so, as the daemon opens it ("" if unmapped) */
	char torch_cpu_file[PATH_MAX];
	char torch_python_file[PATH_MAX]; /* libtorch_python.so, as the daemon opens it */
	char python_version[16];	  /* "3.11.2" */
	char python_series[8];		  /* "3.11" */
	char torch_version[64];		  /* "1.13.0a0" */
	char torch_series[16];		  /* "1.13" */
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

/*
 * A file the process maps (path, device and inode as its /proc/PID/maps line names them), as
 * the daemon can open it: through /proc/PID/root when that is the same file, else the path as
 * given (a plain chroot's maps show host paths). 0, or -ENOENT/-EACCES.
 */
int target__image_file(pid_t pid, const char *path, dev_t dev, ino_t ino, char *out, size_t len);

/* Read t->pid's rank, local rank, world size and job from /proc/PID/environ (unset: -1, ""). */
void target__read_env(struct target *t);

/* The process (thread group) pid belongs to: pid itself for a process, its leader for a thread. */
pid_t target__tgid(pid_t pid);

/* Is the process still there (and the same one)? */
int target__alive(const struct target *t);

/* Parse "X.Y..." into "X.Y"; -EINVAL if it does not start that way. */
int target__series(const char *version, char *out, size_t outlen);

#endif /* __TARGET_H */
