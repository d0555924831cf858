#!/usr/bin/python3
"""A tagger whose recurrence grows: an nn.RNN with relu and recurrent weights of gain 1.3 (an
identity initialisation scaled up), over sequences of 12 tokens, where the hidden state stays
small. At step 4 the batch holds one long document (400 tokens): 1.3 ** 400 is past the
float32 range, so the hidden state overflows to +Inf inside the RNN's call, and NaN after
it, from finite inputs and parameters, with no zero, exp or domain among them.

Expected first anomaly: rnn (RNN) at step 4, +Inf and NaN, inputs finite: the origin. The
cause is no division (the finite values beside the Inf reach the range): the values grew
inside the call, a recurrence the autograd walk shows as relu repeated; the fixes bound its
gain.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import common

VOCAB = 30
TAGS = 5


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 16)
        self.rnn = nn.RNN(16, 32, nonlinearity="relu", batch_first=True)
        self.out = nn.Linear(32, TAGS)
        with torch.no_grad():
            self.rnn.weight_hh_l0.copy_(torch.eye(32) * 1.3)

    def forward(self, tokens):
        return self.out(self.rnn(self.emb(tokens))[0])


def tag_loss(logits, tags):
    return F.cross_entropy(logits.reshape(-1, TAGS), tags.reshape(-1))


class RecurrentGrowth(common.Trainer):
    """Trainer whose batch at step 4 is one long document."""

    expected_cause = "unknown"
    lr = 1e-4

    def model(self):
        return Tagger()

    def loss(self):
        return tag_loss

    def batch(self, step, micro, gen):
        shape = (1, 400) if step == self.fault_step else (4, 12)
        tokens = torch.randint(0, VOCAB, shape, generator=gen)
        return (tokens,), torch.randint(0, TAGS, shape, generator=gen)


if __name__ == "__main__":
    common.main(RecurrentGrowth())
