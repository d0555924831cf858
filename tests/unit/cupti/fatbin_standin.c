// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The test copy of the library's fatbin: bytes the mock driver's cuModuleLoadData is handed. */
#include <stddef.h>

const unsigned char nw_scan_fatbin[] = "nw_scan stand-in";
const size_t nw_scan_fatbin_size = sizeof(nw_scan_fatbin);
