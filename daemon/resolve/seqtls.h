/* SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause) */
/*
 * Where a thread's autograd sequence counter (at::sequence_number, a thread_local of
 * libtorch_cpu) lives, found from the code of the library's own reader of it.
 */
#ifndef __SEQTLS_H
#define __SEQTLS_H

#include <stddef.h>
#include <stdint.h>

struct remote;

/* What the reader's code says: the GOT entry it hands __tls_get_addr, and the offset. */
struct seqtls_code {
	uint64_t got;	/* address of the tls_index {module id, offset} the code passes */
	int64_t add;	/* displacement the code adds to what __tls_get_addr returns */
	int offset_got; /* 1: general dynamic, the offset is the tls_index's second word */
};

/*
 * Decode at::sequence_number::peek() (its first len bytes, loaded at addr): a
 * general-dynamic (lea tls_index(%rip),%rdi; call __tls_get_addr; mov (%rax),%rax)
 * or local-dynamic (the same with the module's tls_index and mov off(%rax),%rax)
 * access. -ENOTSUP for any other code (TLS descriptors, initial-exec).
 */
int seqtls__decode(const uint8_t *code, size_t len, uint64_t addr, struct seqtls_code *out);

/*
 * The counter's module id and offset in the target: peek() decoded at its runtime address
 * and its tls_index read from the target's memory (relocated by its dynamic loader).
 */
int seqtls__resolve(const struct remote *r, uint64_t peek, uint64_t *modid, uint64_t *offset);

#endif /* __SEQTLS_H */
