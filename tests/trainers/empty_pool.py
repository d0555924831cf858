#!/usr/bin/python3
"""Pooling over the valid tokens of a document, of none.

--variant lse: a smooth max written by hand, m + log(sum(exp(h - m))) with m the max over the
  positions a bool mask keeps (the others filled with -inf); at step 4 one document of the
  batch has no valid token: its row is all -inf, m is -inf, and h - m is -inf - (-inf) = NaN.
  No softmax is taken. Expected: pool (LSEPool) at step 4, NaN, inputs finite: the origin;
  every position of that row masked (attention_fully_masked), from the mask's all-false row
  and the call's masked_fill and max.
--variant empty: a mean over the tokens, and at step 4 every text of the batch was filtered
  to nothing: the embeddings have a dimension of 0, and their mean is 0/0. Expected: pool
  (MeanPool) at step 4, NaN, inputs finite (none): the origin; division_by_zero from the
  input that holds no values.
"""
import torch
import torch.nn as nn

import common

VOCAB = 40


class LSEPool(nn.Module):
    def forward(self, h, keep):
        h = h.masked_fill(~keep[..., None], float("-inf"))
        m = h.max(1, keepdim=True).values
        return (m + torch.log(torch.exp(h - m).sum(1, keepdim=True))).squeeze(1)


class MeanPool(nn.Module):
    def forward(self, h):
        return h.mean(1)


class Classifier(nn.Module):
    def __init__(self, lse):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 12)
        self.pool = LSEPool() if lse else MeanPool()
        self.out = nn.Linear(12, 2)

    def forward(self, tokens, *keep):
        return self.out(self.pool(self.emb(tokens), *keep))


class EmptyPool(common.Trainer):
    """Trainer whose batch at step 4 holds a document with no valid token."""

    variant = "lse"
    lr = 0.01

    @property
    def expected_cause(self):
        return "attention_fully_masked" if self.variant == "lse" else "division_by_zero"

    def model(self):
        return Classifier(self.variant == "lse")

    def loss(self):
        return nn.CrossEntropyLoss()

    def batch(self, step, micro, gen):
        labels = torch.randint(0, 2, (6,), generator=gen)
        if self.variant == "empty":
            length = 0 if step == self.fault_step else 9
            return (torch.randint(1, VOCAB, (6, length), generator=gen),), labels
        tokens = torch.randint(1, VOCAB, (6, 9), generator=gen)
        keep = torch.ones(6, 9, dtype=torch.bool)
        keep[:, 7:] = False  # padding
        if step == self.fault_step:
            keep[2] = False  # a document with no valid token
        return (tokens, keep), labels


if __name__ == "__main__":
    common.main(EmptyPool())
