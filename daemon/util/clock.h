/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/* The daemon's clock for deadlines, intervals and durations. */
#ifndef __CLOCK_H
#define __CLOCK_H

/* Seconds on CLOCK_MONOTONIC (stopped while the machine sleeps; never set back). */
double clock__now(void);

#endif /* __CLOCK_H */
