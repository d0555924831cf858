/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Readiness and state for a service manager, in systemd's notify protocol: one datagram of
 * "KEY=VALUE" lines to the unix socket named by $NOTIFY_SOCKET (a path, or '@' then an
 * abstract name). Nothing to do when the variable is not set.
 */
#ifndef __NOTIFY_H
#define __NOTIFY_H

/* Send state ("READY=1", "STOPPING=1", ...): 0 when sent or not asked, or a negative errno. */
int notify__send(const char *state);

#endif /* __NOTIFY_H */
