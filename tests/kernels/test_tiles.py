"""The backward's tile list: fewer tiles, each row losing at most its mass budget."""

from __future__ import annotations

import pytest
import torch
from helpers import SMALL, grads, make_inputs

from perfsuite.kernels import function, terms
from perfsuite.kernels.configs import KernelConfig, use_config
from perfsuite.kernels.tiles import build_tile_list, mass_budget, row_thresholds

# Backward tiles wider / narrower than the forward's: the bound spans or splits tiles.
WIDE = dict(SMALL, backward=KernelConfig(16, 64, 16, num_warps=4, num_stages=1, block_dd=16))
NARROW = dict(SMALL, backward=KernelConfig(32, 16, 16, num_warps=4, num_stages=1, block_dd=16))


def _grads(e, c, t, **options):
    """The tile backward (filtered over its list unless ``filter_eps`` says otherwise)."""
    options = {"tiles": True, "filter_eps": "auto", **options}
    _, de, dc = grads(e, c, t, sort_vocab=False, **options)
    return de, dc, function.LAST_TILES[0]


def peaked_inputs(n: int, v: int, d: int, device: str, ignore: str = "some"):
    """Rows that point at their target (as a trained model's do): most tiles hold only
    probabilities far below the filter threshold."""
    e, c, t = make_inputs(n, v, d, torch.float32, device, ignore=ignore)
    c = c / c.norm(dim=1, keepdim=True)
    e = e + 30 * c[t.clamp(min=0)]
    return e.to(torch.bfloat16), c.to(torch.bfloat16), t


