"""The filters as the study emulates them: the tile list against the kernel's own
thresholds and launch list, the element filters against hand-counted tiles."""

from __future__ import annotations

import pytest
import torch

from perfsuite.filtering import emulate


def _peaked(n: int = 64, v: int = 4096, d: int = 32, scale: float = 8.0):
    gen = torch.Generator().manual_seed(0)
    e = torch.randn(n, d, generator=gen) * scale
    c = torch.randn(v, d, generator=gen)
    logits = e @ c.T
    return logits, torch.logsumexp(logits, -1)


@pytest.mark.parametrize("filter_eps", [2.0**-12, 2.0**-6, 2.0**-2])
def test_tile_list_matches_the_kernels_thresholds_and_launch_list(filter_eps):
    """Same bf16 tile LSEs in, same τ per row and the same (row block, tile) pairs out."""
    from perfsuite.kernels import tiles

    logits, lse = _peaked()
    n, v = logits.shape
    row_max = logits.amax(-1)
    tile_lse = emulate.forward_tile_lse(logits)
    tau_kernel = tiles.row_thresholds(
        tile_lse, row_max, lse - row_max, filter_eps=filter_eps, extra=0.0, dtype=torch.bfloat16
    )
    tau = emulate.row_thresholds(emulate.tile_mass(tile_lse, lse), filter_eps, torch.bfloat16)
    assert torch.equal(tau, tau_kernel)
    block_n, block_v = 16, 256
    grid = dict(vocab=v, block_n=block_n, block_v=block_v, extra=0.0)
    weights = torch.full((n,), 1.0 / n)
    launched = tiles.build_tile_list(
        tile_lse, emulate.FORWARD_TILE, row_max, lse - row_max, weights, tau_kernel, **grid
    )
    count = int(launched.count.item())
    kernel_keep = torch.zeros(n // block_n, v // block_v, dtype=torch.bool)
    kernel_keep.view(-1)[launched.entries[:count].long()] = True
    flt = emulate.Filter("t", block_n, block_v, False, "")
    keep, _ = emulate.tile_list_tiles(
        logits, lse, torch.ones(n, dtype=torch.bool), filter_eps, torch.bfloat16, flt
    )
    assert torch.equal(keep, kernel_keep)
    assert 0.5 < keep.float().mean() < 1.0  # a case where the list does skip pairs


def test_a_flat_softmax_keeps_every_tile_and_a_heavy_tail_lowers_the_threshold():
    logits, lse = _peaked(scale=0.01)  # every 128-wide tile holds ~1/32 of the mass
    live = torch.ones(64, dtype=torch.bool)
    flt = emulate.FILTERS["tile-list"]
    keep, tau = emulate.tile_list_tiles(logits, lse, live, 2.0**-12, torch.bfloat16, flt)
    assert bool((tau == 2.0**-12).all()) and bool(keep.all())
    # One peak and a flat tail of 2^20 entries: each tail tile holds ~1.2e-4 < 2^-12, so at
    # filter_eps the tail (almost all the mass) would go; the next level, 2^-14, drops nothing.
    wide = torch.zeros(2, 1 << 20)
    wide[:, 0] = 8.0
    lse, live = torch.logsumexp(wide, -1), torch.ones(2, dtype=torch.bool)
    keep, tau = emulate.tile_list_tiles(wide, lse, live, 2.0**-12, torch.bfloat16, flt)
    assert bool((tau == 2.0**-14).all()) and bool(keep.all())


def test_element_tiles_keep_exactly_the_tiles_holding_a_term_at_or_above_eps():
    terms = torch.zeros(5, 7)
    terms[0, 0] = 0.5  # tile (0, 0)
    terms[4, 6] = 0.25  # tile (2, 3)
    terms[2, 3] = 0.24  # below eps: tile (1, 1) stays out
    live = torch.ones(5, dtype=torch.bool)
    flt = emulate.Filter("t", 2, 2, False, "")
    keep = emulate.element_tiles(terms, live, 0.25, flt)
    assert keep.shape == (3, 4)
    assert sorted(map(tuple, keep.nonzero().tolist())) == [(0, 0), (2, 3)]
    live[4] = False  # an ignored row keeps nothing alive
    assert emulate.element_tiles(terms, live, 0.25, flt).sum() == 1
    mask = emulate.expand(keep, 5, 7, 2, 2)
    assert mask.shape == (5, 7) and int(mask.sum()) == 4 + 1


def test_the_softmax_part_drops_masked_terms_and_keeps_ours_targets_exact():
    probs = torch.softmax(torch.randn(3, 6, generator=torch.Generator().manual_seed(1)), -1)
    targets = torch.tensor([1, 4, -100])
    live = targets != -100
    mask = torch.ones(3, 6, dtype=torch.bool)
    mask[:, 4] = False
    full = emulate.softmax_part(probs, targets, live, None, None, False)
    ours = emulate.softmax_part(probs, targets, live, None, mask, False)
    cce = emulate.softmax_part(probs, targets, live, None, mask, True)
    assert torch.equal(full[2], torch.zeros(6))  # ignored row
    assert full[0, 1] == pytest.approx((probs[0, 1] - 1) / 2)
    assert ours[1, 4] == pytest.approx(-1 / 2)  # target part kept, softmax part dropped
    assert cce[1, 4] == 0  # CCE's target goes with its tile
    assert torch.equal(ours[:, :4], full[:, :4])


def test_sorted_order_is_decreasing_average_logit():
    logits = torch.tensor([[0.0, 3.0, 1.0], [0.0, 1.0, 5.0]])
    live = torch.tensor([True, False])
    assert emulate.vocab_order("sorted", logits, live).tolist() == [1, 2, 0]
    assert emulate.vocab_order("natural", logits, live) is None
    with pytest.raises(ValueError, match="unknown vocabulary order"):
        emulate.vocab_order("backwards", logits, live)
