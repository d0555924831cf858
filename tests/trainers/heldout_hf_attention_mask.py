#!/usr/bin/python3
"""Held-out: a BERT-style self-attention of its own, given `attention_mask=` by keyword, meets
a sample whose attention mask is all zeros.

The encoder is laid out as Hugging Face's BERT is (encoder.layer.N.attention.self, a
SelfAttention whose forward(hidden_states, attention_mask=None) returns a 1-tuple, then
attention.output, intermediate, output), and each layer is called as
`layer(hidden, attention_mask=mask)`. The mask is a 0/1 integer tensor (1: attend), turned into
`scores.masked_fill(attention_mask[:, None, None, :] == 0, float("-inf"))` inside the
attention, where the original code added a large finite negative number. From the fault step
on, the tokenizer hands over a batch in which sample 1 has no tokens (its mask all 0): every
score of that sample is -inf and softmax makes 0/0 = NaN.

True cause, from the code: attention_fully_masked (every key masked, the mask given by keyword).
Expected first anomaly: encoder.layer.0.attention.self (SelfAttention) output[0] at the fault
step, NaN, inputs finite: origin.
"""
import math

import torch
import torch.nn as nn

import common

BATCH, SEQ, DIM, HEADS = 3, 5, 8, 2


class SelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.query = nn.Linear(DIM, DIM)
        self.key = nn.Linear(DIM, DIM)
        self.value = nn.Linear(DIM, DIM)

    def heads(self, x):
        b, t, _ = x.shape
        return x.view(b, t, HEADS, DIM // HEADS).permute(0, 2, 1, 3)

    def forward(self, hidden_states, attention_mask=None):
        q = self.heads(self.query(hidden_states))
        k = self.heads(self.key(hidden_states))
        v = self.heads(self.value(hidden_states))
        scores = q @ k.transpose(-1, -2) / math.sqrt(DIM // HEADS)
        if attention_mask is not None:
            scores = scores.masked_fill(attention_mask[:, None, None, :] == 0, float("-inf"))
        context = scores.softmax(dim=-1) @ v
        b, _, t, _ = context.shape
        return (context.permute(0, 2, 1, 3).reshape(b, t, DIM),)


class SelfOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.dense = nn.Linear(DIM, DIM)
        self.LayerNorm = nn.LayerNorm(DIM)

    def forward(self, hidden_states, input_tensor):
        return self.LayerNorm(self.dense(hidden_states) + input_tensor)


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.self = SelfAttention()
        self.output = SelfOutput()

    def forward(self, hidden_states, attention_mask=None):
        context = self.self(hidden_states, attention_mask=attention_mask)[0]
        return self.output(context, hidden_states)


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention = Attention()
        self.intermediate = nn.Sequential(nn.Linear(DIM, 16), nn.GELU())
        self.output = nn.Linear(16, DIM)

    def forward(self, hidden_states, attention_mask=None):
        h = self.attention(hidden_states, attention_mask=attention_mask)
        return h + self.output(self.intermediate(h))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.ModuleList([Layer(), Layer()])

    def forward(self, hidden_states, attention_mask=None):
        for layer in self.layer:
            hidden_states = layer(hidden_states, attention_mask=attention_mask)
        return hidden_states


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embeddings = nn.Embedding(20, DIM)
        self.encoder = Encoder()
        self.pooler = nn.Linear(DIM, 1)

    def forward(self, input_ids, attention_mask):
        h = self.encoder(self.embeddings(input_ids), attention_mask=attention_mask)
        return self.pooler(h[:, 0])


class HfAttentionMask(common.Trainer):
    """Trainer whose batch holds a sample with no tokens from the fault step."""

    steps = 3000  # an upper bound: --live stops --after-fault steps after the fault
    fault_step = None  # until asked for

    def model(self):
        return Model()

    def optimizer(self, params):
        return torch.optim.Adam(params, lr=1e-3)

    def batch(self, step, micro, gen):
        ids = torch.randint(1, 20, (BATCH, SEQ), generator=gen)
        lengths = torch.randint(2, SEQ + 1, (BATCH,), generator=gen)
        if self.fault_step is not None and step >= self.fault_step:
            lengths[1] = 0  # an empty text
        mask = (torch.arange(SEQ).unsqueeze(0) < lengths.unsqueeze(1)).long()
        ids = ids * mask  # token 0 is padding
        y = (ids[:, :1] % 3).float()
        return (ids, mask), y


if __name__ == "__main__":
    common.main(HfAttentionMask())
