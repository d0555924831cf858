#!/usr/bin/python3
"""Demo for `make demo`: a small decoder-only transformer that goes NaN at step 12.

Its RMSNorm has no epsilon. Token 0 is padding, and an Embedding with padding_idx keeps that
row at exactly zero; at step 12 a batch arrives with padded sequences, blocks.0.norm computes
0 / sqrt(mean(0^2)) = NaN at the padded positions, and the NaN spreads through attention.

Expected first anomaly: blocks.0.norm (RMSNorm), inputs finite: origin.

`make demo` runs it with --live (training at once) and moves the padded batch to a step after
nanwatchd has attached ("FAULT n" on stdin), as a user attaches to a job already training.
"""
import math

import torch
import torch.nn as nn

import common

VOCAB, DIM, SEQ, BATCH, HEADS = 32, 16, 12, 4, 2
FAULT_STEP = 12


class RMSNorm(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        # The bug: no eps inside the sqrt, so an all-zero row gives 0/0.
        return x / x.pow(2).mean(dim=-1, keepdim=True).sqrt() * self.weight


class SelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(DIM, 3 * DIM)
        self.proj = nn.Linear(DIM, DIM)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, HEADS, d // HEADS).permute(2, 0, 3, 1, 4)
        att = q @ k.transpose(-2, -1) / math.sqrt(d // HEADS)
        causal = torch.ones(t, t, dtype=torch.bool).triu(1)
        att = att.masked_fill(causal, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        return self.proj(y)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = RMSNorm(DIM)
        self.attn = SelfAttention()
        self.norm2 = RMSNorm(DIM)
        self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))

    def forward(self, x):
        x = x + self.attn(self.norm(x))
        return x + self.mlp(self.norm2(x))


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, DIM, padding_idx=0)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.norm = RMSNorm(DIM)
        self.head = nn.Linear(DIM, VOCAB)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x)).view(-1, VOCAB)


class Demo(common.Trainer):
    """Tiny transformer whose eps-less RMSNorm meets padding at step 12."""

    # 0/0 on all-zero rows through a root mean square: live from the call's ops (div of a sqrt
    # of a mean), and the replay from the denominator's producers
    expected_cause = "norm_zero_variance"

    steps = 20
    fault_step = FAULT_STEP
    lr = 3e-3

    def model(self):
        return TinyLM()

    def loss(self):
        return nn.CrossEntropyLoss()

    def optimizer(self, params):
        return torch.optim.Adam(params, lr=self.lr)

    def batch(self, step, micro, gen):
        seq = torch.randint(1, VOCAB, (BATCH, SEQ + 1), generator=gen)
        if step == self.fault_step:
            seq[1, SEQ - 3:] = 0  # the first padded batch
        return (seq[:, :-1],), seq[:, 1:].reshape(-1)


if __name__ == "__main__":
    common.main(Demo())
