// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * libFuzzer target: capture records (daemon/capture/capture.c) assembled without a directory,
 * their facts computed (daemon/explain/evidence.c) and read by the diagnosis. An input is a run
 * of records, each one selector byte (0 tensor, 1 data, 2 end) and the record's bytes (its type
 * field is set here); a data record is its header, then as many data bytes as its len says.
 */
#include <stdint.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "capture/capture.h"
#include "explain/diagnose.h"
#include "explain/evidence.h"
#include "resolve/remote.h"

static int no_read(void *ctx, uint64_t addr, void *buf, size_t len)
{
	(void)ctx;
	(void)addr;
	(void)buf;
	(void)len;
	return -1;
}

/* Fill the record from the input after its type byte; returns the bytes used. */
static size_t take(void *rec, size_t size, const uint8_t *p, size_t n)
{
	size_t k = n < size ? n : size;

	memset(rec, 0, size);
	memcpy(rec, p, k);
	return k;
}

static size_t one_record(struct capture *c, const uint8_t *p, size_t n)
{
	static struct nw_cap_data r;
	struct nw_cap_tensor t;
	struct nw_cap_end e;
	size_t used, head = offsetof(struct nw_cap_data, data);

	switch (p[0] % 3) {
	case 0:
		used = take(&t, sizeof(t), p + 1, n - 1);
		t.type = NW_EV_CAP_TENSOR;
		capture__record(c, &t, sizeof(t));
		return used;
	case 1:
		used = take(&r, head, p + 1, n - 1);
		r.type = NW_EV_CAP_DATA;
		if (r.len > NW_CAP_CHUNK)
			r.len %= NW_CAP_CHUNK + 1;
		if (r.len > n - 1 - used)
			r.len = n - 1 - used;
		memcpy(r.data, p + 1 + used, r.len);
		capture__record(c, &r, sizeof(r));
		return used + r.len;
	default:
		used = take(&e, sizeof(e), p + 1, n - 1);
		e.type = NW_EV_CAP_END;
		capture__record(c, &e, sizeof(e));
		return used;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct remote r = {.read = no_read};
	struct capture_opts o = {.max_bytes = 1 << 16, .pid = 1, .comm = "fuzz", .remote = &r};
	const struct evidence_facts *x;
	struct diag_anomaly a = {.iteration = 1,
				 .nan = 1,
				 .phase = "forward",
				 .dtype = "float32",
				 .inputs_finite = 1,
				 .params_finite = 1,
				 .module = "Layer"};
	struct diagnosis g;
	struct capture *c;
	struct diag *d;
	char err[128];
	size_t off = 0;

	c = capture__new(&o, err, sizeof(err));
	if (!c)
		return 0;
	while (off < size)
		off += 1 + one_record(c, data + off, size - off);
	x = capture__facts(c);
	d = calloc(1, sizeof(*d));
	if (x && d) {
		diagnose__init(d);
		a.module_id = x->module;
		a.iteration = x->iteration;
		diagnose__observe(d, &a);
		diagnose__facts(d, x);
		diagnose__conclude(d, &g);
	}
	free(d);
	capture__free(c);
	return 0;
}
