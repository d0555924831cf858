// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* Decoding a raw events-ring record into a finding: the one place that reads struct nw_event. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <linux/types.h>
#include "explain/backward.h"
#include "util/dtype.h"
#include "explain/decode.h"
#include "util/fpconv.h"
#include "util/tpath.h"
#include "resolve/names.h"
#include "nanwatch.h"
#include "nwfloat.h"

_Static_assert(FINDING_MAX_DIMS == NW_MAX_DIMS, "a finding keeps every shape entry");
_Static_assert(FINDING_CLASS_LEN == NW_NAME_LEN, "a finding keeps the whole class name");
_Static_assert(TPATH_NONE == NW_NO_INDEX, "one index means none");
_Static_assert(1 + 2 * NW_LOSS_NODES <= NW_MAX_DEPTH, "a loss event's nodes fit beside modules[0]");
_Static_assert(FINDING_LOSS_NODES == NW_LOSS_NODES && FINDING_LOSS_ROOT == NW_LOSS_ROOT,
	       "a finding keeps every node of a loss");
_Static_assert(TPATH_ATTR == NW_ATTR_INDEX, "one flag means an attribute");

/* Tensor path: "output", "output[1]", "output[1][0]", "output['logits']", "output.logits",
 * "loss", "grad[0]", "parameters". */
static void tensor_name(const struct nw_event *ev, char *buf, size_t len)
{
	if (ev->phase == NW_PHASE_BACKWARD)
		tpath__format(buf, len, "grad", ev->index0, TPATH_NONE, NULL, 0);
	else if (ev->phase == NW_PHASE_LOSS)
		tpath__format(buf, len, "loss", ev->index0, TPATH_NONE, NULL, 0);
	else if (ev->index0 == NW_PARAMS_INDEX)
		snprintf(buf, len, "parameters");
	else
		tpath__format(buf, len, "output", ev->index0, ev->index1, ev->key, sizeof(ev->key));
}

static int one_of(const char *op, const char *const *set, size_t n)
{
	size_t k;

	for (k = 0; k < n; k++)
		if (!strcmp(op, set[k]))
			return 1;
	return 0;
}

/*
 * The nodes BPF walked from the loss (modules[1..NW_LOSS_NODES], how each was found after
 * them) into l: the op of each ("?" where it has no op's name), and the line of single inputs
 * from the loss (as far as a named node goes on to the next).
 */
static void loss_nodes(const struct nw_event *ev, struct backward *bwd, struct finding_loss *l)
{
	const __u64 *vptr = ev->modules + 1, *word = ev->modules + 1 + NW_LOSS_NODES;
	unsigned int i;
	int named;

	memset(l, 0, sizeof(*l));
	for (i = 0; i < NW_LOSS_NODES && vptr[i]; i++) {
		unsigned int parent = word[i] & 0xff;

		/* found from a node before it, or the loss's own: else the record is not a walk's */
		if (i ? parent >= i : parent != NW_LOSS_ROOT)
			break;
		if (backward__op_name(backward__class(bwd, vptr[i]), l->op[i], sizeof(l->op[i])))
			snprintf(l->op[i], sizeof(l->op[i]), "?");
		l->parent[i] = (unsigned char)parent;
		l->input[i] = (unsigned char)(word[i] >> 8);
		l->also[i] = NW_LOSS_ROOT;
		if (word[i] & NW_LOSS_ALSO) {
			l->also[i] = (unsigned char)(word[i] >> 32);
			l->also_input[i] = (unsigned char)(word[i] >> 40);
		}
		l->n = i + 1;
	}
	for (i = 0; i < l->n; i++)
		if (l->also[i] != NW_LOSS_ROOT && l->also[i] >= l->n)
			l->also[i] = NW_LOSS_ROOT; /* a node the event does not hold */
	/* the line: node i + 1 is node i's one input while i is named and has one */
	named = l->n && strcmp(l->op[0], "?");
	for (i = 0; i < l->n; i++) {
		l->line = i + 1;
		if (!named || !(word[i] & NW_LOSS_SINGLE) || i + 1 >= l->n || l->parent[i + 1] != i)
			break;
		named = strcmp(l->op[i + 1], "?") != 0;
	}
}

/*
 * The op that made the loss, for the diagnosis alone, from the loss's line of single inputs:
 * the first that is no arithmetic with a constant or a reshape (a loss divided by the
 * accumulation steps), or a log below it (a log of 0 made the NaN there). NULL if none is
 * named.
 */
