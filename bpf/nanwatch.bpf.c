// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/*
 * nanwatch's BPF object, one translation unit: the program files, each of which
 * holds programs only and includes the headers it uses (state.bpf.h: maps,
 * settings, counters, scratch; pyobj.bpf.h: CPython objects; tensor.bpf.h: the
 * tensor decoder; scan.bpf.h: the scanner; calls.bpf.h, check.bpf.h,
 * step.bpf.h, capture.bpf.h, backward.bpf.h: what the programs do). One unit, so
 * that the state is defined once and the skeleton (build/nanwatch.skel.h) is
 * generated from it as is.
 */
#include "forward.bpf.c"
#include "step.bpf.c"
#include "loss.bpf.c"
#include "scaler.bpf.c"
#include "backward.bpf.c"
#include "exec.bpf.c"

char LICENSE[] SEC("license") = "Dual BSD/GPL";
