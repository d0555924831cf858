// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * libFuzzer target: the service config (daemon/service/config.c on daemon/util/yamlmap.c and
 * libyaml). A refused file is one line naming it; an accepted one holds what the checks promise
 * and its compiled matchers run.
 */
#include <arpa/inet.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "service/config.h"

/* "ADDR:PORT" with ADDR localhost, an IPv4 address in 127/8 or [an IPv6 loopback]: 1. */
static int loopback(const char *listen)
{
	const char *colon = strrchr(listen, ':');
	char host[64];
	struct in6_addr a6;
	struct in_addr a4;
	size_t n = colon ? (size_t)(colon - listen) : 0;

	if (!n || n >= sizeof(host))
		return 0;
	memcpy(host, listen, n);
	host[n] = 0;
	if (!strcmp(host, "localhost"))
		return 1;
	if (host[0] == '[' && host[n - 1] == ']') {
		host[n - 1] = 0;
		return inet_pton(AF_INET6, host + 1, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6);
	}
	return inet_pton(AF_INET, host, &a4) == 1 && (ntohl(a4.s_addr) >> 24) == 127;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char env[] = "RANK=0\0WORLD_SIZE=2\0SLURM_JOB_ID=7";
	char err[512] = "", sum[1024];
	struct config *c;
	int i;

	c = config__parse("fuzz.yaml", (const char *)data, size, err, sizeof(err));
	if (!c) {
		if (strncmp(err, "fuzz.yaml: ", 11) || strchr(err, '\n'))
			abort();
		return 0;
	}
	if (c->nrules < 1 || c->nrules > CONFIG_MAX_RULES || c->noutputs < 1 ||
	    c->noutputs > CONFIG_MAX_OUTPUTS)
		abort();
	if (c->metrics_listen[0] && !loopback(c->metrics_listen))
		abort();
	for (i = 0; i < c->nrules; i++) {
		const struct config_rule *r = &c->rules[i];

		if (!r->has_cmdline && !r->has_exe && !r->has_cgroup && !r->nenv)
			abort();
		if (r->backward < 0 || r->backward > 2)
			abort();
		config__rule_match(r, "python3 train.py", "/usr/bin/python3.11", env, sizeof(env),
				   "0::/system.slice/slurmstepd.scope");
	}
	config__summary(c, sum, sizeof(sum));
	config__free(c);
	return 0;
}
