"""The default slice backward: engines agree, results are bit-deterministic, the budget
sets the slice width and nothing else, fp16 keeps small gradients."""

from __future__ import annotations

import itertools

import pytest
import torch
from helpers import DTYPES, SMALL, bits, check, full_loss, grads, lce, make_inputs

from perfsuite.kernels import cublas_route, slices
from perfsuite.kernels.configs import use_config

# Every pair of dtype, β and softcap values; the other triples: test_values_and_grads' test_grid
PAIRWISE = [
    ("fp32", 0.0, 20.0), ("fp32", 0.1, None), ("bf16", 0.0, None),
    ("bf16", 0.1, 20.0), ("fp16", 0.0, 20.0), ("fp16", 0.1, None),
]  # fmt: skip


@pytest.mark.parametrize(("dtype", "beta", "softcap"), PAIRWISE)
def test_triton_engine_matches_reference_over_several_slices(device, dtype, beta, softcap):
    """A budget of one grain (128 columns, four SMALL slice tiles): V = 200 takes slices of
    128 and 72; N and D two SMALL blocks, the last masked (torch engine: test_torch_engine_grid)."""
    e, c, t = make_inputs(20, 200, 20, DTYPES[dtype], device)
    per = slices.bytes_per_column(20, 20, e.dtype, e.device, "triton", softcap is not None)
    budget = slices.WIDTH_GRAIN * per
    assert slices.slice_width(200, per, budget) == 128
    with use_config(**SMALL):
        check(e, c, t, beta=beta, softcap=softcap, engine="triton", memory_budget=budget)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_engines_agree(device, dtype, monkeypatch):
    """The torch engine and the cuBLAS route (bf16, its small epilogue blocks) are the same
    algorithm: equal to the Triton path up to the order of fp32 sums and one rounding of G
    and of the output in 16-bit types."""
    if device != "cpu":
        pytest.skip("the torch engine is the CPU path")
    monkeypatch.setattr(cublas_route, "INTERPRETER_BLOCK", (16, 32))
    e, c, t = make_inputs(20, 200, 20, DTYPES[dtype], device)  # budget 1: slices of 128, 72
    options = dict(label_smoothing=0.1, softcap=20.0, memory_budget=1)
    with use_config(**SMALL):
        tri = grads(e, c, t, engine="triton", **options)
    for engine in ("torch", "cublas") if dtype == "bf16" else ("torch",):
        other = grads(e, c, t, engine=engine, **options)
        for name, a, b in zip(("loss", "dE", "dC"), other, tri, strict=True):
            scale = b.float().abs().max().item()
            tol = 1e-5 if dtype == "fp32" else 2 * 2**-8
            assert (a.float() - b.float()).abs().max().item() <= tol * scale, (engine, name)


@pytest.mark.parametrize("engine", ["triton", "torch"])
def test_bit_identical_run_to_run(device, engine):
    if engine == "torch" and device != "cpu":
        pytest.skip("the torch engine is the CPU path")
    e, c, t = make_inputs(20, 200, 20, torch.bfloat16, device)  # budget 1: slices of 128, 72
    options = dict(label_smoothing=0.1, softcap=30.0, engine=engine, memory_budget=1)
    with use_config(**SMALL):
        first = grads(e, c, t, **options)
        second = grads(e, c, t, **options)
    for name, a, b in zip(("loss", "dE", "dC"), first, second, strict=True):
        assert torch.equal(bits(a), bits(b)), name


def test_slice_width_arithmetic():
    assert slices.slice_width(256_000, 8192 * 2, 64 * 2**20) == 4096
    assert slices.slice_width(256_000, 10**9, 1) == 128  # never below one grain
    assert slices.slice_width(256_000, 8192 * 2, None) == 4096  # Gemma2-2B's default: 63
    assert slices.slice_width(2048, 256 * 4, None) == 128  # small: a sixteenth of V
    assert slices.slice_width(300, 4, 2**30) == 384  # never past the vocabulary's grains
    # GPT-2's 50,257 at N 8192 bf16 with 64 MiB: 4096 columns fit, so 13 slices; evened
    # out they are 3,968 wide (the last 2,641) instead of 12 × 4096 and 1,105.
    assert slices.slice_width(50_257, 8192 * 2, 64 * 2**20) == 3968
    assert slices.slice_width(1000, 1, 384) == 384  # three slices: 384, 384, 232


