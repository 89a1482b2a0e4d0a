"""The synthetic bigram source: a proper distribution, and samples that follow it."""

from __future__ import annotations

import torch

from perfsuite.converge.data import make_dataset, make_source


def test_true_distribution_sums_to_one_on_a_sparse_support():
    source = make_source(vocab=256, support=8, zipf=1.1, seed=3)
    p = source.transition
    assert p.dtype == torch.float64 and (p >= 0).all()
    torch.testing.assert_close(p.sum(dim=1), torch.ones(256, dtype=torch.float64))
    assert ((p > 0).sum(dim=1) == 8).all()
    torch.testing.assert_close(source.prior.sum(), torch.tensor(1.0, dtype=torch.float64))
    assert 0 < source.conditional_entropy() <= torch.log(torch.tensor(8.0)).item() + 1e-9


def test_same_seed_same_source_and_batches():
    a, b = make_source(128, 4, 1.1, seed=1), make_source(128, 4, 1.1, seed=1)
    assert torch.equal(a.transition, b.transition)
    assert not torch.equal(a.transition, make_source(128, 4, 1.1, seed=2).transition)
    da, db = make_dataset(a, 3, 2, 16, 1), make_dataset(b, 3, 2, 16, 1)
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
    assert counts[source.transition == 0].sum() == 0
    # Well-visited rows: empirical conditionals within sampling noise of the truth.
    rows = counts.sum(dim=1)
    busy = (rows >= 2000).nonzero().squeeze(1)
    assert busy.numel() >= 5
    empirical = counts[busy] / rows[busy].unsqueeze(1)
    total_variation = 0.5 * (empirical - source.transition[busy]).abs().sum(dim=1)
    assert (total_variation < 0.05).all(), total_variation
    # First tokens follow the prior.
    first = torch.bincount(seqs[:, 0], minlength=64).double() / 4000
    assert 0.5 * (first - source.prior).abs().sum() < 0.08
