"""What a run trains on, the same batches for every method (seeded generators): a sparse
synthetic bigram source whose truth is known (held-out calibration is held against it), or
Python's bundled help pages under a byte-level BPE trained on them (no truth)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from perfsuite.converge.presets import Preset

MAX_REDRAWS = 64
HELDOUT_FRACTION = 0.1
Sampler = Callable[[bool, int, torch.Generator], torch.Tensor]  # (heldout, count, generator)


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
            pick.clamp_(max=self.successors.shape[1] - 1)
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
            "successors_per_token": self.successors.shape[1],
            "prior": f"Zipf-like, p(rank r) proportional to 1/(r+2.7)^{self.zipf:g}",
            "weights": "Dirichlet(1) over each token's successors",
            "seed": self.seed,
            "entropy_rate_nats": round(self.conditional_entropy(), 6),
        }


def successors_without_replacement(
    prior: torch.Tensor, rows: int, support: int, generator: torch.Generator
) -> torch.Tensor:
    """``rows x support`` distinct ids, each row drawn from ``prior`` without replacement by
    rejection (the exact renormalised law; ``torch.multinomial`` took ~50 s at 32k x 32k),
    rows still repeating after ``MAX_REDRAWS`` rounds drawn from the renormalised prior."""
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
    """A reproducible source: each token's ``support`` successors drawn from a prior of
    Zipf-Mandelbrot weights ``1/(rank + 2.7)^zipf`` over a random permutation of the ids,
    Dirichlet(1) weights on them; the same arguments give the same source."""
    if not 1 <= support <= vocab:
        raise ValueError(f"support must be in [1, vocab={vocab}], got {support}")
    gen = torch.Generator().manual_seed(seed)
    ranks = torch.arange(vocab, dtype=torch.float64)
    prior = torch.empty_like(ranks)
    prior[torch.randperm(vocab, generator=gen)] = 1.0 / (ranks + 2.7) ** zipf
    prior /= prior.sum()
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


def _text_sampler(preset: Preset, split_words: bool) -> tuple[Sampler, dict[str, Any]]:
    """Sequences of the help pages under a byte-level BPE of at most ``preset.vocab`` ids,
    held-out ones from their last tenth; what they are.

    ``split_words=False`` lets merges cross word boundaries (trained line by line, which
    keeps it fast): the help pages hold only ~9.2k distinct word pieces, so a split BPE
    stops there, while a cross-word one reaches 16k ids and more (a larger softmax)."""
    from pydoc_data.topics import topics

    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    vocab, length = preset.vocab, preset.seq + 1
    if vocab < 256:
        raise ValueError(f"text data needs a vocabulary of at least 256 (bytes), got {vocab}")
    text = "\n\n".join(topics[key] for key in sorted(topics))  # in a fixed order
    byte_level = pre_tokenizers.ByteLevel
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = byte_level(add_prefix_space=False, use_regex=split_words)
    alphabet = byte_level.alphabet()
    trainer = trainers.BpeTrainer(vocab_size=vocab, initial_alphabet=alphabet, show_progress=False)
    tokenizer.train_from_iterator([text] if split_words else text.split("\n"), trainer=trainer)
    ids = torch.tensor(tokenizer.encode(text).ids, dtype=torch.long)
    cut = int(ids.numel() * (1 - HELDOUT_FRACTION))

    def draw(heldout: bool, count: int, gen: torch.Generator) -> torch.Tensor:
        part = ids[cut:] if heldout else ids[:cut]
        if (n := part.numel()) <= length:
            raise ValueError(f"the text has {n} tokens, fewer than a sequence ({length})")
        starts = torch.randint(0, n - length, (count,), generator=gen)
        return part[starts.unsqueeze(1) + torch.arange(length)]

    info: dict[str, Any] = {
        "kind": "real text: Python's bundled help topics (pydoc_data.topics), no download",
        "truth_known": False,
        "characters": len(text),
        "tokenizer": f"byte-level BPE trained on the text (tokenizers), "
        f"{tokenizer.get_vocab_size()} of {vocab} ids used"
        + ("" if split_words else ", merges across words"),
        "tokens": int(ids.numel()),
        "heldout": f"the last {HELDOUT_FRACTION:.0%} of the tokens",
    }
    return draw, info


def build_dataset(preset: Preset, kind: str = "bigram", split_words: bool = True) -> Dataset:
    """The preset's batches of ``kind`` (``presets.DATA_KINDS``), the same tensors every
    call: sequences of ``seq + 1`` tokens (inputs ``[:, :-1]``, targets ``[:, 1:]``), the
    distinct training batches drawn from seed + 1, the held-out ones from seed + 2."""
    p, source = preset, None
    if kind == "text":
        draw, info = _text_sampler(p, split_words)
    else:
        source = make_source(p.vocab, p.support, p.zipf, p.seed)
        info = source.describe()

        def draw(heldout: bool, count: int, gen: torch.Generator) -> torch.Tensor:
            return source.sample(count, p.seq + 1, gen)

    distinct = p.steps if p.train_batches is None else min(p.train_batches, p.steps)
    train = draw(False, distinct * p.batch, torch.Generator().manual_seed(p.seed + 1))
    heldout = draw(True, p.eval_batches * p.batch, torch.Generator().manual_seed(p.seed + 2))
    info = {**info, "train_seed": p.seed + 1, "heldout_seed": p.seed + 2}
    shape = (-1, p.batch, p.seq + 1)
    return Dataset(source, train.view(shape), heldout.view(shape), p.steps, info)