WIDTHS = list(
    itertools.product(
        (1, 300, 8192),  # N
        (1, 100, 1000, 50_257, 128_256, 256_000),  # V
        (64, 2304),  # D
        (torch.float32, torch.bfloat16, torch.float16),
        (None, 1, 10**5, 64 * 2**20, 2**40),  # budget
    )
)


@pytest.mark.parametrize("engine", ["triton", "torch"])
@pytest.mark.parametrize("fp32_out", [True, False])
def test_slice_geometry_follows_the_budget_rule(engine, fp32_out, monkeypatch):
    """For every N, V, D, dtype and budget: widths a multiple of 128 (so every slice
    buffer's row stride and every C_s start is 16-byte aligned in any dtype), the budget
    held unless it is below one grain, the fewest slices it allows, evened out (the last
    short by less than a grain per slice), and no width past the vocabulary's grains."""
    monkeypatch.setattr(slices, "_fp32_out_mm", lambda device: fp32_out)
    cuda = torch.device("cuda")
    grain = slices.WIDTH_GRAIN
    assert grain % 128 == 0
    for n, v, d, dtype, budget in WIDTHS:
        per = slices.bytes_per_column(n, d, dtype, cuda, engine, softcap=True)
        width = slices.slice_width(v, per, budget)
        case = (n, v, d, dtype, budget, width)
        size = torch.finfo(dtype).bits // 8
        assert width % grain == 0 and width >= grain, case
        assert width * size % 16 == 0 and width * d * size % 16 == 0, case  # G rows, C_s
        limit = budget if budget is not None else min(slices.DEFAULT_BUDGET, per * -(-v // 16))
        holds = limit // per // grain * grain  # grains the budget holds
        if holds >= grain:
            assert width * per <= limit, case
            assert -(-v // width) == -(-v // min(holds, -(-v // grain) * grain)), case
        else:
            assert width == grain, case  # exceeded by one grain at most, never refused
        slices_needed = -(-v // width)
        assert v - (slices_needed - 1) * width > width - slices_needed * grain, case
        assert width < v + grain, case


def test_budget_changes_width_not_result(device):
    """One slice or many: the same gradients up to the order of dE's fp32 sums."""
    e, c, t = make_inputs(33, 1000, 40, torch.float32, device)
    one = grads(e, c, t, label_smoothing=0.1, memory_budget=2**30)
    many = grads(e, c, t, label_smoothing=0.1, memory_budget=1)
    for a, b in zip(one, many, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


def test_fp16_keeps_gradients_below_its_subnormals(device, monkeypatch):
    """p·g < 6e-8 flushes to zero in fp16 unless G is rescaled: here p ≈ 1/1024 and
    g = 1/256 of an upstream 1/32, as a mean over 2048 rows of 4096 classes gives."""
    e, c, t = make_inputs(256, 1024, 16, torch.float32, device, ignore="none")

    def grads_of(loss, e, c):
        e, c = e.detach().clone().requires_grad_(), c.detach().clone().requires_grad_()
        (loss(e, c, t) / 32).backward()
        return e.grad, c.grad

    ref = grads_of(lambda e, c, t: full_loss(e, c, t, 0.0, None, "mean"), e, c)
    half = [x.half() for x in (e, c)]
    scaled = grads_of(lce, *half)
    monkeypatch.setattr(
        slices, "_gradient_scale", lambda k, weight, dtype: torch.ones((), device=k.prob.device)
    )
    flushed = grads_of(lce, *half)

    def err(x):
        pairs = zip(x, ref, strict=True)
        return [(a.float() - b).norm().item() / b.norm().item() for a, b in pairs]

    good, bad = err(scaled), err(flushed)
    assert all(g_ < 0.25 * b_ for g_, b_ in zip(good, bad, strict=True)), (good, bad)


# dtype × β × softcap in full, each reduction with every dtype, β and softcap.
TORCH_GRID = [
    (dtype, beta, cap, ("mean", "sum", "none")[(i + j) % 3])
    for (i, dtype), (j, beta), cap in itertools.product(
        enumerate(DTYPES), enumerate([0.0, 0.1, 1.0]), [None, 20.0]
    )
]


@pytest.mark.parametrize(("dtype", "beta", "softcap", "reduction"), TORCH_GRID)
def test_torch_engine_grid(device, dtype, beta, softcap, reduction):
    if device != "cpu":
        pytest.skip("the torch engine is the CPU path")
    e, c, t = make_inputs(33, 550, 40, DTYPES[dtype], device, ignore="prefix")
    check(e, c, t, beta=beta, softcap=softcap, reduction=reduction, engine="torch", memory_budget=1)
