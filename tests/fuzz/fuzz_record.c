// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * libFuzzer target: decoding the events ring buffer's records (explain__record in
 * daemon/explain/explain.c) into anomaly, warning, diagnosis and stats lines, without BPF. An input is
 * a run of raw records (struct nw_event, as the kernel delivers them) followed by bytes that
 * stand for the target's memory at FAKE_BASE, read by the module-name walk (names.c, remote.c)
 * in place of process_vm_readv.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "explain/diagnose.h"
#include "output/emit.h"
#include "fuzz_stream.h"
#include "resolve/layout.h"
#include "resolve/names.h"
#include "resolve/remote.h"
#include "explain/explain.h"
#include "output/sink.h"
#include "resolve/target.h"

#define FAKE_BASE 0x10000ULL
#define MAX_RECORDS 16

static struct emitter emitter;
static struct target target = {.pid = 4242, .comm = "python3"};
static struct remote_layout python_layout;

struct memory {
	const uint8_t *p;
	size_t n;
};

static int fake_read(void *ctx, uint64_t addr, void *buf, size_t len)
{
	const struct memory *m = ctx;

	if (addr < FAKE_BASE || addr - FAKE_BASE > m->n || len > m->n - (addr - FAKE_BASE))
		return -14; /* EFAULT, as process_vm_readv says for unmapped memory */
	memcpy(buf, m->p + (addr - FAKE_BASE), len);
	return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	const char *dir = getenv("NANWATCH_LAYOUTS");
	char path[512], err[256];
	struct layout *py;

	(void)argc;
	(void)argv;
	if (fuzz_stream_init(&emitter, &target))
		return -1;
	snprintf(path, sizeof(path), "%s/python-3.11.yaml", dir ? dir : "config/layouts");
	py = layout__load(path, err, sizeof(err));
	if (!py || remote__layout_from(&python_layout, py, err, sizeof(err))) {
		fprintf(stderr, "fuzz_record: %s\n", err);
		exit(1);
	}
	layout__free(py);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	size_t n = size / sizeof(struct nw_event), i;
	struct memory mem = {data + n * sizeof(struct nw_event), size % sizeof(struct nw_event)};
	struct remote remote = {.read = fake_read, .ctx = &mem, .pid = 4242};
	uint64_t counters[NW_C_MAX] = {0};
	struct explain r = {.e = &emitter, .remote = &remote};

	remote.l = python_layout;
	r.names = names__new(&remote);
	if (!r.names)
		return 0;
	diagnose__init(&r.diag);
	emitter.failed = 0;
	for (i = 0; i < n && i < MAX_RECORDS; i++)
		explain__record(&r, data + i * sizeof(struct nw_event), sizeof(struct nw_event));
	/* a short record is not ours: skipped */
	explain__record(&r, mem.p, mem.n);
	explain__diagnose(&r, UINT64_MAX);
	explain__lost(&r, counters);
	explain__stats(&r, counters, 0, 0, 0, 0, NULL);
	names__free(r.names);
	return 0;
}
