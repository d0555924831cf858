// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * An optimizer's step count, for step numbers that stay right when the watch
 * starts mid-run: torch.optim.Optimizer.state is a defaultdict (a dict subclass,
 * same layout) keyed by parameter; each parameter's dict holds 'step', a 0-dim
 * tensor updated in place at every step. The BPF side reads that tensor's value
 * at each step; this only finds it.
 */
#include <errno.h>
#include <string.h>
#include "resolve/optstate.h"
#include "resolve/remote.h"

int optstate__step_impl(const struct remote *r, const struct optstate_layout *l, uint64_t opt,
			uint64_t *impl)
{
	uint64_t state, pstate, step, type, name, p;
	uint8_t borrowed = 0;
	char tname[16];
	int err;

	err = remote__attr(r, opt, "state", &state);
	if (!err)
		err = remote__dict_first(r, state, &pstate);
	if (!err)
		err = remote__dict_get(r, pstate, "step", &step);
	if (!err)
		err = remote__u64(r, step + r->l.obj_type, &type);
	if (!err)
		err = remote__u64(r, type + r->l.type_name, &name);
	if (!err)
		err = remote__cstr(r, name, tname, sizeof(tname));
	if (err)
		return err;
	if (strcmp(tname, "Tensor"))
		return -EINVAL;
	/* var_borrowed -1: a plain at::Tensor (torch 2.11+), never borrowed */
	if (l->var_borrowed >= 0)
		err = r->read(r->ctx, step + l->var_borrowed, &borrowed, 1);
	if (!err)
		err = remote__u64(r, step + l->var_tensor, &p);
	if (!err && borrowed)
		err = remote__u64(r, p, &p); /* a borrowed at::Tensor: its TensorImpl first */
	if (err)
		return err;
	if (!p)
		return -ENOENT;
	*impl = p;
	return 0;
}
