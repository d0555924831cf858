/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * A stopped thread's call chain in another process, from the .eh_frame unwind tables of the
 * files it maps (x86-64): the return addresses of the frames that are live, not the stale
 * ones a scan of its stack would also find.
 */
#ifndef __UNWIND_H
#define __UNWIND_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct unwind;

/* For process pid; NULL + errno on failure. */
struct unwind *unwind__new(pid_t pid);
void unwind__free(struct unwind *u); /* accepts NULL */

/*
 * An executable mapping [lo, hi) of the file at path (as /proc/PID/maps names it, with its
 * device and inode), whose offset 0 is mapped at base. Its tables are read, through the
 * process's root, when a frame needs them.
 */
int unwind__add(struct unwind *u, uint64_t lo, uint64_t hi, uint64_t base, const char *path,
		dev_t dev, ino_t ino);

/* The registers unwinding needs, by DWARF number (rip is 16). */
struct unwind_regs {
	uint64_t r[17];
	uint32_t known; /* bit n: r[n] holds the register's value */
};

/*
 * Up to max PCs of the chain (the thread's PC first, then each caller's return address),
 * reading the stack only inside [stack_lo, stack_hi). Returns how many; *rest is 0 when the
 * chain was followed to its end, else the stack pointer of the frame where it could go no
 * further (no unwind table for its PC, a rule this unwinder does not evaluate, a signal
 * frame, a stack outside the range).
 */
size_t unwind__walk(struct unwind *u, const struct unwind_regs *regs, uint64_t stack_lo,
		    uint64_t stack_hi, uint64_t *pcs, size_t max, uint64_t *rest);

/* Pure parts, exposed for the unit tests. */

/* Read a DW_EH_PE-encoded pointer at p (field address addr, datarel base data); bytes used, 0
 * if it does not fit in [p, end) or the encoding is not supported. */
size_t unwind__pointer(const uint8_t *p, const uint8_t *end, uint8_t enc, uint64_t addr,
		       uint64_t data, uint64_t *out);

#endif /* __UNWIND_H */
