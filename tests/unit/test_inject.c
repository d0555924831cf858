// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The pure parts of the injection: how an interrupted system call restarts, which stopped
 * thread runs dlopen, the call's frame below the red zone, /proc/PID/task/TID/{stat,status}
 * and the hazard ranges. The ptrace part runs against real processes in
 * tests/integration/test_inject.py.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include "inject/inject.h"

static void test_restart_kind(void **state)
{
	(void)state;
	assert_int_equal(inject__restart_kind(-1, 0), INJECT_NOT_IN_SYSCALL);
	assert_int_equal(inject__restart_kind(-1, -512), INJECT_NOT_IN_SYSCALL);
	/* read on a pipe, nanosleep, poll, a write that completed, a call that said EINTR */
	assert_int_equal(inject__restart_kind(0, -512), INJECT_RESTART);
	assert_int_equal(inject__restart_kind(202, -513), INJECT_RESTART);
	assert_int_equal(inject__restart_kind(7, -514), INJECT_RESTART);
	assert_int_equal(inject__restart_kind(35, -516), INJECT_RESTART_BLOCK);
	assert_int_equal(inject__restart_kind(1, 12), INJECT_SYSCALL_DONE);
	assert_int_equal(inject__restart_kind(232, -EINTR), INJECT_SYSCALL_DONE);
}

#define ROOM (1u << 20)

static void test_pick_prefers_blocked_then_main(void **state)
{
	struct inject_thread th[] = {
		{.tid = 101, .orig_rax = 1, .rax = 5, .stack_room = ROOM},     /* returned */
		{.tid = 103, .orig_rax = 0, .rax = -512, .stack_room = ROOM},  /* blocked */
		{.tid = 100, .orig_rax = 35, .rax = -516, .stack_room = ROOM}, /* main, blocked */
		{.tid = 102, .orig_rax = -1, .rax = 0, .stack_room = ROOM},    /* running */
	};

	(void)state;
	assert_int_equal(inject__pick(th, 4, 100), 2);
	th[2].hazard = 1;
	assert_int_equal(inject__pick(th, 4, 100), 1);
	th[1].orig_rax = -1;
	assert_int_equal(inject__pick(th, 4, 100), 0); /* a finished call is still a safe point */
	th[0].signalled = 1;
	assert_int_equal(inject__pick(th, 4, 100), -EAGAIN);
}

static void test_pick_lowest_tid_and_stack_room(void **state)
{
	struct inject_thread th[] = {
		{.tid = 205, .orig_rax = 0, .rax = -512, .stack_room = ROOM},
		{.tid = 203, .orig_rax = 0, .rax = -512, .stack_room = INJECT_STACK_NEED - 1},
		{.tid = 204, .orig_rax = 0, .rax = -512, .stack_room = INJECT_STACK_NEED},
	};

	(void)state;
	assert_int_equal(inject__pick(th, 3, 1), 2);
	assert_int_equal(inject__pick(th, 1, 1), 0);
	assert_int_equal(inject__pick(th, 0, 1), -EAGAIN);
}

static void test_frame(void **state)
{
	struct inject_frame f;
	uint64_t rsp;

	(void)state;
	for (rsp = 0x7ffd00001000; rsp < 0x7ffd00001000 + 32; rsp += 1) {
		size_t len;

		for (len = 1; len < 40; len++) {
			assert_int_equal(inject__frame(rsp, len, &f), 0);
			/* the string stays below the red zone; the call sees (rsp + 8) % 16 == 0 */
			assert_true(f.str + len <= rsp - 128);
			assert_int_equal(f.str % 16, 0);
			assert_int_equal((f.rsp + 8) % 16, 0);
			assert_true(f.rsp + 8 <= f.str);
			assert_true(f.str - f.rsp < 64);
		}
	}
	assert_int_equal(inject__frame(4096, 10, &f), -EINVAL);
	assert_int_equal(inject__frame(0x7ffd00001000, 0, &f), -EINVAL);
	assert_int_equal(inject__frame(0x7ffd00001000, 1 << 20, &f), -EINVAL);
}

static void test_stat_state(void **state)
{
	(void)state;
	assert_int_equal(inject__stat_state("42 (python3) S 1 42 42 0 -1"), 'S');
	/* a comm with spaces and parentheses */
	assert_int_equal(inject__stat_state("42 (a) b (c) t 1 42"), 't');
	assert_int_equal(inject__stat_state("42 (x) T 1"), 'T');
	assert_int_equal(inject__stat_state("42 (x)"), 0);
	assert_int_equal(inject__stat_state("42 x S"), 0);
	assert_int_equal(inject__stat_state(""), 0);
}

static void test_tracer(void **state)
{
	(void)state;
	assert_int_equal(inject__tracer("Name:\tx\nState:\tS\nTracerPid:\t0\nUid:\t0\n"), 0);
	assert_int_equal(inject__tracer("Name:\tx\nTracerPid:\t1234\n"), 1234);
	assert_int_equal(inject__tracer("Name:\tx\n"), -1);
}

static void test_seccomp(void **state)
{
	long n;

	(void)state;
	assert_int_equal(inject__seccomp("Name:\tx\nSeccomp:\t0\nSeccomp_filters:\t0\n", &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(inject__seccomp("Name:\tx\nSeccomp:\t2\nSeccomp_filters:\t3\n", &n), 2);
	assert_int_equal(n, 3);
	assert_int_equal(inject__seccomp("Name:\tx\nSeccomp:\t1\n", &n), 1);
	assert_int_equal(n, 0);
	assert_int_equal(inject__seccomp("Name:\tx\nUid:\t0\n", &n), -1);
}

static void test_in_ranges(void **state)
{
	const struct inject_range r[] = {{0x1000, 0x2000}, {0x5000, 0x5100}};
	const uint64_t words[] = {0x0, 0xfff, 0x2000, 0x50ff, 0x1000};

	(void)state;
	assert_int_equal(inject__in_ranges(r, 2, words, 5), 3);
	assert_int_equal(inject__in_ranges(r, 2, words, 3), -1);
	assert_int_equal(inject__in_ranges(r, 1, words, 5), 4);
	assert_int_equal(inject__in_ranges(r, 0, words, 5), -1);
}

/* The library in a target's maps: by its name from any directory, or a copy placed in /tmp. */
static void test_loaded(void **state)
{
	(void)state;
	assert_true(inject__loaded("7f00-7f10 r-xp 0 08:01 12 /opt/x/libnanwatch_cupti.so\n"));
	assert_true(inject__loaded("7f00-7f10 r-xp 0 08:01 12 /tmp/.nanwatch-inject-4-9.so "
				   "(deleted)\n"));
	assert_false(inject__loaded("7f00-7f10 r-xp 0 08:01 12 /usr/lib/libcupti.so.13\n"
				    "7f20-7f30 r-xp 0 08:01 13 /usr/lib/libcuda.so.1\n"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_restart_kind),
		cmocka_unit_test(test_pick_prefers_blocked_then_main),
		cmocka_unit_test(test_pick_lowest_tid_and_stack_room),
		cmocka_unit_test(test_frame),
		cmocka_unit_test(test_stat_state),
		cmocka_unit_test(test_seccomp),
		cmocka_unit_test(test_tracer),
		cmocka_unit_test(test_in_ranges),
		cmocka_unit_test(test_loaded),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
