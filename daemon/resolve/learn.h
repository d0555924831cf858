/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Learning a target's layout tables: nanwatch-layout run by the target's own interpreter, as the
 * target's user, inside the target's root, with nothing of the daemon's: no privileges or
 * capabilities, no_new_privs, no network, a clean environment, a time limit and an output
 * limit. What it prints is untrusted: the caller parses and verifies it like any table.
 */
#ifndef __LEARN_H
#define __LEARN_H

#include <stddef.h>
#include <sys/types.h>

#define LEARN_MAX_GROUPS 64
#define LEARN_MAX_OUTPUT (256u << 10) /* bytes of tables read back */
#define LEARN_NOBODY 65534	      /* who a root target's learning runs as */

struct learn_identity {
	uid_t uid; /* the target's effective ids (as the host sees them) */
	gid_t gid;
	gid_t groups[LEARN_MAX_GROUPS];
	int ngroups;
};

struct learn_req {
	pid_t pid;
	struct learn_identity id;
	int interp_fd;		 /* the target's interpreter file, run with execveat */
	const char *interp_path; /* argv[0]: its path as the target sees it */
	int tool_fd;		 /* nanwatch-layout, given to the interpreter on stdin */
	int keys_fd;		 /* its schema (layout_keys.def), as /proc/self/fd/3 */
	const char *import_dir;	 /* the directory the target's torch package is in */
	unsigned int timeout_ms; /* the whole run, killed past it */
};

/*
 * The identity a target's learning runs as: its effective uid, gid and groups from
 * /proc/PID/status; a target running as root gets LEARN_NOBODY (no group). -errno if unread.
 */
int learn__identity(pid_t pid, struct learn_identity *id, uid_t *owner);

/*
 * Run nanwatch-layout --python --torch as req says; its standard output (both tables) in a
 * malloc'd NUL-terminated *out of *outlen bytes. On failure a negative errno and one line in
 * err: ETIMEDOUT (the time limit), EFBIG (more than LEARN_MAX_OUTPUT), EPROTO (it exited
 * non-zero: its last line of standard error quoted), or what a step of the set-up failed with.
 */
int learn__run(const struct learn_req *req, char **out, size_t *outlen, char *err, size_t errlen);

#endif /* __LEARN_H */
