// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * Parameters are checked in BPF when a module's output goes bad, while the
 * optimizer has not yet touched them; the daemon only says where they are.
 * nn.Parameter objects live as long as the module, and optimizers update
 * them in place, so the list read at the module's first call stays right.
 */
#include <string.h>
#include "params.h"
#include "remote.h"

struct list_ctx {
	const struct remote *r;
	struct nw_params *out;
};

static int param_cb(const char *key, uint64_t value, void *ctx)
{
	struct list_ctx *p = ctx;

	(void)key;
	if (value == p->r->none)
		return 0;	/* a registered but unset parameter (bias=False) */
	if (p->out->n < NW_MAX_PARAMS)
		p->out->tensors[p->out->n++] = value;
	else
		p->out->more++;
	return 0;
}

int params__list(const struct remote *r, uint64_t module, struct nw_params *out)
{
	struct list_ctx ctx = {r, out};
	uint64_t dict;
	int err;

	memset(out, 0, sizeof(*out));
	err = remote__attr(r, module, "_parameters", &dict);
	if (err)
		return err;
	return remote__dict_each(r, dict, param_cb, &ctx);
}
