#!/usr/bin/python3
"""sqrt at 0 with a non-zero gradient: finite forward, an infinite gradient.

The same model as backward_sqrt_zero without the gate: at step 4 an all-zero sample makes
sqrt(0) = 0 (finite), and its derivative 1/(2*sqrt(0)) times a non-zero gradient is ±Inf.
SqrtBackward0 returns Inf, not NaN: detect_anomaly, which checks NaN only, does not stop
there but at the next node, where Inf * 0 makes NaN. The node hooks of --oracle (NaN and
Inf) name SqrtBackward0, as nanwatchd must.

Expected: phase "backward", step 4, node SqrtBackward0, grad[0], layer "root", ±Inf.
"""
import common
from backward_sqrt_zero import BackwardSqrtZero


class BackwardSqrtInf(BackwardSqrtZero):
    """Trainer whose batch has an all-zero sample at step 4, ungated."""

    expected_cause = "division_by_zero"
    gated = False


if __name__ == "__main__":
    common.main(BackwardSqrtInf())