@pytest.mark.parametrize(
    ("configs", "beta", "softcap", "n", "vocab", "d", "ignore"),  # D steps: 2 in "same", else 1
    [(SMALL, 0.0, None, 48, 320, 32, "prefix"), (WIDE, 0.1, None, 20, 600, 16, "some"),
     (NARROW, 0.0, 40.0, 36, 320, 16, "some")],
    ids=["same", "wide-smooth", "narrow-softcap"],
)  # fmt: skip
def test_fewer_tiles_within_mass_budget(device, configs, beta, softcap, n, vocab, d, ignore):
    """Skipped tiles lose at most the per-row mass budget against an unfiltered run
    (enough vocab tiles per row block that most can be skipped)."""
    e, c, t = peaked_inputs(n, vocab, d, device, ignore=ignore)
    options = dict(label_smoothing=beta, softcap=softcap)
    with use_config(**configs):
        de_list, dc_list, tiles = _grads(e, c, t, tile_list=True, **options)
        de_full, dc_full, none = _grads(e, c, t, filter_eps=None, **options)
    assert none is None and tiles is not None
    fraction = tiles.launched_fraction()
    assert 0 < fraction < 0.8, fraction
    # |ΔdE_n| ≤ g·(dropped mass)·max|C|, plus one rounding of dE into bf16.
    g = 1 / (t != -100).sum().item()
    bound = g * mass_budget(torch.bfloat16) * c.float().abs().max().item()
    ulp = 2**-8 * de_full.float().abs().max().item()
    assert (de_list.float() - de_full.float()).abs().max().item() <= bound + ulp
    # dC_v gathers the dropped terms of every row: ≤ Σ_n g·budget·max|E| = budget·max|E|.
    dc_bound = mass_budget(torch.bfloat16) * e.float().abs().max().item()
    dc_ulp = 2**-8 * dc_full.float().abs().max().item()
    assert (dc_list.float() - dc_full.float()).abs().max().item() <= dc_bound + dc_ulp
    if ignore == "prefix":
        # Rows peak at their targets, so target tiles are listed (by their mass: the target
        # part itself is exact outside the tiles); blocks of only ignored rows never are.
        torch.testing.assert_close(de_list, de_full, rtol=2**-7, atol=1e-6)
        torch.testing.assert_close(dc_list, dc_full, rtol=2**-7, atol=1e-6)
        listed = tiles.entries[: int(tiles.count.item())].long()
        num_v, live = -(-vocab // 32), (2 * n) // 3
        assert {int(x) for x in listed // num_v} <= set(range(live // 16, n // 16))
        for row in range(live, n):
            assert (row // 16) * num_v + int(t[row]) // 32 in set(listed.tolist())


def test_no_list_when_it_cannot_drop_anything(device):
    """Softcap smoothing β/V above filter_eps: every tile listed (no filter, no list:
    test_fewer_tiles_within_mass_budget)."""
    e, c, t = make_inputs(16, 100, 16, torch.float32, device)
    _grads(e, c, t, label_smoothing=1.0, softcap=20.0, filter_eps=1e-3)
    assert function.LAST_TILES[0].launched_fraction() == 1.0


@pytest.mark.parametrize(
    ("beta", "softcap"), [(0.0, None), (0.1, 20.0)], ids=["plain", "smooth-cap"]
)
def test_list_keeps_every_tile_the_element_filter_keeps(device, beta, softcap):
    """Conservative: with the list's own per-row thresholds τ, every (row block, vocab
    tile) holding one in-tile term |d| ≥ τ of a live row (what the in-kernel element
    filter keeps) is listed. Terms from fp32 reference logits."""
    e, c, t = peaked_inputs(32, 600, 64, device)
    p = function.Params(
        beta=beta, softcap=softcap, ignore_index=-100, reduction="mean",
        filter_eps=torch.finfo(torch.bfloat16).eps / 32, sort_vocab=False, accum_fp32=False,
    )  # fmt: skip
    with use_config(**WIDE):
        out, _ = function._forward(e, c, t, None, p, needs_grad=True)
        g = terms.coefficients(terms.row_weights(t, None, p, 600), out.lse, p, 600).prob
        extra = 64 * beta / 600 if softcap else 0.0
        tau = row_thresholds(
            out.tile_lse, out.row_max, out.log_sum,
            filter_eps=p.filter_eps, extra=extra, dtype=torch.bfloat16,
        )  # fmt: skip
        tiles = build_tile_list(
            out.tile_lse, out.tile_width, out.row_max, out.log_sum, g, tau,
            vocab=600, block_n=16, block_v=64, extra=extra,
        )  # fmt: skip
    z = e.float() @ c.float().T
    if softcap:
        th = torch.tanh(z / softcap)
        z = softcap * th
    parts = torch.softmax(z, dim=1)
    if softcap:
        parts = parts * (1 - th * th) + beta / 600 * th * th
    big = (parts >= tau[:, None]) & (g != 0)[:, None]
    num_v = -(-600 // 64)
    padded = torch.zeros(32, num_v * 64, dtype=torch.bool, device=big.device)
    padded[:, :600] = big
    needed = padded.view(32 // 16, 16, num_v, 64).any(dim=3).any(dim=1)
    listed = torch.zeros(32 // 16 * num_v, dtype=torch.bool, device=big.device)
    listed[tiles.entries[: int(tiles.count.item())].long()] = True
    assert needed.any() and not needed.all()
    missing = needed.view(-1) & ~listed
    assert not missing.any(), f"{int(missing.sum())} pairs with kept terms are not listed"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_full_list_gives_identical_gradients(device, dtype):
    """Flat softmax: τ = 0, the list holds every pair, and its gradients are the
    unfiltered launch's, bit for bit (same tiles, same order)."""
    e, c, t = make_inputs(20, 100, 32, dtype, device)  # 2 × 4 tiles, each last one masked
    with use_config(**SMALL):
        de_list, dc_list, tiles = _grads(e, c, t, tile_list=True)
        de_full, dc_full, _ = _grads(e, c, t, filter_eps=None)
    assert tiles.launched_fraction() == 1.0
    assert torch.equal(de_list, de_full) and torch.equal(dc_list, dc_full)
