"""A synthetic language whose true next-token distribution is known.

No network and no tokenizer: a random sparse bigram source. Each token has
``support`` successors drawn (without replacement) from a Zipf-like prior over
the vocabulary, with Dirichlet(1) weights, so the source's marginal is skewed
like text while every conditional is exact. Because ``P(next | prev)`` is known,
held-out calibration can be held against the truth, not only against sampled
labels: the best achievable loss is the source's conditional entropy.

The source is stored sparse (``vocab x support`` successors and weights), so a
32k vocabulary costs a few MiB, not the 8 GiB of a dense transition matrix.
Every batch comes from seeded ``torch.Generator`` s, so every method sees the
same tokens in the same order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

MAX_REDRAWS = 64


@dataclass
class BigramSource:
    """``P(next = successors[a, j] | prev = a) = weights[a, j]`` (float64, rows sum to 1);
    ``prior`` is the distribution of a sequence's first token."""

    successors: torch.Tensor
    weights: torch.Tensor
    prior: torch.Tensor
    zipf: float
    seed: int

    @property
    def vocab(self) -> int:
        return self.prior.shape[0]

    @property
    def support(self) -> int:
        return self.successors.shape[1]

    def dense(self) -> torch.Tensor:
        """The ``vocab x vocab`` transition matrix (for small vocabularies and tests)."""
        out = torch.zeros(self.vocab, self.vocab, dtype=torch.float64)
        return out.scatter_(1, self.successors, self.weights)

    def sample(self, batch: int, length: int, generator: torch.Generator) -> torch.Tensor:
        """``(batch, length)`` int64 token ids drawn from the chain."""
        out = torch.empty(batch, length, dtype=torch.long)
        out[:, 0] = torch.multinomial(self.prior.float(), batch, True, generator=generator)
        cdf = self.weights.cumsum(dim=1)
        for t in range(1, length):
            prev = out[:, t - 1]
            u = torch.rand(batch, 1, dtype=torch.float64, generator=generator)
            rows = cdf[prev]
            pick = torch.searchsorted(rows, u * rows[:, -1:], right=True)
            pick.clamp_(max=self.support - 1)
            out[:, t] = self.successors[prev].gather(1, pick).squeeze(1)
        return out

    def conditional_entropy(self) -> float:
        """Entropy rate under the chain's stationary distribution (nats/token)."""
        row_entropy = -(self.weights * self.weights.log()).sum(dim=1)
        return float((self.stationary() * row_entropy).sum())

    def stationary(self, iters: int = 200) -> torch.Tensor:
        """The chain's stationary distribution by power iteration, started at the prior."""
        pi = self.prior.clone()
        flat = self.successors.reshape(-1)
        for _ in range(iters):
            mass = (pi.unsqueeze(1) * self.weights).reshape(-1)
            pi = torch.zeros_like(pi).index_add_(0, flat, mass)
        return pi / pi.sum()

    def describe(self) -> dict[str, Any]:
        return {
            "kind": "synthetic sparse bigram source (no download)",
            "truth_known": True,
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


def successors_without_replacement(
    prior: torch.Tensor, rows: int, support: int, generator: torch.Generator
) -> torch.Tensor:
    """``rows x support`` distinct token ids per row, each row a draw without replacement
    from ``prior``: one pick at a time, a row whose pick repeats one of its earlier ones
    draws again (rejection gives exactly the prior renormalised over the ids left).
    ``torch.multinomial`` without replacement does the same but takes ~50 s for 32k
    rows of a 32k vocabulary; this takes well under a second. Rows still repeating
    after ``MAX_REDRAWS`` rounds (a support near the vocabulary) get the exact
    renormalised draw directly."""
    vocab = prior.shape[0]
    cdf = prior.cumsum(0)
    out = torch.empty(rows, support, dtype=torch.long)
    for j in range(support):
        todo = torch.arange(rows)
        for _ in range(MAX_REDRAWS):
            u = torch.rand(todo.numel(), dtype=torch.float64, generator=generator)
            pick = torch.searchsorted(cdf, u * cdf[-1], right=True).clamp_(max=vocab - 1)
            repeat = (out[todo, :j] == pick.unsqueeze(1)).any(dim=1)
            out[todo[~repeat], j] = pick[~repeat]
            todo = todo[repeat]
            if todo.numel() == 0:
                break
        if todo.numel():
            left = prior.expand(todo.numel(), vocab).clone()
            left.scatter_(1, out[todo, :j], 0.0)
            out[todo, j] = torch.multinomial(left, 1, generator=generator).squeeze(1)
    return out


def make_source(vocab: int, support: int, zipf: float, seed: int) -> BigramSource:
    """A reproducible source: the same arguments give the same successors and weights."""
    if not 1 <= support <= vocab:
        raise ValueError(f"support must be in [1, vocab={vocab}], got {support}")
    gen = torch.Generator().manual_seed(seed)
    prior = zipf_prior(vocab, zipf, gen)
    successors = successors_without_replacement(prior, vocab, support, gen)
    weights = -torch.rand(vocab, support, dtype=torch.float64, generator=gen).log()  # Exp(1)
    weights = weights / weights.sum(dim=1, keepdim=True)  # normalised Exp(1): Dirichlet(1)
    return BigramSource(successors, weights, prior, zipf=zipf, seed=seed)


@dataclass
class Dataset:
    """Distinct training batches ``(n, batch, seq + 1)``, cycled for ``steps`` steps,
    and held-out ones, fixed up front. ``source`` is None for real text (no truth)."""

    source: BigramSource | None
    train: torch.Tensor
    heldout: torch.Tensor
    steps: int
    info: dict[str, Any]

    def batches(self) -> Iterator[torch.Tensor]:
        """The training batch of every step, in order (the same for every run)."""
        for step in range(self.steps):
            yield self.train[step % self.train.shape[0]]

    def describe(self) -> dict[str, Any]:
        distinct = self.train.shape[0]
        return {
            **self.info,
            "train_batches": [self.steps, *self.train.shape[1:]],
            "distinct_train_batches": distinct,
            "epochs": round(self.steps / distinct, 3),
            "heldout_batches": list(self.heldout.shape),
            "order": "the same batches in the same order for every method and beta",
        }


def seeded_dataset(
    sample: Callable[[bool, int, torch.Generator], torch.Tensor],
    sizes: tuple[int, int, int, int, int | None],
    seed: int,
    info: dict[str, Any],
    source: BigramSource | None = None,
) -> Dataset:
    """``sample(heldout, count, generator)`` sequences of ``seq + 1`` tokens, for
    ``sizes = (steps, batch, seq, eval_batches, train_batches)``: the distinct training
    batches from seed + 1, the held-out ones from seed + 2."""
    steps, batch, seq, eval_batches, train_batches = sizes
    distinct = steps if train_batches is None else min(train_batches, steps)
    train = sample(False, distinct * batch, torch.Generator().manual_seed(seed + 1))
    heldout = sample(True, eval_batches * batch, torch.Generator().manual_seed(seed + 2))
    info = {**info, "train_seed": seed + 1, "heldout_seed": seed + 2}
    shape = (batch, seq + 1)
    heldout = heldout.view(eval_batches, *shape)
    return Dataset(source, train.view(distinct, *shape), heldout, steps, info)


def make_dataset(
    source: BigramSource,
    steps: int,
    batch: int,
    seq: int,
    eval_batches: int,
    train_batches: int | None = None,
) -> Dataset:
    """Sequences of ``seq + 1`` tokens: inputs are ``[:, :-1]``, targets ``[:, 1:]``."""
    sizes = (steps, batch, seq, eval_batches, train_batches)
    draw = lambda _, count, gen: source.sample(count, seq + 1, gen)  # noqa: E731
    return seeded_dataset(draw, sizes, source.seed, source.describe(), source)
