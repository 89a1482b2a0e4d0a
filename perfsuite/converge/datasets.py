"""Which data a converge run trains on: ``bigram`` (synthetic, known truth) or ``text``."""

from __future__ import annotations

from perfsuite.converge.data import Dataset, make_dataset, make_source
from perfsuite.converge.presets import Preset
from perfsuite.converge.text import make_text_dataset

DATA_KINDS = ("bigram", "text")


def build_dataset(preset: Preset, kind: str) -> Dataset:
    """The preset's batches of ``kind``: the same tensors every call (seeded)."""
    p = preset
    if kind == "bigram":
        source = make_source(p.vocab, p.support, p.zipf, p.seed)
        return make_dataset(source, p.steps, p.batch, p.seq, p.eval_batches, p.train_batches)
    if kind == "text":
        return make_text_dataset(
            p.vocab, p.steps, p.batch, p.seq, p.eval_batches, p.seed, p.train_batches
        )
    raise ValueError(f"unknown data kind {kind!r}; known: {', '.join(DATA_KINDS)}")
