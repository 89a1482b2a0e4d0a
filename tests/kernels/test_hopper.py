"""The TMA fast path (kernels/hopper.py): when it is chosen, and that it computes what the
portable kernels compute (under the interpreter here, which runs host descriptors)."""

from __future__ import annotations

import types
from dataclasses import replace
from unittest import mock

import pytest
import torch
from helpers import make_inputs

from perfsuite.kernels import forward, hopper, slices
from perfsuite.kernels.configs import KernelConfig, tma_config, use_config
from perfsuite.kernels.terms import Coefficients

HALF = {"bf16": torch.bfloat16, "fp16": torch.float16}
# Several row blocks, vocab tiles, splits and D steps on tiny problems: every loop of the
# persistent kernels runs more than once (the interpreter's grid has 3 programs).
SMALL = KernelConfig(16, 32, 16, num_warps=4, num_stages=1)
# The same with the tile and D loops fused (the GPU builds' FLATTEN; the slice kernel
# then runs every tile through the GEMM, its zero-coefficient rows giving +0 by the
# arithmetic where the unfused kernel skips them).
SMALL_FLAT = KernelConfig(16, 32, 16, num_warps=4, num_stages=1, flatten=True)

# (dtype, smoothing, softcap, class weights, loops): weights reach both kernels only through
# smoothing. Every variant once (fp16 on the heaviest), half of them with the loops fused;
# smoothing with softcap, and class weights, run both ways.
CASES = [
    ("bf16", False, None, False, SMALL),
    ("bf16", False, 20.0, False, SMALL_FLAT),
    ("bf16", True, None, False, SMALL_FLAT),
    ("bf16", True, 20.0, False, SMALL),
    ("bf16", True, 20.0, True, SMALL_FLAT),
    ("fp16", True, 20.0, True, SMALL),
]
IDS = [f"{d}-{s}-{c}-{w}-{'flat' if f.flatten else 'nest'}" for d, s, c, w, f in CASES]
ALIGNED = [(1 << 20, 2304, 1), (1 << 21, 2304, 1)]


@pytest.mark.parametrize(
    "cap, dtype, operands, why",
    [
        ((9, 0), torch.bfloat16, ALIGNED, ""),
        ((10, 0), torch.float16, ALIGNED, ""),
        (None, torch.bfloat16, ALIGNED, "no CUDA device"),
        ((8, 0), torch.bfloat16, ALIGNED, "Ampere: no TMA"),
        ((12, 0), torch.bfloat16, ALIGNED, "consumer Blackwell: 99 KiB of shared memory"),
        ((9, 0), torch.float32, ALIGNED, "fp32"),
        ((9, 0), torch.bfloat16, [(1 << 20, 4063, 1)], "row stride of 8,126 B"),
        ((9, 0), torch.bfloat16, [(1 << 20 | 8, 2304, 1)], "base not 16-byte aligned"),
        ((9, 0), torch.bfloat16, [(1 << 20, 2304, 2)], "rows not contiguous"),
    ],
)
def test_eligible_on_hopper_and_blackwell_with_aligned_16_bit_operands(cap, dtype, operands, why):
    assert hopper.eligible(cap, dtype, operands) == (not why), why


def test_cpu_tensors_take_the_portable_kernels():
    e = torch.zeros(16, 32, dtype=torch.bfloat16)
    assert not hopper.use_tma(e, e)


def _logits(e, c, softcap):
    z = e.double() @ c.double().T
    return z if softcap is None else softcap * torch.tanh(z / softcap)


def _forward_inputs(dtype, smoothing, softcap, weighted, n=20, v=100, d=24):
    e, c, t = make_inputs(n, v, d, dtype, "cpu", ignore="none")
    weight = torch.rand(v) if weighted else None
    cbar = None
    if smoothing and softcap is None:
        cbar = (c.float() * (1.0 if weight is None else weight[:, None])).sum(0)
    kw = dict(cbar=cbar, smoothing=smoothing, softcap=softcap, weight=weight, logit_avg=False)
    return e, c, t, kw


def _tma_forward(e, c, t, kw):
    with mock.patch.object(hopper, "use_tma", return_value=True):
        return forward.lse_forward(e, c, t, **kw)


