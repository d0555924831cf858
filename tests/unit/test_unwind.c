// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The .eh_frame unwinder: pointer encodings, and a walk of this process's own stack from
 * registers taken three calls deep, which must give back each caller's return address and
 * reach the outermost frame (_start) through libc's tables.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>
#include <unistd.h>
#include <cmocka.h>
#include "inject/unwind.h"

static void test_pointer(void **state)
{
	const uint8_t s4[] = {0xfc, 0xff, 0xff, 0xff}, u4[] = {0x10, 0, 0, 0};
	const uint8_t lebs[] = {0xe5, 0x8e, 0x26}, sleb_neg[] = {0x7f};
	const uint8_t abs8[] = {1, 2, 3, 4, 5, 6, 7, 8};
	uint64_t v;

	(void)state;
	/* pcrel sdata4: relative to the field's own address */
	assert_int_equal(unwind__pointer(s4, s4 + 4, 0x1b, 0x1000, 0, &v), 4);
	assert_int_equal(v, 0x1000 - 4);
	/* datarel sdata4, udata4 */
	assert_int_equal(unwind__pointer(s4, s4 + 4, 0x3b, 0, 0x2000, &v), 4);
	assert_int_equal(v, 0x2000 - 4);
	assert_int_equal(unwind__pointer(u4, u4 + 4, 0x03, 0, 0, &v), 4);
	assert_int_equal(v, 16);
	assert_int_equal(unwind__pointer(lebs, lebs + 3, 0x01, 0, 0, &v), 3);
	assert_int_equal(v, 624485);
	assert_int_equal(unwind__pointer(sleb_neg, sleb_neg + 1, 0x09, 0, 0, &v), 1);
	assert_int_equal((int64_t)v, -1);
	assert_int_equal(unwind__pointer(abs8, abs8 + 8, 0x00, 0, 0, &v), 8);
	assert_int_equal(v, 0x0807060504030201ULL);
	/* short input, omitted, indirect, an unknown application */
	assert_int_equal(unwind__pointer(s4, s4 + 3, 0x1b, 0, 0, &v), 0);
	assert_int_equal(unwind__pointer(lebs, lebs + 2, 0x01, 0, 0, &v), 0);
	assert_int_equal(unwind__pointer(s4, s4 + 4, 0xff, 0, 0, &v), 0);
	assert_int_equal(unwind__pointer(s4, s4 + 4, 0x9b, 0, 0, &v), 0);
	assert_int_equal(unwind__pointer(s4, s4 + 4, 0x5b, 0, 0, &v), 0);
}

/* This process's executable file mappings, as inject.c hands them to the unwinder. */
static void add_own_maps(struct unwind *u, uint64_t *stack_lo, uint64_t *stack_hi, uint64_t sp)
{
	char line[4352], path[4096];
	uint64_t base = 0;
	char last[4096] = "";
	FILE *f = fopen("/proc/self/maps", "r");

	assert_non_null(f);
	while (fgets(line, sizeof(line), f)) {
		unsigned long long lo, hi, off, ino;
		unsigned int maj, min;
		char perms[8];

		path[0] = 0;
		if (sscanf(line, "%llx-%llx %7s %llx %x:%x %llu %4095s", &lo, &hi, perms, &off,
			   &maj, &min, &ino, path) < 7)
			continue;
		if (sp >= lo && sp < hi) {
			*stack_lo = lo;
			*stack_hi = hi;
		}
		if (path[0] != '/')
			continue;
		if (off == 0 && strcmp(path, last)) {
			base = lo;
			snprintf(last, sizeof(last), "%s", path);
		}
		if (perms[2] == 'x' && !strcmp(path, last))
			assert_int_equal(unwind__add(u, lo, hi, base, path, makedev(maj, min), ino),
					 0);
	}
	fclose(f);
}

static uint64_t ret_of[3]; /* the return addresses of level3, level2, level1 */

static __attribute__((noinline)) size_t level3(uint64_t *pcs, size_t max, uint64_t *rest)
{
	struct unwind_regs r = {};
	uint64_t stack_lo = 0, stack_hi = 0;
	struct unwind *u = unwind__new(getpid());
	size_t n;

	ret_of[0] = (uint64_t)__builtin_return_address(0);
	__asm__ volatile("lea 0(%%rip), %0\n\t"
			 "mov %%rsp, %1\n\t"
			 "mov %%rbp, %2"
			 : "=r"(r.r[16]), "=r"(r.r[7]), "=r"(r.r[6]));
	r.known = 1u << 16 | 1u << 7 | 1u << 6;
	assert_non_null(u);
	add_own_maps(u, &stack_lo, &stack_hi, r.r[7]);
	assert_true(stack_hi > stack_lo);
	n = unwind__walk(u, &r, stack_lo, stack_hi, pcs, max, rest);
	unwind__free(u);
	return n;
}

static __attribute__((noinline)) size_t level2(uint64_t *pcs, size_t max, uint64_t *rest)
{
	size_t n;

	ret_of[1] = (uint64_t)__builtin_return_address(0);
	n = level3(pcs, max, rest);
	__asm__ volatile("" ::: "memory"); /* not a tail call */
	return n;
}

static __attribute__((noinline)) size_t level1(uint64_t *pcs, size_t max, uint64_t *rest)
{
	size_t n;

	ret_of[2] = (uint64_t)__builtin_return_address(0);
	n = level2(pcs, max, rest);
	__asm__ volatile("" ::: "memory");
	return n;
}

static void test_walk_own_stack(void **state)
{
	uint64_t pcs[64], rest = 1;
	size_t n;

	(void)state;
	n = level1(pcs, 64, &rest);
	assert_true(n >= 6);
	assert_int_equal(pcs[1], ret_of[0]);
	assert_int_equal(pcs[2], ret_of[1]);
	assert_int_equal(pcs[3], ret_of[2]);
	assert_int_equal(rest, 0); /* through cmocka and libc to _start */
	/* too few slots: stopped, with the stack pointer of where it stopped */
	n = level1(pcs, 2, &rest);
	assert_int_equal(n, 2);
	assert_int_not_equal(rest, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pointer),
		cmocka_unit_test(test_walk_own_stack),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