static const char *loss_op(const struct finding_loss *l, char *buf, size_t len)
{
	static const char *const carry[] = {"div",  "mul",	     "neg",	"add",
					    "sub",  "rsub",	     "clone",	"to_copy",
					    "view", "reshape_alias", "squeeze", "unsqueeze"};
	static const char *const logs[] = {"log", "log2", "log10", "log1p", "xlogy"};
	size_t n = l->line, i, first;

	/* a "?" ends the line: no op past it is named */
	if (n && !strcmp(l->op[n - 1], "?"))
		n--;
	for (first = 0; first < n && one_of(l->op[first], carry, sizeof(carry) / sizeof(carry[0]));
	     first++)
		;
	if (first == n)
		return NULL;
	for (i = first; i < n; i++)
		if (one_of(l->op[i], logs, sizeof(logs) / sizeof(logs[0])))
			return snprintf(buf, len, "%s", l->op[i]) < (int)len ? buf : NULL;
	return snprintf(buf, len, "%s", l->op[first]) < (int)len ? buf : NULL;
}

/* The module's class as type(m).__name__. */
static const char *class_of(const struct nw_event *ev, struct finding *f)
{
	const char *dot;

	memcpy(f->class_buf, ev->class_name, NW_NAME_LEN);
	f->class_buf[NW_NAME_LEN] = 0;
	/* static types carry their module: "torch.nn.X" -> "X" */
	dot = strrchr(f->class_buf, '.');
	return dot ? dot + 1 : f->class_buf;
}

static double max_abs(const struct nw_event *ev)
{
	double lo, hi;

	if (ev->min_key == ~0ULL)
		return 0;
	lo = nw_bits_to_double(nw_key_bits(ev->min_key, ev->dtype), ev->dtype);
	hi = nw_bits_to_double(nw_key_bits(ev->max_key, ev->dtype), ev->dtype);
	lo = lo < 0 ? -lo : lo;
	hi = hi < 0 ? -hi : hi;
	return lo > hi ? lo : hi;
}

static int kind_of(__u32 type)
{
	switch (type) {
	case NW_EV_ANOMALY:
		return FINDING_ANOMALY;
	case NW_EV_MODULE:
		return FINDING_MODULE;
	case NW_EV_LOSS:
		return FINDING_LOSS;
	case NW_EV_MAGNITUDE:
		return FINDING_MAGNITUDE;
	case NW_EV_SCALER:
		return FINDING_SCALER;
	default:
		return FINDING_NONE;
	}
}

/* A phase this does not know is a module output's, as the BPF side numbers them. */
static int phase_of(__u8 phase)
{
	switch (phase) {
	case NW_PHASE_LOSS:
		return FINDING_PHASE_LOSS;
	case NW_PHASE_BACKWARD:
		return FINDING_BACKWARD;
	default:
		return FINDING_FORWARD;
	}
}

/* Inputs and parameters: 1 all finite, 0 some not, -1 unknown (not all scanned, not listed). */
static void verdicts(const struct nw_event *ev, struct finding *f)
{
	f->inputs_finite = -1;
	f->params_finite = -1;
	if (f->phase == FINDING_BACKWARD) {
		/* every gradient the engine handed to a node before this one was finite */
		f->inputs_finite = ev->producers > 0;
	} else if (f->phase == FINDING_FORWARD) {
		f->inputs_finite = ev->inputs_nonfinite ? 0 : ev->inputs_skipped ? -1 : 1;
		f->params_finite = ev->params_nonfinite			     ? 0
				   : !ev->params_known || ev->params_skipped ? -1
									     : 1;
	}
}

/* Layer path and class: none for the loss, the maker's (if known) for a gradient. */
static void name_module(const struct nw_event *ev, struct names *names, struct finding *f)
{
	int named = f->kind == FINDING_MODULE || f->kind == FINDING_MAGNITUDE ||
		    (f->kind == FINDING_ANOMALY && f->phase == FINDING_FORWARD) ||
		    (f->kind == FINDING_ANOMALY && f->phase == FINDING_BACKWARD && ev->module);

	if (!named)
		return;
	if (names && f->kind == FINDING_MODULE && ev->parent) {
		char held[sizeof(ev->held) + 1];

		memcpy(held, ev->held, sizeof(ev->held));
		held[sizeof(ev->held)] = 0;
		names__held(names, ev->modules[0], ev->module, ev->parent, held);
	}
	f->layer = names ? names__path(names, ev->modules[0], ev->module) : NULL;
	if (f->kind != FINDING_MODULE)
		f->module_class = class_of(ev, f);
}