@pytest.mark.parametrize("dtype, smoothing, softcap, weighted, cfg", CASES, ids=IDS)
def test_forward_matches_portable_kernel_and_fp64(dtype, smoothing, softcap, weighted, cfg):
    e, c, t, kw = _forward_inputs(HALF[dtype], smoothing, softcap, weighted)
    with use_config(forward=replace(cfg, block_v=64)):  # 4 tiles a split (of 256 columns)
        ours = _tma_forward(e, c, t, kw)
        today = forward.lse_forward(e, c, t, **kw)
    z = _logits(e, c, softcap)
    lse = torch.logsumexp(z, 1)
    # fp32 statistics of exact (fp64-summed) logits: fp32 rounding only.
    torch.testing.assert_close(ours.lse.double(), lse, rtol=0, atol=4e-6)
    torch.testing.assert_close(ours.lse, today.lse, rtol=0, atol=4e-6)
    torch.testing.assert_close(ours.target_logit, today.target_logit, rtol=0, atol=0)
    if smoothing:
        w = kw["weight"].double() if weighted else torch.ones(c.shape[0], dtype=torch.float64)
        want = ((z - ours.row_max.double()[:, None]) * w).sum(1)
        torch.testing.assert_close(ours.rel_sum.double(), want, rtol=1e-5, atol=1e-4)
        torch.testing.assert_close(ours.rel_sum, today.rel_sum, rtol=1e-5, atol=1e-4)
    else:
        assert ours.rel_sum is None


def test_forward_splits_and_padded_vocab():
    """V not a multiple of the tile, two splits, the last one short: padded columns
    count nowhere."""
    e, c, t, kw = _forward_inputs(torch.bfloat16, True, 20.0, False, n=20, v=71)
    with use_config(forward=SMALL):
        assert hopper.forward_splits(20, 71, e.device, SMALL) == 2
        ours = _tma_forward(e, c, t, kw)
    z = _logits(e, c, 20.0)
    torch.testing.assert_close(ours.lse.double(), torch.logsumexp(z, 1), rtol=0, atol=4e-6)
    want = (z - ours.row_max.double()[:, None]).sum(1)
    torch.testing.assert_close(ours.rel_sum.double(), want, rtol=1e-5, atol=1e-4)


def _slice_inputs(dtype, smoothing, softcap, weighted, n=20, v=150, d=24):
    e, c, t = make_inputs(n, v, d, dtype, "cpu", ignore="none")
    z = _logits(e, c, softcap).float()
    row_max = z.amax(1)
    log_sum = (z - row_max[:, None]).exp().sum(1).log()
    a, b, s = torch.rand(3, n)
    # The first row block: zero coefficients (S too, as terms.coefficients gives an
    # ignored row), no GEMM in the unfused kernel.
    a[:16], b[:16], s[:16] = 0.0, 0.0, 0.0
    k = Coefficients(a, b, s if smoothing else None)
    weight = torch.rand(v) if weighted else None
    return e, c, t, row_max, log_sum, k, weight


@pytest.mark.parametrize("dtype, smoothing, softcap, weighted, cfg", CASES, ids=IDS)
def test_grad_slice_bit_identical_to_portable_kernel(dtype, smoothing, softcap, weighted, cfg):
    """Same logits (fp64 dots under the interpreter), same epilogue order: same bits, on a
    middle slice and on the short last one (its stores clipped at the slice's width)."""
    e, c, t, row_max, log_sum, k, weight = _slice_inputs(HALF[dtype], smoothing, softcap, weighted)
    p = types.SimpleNamespace(softcap=softcap)
    inv = torch.full((1,), 0.5)
    width = 96
    for v0 in (48, 144 - 48):  # 96 columns (3 tiles), then the last 54
        cols = min(width, c.shape[0] - v0)
        ours, today = (torch.full((e.shape[0], width), 7.0, dtype=e.dtype) for _ in range(2))
        with use_config(slices=cfg):
            hopper.grad_slice(ours[:, :cols], e, c, t, row_max, log_sum, k, weight, inv, v0, p=p)
            slices._triton_grad_slice(
                today[:, :cols], e, c, t, row_max, log_sum, k, weight, inv, v0, p=p
            )
        assert torch.equal(ours, today)
        assert bool((ours[:, cols:] == 7.0).all())  # nothing written past the slice
        assert bool((ours[:16, :cols] == 0).all())
        assert not bool(ours[:16, :cols].signbit().any())  # +0, as the skip stores


