// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* nanwatch-layout run for a target: as its user, inside its root, with nothing of ours. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* setns, unshare, setresuid, pipe2, F_DUPFD_CLOEXEC */
#endif
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/capability.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include "resolve/learn.h"
#include "util/clock.h"
#include "util/file.h"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

#define STATUS_MAX (64 << 10)
#define STDERR_KEEP 2048
#define HIGH_FD 16 /* the child's descriptors are moved above what it hands on */

/* The numbers after "Name:" on a /proc/PID/status line, at most max; how many, -1 if none. */
static int status_ids(const char *buf, const char *name, unsigned long *ids, int max)
{
	const char *p = strstr(buf, name);
	int n = 0;

	if (!p)
		return -1;
	p += strlen(name);
	while (*p && *p != '\n' && n < max) {
		char *end;
		unsigned long v;

		while (*p == ' ' || *p == '\t')
			p++;
		if (*p < '0' || *p > '9')
			break;
		errno = 0;
		v = strtoul(p, &end, 10);
		if (errno || v > UINT_MAX - 1)
			return -1;
		ids[n++] = v;
		p = end;
	}
	while (*p == ' ' || *p == '\t')
		p++;
	return *p && *p != '\n' ? -1 : n; /* more than max, or not a number */
}

int learn__identity(pid_t pid, struct learn_identity *id, uid_t *owner)
{
	unsigned long uids[4], gids[4], groups[LEARN_MAX_GROUPS];
	char path[64], *buf;
	int n, i;

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	buf = file__read(path, STATUS_MAX, NULL);
	if (!buf)
		return -errno;
	memset(id, 0, sizeof(*id));
	if (status_ids(buf, "\nUid:", uids, 4) != 4 || status_ids(buf, "\nGid:", gids, 4) != 4) {
		free(buf);
		return -EINVAL;
	}
	n = status_ids(buf, "\nGroups:", groups, LEARN_MAX_GROUPS);
	free(buf);
	if (n < 0)
		return -E2BIG; /* more groups than we hand on: not the target's identity */
	*owner = uids[1];
	if (uids[1] == 0) {
		/* never root, even without capabilities: root owns the files of the root */
		id->uid = id->gid = LEARN_NOBODY;
		return 0;
	}
	id->uid = uids[1];
	id->gid = gids[1];
	for (i = 0; i < n; i++)
		id->groups[i] = groups[i];
	id->ngroups = n;
	return 0;
}

#define SETUP_FAILED 126 /* the child's exit status when a step before the exec failed */
#define SETUP_PREFIX "nanwatchd-learn: "

/* One line on standard error from the child (no allocation after fork), then exit. */
static void __attribute__((noreturn)) child_fail(const char *step)
{
	static const char *const names[] = {
		[EPERM] = "EPERM",   [ENOENT] = "ENOENT", [EACCES] = "EACCES",
		[EINVAL] = "EINVAL", [ENOSYS] = "ENOSYS", [EBADF] = "EBADF"};
	char buf[160], num[16];
	int e = errno, i = sizeof(num);
	size_t n;

	num[--i] = 0;
	do
		num[--i] = '0' + e % 10;
	while ((e /= 10) && i > 0);
	e = errno;
	n = (size_t)snprintf(buf, sizeof(buf), SETUP_PREFIX "%s failed (%s)\n", step,
			     e > 0 && e < (int)(sizeof(names) / sizeof(names[0])) && names[e]
				     ? names[e]
				     : num + i);
	if (write(2, buf, n < sizeof(buf) ? n : sizeof(buf) - 1) < 0)
		_exit(SETUP_FAILED);
	_exit(SETUP_FAILED);
}

struct child_fds {
	int interp, tool, keys, root, mntns, out, err;
};

