// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The daemon's clock (see clock.h). */
#include <time.h>
#include "util/clock.h"

double clock__now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}