def test_launchers_dispatch_to_the_tma_kernels_when_eligible():
    """The one branch in each portable launcher: ``use_tma`` true → the TMA launcher runs
    (and gives what the portable kernel gives); false → it does not."""
    e, c, t, kw = _forward_inputs(torch.bfloat16, True, 20.0, False)
    with (
        use_config(forward=SMALL),
        mock.patch.object(hopper, "use_tma", return_value=True),
        mock.patch.object(hopper, "launch_forward", wraps=hopper.launch_forward) as fast,
    ):
        ours = forward.lse_forward(e, c, t, **kw)
        assert fast.call_count == 1
        # The ablations' extras (logit sums, tile LSEs) stay on the portable kernel.
        today = forward.lse_forward(e, c, t, **dict(kw, logit_avg=True))
        assert fast.call_count == 1
    torch.testing.assert_close(ours.lse, today.lse, rtol=0, atol=4e-6)

    # The TMA kernel twice: bit-identical run to run too.
    e, c, t, row_max, log_sum, k, weight = _slice_inputs(torch.bfloat16, True, 20.0, False)
    p = types.SimpleNamespace(softcap=20.0)
    args = (e, c, t, row_max, log_sum, k, weight, torch.ones(1), 32)
    outs = []
    for eligible in (False, True, True):
        out = torch.empty(e.shape[0], 64, dtype=e.dtype)
        with (
            use_config(slices=SMALL),
            mock.patch.object(hopper, "use_tma", return_value=eligible),
            mock.patch.object(hopper, "grad_slice", wraps=hopper.grad_slice) as fast,
        ):
            slices._triton_grad_slice(out, *args, p=p)
        assert fast.call_count == int(eligible)
        outs.append(out)
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[1], outs[2])


def test_switch_off(monkeypatch):
    monkeypatch.setenv("PERFSUITE_TMA", "0")
    assert not hopper.enabled()
    monkeypatch.setenv("PERFSUITE_TMA", "1")
    assert hopper.enabled()


def test_fitting_ctas():
    """The occupancy arithmetic the launcher sizes its grid by (kernel-report's too)."""
    assert hopper.fitting_ctas(224, 99344, 8) == 1  # registers: 224 × 256 threads
    assert hopper.fitting_ctas(87, 99360, 8, tmem=256) == 2  # shared and tensor memory
    assert hopper.fitting_ctas(87, 99360, 8, tmem=512) == 1
    assert hopper.fitting_ctas(64, 240_000, 8) == 0  # over the per-CTA shared memory
    assert hopper.fitting_ctas(32, 0, 4) == 16  # threads


def test_persistent_grid_follows_the_loaded_build(monkeypatch):
    """First launch of a build: SMs × the config's CTAs/SM; after it, SMs × what fits."""
    grids = []

    class Compiled:
        n_regs = 87
        metadata = types.SimpleNamespace(shared=99360, num_warps=8, tmem_size=256)

    class Kernel:
        def __getitem__(self, grid):
            grids.append(grid)
            return lambda *args, **kwargs: Compiled()

    monkeypatch.setattr(hopper, "interpreting", lambda: False)
    monkeypatch.setattr(hopper, "_sm_count", lambda index: 148)
    monkeypatch.setattr(hopper, "_RESIDENT", {})
    cuda = torch.device("cuda", 0)
    cfg = tma_config("forward", "sm_90")
    for _ in range(2):
        hopper._launch(Kernel(), ("forward", cuda, "test"), 10_000, cuda, cfg)
    assert grids == [(148,), (296,)]
    hopper._launch(Kernel(), ("forward", cuda, "small"), 100, cuda, cfg)
    assert grids[-1] == (100,)  # less work than a wave: one program per item
