#!/usr/bin/python3
"""Held-out: nn.TransformerEncoder given its padding mask by keyword, one sequence all padding.

The model embeds token features and runs a two-layer nn.TransformerEncoder (batch first, no
dropout) called as `self.encoder(h, src_key_padding_mask=pad)`, the way real code passes masks.
From the fault step on, the data pipeline hands over a batch in which sequence 2 is empty (its
padding mask True at every position). Each TransformerEncoderLayer passes the mask by keyword
to its nn.MultiheadAttention (`key_padding_mask=`), which fills every score of that sequence
with -inf; softmax over a row that is all -inf is 0/0: NaN.

True cause, from the code: attention_fully_masked (every key of a sequence masked by a
keyword-passed mask). No positional input of the attention is non-finite or unusual: the mask
is the only tensor that shows it.
Expected first anomaly: encoder.layers.0.self_attn (MultiheadAttention) output[0] at the fault
step, NaN, inputs finite: origin.
"""
import torch
import torch.nn as nn

import common

BATCH, SEQ, FEAT, DIM = 4, 6, 5, 8


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(FEAT, DIM)
        # batch first: the attention's output is then a transposed view of a dense tensor,
        # which Tensor.is_contiguous() calls non-contiguous and the daemon scans
        layer = nn.TransformerEncoderLayer(DIM, nhead=2, dim_feedforward=16, dropout=0.0,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(DIM, 1)

    def forward(self, x, pad):
        h = self.encoder(self.embed(x), src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).float()
        pooled = (h * keep).sum(dim=1) / keep.sum(dim=1).clamp_min(1.0)
        return self.head(pooled)


class EncoderPadding(common.Trainer):
    """Trainer whose batch holds an all-padding sequence from the fault step."""

    steps = 3000  # an upper bound: --live stops --after-fault steps after the fault
    fault_step = None  # until asked for

    def model(self):
        return Tagger()

    def optimizer(self, params):
        return torch.optim.Adam(params, lr=1e-3)

    def batch(self, step, micro, gen):
        x = torch.randn(BATCH, SEQ, FEAT, generator=gen)
        lengths = torch.randint(2, SEQ + 1, (BATCH,), generator=gen)
        if self.fault_step is not None and step >= self.fault_step:
            lengths[2] = 0  # an empty sequence reaches the model
        pad = torch.arange(SEQ).unsqueeze(0) >= lengths.unsqueeze(1)
        y = x[:, :, :2].mean(dim=(1, 2)).unsqueeze(1)
        return (x, pad), y


if __name__ == "__main__":
    common.main(EncoderPadding())
