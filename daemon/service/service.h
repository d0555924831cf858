/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Service mode: one daemon watching every process a config's rules match, found by a
 * periodic /proc scan, each target its own session, all writing to the same outputs.
 */
#ifndef __SERVICE_H
#define __SERVICE_H

/* --check-config: a one-line summary on stdout and 0, or the error on stderr and -errno. */
int service__check_config(const char *path);

#endif /* __SERVICE_H */
