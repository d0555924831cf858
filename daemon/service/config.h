/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * The service's configuration file (YAML, read through util/yamlmap): which processes to
 * watch and how, where events go, the metrics endpoint. Regular expressions are compiled at
 * load, so a loaded config cannot fail later; every error is one line "FILE: line N: KEY: why".
 */
#ifndef __CONFIG_H
#define __CONFIG_H

#include <limits.h>
#include <regex.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CONFIG_MAX_RULES 32
#define CONFIG_MAX_ENV 8
#define CONFIG_MAX_OUTPUTS 8 /* SINKS_MAX */
#define CONFIG_DEFAULT_SCAN_MS 200

struct config_env {
	char name[64];
	regex_t re;
};

/* One watch rule: every matcher given must match (POSIX extended regex, unanchored). */
struct config_rule {
	char name[64];
	bool has_cmdline, has_exe, has_cgroup;
	regex_t cmdline, exe, cgroup;
	struct config_env env[CONFIG_MAX_ENV];
	int nenv;
	char mode[8];		    /* full, sample, loss */
	int backward;		    /* 0 off, 1 norms, 2 on */
	char capture_dir[PATH_MAX]; /* "" : no capture */
	uint64_t capture_max_bytes; /* 0: the default */
	char job[128];		    /* "" : from the target's environment */
	bool children;		    /* also forked children that did not exec */
};

struct config {
	char path[PATH_MAX];
	struct config_rule rules[CONFIG_MAX_RULES];
	int nrules;
	char outputs[CONFIG_MAX_OUTPUTS][PATH_MAX + 8]; /* sink specs: "-", "unix:PATH", a path */
	int noutputs;
	char metrics_listen[64];	 /* "" : none; else a loopback ADDR:PORT */
	char metrics_textfile[PATH_MAX]; /* "" : none; else the node_exporter textfile to write */
	int scan_interval_ms;
	char layouts[PATH_MAX]; /* "" : the default */
	int stats_interval;	/* seconds; 0: at the detach only */
	uint64_t max_scan_bytes;
	uint32_t grad_ring_bytes;    /* the gradient data ring; 0: histograms counted in BPF */
	size_t queue_bytes;	     /* per output */
	int return_probe;	     /* enum probe_return (attach/probe.h) */
	int read_method;	     /* OPTVAL_READ_AUTO or enum nw_read_method (util/optval.h) */
	bool learn_layouts;	     /* tables the layouts lack are learned as the target's user */
	char layout_cache[PATH_MAX]; /* "" : the default */
	unsigned int learn_timeout_ms; /* the learning tool's time limit */
};

/* Load and check path; NULL with errno set and one line in err. */
struct config *config__load(const char *path, char *err, size_t errlen);
/* The same from text in memory (name: as messages call it). */
struct config *config__parse(const char *name, const char *text, size_t len, char *err,
			     size_t errlen);
void config__free(struct config *c); /* accepts NULL */

/* One line saying what the config holds (no newline). */
void config__summary(const struct config *c, char *buf, size_t len);

/*
 * Does rule r match a process with this command line (NULs as spaces), exe path, environment
 * (NUL-separated NAME=VALUE, env_len bytes) and cgroup text? NULL fields match nothing.
 */
bool config__rule_match(const struct config_rule *r, const char *cmdline, const char *exe,
			const char *env, size_t env_len, const char *cgroup);

#endif /* __CONFIG_H */
