"""What a run trains on: the synthetic bigram source (``data``), or real text without a
download, Python's bundled help pages (``pydoc_data.topics``) tokenised by a byte-level
BPE trained on them up to the preset's vocabulary; the last tenth held out, no truth.
"""

from __future__ import annotations

from typing import Any

import torch

from perfsuite.converge.data import Dataset, make_dataset, make_source, seeded_dataset
from perfsuite.converge.presets import Preset

DATA_KINDS = ("bigram", "text")  # a synthetic source whose truth is known, or real text
HELDOUT_FRACTION = 0.1


def corpus() -> str:
    """The text, in a fixed order."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[key] for key in sorted(topics))


def tokenize(text: str, vocab: int, split_words: bool = True) -> tuple[torch.Tensor, int]:
    """Token ids of ``text`` under a byte-level BPE of at most ``vocab`` ids, and its size.

    ``split_words=False`` lets merges cross word boundaries (trained line by line, which
    keeps it fast): the help pages hold only ~9.2k distinct word pieces, so a split BPE
    stops there, while a cross-word one reaches 16k ids and more (a larger softmax).
    """
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    if vocab < 256:
        raise ValueError(f"text data needs a vocabulary of at least 256 (bytes), got {vocab}")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(
        add_prefix_space=False, use_regex=split_words
    )
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator([text] if split_words else text.split("\n"), trainer=trainer)
    ids = torch.tensor(tokenizer.encode(text).ids, dtype=torch.long)
    return ids, tokenizer.get_vocab_size()


def _windows(ids: torch.Tensor, count: int, length: int, gen: torch.Generator) -> torch.Tensor:
    if ids.numel() <= length:
        raise ValueError(f"the text has {ids.numel()} tokens, fewer than a sequence ({length})")
    starts = torch.randint(0, ids.numel() - length, (count,), generator=gen)
    return ids[starts.unsqueeze(1) + torch.arange(length)]


def make_text_dataset(
    vocab: int,
    steps: int,
    batch: int,
    seq: int,
    eval_batches: int,
    seed: int,
    train_batches: int | None = None,
    split_words: bool = True,
) -> Dataset:
    """Batches of ``seq + 1`` tokens from the text, held-out ones from its last tenth."""
    text = corpus()
    ids, used = tokenize(text, vocab, split_words)
    cut = int(ids.numel() * (1 - HELDOUT_FRACTION))

    def draw(heldout: bool, count: int, gen: torch.Generator) -> torch.Tensor:
        return _windows(ids[cut:] if heldout else ids[:cut], count, seq + 1, gen)

    info: dict[str, Any] = {
        "kind": "real text: Python's bundled help topics (pydoc_data.topics), no download",
        "truth_known": False,
        "characters": len(text),
        "tokenizer": f"byte-level BPE trained on the text (tokenizers), {used} of {vocab} ids used"
        + ("" if split_words else ", merges across words"),
        "tokens": int(ids.numel()),
        "heldout": f"the last {HELDOUT_FRACTION:.0%} of the tokens",
    }
    return seeded_dataset(draw, (steps, batch, seq, eval_batches, train_batches), seed, info)


def build_dataset(preset: Preset, kind: str) -> Dataset:
    """The preset's batches of ``kind`` (``DATA_KINDS``): the same tensors every call."""
    p = preset
    if kind == "bigram":
        source = make_source(p.vocab, p.support, p.zipf, p.seed)
        return make_dataset(source, p.steps, p.batch, p.seq, p.eval_batches, p.train_batches)
    return make_text_dataset(
        p.vocab, p.steps, p.batch, p.seq, p.eval_batches, p.seed, p.train_batches
    )