static void __attribute__((noreturn)) child(const struct learn_req *r, struct child_fds f,
					    int enter_ns, char *const argv[], char *const envp[])
{
	struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct caps[2] = {};
	struct rlimit core = {0, 0}, cpu;
	int *fds[] = {&f.interp, &f.tool, &f.keys, &f.root, &f.mntns, &f.out, &f.err};
	sigset_t none;
	size_t i;
	int c;

	sigemptyset(&none);
	setpgid(0, 0);
	if (sigprocmask(SIG_SETMASK, &none, NULL) || prctl(PR_SET_PDEATHSIG, SIGKILL))
		child_fail("PR_SET_PDEATHSIG");
	for (i = 0; i < sizeof(fds) / sizeof(fds[0]); i++)
		if (*fds[i] >= 0 && (*fds[i] = fcntl(*fds[i], F_DUPFD_CLOEXEC, HIGH_FD)) < 0)
			child_fail("moving descriptors");
	if (dup2(f.err, 2) < 0 || dup2(f.tool, 0) < 0 || dup2(f.out, 1) < 0 || dup2(f.keys, 3) < 0)
		child_fail("dup2");
	/* nothing of the daemon's (BPF objects, outputs, sockets) reaches the program */
	if (syscall(SYS_close_range, 4, ~0U, CLOSE_RANGE_CLOEXEC))
		child_fail("close_range");
	if (enter_ns && setns(f.mntns, CLONE_NEWNS))
		child_fail("setns into the target's mount namespace");
	/* a mount namespace of its own (the target's /proc may be another pid namespace's) and
	 * no network */
	if (fchdir(f.root) || unshare(CLONE_NEWNS | CLONE_NEWNET))
		child_fail("unshare");
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL))
		child_fail("making its mounts private");
	if (chroot(".") || chdir("/"))
		child_fail("chroot into the target's root");
	/* the tool reads /proc/self: a /proc of this pid namespace, other users' hidden; a root
	 * without a /proc directory gets none (the tool then says so) */
	if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, "hidepid=invisible") &&
	    errno != ENOENT && errno != ENOTDIR)
		child_fail("mounting /proc");
	cpu.rlim_cur = cpu.rlim_max = r->timeout_ms / 1000 + 1;
	if (setrlimit(RLIMIT_CORE, &core) || setrlimit(RLIMIT_CPU, &cpu))
		child_fail("setrlimit");
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
		child_fail("PR_SET_NO_NEW_PRIVS");
	/* the bounding set too, where we may (it needs CAP_SETPCAP): the uid change below
	 * clears the rest */
	for (c = 0; c < 64; c++)
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) && errno == EINVAL)
			break;
	if (setgroups(r->id.ngroups, r->id.groups))
		child_fail("setgroups");
	if (setresgid(r->id.gid, r->id.gid, r->id.gid))
		child_fail("setresgid");
	if (setresuid(r->id.uid, r->id.uid, r->id.uid))
		child_fail("setresuid");
	if (!getuid() || !geteuid() || syscall(SYS_capset, &hdr, caps))
		child_fail("dropping every capability");
	syscall(SYS_execveat, f.interp, "", argv, envp, AT_EMPTY_PATH);
	child_fail("execveat of the target's interpreter");
}

/* The last non-empty line of text, printable only, into out. */
static void last_line(const char *text, size_t len, char *out, size_t outlen)
{
	size_t end = len, start, i, n = 0;

	while (end && (text[end - 1] == '\n' || text[end - 1] == '\r'))
		end--;
	for (start = end; start && text[start - 1] != '\n'; start--)
		;
	for (i = start; i < end && n + 1 < outlen; i++)
		out[n++] = (unsigned char)text[i] < 0x20 || text[i] == 0x7f ? '?' : text[i];
	out[n] = 0;
}

struct reading {
	char *out;
	size_t len;
	char errbuf[STDERR_KEEP];
	size_t errlen;
};

/* The end of the child's standard error: its last line is what a failure says. */
static void keep_tail(struct reading *rd, const char *p, size_t n)
{
	if (n >= sizeof(rd->errbuf)) {
		memcpy(rd->errbuf, p + n - sizeof(rd->errbuf), sizeof(rd->errbuf));
		rd->errlen = sizeof(rd->errbuf);
		return;
	}
	if (rd->errlen + n > sizeof(rd->errbuf)) {
		size_t drop = rd->errlen + n - sizeof(rd->errbuf);

		memmove(rd->errbuf, rd->errbuf + drop, rd->errlen - drop);
		rd->errlen -= drop;
	}
	memcpy(rd->errbuf + rd->errlen, p, n);
	rd->errlen += n;
}

/* Read what is there on fd; 1 at its end, 0 while open, -EFBIG past the output limit. */
static int drain(int fd, int is_out, struct reading *rd)
{
	char tmp[4096];
	ssize_t n = read(fd, tmp, sizeof(tmp));

	if (n < 0)
		return errno == EINTR || errno == EAGAIN ? 0 : 1;
	if (!n)
		return 1;
	if (!is_out) {
		keep_tail(rd, tmp, n);
		return 0;
	}
	if (rd->len + n > LEARN_MAX_OUTPUT)
		return -EFBIG;
	memcpy(rd->out + rd->len, tmp, n);
	rd->len += n;
	return 0;
}

/* Read both pipes until they end, the limit passes or the output is too large. */
static int collect(int outfd, int errfd, double deadline, struct reading *rd)
{
	int open_out = 1, open_err = 1;

	while (open_out || open_err) {
		struct pollfd p[2] = {{outfd, POLLIN, 0}, {errfd, POLLIN, 0}};
		double left = deadline - clock__now();
		int ret;

		if (left <= 0)
			return -ETIMEDOUT;
		p[0].fd = open_out ? outfd : -1;
		p[1].fd = open_err ? errfd : -1;
		ret = poll(p, 2, (int)(left * 1000) + 1);
		if (ret < 0 && errno != EINTR)
			return -errno;
		if (ret <= 0)
			continue;
		if (p[0].revents) {
			ret = drain(outfd, 1, rd);
			if (ret < 0)
				return ret;
			open_out = !ret;
		}
		if (p[1].revents)
			open_err = !drain(errfd, 0, rd);
	}
	return 0;
}

