#!/usr/bin/python3
"""A value made non-finite by a module's own code, between its calls to its children: the
first non-finite output is a child's, whose input no module returned.

--variant vae: a VAE samples z = mu + eps * exp(0.5 * logvar) in its forward; at step 4 its
log-variance head has diverged (bias 400), exp overflows, and the decoder's first Linear is
the first non-finite output. The code of the model (VAE) made it: exp_overflow.
--variant attn: an attention layer with q, k, v and out Linear children computes its scores
in its forward, masked_fill(-inf) with a key padding mask, and a softmax; at step 4 one
sample's keys are all padding: its softmax row is NaN, and out (Linear) is the first
non-finite output. The code of attn made it: attention_fully_masked.
--variant critic: a critic takes a stored tanh-squashed action and recovers its pre-squash
value with atanh in its forward, before its Q head; at step 4 a stored action rounded to
exactly 1 (tanh past 9 in float32): atanh(1) = +Inf, and q is the first non-finite output.
The code of the model (Critic) made it: invalid_domain, the fix clamping into [-1, 1].
--variant scatter: a graph layer averages its neighbours by hand, a sum into each node
(index_add_) divided by its in-degree (a count, with "/"), before its Linear; at step 4 one
node of the batch's graph has no incoming edge: 0/0 is NaN, and conv.lin is the first
non-finite output. The code of conv made it: division_by_zero (the count clamped to 1).
--variant invdist: a pair layer weighs atoms by their inverse distance, 1 / cdist(pos, pos)
(the diagonal kept off), before its Linear; at step 4 two atoms of a molecule coincide: the
distance is 0, its inverse +Inf, and pair.lin is the first non-finite output. The code of
pair made it: division_by_zero (an epsilon on the distance).
--variant gumbel: a discrete bottleneck samples a one-hot code with F.gumbel_softmax(logits,
tau) in its forward, tau annealed by a schedule that reaches 0 at step 4: (logits + g) / 0 is
±Inf, its softmax NaN, and q.code is the first non-finite output. The code of q made it:
division_by_zero (the temperature kept above a floor).
Expected first anomaly: dec.0 (vae), attn.out (attn), q (critic), conv.lin (scatter),
pair.lin (invdist) or q.code (gumbel), inputs not finite, not an origin; then the enclosing
module, an origin.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

import common


class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        self.mu = nn.Linear(16, 4)
        self.logvar = nn.Linear(16, 4)
        self.dec = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 8))

    def forward(self, x):
        h = self.enc(x)
        mu, logvar = self.mu(h), self.logvar(h)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return self.dec(z), mu, logvar


def vae_loss(out, x):
    recon, mu, logvar = out
    return ((recon - x) ** 2).mean() - 0.5 * torch.mean(1 + logvar - mu ** 2 - logvar.exp())


vae_loss.top_modules = ()


class Attention(nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.q, self.k, self.v, self.out = (nn.Linear(d, d) for _ in range(4))
        self.scale = d ** -0.5

    def forward(self, x, pad):
        scores = self.q(x) @ self.k(x).transpose(1, 2) * self.scale
        scores = scores.masked_fill(pad[:, None, :], float("-inf"))
        return self.out(torch.softmax(scores, dim=-1) @ self.v(x))


class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Attention()
        self.head = nn.Linear(8, 1)

    def forward(self, x, pad):
        return self.head(self.attn(x, pad))


class Critic(nn.Module):
    def __init__(self):
        super().__init__()
        self.q = nn.Linear(10, 1)

    def forward(self, obs, action):
        u = torch.atanh(action)  # the action before the policy's tanh
        return self.q(torch.cat([obs, u], dim=-1))


class MeanConv(nn.Module):
    """A graph convolution averaging each node's neighbours by hand."""

    def __init__(self, d=8):
        super().__init__()
        self.lin = nn.Linear(d, d)

    def forward(self, x, edges):
        src, dst = edges[0], edges[1]
        total = torch.zeros_like(x).index_add_(0, dst, x[src])
        count = torch.zeros(x.shape[0]).index_add_(0, dst, torch.ones(dst.shape[0]))
        return torch.relu(self.lin(total / count[:, None]))


