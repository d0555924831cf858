#!/usr/bin/python3
"""A token-level loss over a batch whose targets are all ignored: a language model's labels
are -100 (cross_entropy's ignore_index) over the prompt, and at step 4 the batch holds
prompts alone. The mean over no counted target is 0/0: NaN, from finite logits.

--variant functional: the loss module calls F.cross_entropy(..., ignore_index=-100).
--variant module: the loss module holds an nn.CrossEntropyLoss (layer "ce").
--variant loop: a plain function calls F.cross_entropy, as a training loop does: no module
makes the loss.
Expected first anomaly: the loss module ("" for functional, "ce" for module) at step 4, NaN,
inputs finite: origin; for loop, the loss itself (phase loss), every module output finite.
Cause: division_by_zero, not a log's domain (nor, for loop, a log of 0).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import common

VOCAB = 20


class TinyLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(VOCAB, 16)
        self.out = nn.Linear(16, VOCAB)

    def forward(self, tokens):
        return self.out(torch.tanh(self.emb(tokens)))


class TokenLoss(nn.Module):
    """The mean cross-entropy over the tokens whose label is not -100."""

    def forward(self, logits, labels):
        return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)


def token_loss(logits, labels):
    """The loss as a training loop computes it, outside any module."""
    return F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=-100)


class HeldLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.ce = nn.CrossEntropyLoss()

    def forward(self, logits, labels):
        return self.ce(logits.flatten(0, 1), labels.flatten())


class IgnoredTargets(common.Trainer):
    """Trainer whose batch at step 4 has every label ignored."""

    variant = "functional"
    expected_cause = "division_by_zero"

    def model(self):
        return TinyLM()

    def loss(self):
        if self.variant == "loop":
            return token_loss
        return HeldLoss() if self.variant == "module" else TokenLoss()

    def batch(self, step, micro, gen):
        tokens = torch.randint(0, VOCAB, (4, 6), generator=gen)
        labels = torch.randint(0, VOCAB, (4, 6), generator=gen)
        labels[:, :2] = -100  # the prompt's tokens count for nothing
        if step == self.fault_step:
            labels[:] = -100  # prompts alone
        return (tokens,), labels


if __name__ == "__main__":
    common.main(IgnoredTargets())
