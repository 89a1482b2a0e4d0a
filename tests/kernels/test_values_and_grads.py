"""Values and gradients against the fp32 reference, axis by axis.

dtype × β × softcap runs in full; reduction, impl and ignore pattern are spread over it
so that every pair of values of any two axes appears (a pairwise covering set), then
filtering, sorting, awkward sizes and multi-tile launches on their own.
"""

from __future__ import annotations

import itertools

import pytest
import torch
from helpers import DTYPES, SMALL, check, grads, make_inputs

from perfsuite.kernels.configs import use_config
from perfsuite.kernels.slices import slice_width

REDUCTIONS, IMPLS = ("mean", "sum", "none"), ("split", "fused")
IGNORES = ("some", "prefix", "none", "all")
GRID = [
    (dtype, beta, cap, REDUCTIONS[(i + j) % 3], IMPLS[(j + k) % 2], IGNORES[(i + 3 * j + k) % 4])
    for (i, dtype), (j, beta), (k, cap) in itertools.product(
        enumerate(DTYPES), enumerate([0.0, 0.1, 1.0]), enumerate([None, 20.0])
    )
]


@pytest.mark.parametrize(("dtype", "beta", "softcap", "reduction", "impl", "ignore"), GRID)
def test_grid(device, dtype, beta, softcap, reduction, impl, ignore):
    # V = 257: three default slices of 128, 128 and 1 column.
    assert slice_width(257, 1, None) == 128
    e, c, t = make_inputs(37, 257, 45, DTYPES[dtype], device, ignore=ignore)
    check(e, c, t, beta=beta, softcap=softcap, reduction=reduction, impl=impl)


@pytest.mark.parametrize(
    ("filter_eps", "sort_vocab", "tile_list"),
    # sort_vocab is read only by the element filter (tile_list=False): both ways there
    [("auto", True, True), ("auto", True, False), ("auto", False, False), (None, True, True),
     (1e-2, True, True)],
)  # fmt: skip
def test_filter_and_sort(device, filter_eps, sort_vocab, tile_list):
    # A peaked distribution, as the filters expect (at this size they skip no tile).
    e, c, t = make_inputs(20, 100, 32, torch.bfloat16, device)
    e = (e.float() * 3).to(torch.bfloat16)
    if filter_eps == 1e-2:
        # A coarse threshold: check only that the target and smoothing parts survive.
        _, de, _ = grads(e, c, t, label_smoothing=0.1, filter_eps=1e-2)
        assert torch.isfinite(de.float()).all()
        return
    with use_config(**SMALL):
        check(e, c, t, beta=0.1, filter_eps=filter_eps, sort_vocab=sort_vocab, tile_list=tile_list)


@pytest.mark.parametrize(
    ("n", "v", "d", "dtype", "options"),
    [(1, 301, 45, "fp32", {}), (37, 97, 50, "fp32", {}), (50, 33, 17, "fp32", {"softcap": 20.0}),
     (37, 97, 50, "fp16", {"impl": "fused"}),
     (37, 97, 50, "bf16", {"softcap": 20.0, "accum_fp32": True})],
)  # fmt: skip
def test_awkward_sizes_multi_tile(device, n, v, d, dtype, options):
    e, c, t = make_inputs(n, v, d, DTYPES[dtype], device, ignore="none" if n == 1 else "some")
    with use_config(**SMALL):
        check(e, c, t, beta=0.1, **options)


def test_vocab_split_combine(device):
    """Several vocab splits per row block (the GPU's launch shape) combine exactly."""
    from perfsuite.kernels.forward import lse_forward
    from perfsuite.kernels.reductions import column_sum

    e, c, t = make_inputs(20, 600, 24, torch.float32, device)
    logits = e @ c.T
    for splits in (1, 2, 3, 7):
        cbar = column_sum(c)
        out = lse_forward(
            e, c, t, cbar=cbar, smoothing=True, softcap=None, logit_avg=True, num_splits=splits
        )
        torch.testing.assert_close(out.lse, logits.logsumexp(1))
        torch.testing.assert_close(out.row_max, logits.amax(1))
        torch.testing.assert_close(
            out.rel_sum, (logits - logits.amax(1, keepdim=True)).sum(1), rtol=1e-4, atol=1e-4
        )
        torch.testing.assert_close(out.logit_avg, logits.mean(0))
