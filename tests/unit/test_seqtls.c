// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * at::sequence_number's thread-local, located from the code of peek(): the bytes of the
 * two builds the integration tests run (Debian's torch 1.13: general dynamic; its 2.6:
 * local dynamic), codes the decoder must refuse, and the tls_index read from a fake target.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include "fakemem.h"
#include "resolve/seqtls.h"

/* torch 1.13 (Debian bookworm) at 0xd90460: sub; data16 lea 0x64b265c(%rip),%rdi; call;
 * mov (%rax),%rax */
static const uint8_t peek_gd[] = {0x48, 0x83, 0xec, 0x08, 0x66, 0x48, 0x8d, 0x3d, 0x5c, 0x26,
				  0x4b, 0x06, 0x66, 0x66, 0x48, 0xe8, 0x7c, 0xee, 0xa9, 0xff,
				  0x48, 0x8b, 0x00, 0x48, 0x83, 0xc4, 0x08, 0xc3};
/* torch 2.6 (Debian trixie) at 0x1ab2a70: endbr64; sub; lea 0xdfe6831(%rip),%rdi; call;
 * mov 0x130(%rax),%rax */
static const uint8_t peek_ld[] = {0xf3, 0x0f, 0x1e, 0xfa, 0x48, 0x83, 0xec, 0x08, 0x48, 0x8d, 0x3d,
				  0x31, 0x68, 0xfe, 0x0d, 0xe8, 0xdc, 0x0f, 0x5f, 0xff, 0x48, 0x8b,
				  0x80, 0x30, 0x01, 0x00, 0x00, 0x48, 0x83, 0xc4, 0x08, 0xc3};

static void test_decode_general_dynamic(void **state)
{
	struct seqtls_code c;

	(void)state;
	assert_int_equal(seqtls__decode(peek_gd, sizeof(peek_gd), 0xd90460, &c), 0);
	assert_int_equal(c.got, 0x7242ac8); /* objdump's address of the tls_index */
	assert_int_equal(c.offset_got, 1);
	assert_int_equal(c.add, 0);
}

static void test_decode_local_dynamic(void **state)
{
	struct seqtls_code c;

	(void)state;
	assert_int_equal(seqtls__decode(peek_ld, sizeof(peek_ld), 0x1ab2a70, &c), 0);
	assert_int_equal(c.got, 0xfa992b0);
	assert_int_equal(c.offset_got, 0);
	assert_int_equal(c.add, 0x130);
}

static void test_decode_refused(void **state)
{
	/* TLS descriptors: lea x(%rip),%rax; call *(%rax); mov %fs:(%rax),%rax */
	static const uint8_t desc[] = {0x48, 0x8d, 0x05, 1,    2,    3,	   4,
				       0xff, 0x10, 0x64, 0x48, 0x8b, 0x00, 0xc3};
	/* initial exec: mov x@gottpoff(%rip),%rax; mov %fs:(%rax),%rax */
	static const uint8_t ie[] = {0x48, 0x8b, 0x05, 1, 2, 3, 4, 0x64, 0x48, 0x8b, 0x00, 0xc3};
	uint8_t cut[sizeof(peek_ld)], noload[sizeof(peek_ld)];
	struct seqtls_code c;

	(void)state;
	assert_int_equal(seqtls__decode(desc, sizeof(desc), 0x1000, &c), -ENOTSUP);
	assert_int_equal(seqtls__decode(ie, sizeof(ie), 0x1000, &c), -ENOTSUP);
	/* cut before the load: the access is not known to be a plain read */
	memcpy(cut, peek_ld, sizeof(cut));
	assert_int_equal(seqtls__decode(cut, 22, 0x1000, &c), -ENOTSUP);
	/* a call followed by something else than a load from the returned address */
	memcpy(noload, peek_ld, sizeof(noload));
	noload[21] = 0x89;
	assert_int_equal(seqtls__decode(noload, sizeof(noload), 0x1000, &c), -ENOTSUP);
	assert_int_equal(seqtls__decode(NULL, 0, 0, &c), -EINVAL);
}

static struct fakemem mem;

/* peek at a runtime address with its tls_index {modid, offset} in the fake target */
static uint64_t put_peek(const uint8_t *code, size_t len, uint64_t got_disp_at, uint64_t modid,
			 uint64_t off)
{
	uint64_t peek = fakemem__alloc(&mem, 64), got = fakemem__alloc(&mem, 16);
	int32_t disp;

	fakemem__put(&mem, peek, code, len);
	disp = (int32_t)(got - (peek + got_disp_at + 4));
	fakemem__put(&mem, peek + got_disp_at, &disp, sizeof(disp));
	fakemem__put64(&mem, got, modid);
	fakemem__put64(&mem, got + 8, off);
	return peek;
}

static void test_resolve(void **state)
{
	uint64_t modid = 0, off = 0, peek;
	struct remote r;

	(void)state;
	fakemem__init(&mem);
	fakemem__remote(&mem, &r);
	/* general dynamic: both words from the tls_index */
	peek = put_peek(peek_gd, sizeof(peek_gd), 8, 3, 0x18);
	assert_int_equal(seqtls__resolve(&r, peek, &modid, &off), 0);
	assert_int_equal(modid, 3);
	assert_int_equal(off, 0x18);
	/* local dynamic: the module's tls_index has offset 0, the code adds 0x130 */
	peek = put_peek(peek_ld, sizeof(peek_ld), 11, 5, 0);
	assert_int_equal(seqtls__resolve(&r, peek, &modid, &off), 0);
	assert_int_equal(modid, 5);
	assert_int_equal(off, 0x130);
	/* a tls_index not yet relocated (module id 0), or unreadable */
	peek = put_peek(peek_ld, sizeof(peek_ld), 11, 0, 0);
	assert_int_equal(seqtls__resolve(&r, peek, &modid, &off), -ENOTSUP);
	assert_true(seqtls__resolve(&r, 0x10, &modid, &off) < 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_decode_general_dynamic),
		cmocka_unit_test(test_decode_local_dynamic),
		cmocka_unit_test(test_decode_refused),
		cmocka_unit_test(test_resolve),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
