#!/usr/bin/python3
"""3000 small modules, run flat out: one of the last ones has its parameters made non-finite.

The model sums 3000 Linear(4, 1) branches. Their first calls send 3000 module records at
once, more than the ring buffer holds while the daemon names them, and the trainer never
waits: the daemon must still know every module's parameters when an anomaly is reported
(dropped records are sent again; parameters it had not listed are read and checked then).
Only layers.2900 has its own parameter group; its learning rate jumps to 3e38 for step 4, so
the update overflows its weights to +-Inf (the others learn at 1e-6 and stay finite).
Expected first anomaly: layers.2900 (Linear) at step 5, inputs finite, params_finite false, not
an origin: nonfinite_params, origin step 4.
"""
import torch
import torch.nn as nn

import common

N = 3000
BAD = 2900


class Wide(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(4, 1) for _ in range(N))

    def forward(self, x):
        return torch.stack([m(x) for m in self.layers]).sum(0)


class ManyModules(common.Trainer):
    """Trainer with 3000 modules whose module BAD gets non-finite weights at step 4."""

    steps = 8
    expected_cause = "nonfinite_params"
    expected_origin = "params_bad"

    def model(self):
        self.net = Wide()
        return self.net

    def optimizer(self, params):
        bad = set(id(p) for p in self.net.layers[BAD].parameters())
        rest = [p for p in params if id(p) not in bad]
        self.opt = torch.optim.SGD([{"params": rest, "lr": 1e-6},
                                    {"params": list(self.net.layers[BAD].parameters()),
                                     "lr": 0.05}])
        return self.opt

    def schedule(self, model, step):
        self.opt.param_groups[1]["lr"] = 3e38 if step == self.fault_step else 0.05

    def batch(self, step, micro, gen):
        x = torch.randn(8, 4, generator=gen)
        return (x,), 10 * x[:, :1]


if __name__ == "__main__":
    common.main(ManyModules())
