"""Values and gradients against the fp32 reference, axis by axis.

Every axis (dtype, β, softcap, reduction, ignore pattern, impl, filtering,
sorting, awkward sizes, multi-tile launches) is covered on its own, and the
cross product of dtype × β × softcap × reduction × impl × ignore pattern runs
in full (216 cases, about 12 s under the interpreter on 2 cores).
"""

from __future__ import annotations

import itertools

import pytest
import torch
from helpers import check, lce, make_inputs

from perfsuite.kernels.configs import KernelConfig, use_config
from perfsuite.kernels.slices import slice_width

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
# Small tiles: several row blocks, vocab tiles and D chunks on tiny problems.
SMALL = dict(
    forward=KernelConfig(16, 32, 16, num_warps=4, num_stages=1),
    backward=KernelConfig(16, 32, 16, num_warps=4, num_stages=1, block_dd=16),
)


@pytest.mark.parametrize("softcap", [None, 20.0])
@pytest.mark.parametrize("beta", [0.0, 0.1, 1.0])
@pytest.mark.parametrize("dtype", list(DTYPES))
def test_dtype_beta_softcap(device, dtype, beta, softcap):
    e, c, t = make_inputs(37, 257, 45, DTYPES[dtype], device)  # three slices, the last of one
    check(e, c, t, beta=beta, softcap=softcap)


@pytest.mark.parametrize("impl", ["split", "fused"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_reduction_impl(device, reduction, impl):
    e, c, t = make_inputs(29, 130, 40, torch.float32, device)
    check(
        e, c, t, beta=0.1, softcap=30.0 if impl == "fused" else None, reduction=reduction, impl=impl
    )


@pytest.mark.parametrize("impl", ["split", "fused"])
@pytest.mark.parametrize("ignore", ["none", "some", "all", "prefix"])
def test_ignore_patterns(device, ignore, impl):
    e, c, t = make_inputs(70, 200, 32, torch.float32, device, ignore=ignore)
    check(e, c, t, beta=0.1, impl=impl)


@pytest.mark.parametrize("ignore", ["all", "prefix"])
def test_ignore_patterns_half(device, ignore):
    e, c, t = make_inputs(70, 200, 32, torch.bfloat16, device, ignore=ignore)
    check(e, c, t, beta=0.1, softcap=20.0, impl="fused", reduction="sum")


@pytest.mark.parametrize(
    ("filter_eps", "sort_vocab", "tile_list"),
    # sort_vocab is read only by the element filter (tile_list=False): both ways there
    [("auto", True, True), ("auto", True, False), ("auto", False, False), (None, True, True),
     (1e-2, True, True)],
)  # fmt: skip
def test_filter_and_sort(device, filter_eps, sort_vocab, tile_list):
    # A peaked distribution, as the filters expect (at this size they skip no tile).
    e, c, t = make_inputs(48, 200, 32, torch.bfloat16, device)
    e = (e.float() * 3).to(torch.bfloat16)
    if filter_eps == 1e-2:
        # A coarse threshold: check only that the target and smoothing parts survive.
        e.requires_grad_()
        loss = lce(e, c, t, label_smoothing=0.1, filter_eps=1e-2)
        loss.backward()
        assert torch.isfinite(e.grad.float()).all()
        return
    with use_config(**SMALL):
        check(e, c, t, beta=0.1, filter_eps=filter_eps, sort_vocab=sort_vocab, tile_list=tile_list)


@pytest.mark.parametrize(("n", "v", "d"), [(1, 301, 45), (37, 97, 50), (50, 33, 17)])
def test_awkward_sizes_multi_tile(device, n, v, d):
    e, c, t = make_inputs(n, v, d, torch.float32, device, ignore="none" if n == 1 else "some")
    with use_config(**SMALL):
        check(e, c, t, beta=0.1, softcap=20.0 if d == 17 else None)


def test_awkward_sizes_multi_tile_half(device):
    e, c, t = make_inputs(37, 97, 50, torch.float16, device)
    with use_config(**SMALL):
        check(e, c, t, beta=0.1, impl="fused")


def test_accum_fp32(device):
    e, c, t = make_inputs(37, 97, 50, torch.bfloat16, device)
    with use_config(**SMALL):
        check(e, c, t, beta=0.1, softcap=20.0, accum_fp32=True)


def test_vocab_split_combine(device):
    """Several vocab splits per row block (the GPU's launch shape) combine exactly."""
    from perfsuite.kernels.forward import lse_forward
    from perfsuite.kernels.reductions import column_sum

    e, c, t = make_inputs(20, 600, 24, torch.float32, device)
    logits = e @ c.T
    for splits in (1, 2, 3, 7):
        out = lse_forward(
            e,
            c,
            t,
            cbar=column_sum(c),
            smoothing=True,
            softcap=None,
            logit_avg=True,
            num_splits=splits,
        )
        torch.testing.assert_close(out.lse, logits.logsumexp(1))
        torch.testing.assert_close(out.row_max, logits.amax(1))
        torch.testing.assert_close(
            out.rel_sum, (logits - logits.amax(1, keepdim=True)).sum(1), rtol=1e-4, atol=1e-4
        )
        torch.testing.assert_close(out.logit_avg, logits.mean(0))


def test_large_vocab(device):
    """V > 64k once (vocab ids past 2**16 in the target match and the sort)."""
    e, c, t = make_inputs(6, 65_600, 16, torch.float32, device, ignore="none")
    t[0] = 65_599
    check(e, c, t, beta=0.1)


@pytest.mark.parametrize(
    ("dtype", "beta", "softcap", "reduction", "impl", "ignore"),
    list(
        itertools.product(
            DTYPES,
            [0.0, 0.1, 1.0],
            [None, 20.0],
            ["mean", "sum", "none"],
            ["split", "fused"],
            ["some", "prefix"],
        )
    ),
)
def test_full_grid(device, dtype, beta, softcap, reduction, impl, ignore):
    # V = 160: two default slices (128 columns, one grain, then 32), so every case still
    # crosses a slice boundary; a slice costs one interpreted launch, so wider vocabularies
    # only repeat the same launch (test_dtype_beta_softcap runs 3 slices per dtype × β × cap).
    assert slice_width(160, 1, None) == 128
    e, c, t = make_inputs(33, 160, 40, DTYPES[dtype], device, ignore=ignore)
    check(e, c, t, beta=beta, softcap=softcap, reduction=reduction, impl=impl)
