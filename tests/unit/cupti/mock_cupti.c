// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Mock libcupti: one subscriber (a second is refused, as CUPTI does),
 * per-callback-id enables, and mock_cupti_fire() for the mock driver.
 * NWMOCK_SUBSCRIBE_RESULT=N makes cuptiSubscribe fail with N (39: another
 * subscriber holds CUPTI).
 */
#include <stdlib.h>

#include "mock.h"

#define MAX_CBID 1024

int mock_cupti_subscribed;
static nwc_callback_fn fn;
static void *userdata;
static int enabled[MAX_CBID];

nwc_cuptiresult cuptiSubscribe(CUpti_SubscriberHandle *sub, nwc_callback_fn cb, void *ud)
{
	const char *r = getenv("NWMOCK_SUBSCRIBE_RESULT");

	if (r && atoi(r))
		return atoi(r);
	if (fn) /* as CUPTI: one subscriber per process */
		return NWC_CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
	fn = cb;
	userdata = ud;
	mock_cupti_subscribed = 1;
	*sub = (CUpti_SubscriberHandle)0x5b;
	return NWC_CUPTI_SUCCESS;
}

nwc_cuptiresult cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle sub,
				    nwc_cupti_domain domain, CUpti_CallbackId cbid)
{
	if (sub != (CUpti_SubscriberHandle)0x5b || domain != NWC_CUPTI_CB_DOMAIN_DRIVER_API ||
	    cbid >= MAX_CBID)
		return 1;
	enabled[cbid] = enable != 0;
	return NWC_CUPTI_SUCCESS;
}

nwc_cuptiresult cuptiUnsubscribe(CUpti_SubscriberHandle sub)
{
	(void)sub;
	fn = NULL;
	mock_cupti_subscribed = 0;
	return NWC_CUPTI_SUCCESS;
}

int mock_cupti_enabled(CUpti_CallbackId cbid)
{
	return cbid < MAX_CBID && enabled[cbid];
}

void mock_cupti_fire(nwc_cupti_domain domain, CUpti_CallbackId cbid, const nwc_callback_data *d)
{
	if (fn && mock_cupti_enabled(cbid))
		fn(userdata, domain, cbid, d);
}
