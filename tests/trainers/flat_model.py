#!/usr/bin/python3
"""A model with no child modules: nothing calls a child, so the model is the first outermost
module with parameters of its own (iterations count its calls; the loss module has none).

--variant linear: the model is one nn.Linear; at step 4 the batch carries a -Inf feature (a
log(0) in the data pipeline). Expected first anomaly: "" (Linear) at step 4, iteration 4,
inputs not finite: not an origin; bad input data.
--variant params: the model holds its parameters itself and calls only functions; it scales
each row of its input to unit length, and at step 4 one row is all zeros (0/0). Expected
first anomaly: "" (Scorer) at step 4, iteration 4, NaN, inputs finite: the origin.
"""
import torch
import torch.nn as nn

import common


class Scorer(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(5, 2) * 0.3)
        self.b = nn.Parameter(torch.zeros(2))

    def forward(self, x):
        x = x / x.norm(dim=1, keepdim=True)
        return x @ self.w + self.b


class FlatModel(common.Trainer):
    """Trainer whose model has no child modules."""

    variant = "linear"

    @property
    def expected_cause(self):
        return "bad_input_data" if self.variant == "linear" else "division_by_zero"

    def model(self):
        return nn.Linear(5, 2) if self.variant == "linear" else Scorer()

    def batch(self, step, micro, gen):
        x = torch.rand(6, 5, generator=gen) + 0.1
        if step == self.fault_step:
            if self.variant == "linear":
                x[1, 3] = 0
            else:
                x[2] = 0
        if self.variant == "linear":
            x = torch.log(x)
        return (x,), torch.randn(6, 2, generator=gen)


if __name__ == "__main__":
    common.main(FlatModel())
