#!/usr/bin/python3
"""A bag-of-tokens classifier whose pooling layer takes the token ids (int64, padding id 0) to
mask the padding and scales each mean by the log of the sample's length, which the data
pipeline passes beside the ids. At step 4 one length is the sentinel -1 (a record whose length
was missing): log(-1) is NaN. The batch always holds a sequence of padding alone (a row of ids
all 0) and sequences of ids above 1: neither is a mask hiding every position. --variant keep
passes a bool mask of the positions to keep beside the ids (rows all true where every token
is valid; no sequence of padding alone): with no softmax in the layer, no fully masked
attention either. The embedding has
no padding_idx: zero rows among the embeddings would be a 0/0 sign that the live rules cannot
tell from the log's domain (the replay of the capture can).

Expected first anomaly: pool (LengthPool) at step 4, NaN, inputs finite: the origin; a log of a
negative value (invalid_domain), not a fully masked attention row nor a division by zero.
"""
import torch
import torch.nn as nn

import common

VOCAB, DIM, BATCH, SEQ = 20, 8, 4, 6


class LengthPool(nn.Module):
    """Mean of the embeddings of the non-padding tokens, times log(length)."""

    def forward(self, h, ids, lengths):
        keep = (ids > 0 if ids.dtype != torch.bool else ids).unsqueeze(-1).to(h.dtype)
        mean = (h * keep).sum(1) / keep.sum(1).clamp_min(1.0)
        return mean * torch.log(lengths).unsqueeze(-1)


class BagClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, DIM)
        self.pool = LengthPool()
        self.out = nn.Linear(DIM, 2)

    def forward(self, ids, lengths, keep=None):
        return self.out(self.pool(self.emb(ids), ids if keep is None else keep, lengths))


class TokenPool(common.Trainer):
    """Trainer whose batch at step 4 holds a length of -1."""

    variant = "ids"
    expected_cause = "invalid_domain"
    lr = 0.01

    def model(self):
        return BagClassifier()

    def loss(self):
        return nn.CrossEntropyLoss()

    def batch(self, step, micro, gen):
        ids = torch.randint(2, VOCAB, (BATCH, SEQ), generator=gen)
        ids[0, 4:] = 0  # a shorter sequence, padded
        # padding alone; with a mask, one that keeps no position is a 0/0 sign (a masked mean)
        # the live rules cannot tell from the log's domain: shorter there
        ids[3, 1 if self.variant == "keep" else 0:] = 0
        lengths = (ids > 0).sum(1).to(torch.float32) + 1.0
        if step == self.fault_step:
            lengths[1] = -1.0
        y = torch.randint(0, 2, (BATCH,), generator=gen)
        if self.variant == "keep":
            return (ids, lengths, ids > 0), y
        return (ids, lengths), y


if __name__ == "__main__":
    common.main(TokenPool())
