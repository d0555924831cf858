#!/usr/bin/python3
"""A model trained under torch.compile (backend "aot_eager": the compiled graph runs torch's
own kernels, no C compiler needed; torch 2 only). Its layers never run as modules: one fx
GraphModule runs them all, taking their parameters and the batch as one list that its boxed
calling convention empties during the call. At step 4 a weight of the second block is set to
+Inf (a bad update, written outside the compiled graph).

Expected first anomaly: the GraphModule at step 4, its inputs not known finite (the list it
took was emptied before its return: no input was there to check, so none is claimed finite);
with torch 2.6, which calls no GraphModule as a module, the compiled model (_orig_mod).
The diagnosis says the model runs compiled, and how to name the layer (compiling off).
"""
import torch
import torch.nn as nn

import common


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.fc = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        return self.norm(x + torch.relu(self.fc(x)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 16)
        self.blocks = nn.Sequential(Block(16), Block(16))
        self.head = nn.Linear(16, 1)

    def forward(self, x):
        return self.head(self.blocks(self.inp(x)))


class Compiled(common.Trainer):
    """Trainer whose compiled model gets an Inf weight at step 4."""

    expected_cause = "unknown"

    def model(self):
        self.net = Net()
        return torch.compile(self.net, backend="aot_eager")

    def schedule(self, model, step):
        if step == self.fault_step:
            with torch.no_grad():
                self.net.blocks[1].fc.weight[0, 0] = float("inf")

    def batch(self, step, micro, gen):
        x = torch.randn(8, 8, generator=gen)
        return (x,), x.sum(dim=1, keepdim=True)


if __name__ == "__main__":
    common.main(Compiled())
