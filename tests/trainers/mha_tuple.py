#!/usr/bin/python3
"""Fully masked attention: at step 4 one sequence of the batch is all padding, so its
key_padding_mask masks every key, softmax over all -inf gives NaN, and MultiheadAttention's
tuple output (attn_out, weights) is NaN for that sequence.

Expected first anomaly: layers.0.attn (MultiheadAttention) output[0], then output[1];
inputs (query, key, value, and key_padding_mask= by keyword) are finite: origin.
"""
import torch
import torch.nn as nn

import common

SEQ, BATCH, DIM = 6, 3, 8


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(DIM, 2)
        self.ff = nn.Sequential(nn.Linear(DIM, 16), nn.GELU(), nn.Linear(16, DIM))

    def forward(self, x, pad):
        a, _ = self.attn(x, x, x, key_padding_mask=pad)
        x = x + a
        return x + self.ff(x)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(DIM, 1)

    def forward(self, x, pad):
        for layer in self.layers:
            x = layer(x, pad)
        return self.head(x.mean(dim=0))


class MhaTuple(common.Trainer):
    """Trainer whose batch at step 4 holds a sequence that is all padding."""

    # what the daemon's diagnosis must say: the mask goes to MultiheadAttention by keyword,
    # captured like a positional input, and it has a sequence whose every key is masked
    expected_cause = "attention_fully_masked"

    lr = 0.02

    def model(self):
        return Net()

    def batch(self, step, micro, gen):
        x = torch.randn(SEQ, BATCH, DIM, generator=gen)
        pad = torch.zeros(BATCH, SEQ, dtype=torch.bool)
        pad[0, 4:] = True  # ordinary padding
        if step == 4:
            pad[1, :] = True  # the bug: an empty sequence
        y = x[:2].mean(dim=(0, 2)).unsqueeze(1)
        return (x, pad), y


if __name__ == "__main__":
    common.main(MhaTuple())
