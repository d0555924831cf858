#!/usr/bin/python3
"""A graph convolution normalised by hand, D^-1/2 A D^-1/2 with d = adj.sum(1).pow(-0.5), over
graphs whose nodes all have a self-loop. At step 4 the batch's graph holds a node with no edge
at all (its row and column of the adjacency zero, its self-loop dropped): its degree is 0, its
d is Inf, and Inf times the zeros of its row is NaN, from finite inputs and parameters. The
ops on the adjacency need no gradient: only the code's names show the pow.

Expected first anomaly: conv1 (GraphConv) at step 4, NaN, inputs finite: the origin.
Cause: division_by_zero, the evidence naming the negative power of a zero degree, the fixes
the zero inverse or self-loops.
"""
import torch
import torch.nn as nn

import common

NODES = 12


class GraphConv(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.lin = nn.Linear(n_in, n_out)

    def forward(self, x, adj):
        d = adj.sum(1).pow(-0.5)
        return (d[:, None] * adj * d[None, :]) @ self.lin(x)


class GCN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = GraphConv(6, 16)
        self.conv2 = GraphConv(16, 3)

    def forward(self, x, adj):
        return self.conv2(torch.relu(self.conv1(x, adj)), adj)


class GCNIsolated(common.Trainer):
    """Trainer whose graph at step 4 holds a node with no edge."""

    expected_cause = "division_by_zero"
    lr = 0.01

    def model(self):
        return GCN()

    def loss(self):
        return nn.CrossEntropyLoss()

    def batch(self, step, micro, gen):
        x = torch.randn(NODES, 6, generator=gen)
        adj = (torch.rand(NODES, NODES, generator=gen) < 0.25).to(torch.float32)
        adj = ((adj + adj.t()) > 0).to(torch.float32)
        adj.fill_diagonal_(1.0)
        if step == self.fault_step:
            adj[5, :] = 0.0
            adj[:, 5] = 0.0
        return (x, adj), torch.randint(0, 3, (NODES,), generator=gen)


if __name__ == "__main__":
    common.main(GCNIsolated())
