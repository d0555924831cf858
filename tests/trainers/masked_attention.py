#!/usr/bin/python3
"""Attention over keys that are all masked: at step 4 one query's mask hides every key, the
softmax of an all -Inf row is NaN. The mask is a bool input (True: masked).

--variant a: MaskedAttention, masked_fill and softmax inline.
--variant b: Selector (no "Attention" in its name), the masking inside a helper.
--variant c: MaskedAttention given its mask by keyword (self.attn(x, mask=mask)), as real code
  passes masks.
--variant d: nn.MultiheadAttention given key_padding_mask= by keyword, one sequence all
  padding: every query of it attends to no key (output[0], the attention output).
Expected first anomaly: the variant's layer at step 4, NaN, inputs finite: origin.
"""
import torch
import torch.nn as nn

import common


class MaskedAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Parameter(torch.randn(4, 4) * 0.5)

    def forward(self, x, mask):
        scores = (x @ self.q) @ x.transpose(-1, -2)
        att = scores.masked_fill(mask, float("-inf")).softmax(dim=-1)
        return att @ x


def select(scores, hidden):
    return torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1)


class Selector(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Parameter(torch.randn(4, 4) * 0.5)

    def forward(self, x, hidden):
        return select((x @ self.q) @ x.transpose(-1, -2), hidden) @ x


class Net(nn.Module):
    def __init__(self, variant):
        super().__init__()
        self.variant = variant
        self.attn = Selector() if variant == "b" else MaskedAttention()
        self.head = nn.Linear(4, 1)

    def forward(self, x, mask):
        if self.variant == "c":
            return self.head(self.attn(x, mask=mask))
        return self.head(self.attn(x, mask))


class PaddedNet(nn.Module):
    """Self-attention over padded sequences, the padding mask passed by keyword."""

    def __init__(self):
        super().__init__()
        self.attn = nn.MultiheadAttention(4, 1, batch_first=True)
        self.head = nn.Linear(4, 1)

    def forward(self, x, pad):
        out, _ = self.attn(x, x, x, key_padding_mask=pad)
        return self.head(out)


class MaskedAttentionTrainer(common.Trainer):
    """Trainer whose mask hides every key of one query at step 4."""

    variant = "a"
    expected_cause = "attention_fully_masked"
    expected_op = "aten::_softmax"
    expected_replay_cause = "attention_fully_masked"

    def model(self):
        return PaddedNet() if self.variant == "d" else Net(self.variant)

    def batch(self, step, micro, gen):
        x = torch.randn(2, 5, 4, generator=gen)
        if self.variant == "d":
            pad = torch.zeros(2, 5, dtype=torch.bool)
            pad[:, 4] = True  # the last position is padding
            if step == self.fault_step:
                pad[1] = True  # an empty sequence: all padding
            return (x, pad), torch.zeros(2, 5, 1)
        mask = torch.zeros(2, 5, 5, dtype=torch.bool)
        mask[:, :, 4] = True  # padding key
        if step == self.fault_step:
            mask[1, 2] = True
        return (x, mask), torch.zeros(2, 5, 1)


if __name__ == "__main__":
    common.main(MaskedAttentionTrainer())
