/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Captures for offline reproduction: the records the BPF side copied at the
 * first origin anomaly, assembled into DIR/<pid>-step<N>-<layer>/ as .npy
 * files and manifest.json, owned by the target's user, modes 0700/0600.
 */
#ifndef __CAPTURE_H
#define __CAPTURE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <linux/types.h>
#include "nanwatch.h"

struct remote;
struct names;
struct capture;

#define CAPTURE_SCHEMA "nanwatch-capture/1"
#define CAPTURE_MAX_ATTRS 256 /* module attributes written to the manifest */
#define CAPTURE_MAX_RING (1u << 30)
#define CAPTURE_DEFAULT_BYTES (60ull << 20) /* with the records' overhead: a 64 MiB ring */
#define CAPTURE_FACTS_BYTES (6ull << 20) /* without --capture-dir: evidence only, an 8 MiB ring */

struct evidence_facts;

struct capture_opts {
	const char *dir;    /* where capture directories are made; NULL: facts only, no files */
	uint64_t max_bytes; /* tensor data budget */
	pid_t pid;
	const char *comm;
	const char *python_version;
	const char *torch_version;
	const struct remote *remote;
	struct names *names;
	const struct nw_layout *layout;
	uint64_t tuple_type; /* &PyTuple_Type in the target */
	/*
	 * The step of a record as the events name it (the loop's counter, once found), with its
	 * source (FINDING_STEP_*) in *source: what the directory's name and the manifest say.
	 * NULL: the record's own step.
	 */
	uint64_t (*step_of)(void *ctx, uint64_t step, int *source);
	void *step_ctx;
};

/* Check the directory and learn the target's owner; NULL (errno set, err written) on failure. */
struct capture *capture__new(const struct capture_opts *o, char *err, size_t errlen);
void capture__free(struct capture *c); /* accepts NULL */

/* Read the capture ring buffer (map fd) from now on. */
int capture__attach(struct capture *c, int ring_fd);
/* One record of the capture ring buffer (what capture__consume feeds); always 0. */
int capture__record(struct capture *c, const void *data, size_t size);
/* Assemble whatever the BPF side sent; 0 or a negative errno. */
int capture__consume(struct capture *c);
/* The capture directory once written (as the daemon sees it), else NULL. */
const char *capture__path(const struct capture *c);
/*
 * Facts about the captured call's inputs, parameters and buffers (the evidence the
 * diagnosis reads), once a capture ended, with or without a directory; else NULL.
 */
const struct evidence_facts *capture__facts(const struct capture *c);
/* A failure to report once (then NULL). */
const char *capture__error(struct capture *c);

/* The non-None values of module._buffers, in order, as params__list lists parameters. */
int capture__buffers(const struct remote *r, uint64_t module, struct nw_params *out);

/* Bytes of ring buffer that hold a capture of max_bytes: a power of two, 0 if too large. */
uint32_t capture__ring_bytes(uint64_t max_bytes);

/* "<pid>-step<step>-<layer>" with the layer's unsafe characters replaced; "root" for "". */
int capture__dirname(char *buf, size_t len, pid_t pid, uint64_t step, const char *layer);

/* The .npy file name of a tensor: input0.npy, input1_2.npy, kwarg0.mask.npy, param.weight.npy, output.npy. */
int capture__filename(char *buf, size_t len, const struct nw_cap_tensor *d, const char *name);

/*
 * A tensor's name as the manifest gives it: input[1], input[0][2], output[0], a keyword
 * argument's key (mask, mask[1]), or a parameter's or buffer's name (name).
 */
void capture__tensor_name(char *buf, size_t len, const struct nw_cap_tensor *d, const char *name);

#endif /* __CAPTURE_H */
