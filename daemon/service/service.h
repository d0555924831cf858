/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Service mode: one daemon watching every process a config's rules match, found by a
 * periodic /proc scan, each target its own session, all writing to the same outputs.
 */
#ifndef __SERVICE_H
#define __SERVICE_H

#include <signal.h>
#include <stddef.h>

struct service_opts {
	const char *config; /* the YAML file */
	int verbose;	    /* why a process is skipped or not yet attached, on stderr */
	int bpf_stats;
	/* called before each process is read; NULL: not asked (session_opts.may_watch) */
	int (*may_watch)(char *err, size_t errlen);
	/* the caller's signal flags: stop (detach everything), reopen file outputs */
	volatile sig_atomic_t *exiting, *reopen;
};

/* --check-config: a one-line summary on stdout and 0, or the error on stderr and -errno. */
int service__check_config(const char *path);

/*
 * Load the config, open the outputs, tell the service manager READY=1 after the first scan,
 * and watch until *exiting: the process's exit status (0; 1 when the config or an output
 * cannot be opened).
 */
int service__run(const struct service_opts *o);

#endif /* __SERVICE_H */
