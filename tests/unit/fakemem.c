// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* The unit tests' fake target memory (tests/unit/fakemem.h). */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <string.h>
#include <cmocka.h>
#include "fakemem.h"

/* CPython 3.11 on x86-64 */
static const struct remote_layout py311 = {
	.obj_type = 8,
	.type_flags = 168,
	.type_dictoffset = 288,
	.type_cached_keys = 880,
	.managed_dict_flag = 1 << 4,
	.managed_dict = -24,
	.managed_values = -32,
	.dict_keys = 32,
	.dict_values = 40,
	.keys_log2_index_bytes = 9,
	.keys_kind = 10,
	.keys_nentries = 24,
	.keys_indices = 32,
	.values_items = 0,
	.keys_kind_general = 0,
	.entry_general = 24,
	.entry_unicode = 16,
	.unicode_length = 16,
	.unicode_state = 32,
	.unicode_ascii_data = 48,
	.unicode_compact_data = 72,
	.unicode_kind_shift = 2,
	.ascii_bit = 6,
	.compact_bit = 5,
	.type_name = 24,
};

const struct nw_layout fakemem_torch = {
	.obj_type = 8,
	.type_base = 256,
	.var_borrowed = 24,
	.var_tensor = 16,
	.impl_storage = 48,
	.impl_storage_offset = 152,
	.impl_numel = 160,
	.impl_dtype = 168,
	.impl_device = 170,
	.impl_ndim = 72,
	.impl_sizes = 80,
	.storage_data = 16,
	.sizes_inline = 5,
	.dtype_f16 = 5,
	.dtype_f32 = 6,
	.dtype_f64 = 7,
	.dtype_bf16 = 15,
	.device_cpu = 0,
};

static int inside(uint64_t addr, size_t len)
{
	return addr >= FAKEMEM_BASE && addr + len <= FAKEMEM_BASE + FAKEMEM_SIZE &&
	       addr + len >= addr;
}

void fakemem__init(struct fakemem *m)
{
	memset(m, 0, sizeof(*m));
	m->l = py311;
}

int fakemem__read(void *ctx, uint64_t addr, void *buf, size_t len)
{
	struct fakemem *m = ctx;

	if (!inside(addr, len))
		return -EFAULT;
	memcpy(buf, m->bytes + (addr - FAKEMEM_BASE), len);
	return 0;
}

int fakemem__gone(void *ctx, uint64_t addr, void *buf, size_t len)
{
	(void)ctx;
	(void)addr;
	(void)buf;
	(void)len;
	return -ESRCH;
}

void fakemem__remote(struct fakemem *m, struct remote *r)
{
	memset(r, 0, sizeof(*r));
	r->read = fakemem__read;
	r->ctx = m;
	r->none = m->none;
	r->l = m->l;
}

uint64_t fakemem__alloc(struct fakemem *m, size_t n)
{
	uint64_t a = FAKEMEM_BASE + m->top;

	m->top += (n + 15) & ~15ULL;
	assert_true(m->top <= FAKEMEM_SIZE);
	return a;
}

void fakemem__put(struct fakemem *m, uint64_t addr, const void *v, size_t n)
{
	assert_true(inside(addr, n));
	memcpy(m->bytes + (addr - FAKEMEM_BASE), v, n);
}

void fakemem__put64(struct fakemem *m, uint64_t addr, uint64_t v)
{
	fakemem__put(m, addr, &v, 8);
}

void fakemem__put8(struct fakemem *m, uint64_t addr, uint8_t v)
{
	fakemem__put(m, addr, &v, 1);
}

uint64_t fakemem__str(struct fakemem *m, const char *s, int wide)
{
	const struct remote_layout *l = &m->l;
	size_t n = strlen(s), i;
	uint64_t data = wide ? l->unicode_compact_data : l->unicode_ascii_data;
	uint64_t a = fakemem__alloc(m, data + (wide ? 2 : 1) * (n + 1));
	uint32_t state = 1u << l->compact_bit;

	if (wide)
		state |= 2u << l->unicode_kind_shift;
	else
		state |= 1u << l->unicode_kind_shift | 1u << l->ascii_bit;
	fakemem__put64(m, a + l->unicode_length, n);
	fakemem__put(m, a + l->unicode_state, &state, 4);
	for (i = 0; i < n; i++) {
		if (wide) /* little-endian UCS-2 of an ASCII character */
			fakemem__put8(m, a + data + 2 * i, (unsigned char)s[i]);
		else
			fakemem__put8(m, a + data + i, s[i]);
	}
	return a;
}

uint64_t fakemem__keys(struct fakemem *m, int n, const uint64_t *keys, const uint64_t *vals)
{
	const struct remote_layout *l = &m->l;
	uint64_t entries = l->keys_indices + 8; /* after 8 index bytes */
	uint64_t k = fakemem__alloc(m, entries + 16 * n);
	int i;

	fakemem__put8(m, k + l->keys_log2_index_bytes, 3);
	fakemem__put8(m, k + l->keys_kind, vals ? 1 : 2);
	fakemem__put64(m, k + l->keys_nentries, n);
	for (i = 0; i < n; i++) {
		fakemem__put64(m, k + entries + 16 * i, keys[i]);
		fakemem__put64(m, k + entries + 16 * i + 8, vals ? vals[i] : 0);
	}
	return k;
}

uint64_t fakemem__dict(struct fakemem *m, int n, const char **names, const uint64_t *vals)
{
	uint64_t keys[16], d = fakemem__alloc(m, 48);
	int i;

	assert_true(n <= 16);
	for (i = 0; i < n; i++)
		keys[i] = fakemem__str(m, names[i], 0);
	fakemem__put64(m, d + m->l.dict_keys, fakemem__keys(m, n, keys, vals));
	return d;
}