static void tensor_fields(const struct nw_event *ev, struct finding *f)
{
	__u32 i;

	tensor_name(ev, f->tensor, sizeof(f->tensor));
	f->parameters = ev->index0 == NW_PARAMS_INDEX;
	f->dtype = ev->dtype;
	f->dtype_name = dtype__name(ev->dtype);
	f->ndim = ev->ndim < NW_MAX_DIMS ? ev->ndim : NW_MAX_DIMS;
	for (i = 0; i < f->ndim; i++)
		f->shape[i] = ev->shape[i];
	f->numel = ev->numel;
	f->scanned = ev->scanned;
	f->truncated = !!(ev->flags & NW_SKIP_TRUNCATED);
	f->nan = ev->nan;
	f->posinf = ev->posinf;
	f->neginf = ev->neginf;
}

/* What each kind keeps in the extremes: the finite range, the loss, a magnitude. */
static void values(const struct nw_event *ev, struct finding *f)
{
	if (f->kind == FINDING_ANOMALY) {
		f->has_finite = ev->min_key != ~0ULL;
		if (f->has_finite) {
			f->finite_min_bits = nw_key_bits(ev->min_key, ev->dtype);
			f->finite_max_bits = nw_key_bits(ev->max_key, ev->dtype);
		}
		f->max_abs = max_abs(ev);
	} else if (f->kind == FINDING_LOSS) {
		f->value = nw_bits_to_double(ev->min_key, ev->dtype);
	} else if (f->kind == FINDING_MAGNITUDE) {
		f->value = nw_bits_to_double(ev->max_key, ev->dtype);
	} else if (f->kind == FINDING_SCALER) {
		f->value = ev->dtype == NW_DT_F32 ? nw_bits_to_double(ev->min_key, ev->dtype) : NAN;
		f->skipped = ev->flags & 1;
	}
}

_Static_assert((int)FINDING_STEP_ATTACH == (int)NW_STEP_ATTACH &&
		       (int)FINDING_STEP_OPTIMIZER == (int)NW_STEP_OPTIMIZER &&
		       (int)FINDING_STEP_BACKWARD == (int)NW_STEP_BACKWARD,
	       "finding_step_source numbers nw_step_source");

int decode__step_source(uint64_t step_word)
{
	unsigned int s = step_word >> NW_STEP_SHIFT;

	return s <= NW_STEP_BACKWARD ? (int)s : FINDING_STEP_ATTACH;
}

int explain__decode(const void *data, size_t size, struct names *names, struct backward *bwd,
		    struct finding *f)
{
	struct nw_event ev;

	memset(f, 0, sizeof(*f));
	if (size < sizeof(ev))
		return -EINVAL; /* not ours */
	memcpy(&ev, data, sizeof(ev));
	f->kind = kind_of(ev.type);
	f->phase = phase_of(ev.phase);
	f->device = "cpu";
	f->time_ns = ev.time_ns;
	f->tid = ev.tid;
	/* the step word carries where the count came from in its top bits */
	f->step = ev.step & NW_STEP_MASK;
	f->step_source = decode__step_source(ev.step);
	f->iteration = ev.iteration;
	f->step_starts = ev.step_starts;
	f->root = ev.modules[0];
	f->module = ev.module;
	f->depth = ev.depth;
	/* a phase this daemon does not know is written as forward, its parameters left as sent */
	f->params_known = ev.params_known || ev.phase > NW_PHASE_BACKWARD;
	f->nested_unchecked = !!(ev.flags & NW_FLAG_DEEPER);
	if (f->kind == FINDING_NONE)
		return 0;
	f->input_nr = ev.input_nr;
	f->producers = ev.producers;
	if (f->kind == FINDING_ANOMALY && f->phase == FINDING_BACKWARD) {
		f->node = backward__class(bwd, ev.node_vptr);
		f->consumer = backward__class(bwd, ev.consumer_vptr);
		f->upstream = ev.parent ? backward__class(bwd, ev.parent) : NULL;
		f->op = backward__op_name(f->node, f->op_buf, sizeof(f->op_buf)) ? NULL : f->op_buf;
	} else if (f->kind == FINDING_ANOMALY && f->phase == FINDING_PHASE_LOSS) {
		/* the op under the loss's arithmetic: the diagnosis's */
		loss_nodes(&ev, bwd, &f->loss);
		f->op = loss_op(&f->loss, f->op_buf, sizeof(f->op_buf));
	}
	name_module(&ev, names, f);
	tensor_fields(&ev, f);
	verdicts(&ev, f);
	values(&ev, f);
	return 0;
}
