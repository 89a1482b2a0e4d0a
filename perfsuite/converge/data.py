"""A synthetic language whose true next-token distribution is known.

No network and no tokenizer: a random sparse bigram source. Each token has
``support`` successors drawn (without replacement) from a Zipf-like prior over
the vocabulary, with Dirichlet(1) weights, so the source's marginal is skewed
like text while every conditional is exact. Because ``P(next | prev)`` is known,
held-out calibration can be held against the truth, not only against sampled
labels: the best achievable loss is the source's conditional entropy.

Every batch comes from seeded ``torch.Generator`` s, so every method sees the
same tokens in the same order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class BigramSource:
    """``transition[a, b] = P(next = b | prev = a)`` (float64, rows sum to 1);
    ``prior`` is the distribution of a sequence's first token."""

    transition: torch.Tensor
    prior: torch.Tensor
    support: int
    zipf: float
    seed: int

    @property
    def vocab(self) -> int:
        return self.transition.shape[0]

    def sample(self, batch: int, length: int, generator: torch.Generator) -> torch.Tensor:
        """``(batch, length)`` int64 token ids drawn from the chain."""
        out = torch.empty(batch, length, dtype=torch.long)
        out[:, 0] = torch.multinomial(self.prior.float(), batch, True, generator=generator)
        cdf = self.transition.cumsum(dim=1)
        for t in range(1, length):
            u = torch.rand(batch, 1, dtype=torch.float64, generator=generator)
            rows = cdf[out[:, t - 1]]
            nxt = torch.searchsorted(rows, u * rows[:, -1:], right=True).squeeze(1)
            out[:, t] = nxt.clamp_(max=self.vocab - 1)
        return out

    def conditional_entropy(self) -> float:
        """Entropy rate under the chain's stationary distribution (nats/token)."""
        stationary = self.stationary()
        p = self.transition
        h_rows = -(p * torch.where(p > 0, p.log(), torch.zeros_like(p))).sum(dim=1)
        return float((stationary * h_rows).sum())

    def stationary(self, iters: int = 200) -> torch.Tensor:
        """The chain's stationary distribution by power iteration, started at the prior."""
        pi = self.prior.clone()
        for _ in range(iters):
            pi = pi @ self.transition
        return pi / pi.sum()

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "synthetic sparse bigram source (no download)",
            "vocab": self.vocab,
            "successors_per_token": self.support,
            "prior": f"Zipf-like, p(rank r) proportional to 1/(r+2.7)^{self.zipf:g}",
            "weights": "Dirichlet(1) over each token's successors",
            "seed": self.seed,
            "entropy_rate_nats": round(self.conditional_entropy(), 6),
        }


def zipf_prior(vocab: int, exponent: float, generator: torch.Generator) -> torch.Tensor:
    """Zipf-Mandelbrot weights ``1/(rank + 2.7)^s`` over a random permutation of ids."""
    ranks = torch.arange(vocab, dtype=torch.float64)
    weights = 1.0 / (ranks + 2.7) ** exponent
    perm = torch.randperm(vocab, generator=generator)
    prior = torch.empty(vocab, dtype=torch.float64)
    prior[perm] = weights
    return prior / prior.sum()


def make_source(vocab: int, support: int, zipf: float, seed: int) -> BigramSource:
    """A reproducible source: the same arguments give the same transition matrix."""
    if not 1 <= support <= vocab:
        raise ValueError(f"support must be in [1, vocab={vocab}], got {support}")
    gen = torch.Generator().manual_seed(seed)
    prior = zipf_prior(vocab, zipf, gen)
    successors = torch.multinomial(
        prior.float().expand(vocab, vocab), support, replacement=False, generator=gen
    )
    weights = -torch.rand(vocab, support, dtype=torch.float64, generator=gen).log()  # Exp(1)
    weights = weights / weights.sum(dim=1, keepdim=True)  # normalised Exp(1): Dirichlet(1)
    transition = torch.zeros(vocab, vocab, dtype=torch.float64)
    transition.scatter_(1, successors, weights)
    return BigramSource(transition=transition, prior=prior, support=support, zipf=zipf, seed=seed)


@dataclass
class Dataset:
    """Training batches ``(steps, batch, seq + 1)`` and held-out ones, fixed up front."""

    source: BigramSource
    train: torch.Tensor
    heldout: torch.Tensor

    def describe(self) -> dict[str, Any]:
        return {
            **self.source.describe(),
            "train_batches": list(self.train.shape),
            "heldout_batches": list(self.heldout.shape),
            "train_seed": self.source.seed + 1,
            "heldout_seed": self.source.seed + 2,
            "order": "the same batches in the same order for every method and beta",
        }


def make_dataset(
    source: BigramSource, steps: int, batch: int, seq: int, eval_batches: int
) -> Dataset:
    """Sequences of ``seq + 1`` tokens: inputs are ``[:, :-1]``, targets ``[:, 1:]``."""
    train_gen = torch.Generator().manual_seed(source.seed + 1)
    heldout_gen = torch.Generator().manual_seed(source.seed + 2)
    train = source.sample(steps * batch, seq + 1, train_gen).view(steps, batch, seq + 1)
    heldout = source.sample(eval_batches * batch, seq + 1, heldout_gen)
    return Dataset(source=source, train=train, heldout=heldout.view(eval_batches, batch, seq + 1))
