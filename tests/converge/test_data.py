"""The data: the synthetic bigram source (a proper distribution, samples that follow it,
sparse at 32k), cycling training batches, and the bundled real text."""

from __future__ import annotations

import math
import time
from dataclasses import replace

import torch

from perfsuite.converge.data import build_dataset, make_source, successors_without_replacement
from perfsuite.converge.presets import PRESETS

SMOKE = PRESETS["smoke"]


def dense(source) -> torch.Tensor:
    """The ``vocab x vocab`` transition matrix the sparse source stands for."""
    out = torch.zeros(source.vocab, source.vocab, dtype=torch.float64)
    return out.scatter_(1, source.successors, source.weights)


def test_true_distribution_sums_to_one_on_a_sparse_support():
    source = make_source(vocab=256, support=8, zipf=1.1, seed=3)
    p = dense(source)
    assert p.dtype == torch.float64 and (p >= 0).all()
    torch.testing.assert_close(p.sum(dim=1), torch.ones(256, dtype=torch.float64))
    assert ((p > 0).sum(dim=1) == 8).all()
    torch.testing.assert_close(source.prior.sum(), torch.tensor(1.0, dtype=torch.float64))
    assert 0 < source.conditional_entropy() <= torch.log(torch.tensor(8.0)).item() + 1e-9


def test_same_seed_same_source_and_batches():
    a, b = make_source(128, 4, 1.1, seed=1), make_source(128, 4, 1.1, seed=1)
    assert torch.equal(dense(a), dense(b))
    assert not torch.equal(dense(a), dense(make_source(128, 4, 1.1, seed=2)))
    tiny = replace(SMOKE, vocab=128, support=4, seed=1, steps=3, batch=2, seq=16, eval_batches=1)
    da, db = build_dataset(tiny), build_dataset(tiny)
    assert torch.equal(da.train, db.train) and torch.equal(da.heldout, db.heldout)
    assert da.train.shape == (3, 2, 17) and da.heldout.shape == (1, 2, 17)
    assert not torch.equal(da.train[0], da.heldout[0])


def test_sampling_follows_the_true_distribution():
    source = make_source(vocab=64, support=6, zipf=1.1, seed=0)
    seqs = source.sample(4000, 40, torch.Generator().manual_seed(5))
    prev, nxt = seqs[:, :-1].reshape(-1), seqs[:, 1:].reshape(-1)
    counts = torch.zeros(64, 64, dtype=torch.float64)
    counts.index_put_((prev, nxt), torch.ones_like(prev, dtype=torch.float64), accumulate=True)
    # Never a transition the source gives probability 0.
    truth = dense(source)
    assert counts[truth == 0].sum() == 0
    # Well-visited rows: empirical conditionals within sampling noise of the truth.
    rows = counts.sum(dim=1)
    busy = (rows >= 2000).nonzero().squeeze(1)
    assert busy.numel() >= 5
    empirical = counts[busy] / rows[busy].unsqueeze(1)
    total_variation = 0.5 * (empirical - truth[busy]).abs().sum(dim=1)
    assert (total_variation < 0.05).all(), total_variation
    # First tokens follow the prior.
    first = torch.bincount(seqs[:, 0], minlength=64).double() / 4000
    assert 0.5 * (first - source.prior).abs().sum() < 0.08


def test_repeated_training_batches_cycle_in_order():
    cycled = dict(steps=7, batch=2, seq=8, eval_batches=1, train_batches=3)
    data = build_dataset(replace(SMOKE, vocab=64, support=4, **cycled))
    assert data.train.shape == (3, 2, 9)
    seen = list(data.batches())
    assert len(seen) == 7 and all(torch.equal(seen[i], data.train[i % 3]) for i in range(7))
    assert data.describe()["epochs"] == round(7 / 3, 3)


def test_a_32k_vocabulary_source_is_sparse_and_quick():
    """The GPU preset's vocabulary: a dense 32k x 32k transition matrix would be 8 GiB."""
    start = time.perf_counter()
    source = make_source(vocab=32768, support=16, zipf=1.1, seed=0)
    seqs = source.sample(8, 65, torch.Generator().manual_seed(1))
    assert time.perf_counter() - start < 20
    assert source.successors.shape == source.weights.shape == (32768, 16)
    # Every drawn transition is one the source allows.
    prev, nxt = seqs[:, :-1].reshape(-1), seqs[:, 1:].reshape(-1)
    assert (source.successors[prev] == nxt.unsqueeze(1)).any(dim=1).all()
    assert 0 < source.conditional_entropy() <= math.log(16) + 1e-9


def test_real_text_dataset():
    preset = replace(SMOKE, vocab=512, steps=3, batch=2, seq=16, eval_batches=2)
    data = build_dataset(preset, "text")
    assert data.source is None and data.info["truth_known"] is False
    assert data.train.shape == (3, 2, 17) and data.heldout.shape == (2, 2, 17)
    assert 0 <= int(data.train.min()) and int(data.train.max()) < 512
    assert "pydoc_data" in data.info["kind"] and data.info["tokens"] > 100_000
    again = build_dataset(preset, "text")
    assert torch.equal(data.train, again.train) and torch.equal(data.heldout, again.heldout)


def test_successors_are_drawn_as_multinomial_without_replacement_draws_them():
    prior = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64)
    ours = successors_without_replacement(prior, 100_000, 2, torch.Generator().manual_seed(0))
    assert (ours[:, 0] != ours[:, 1]).all()
    # P(second = k) = sum_j p_j p_k / (1 - p_j), j != k: the exact renormalised draw.
    p = prior.tolist()
    second = [sum(p[j] * p[k] / (1 - p[j]) for j in range(4) if j != k) for k in range(4)]
    freq = torch.bincount(ours[:, 1], minlength=4).double() / 100_000
    torch.testing.assert_close(freq, torch.tensor(second, dtype=torch.float64), atol=5e-3, rtol=0)
    first = torch.bincount(ours[:, 0], minlength=4).double() / 100_000
    torch.testing.assert_close(first, prior, atol=5e-3, rtol=0)