class Graph(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = MeanConv()
        self.head = nn.Linear(8, 1)

    def forward(self, x, edges):
        return self.head(self.conv(x, edges))


class Pairs(nn.Module):
    """Atom features weighed by the inverse of the atoms' distances."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 4)

    def forward(self, pos):
        eye = torch.eye(pos.shape[1])
        inv = 1.0 / (torch.cdist(pos, pos) + eye) - eye
        return self.lin(inv @ pos)


class Molecule(nn.Module):
    def __init__(self):
        super().__init__()
        self.pair = Pairs()
        self.head = nn.Linear(4, 1)

    def forward(self, pos):
        return self.head(self.pair(pos)).sum(dim=1)


class Quantizer(nn.Module):
    """A discrete bottleneck: a straight-through Gumbel-softmax code, embedded back."""

    def __init__(self):
        super().__init__()
        self.logits = nn.Linear(8, 6)
        self.code = nn.Linear(6, 8)
        self.tau = 1.0

    def forward(self, h):
        return self.code(F.gumbel_softmax(self.logits(h), tau=self.tau, hard=True))


class Autoencoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(8, 8)
        self.q = Quantizer()
        self.dec = nn.Linear(8, 8)

    def forward(self, x):
        return self.dec(self.q(self.enc(x)))


class BetweenCalls(common.Trainer):
    """Trainer whose fault is made by a module's own code between its children's calls."""

    variant = "vae"

    @property
    def expected_cause(self):
        return {"vae": "exp_overflow", "critic": "invalid_domain",
                "scatter": "division_by_zero", "invdist": "division_by_zero",
                "gumbel": "division_by_zero"}.get(self.variant, "attention_fully_masked")

    def model(self):
        if self.variant == "invdist":
            self.lr = 0.001  # inverse distances of close atoms are large: a gentle step
        return {"vae": VAE, "critic": Critic, "scatter": Graph, "invdist": Molecule,
                "gumbel": Autoencoder}.get(self.variant, Tagger)()

    def loss(self):
        return vae_loss if self.variant == "vae" else nn.MSELoss()

    def schedule(self, model, step):
        if self.variant == "gumbel":
            # annealed linearly, and to 0 at the fault step: no floor
            model.q.tau = max(0.0, 1.0 - step / self.fault_step)
        if self.variant == "vae" and step == self.fault_step:
            with torch.no_grad():
                model.logvar.bias.fill_(400.0)  # a log-variance head gone far

    def batch(self, step, micro, gen):
        if self.variant in ("vae", "gumbel"):
            x = torch.randn(6, 8, generator=gen)
            return (x,), x
        if self.variant == "critic":
            obs = torch.randn(6, 8, generator=gen)
            action = torch.tanh(torch.randn(6, 2, generator=gen))
            if step == self.fault_step:
                action[3, 1] = torch.tanh(torch.tensor(12.0))  # rounds to exactly 1
            return (obs, action), obs.sum(dim=-1, keepdim=True)
        if self.variant == "scatter":
            x = torch.randn(6, 8, generator=gen)
            src = torch.arange(6)
            dst = (src + 1) % 6  # a ring, both ways: every node has two neighbours
            edges = torch.stack([torch.cat([src, dst]), torch.cat([dst, src])])
            if step == self.fault_step:
                edges = edges[:, edges[1] != 2]  # node 2 has no incoming edge
            return (x, edges), x[:, :1]
        if self.variant == "invdist":
            pos = torch.randn(3, 5, 3, generator=gen)
            if step == self.fault_step:
                pos[1, 3] = pos[1, 0]  # two atoms in one place
            return (pos,), pos.pow(2).mean(dim=(1, 2)).unsqueeze(1)
        x = torch.randn(4, 5, 8, generator=gen)
        pad = torch.zeros(4, 5, dtype=torch.bool)
        pad[:, 4] = True
        if step == self.fault_step:
            pad[2] = True  # a sample of padding alone
        return (x, pad), x.sum(dim=-1, keepdim=True)


if __name__ == "__main__":
    common.main(BetweenCalls())