static int same_ns(pid_t pid)
{
	char path[64];
	struct stat a, b;

	snprintf(path, sizeof(path), "/proc/%d/ns/mnt", pid);
	if (stat(path, &a) || stat("/proc/self/ns/mnt", &b))
		return 0;
	return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

int learn__run(const struct learn_req *r, char **out, size_t *outlen, char *err, size_t errlen)
{
	char keys[] = "/proc/self/fd/3";
	char *argv[] = {(char *)r->interp_path,
			"-I",
			"-B",
			"-",
			"--python",
			"--torch",
			"--keys",
			keys,
			"--import-from",
			(char *)r->import_dir,
			NULL};
	/* C.UTF-8: what Python would coerce the C locale to itself */
	char *envp[] = {"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/", "LC_CTYPE=C.UTF-8", NULL};
	struct child_fds f = {r->interp_fd, r->tool_fd, r->keys_fd, -1, -1, -1, -1};
	int outp[2] = {-1, -1}, errp[2] = {-1, -1}, enter_ns, status = 0, ret;
	struct reading rd = {};
	char path[64], line[240];
	double deadline;
	pid_t child_pid;

	*out = NULL;
	rd.out = malloc(LEARN_MAX_OUTPUT + 1);
	if (!rd.out)
		return -ENOMEM;
	snprintf(path, sizeof(path), "/proc/%d/root", r->pid);
	f.root = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	enter_ns = !same_ns(r->pid);
	snprintf(path, sizeof(path), "/proc/%d/ns/mnt", r->pid);
	f.mntns = enter_ns ? open(path, O_RDONLY | O_CLOEXEC) : -1;
	if (f.root < 0 || (enter_ns && f.mntns < 0) || pipe2(outp, O_CLOEXEC) ||
	    pipe2(errp, O_CLOEXEC)) {
		ret = -errno;
		snprintf(err, errlen, "cannot reach pid %d's root: %s", r->pid, strerror(-ret));
		goto cleanup;
	}
	f.out = outp[1];
	f.err = errp[1];
	deadline = clock__now() + r->timeout_ms / 1000.0;
	child_pid = fork();
	if (child_pid < 0) {
		ret = -errno;
		snprintf(err, errlen, "fork: %s", strerror(-ret));
		goto cleanup;
	}
	if (!child_pid)
		child(r, f, enter_ns, argv, envp);
	close(outp[1]);
	close(errp[1]);
	outp[1] = errp[1] = -1;
	ret = collect(outp[0], errp[0], deadline, &rd);
	if (ret) {
		kill(-child_pid, SIGKILL);
		kill(child_pid, SIGKILL);
	}
	while (waitpid(child_pid, &status, 0) < 0 && errno == EINTR)
		;
	last_line(rd.errbuf, rd.errlen, line, sizeof(line));
	if (ret == -ETIMEDOUT) {
		snprintf(err, errlen, "nanwatch-layout did not finish in %u s (killed)",
			 r->timeout_ms / 1000);
	} else if (ret == -EFBIG) {
		snprintf(err, errlen, "nanwatch-layout wrote more than %u KiB (killed)",
			 LEARN_MAX_OUTPUT >> 10);
	} else if (ret) {
		snprintf(err, errlen, "reading nanwatch-layout: %s", strerror(-ret));
	} else if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		ret = -EPROTO;
		if (WIFSIGNALED(status))
			snprintf(err, errlen, "nanwatch-layout was killed by signal %d%s%s",
				 WTERMSIG(status), line[0] ? ": " : "", line);
		else if (WEXITSTATUS(status) == SETUP_FAILED &&
			 !strncmp(line, SETUP_PREFIX, strlen(SETUP_PREFIX)))
			snprintf(err, errlen, "the run of nanwatch-layout could not be set up: %s",
				 line + strlen(SETUP_PREFIX));
		else
			snprintf(err, errlen, "nanwatch-layout exited %d: %s", WEXITSTATUS(status),
				 line[0] ? line : "(nothing on standard error)");
	}
	if (!ret) {
		rd.out[rd.len] = 0;
		*out = rd.out;
		*outlen = rd.len;
		rd.out = NULL;
	}
cleanup:
	free(rd.out);
	if (f.root >= 0)
		close(f.root);
	if (f.mntns >= 0)
		close(f.mntns);
	if (outp[0] >= 0)
		close(outp[0]);
	if (outp[1] >= 0)
		close(outp[1]);
	if (errp[0] >= 0)
		close(errp[0]);
	if (errp[1] >= 0)
		close(errp[1]);
	return ret;
}
