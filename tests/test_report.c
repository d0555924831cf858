// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * The stats line's accounting: per phase found = reported + suppressed + lost
 * from the BPF counters and the lines written, and the records lost per type.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include <linux/types.h>
#include "report.h"

static void test_tally_phases(void **state)
{
	uint64_t c[NW_C_MAX] = {0}, reported[REPORT_PHASES] = {2, 1, 1};
	struct report_tally t;
	int i;

	(void)state;
	/* forward 7 found: 2 reported, 4 suppressed, 1 lost; loss 3: 1 + 2; backward 5: 1 + 4 */
	c[NW_C_ANOMALIES] = 10;
	c[NW_C_LOSS_FOUND] = 3;
	c[NW_C_SUPPRESSED] = 6;
	c[NW_C_LOSS_SUPPRESSED] = 2;
	c[NW_C_LOST_FORWARD] = 1;
	c[NW_C_BWD_ANOMALIES] = 5;
	c[NW_C_BWD_SUPPRESSED] = 4;
	c[NW_C_LOST] = 1 + 100 + 2 + 1;
	c[NW_C_LOST_MODULE] = 100;
	c[NW_C_LOST_MARK] = 2;
	c[NW_C_LOST_LOSS_VALUE] = 1;
	c[NW_C_BWD_GRADS_LOST] = 7;
	c[NW_C_LOST_CAPTURE] = 3;
	report__tally(c, reported, &t);
	assert_int_equal(t.phase[NW_PHASE_FORWARD].found, 7);
	assert_int_equal(t.phase[NW_PHASE_FORWARD].suppressed, 4);
	assert_int_equal(t.phase[NW_PHASE_FORWARD].lost, 1);
	assert_int_equal(t.phase[NW_PHASE_LOSS].found, 3);
	assert_int_equal(t.phase[NW_PHASE_LOSS].suppressed, 2);
	assert_int_equal(t.phase[NW_PHASE_BACKWARD].found, 5);
	assert_int_equal(t.phase[NW_PHASE_BACKWARD].suppressed, 4);
	for (i = 0; i < REPORT_PHASES; i++) {
		const struct report_phase *p = &t.phase[i];

		assert_int_equal(p->reported, reported[i]);
		assert_int_equal(p->found, p->reported + p->suppressed + p->lost);
	}
	assert_int_equal(t.all.found, 15);
	assert_int_equal(t.all.reported, 4);
	assert_int_equal(t.all.suppressed, 10);
	assert_int_equal(t.all.lost, 1);
	assert_int_equal(t.lost_anomaly, 1);
	assert_int_equal(t.lost_module, 100);
	assert_int_equal(t.lost_mark, 2);
	assert_int_equal(t.lost_loss, 1);
	assert_int_equal(t.lost_grad, 7);
	assert_int_equal(t.lost_capture, 3);
	/* the events ring's records, every type */
	assert_int_equal(t.lost_anomaly + t.lost_module + t.lost_mark + t.lost_loss, c[NW_C_LOST]);
	/* module records are sent again: not lost for good */
	assert_int_equal(t.lost_for_good, 1 + 2 + 1);
}

/* Counters read while a loss anomaly was between its two increments: no wrap-around. */
static void test_tally_torn_read(void **state)
{
	uint64_t c[NW_C_MAX] = {0}, reported[REPORT_PHASES] = {0};
	struct report_tally t;

	(void)state;
	c[NW_C_ANOMALIES] = 2;
	c[NW_C_LOSS_FOUND] = 3;
	c[NW_C_SUPPRESSED] = 0;
	c[NW_C_LOSS_SUPPRESSED] = 1;
	report__tally(c, reported, &t);
	assert_int_equal(t.phase[NW_PHASE_FORWARD].found, 0);
	assert_int_equal(t.phase[NW_PHASE_FORWARD].suppressed, 0);
	assert_int_equal(t.all.found, 3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tally_phases),
		cmocka_unit_test(test_tally_torn_read),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
