// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * at::sequence_number's per-thread counter, located for BPF. Every autograd node takes its
 * sequence_nr_ from it as it is made, so the counter read at a module call's entry and
 * return bounds the nodes that call made. It is a thread_local of a dlopen'ed library:
 * glibc keeps it in the block the thread's DTV entry for the library's module id points
 * at, at a fixed offset. Both come from the code of peek(), which reads it: the tls_index
 * its __tls_get_addr call is given holds the module id (relocated at load, read from the
 * target) and, for a general-dynamic access, the offset; a local-dynamic access adds the
 * offset itself. Debian's torch 1.13 builds the first, its 2.6 the second.
 */
#include <errno.h>
#include <string.h>
#include "resolve/remote.h"
#include "resolve/seqtls.h"

#define PEEK_BYTES 48

static int32_t s32(const uint8_t *p)
{
	int32_t v;

	memcpy(&v, p, sizeof(v));
	return v;
}

/* Length of the call __tls_get_addr at p (with its padding prefixes), or 0. */
static size_t call_len(const uint8_t *p, size_t left)
{
	size_t i = 0;

	while (i < left && i < 3 && (p[i] == 0x66 || p[i] == 0x48))
		i++;
	if (i + 5 <= left && p[i] == 0xe8)
		return i + 5;
	/* call *__tls_get_addr@GOTPCREL(%rip) (-fno-plt): ff 15 disp32 */
	if (i + 6 <= left && p[i] == 0xff && p[i + 1] == 0x15)
		return i + 6;
	return 0;
}

/* mov disp(%rax),%rax at p: its displacement in *disp, its length returned, or 0. */
static size_t load_len(const uint8_t *p, size_t left, int64_t *disp)
{
	if (left < 3 || p[0] != 0x48 || p[1] != 0x8b)
		return 0;
	if (p[2] == 0x00) {
		*disp = 0;
		return 3;
	}
	if (p[2] == 0x40 && left >= 4) {
		*disp = (int8_t)p[3];
		return 4;
	}
	if (p[2] == 0x80 && left >= 7) {
		*disp = s32(p + 3);
		return 7;
	}
	return 0;
}

int seqtls__decode(const uint8_t *code, size_t len, uint64_t addr, struct seqtls_code *out)
{
	size_t i, n, c;
	int gd;

	if (!code || !out)
		return -EINVAL;
	/* lea x(%rip),%rdi: 48 8d 3d disp32, with a 66 prefix for general dynamic */
	for (i = 0; i + 7 <= len && i < 24; i++) {
		if (code[i] != 0x48 || code[i + 1] != 0x8d || code[i + 2] != 0x3d)
			continue;
		gd = i > 0 && code[i - 1] == 0x66;
		n = i + 7;
		c = call_len(code + n, len - n);
		if (!c)
			return -ENOTSUP;
		if (!load_len(code + n + c, len - n - c, &out->add))
			return -ENOTSUP;
		out->got = addr + n + (int64_t)s32(code + i + 3);
		out->offset_got = gd;
		return 0;
	}
	return -ENOTSUP;
}

int seqtls__resolve(const struct remote *r, uint64_t peek, uint64_t *modid, uint64_t *offset)
{
	uint8_t code[PEEK_BYTES];
	struct seqtls_code sc;
	uint64_t idx[2];
	int ret;

	ret = remote__read(r, peek, code, sizeof(code));
	if (!ret)
		ret = seqtls__decode(code, sizeof(code), peek, &sc);
	if (!ret)
		ret = remote__read(r, sc.got, idx, sizeof(idx));
	if (ret)
		return ret;
	/* glibc numbers modules from 1; its offsets are within the library's TLS block */
	if (!idx[0] || idx[0] > 1 << 20 || (sc.offset_got && idx[1] > 1 << 30))
		return -ENOTSUP;
	*modid = idx[0];
	*offset = (sc.offset_got ? idx[1] : 0) + sc.add;
	return 0;
}
