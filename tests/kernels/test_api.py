"""Input handling: errors, layouts, batch dims, the all-ignored case, recompilation, offsets."""

from __future__ import annotations

import pytest
import torch
import triton
import triton.language as tl
from helpers import check, grads, make_inputs

from perfsuite.kernels import linear_cross_entropy
from perfsuite.kernels.common import wide_offsets


@pytest.mark.parametrize(
    ("mutate", "error", "match"),
    [
        (lambda e, c, t: (e, c[:, :-1], t), ValueError, "mismatched D"),
        (lambda e, c, t: (e, c, t.float()), TypeError, "integer"),
        (lambda e, c, t: (e, c, t[:-1]), ValueError, "leading shape"),
        (lambda e, c, t: (e, c.double(), t), TypeError, "dtype"),
        (lambda e, c, t: (e.double(), c.double(), t), TypeError, "unsupported"),
        (lambda e, c, t: (e, c, torch.where(t == 1, 20, t)), ValueError, r"20 not in \[0, 20\)"),
    ],
)
def test_bad_tensors(device, mutate, error, match, monkeypatch):
    # On CUDA the range check is a device-side assert unless PERFSUITE_DEBUG=1; an
    # assert that fires poisons the CUDA context of the whole test process.
    monkeypatch.setenv("PERFSUITE_DEBUG", "1")
    e, c, t = make_inputs(8, 20, 16, torch.float32, device, ignore="none")
    t[0] = 1
    with pytest.raises(error, match=match):
        linear_cross_entropy(*mutate(e, c, t))


def test_the_public_function_has_no_ablation_knobs(device):
    e, c, t = make_inputs(8, 20, 16, torch.float32, device)
    for knob in ("filter_eps", "sort_vocab", "tile_list", "accum_fp32", "backward"):
        with pytest.raises(TypeError, match=knob):
            linear_cross_entropy(e, c, t, **{knob: None})


def test_non_contiguous_e_leading_dims_and_transposed(device):
    e, c, t = make_inputs(24, 50, 64, torch.float32, device)
    check(e[:, ::2], c[:, :32], t, beta=0.1)  # inner stride 2, viewed in place
    e3, t3 = e[:, :32].reshape(4, 6, 32), t.reshape(4, 6)
    check(e3, c[:, :32], t3, beta=0.1, reduction="none")
    check(e3.transpose(0, 1), c[:, :32], t3.transpose(0, 1), beta=0.1, softcap=10.0, impl="fused")


@pytest.mark.parametrize("impl", ["split", "fused"])
def test_all_ignored_is_zero(device, impl):
    e, c, t = make_inputs(10, 40, 16, torch.bfloat16, device, ignore="all")
    loss, de, dc = grads(e, c, t, label_smoothing=0.1, impl=impl)
    assert loss.item() == 0.0 and not de.any() and not dc.any()
    assert de.dtype == torch.bfloat16


def test_beta_is_not_a_constexpr():
    """β > 0 values share one specialisation; only β = 0 vs β > 0 differ."""
    from perfsuite.kernels import backward

    jit = backward._backward_kernel
    params = {p.name: p for p in getattr(jit, "params", [])}
    if params:
        assert not params["smooth_w"].is_constexpr and not params["TargetW"].is_constexpr
    flags = backward._HEURISTICS["HAS_SMOOTHING"]
    assert flags({"smooth_w": 0.1 / 300}) == flags({"smooth_w": 0.7 / 300}) is True
    assert flags({"smooth_w": 0.0}) is False


@pytest.mark.skipif(not torch.cuda.is_available(), reason="compile cache exists only on GPU")
def test_new_beta_does_not_recompile(device):
    from perfsuite.kernels import backward, forward

    e, c, t = make_inputs(64, 500, 64, torch.bfloat16, device)
    e.requires_grad_()

    def cache_sizes() -> list[int]:
        out = []
        for k in (forward._forward_kernel, backward._backward_kernel):
            out.append(sum(len(v[0]) for v in k.device_caches.values()))
        return out

    linear_cross_entropy(e, c, t, label_smoothing=0.1).backward()
    before = cache_sizes()
    for beta in (0.2, 0.35, 1.0):
        linear_cross_entropy(e, c, t, label_smoothing=beta).backward()
    assert cache_sizes() == before


@triton.jit
def _offsets_kernel(Index, Out, stride):
    tl.store(Out, wide_offsets(tl.load(Index), stride))


def test_int64_offsets(device):
    """Row index × stride past 2**31 (as N·V > 2**31 needs) does not wrap."""
    index = torch.tensor([2**20 + 3], dtype=torch.int32, device=device)
    out = torch.zeros(1, dtype=torch.int64, device=device)
    _offsets_kernel[(1,)](index, out, 4096 + 7)
    assert out.item() == (2**20 + 3) * (4096 + 7) > 2**31


def test_fused_under_no_grad_runs_no_gradient_pass(device, monkeypatch):
    """Evaluation with impl="fused": requires_grad inputs but grad mode off."""
    from perfsuite.kernels import function

    def no_backward(*args, **kwargs):
        raise AssertionError("gradient pass under torch.no_grad()")

    monkeypatch.setattr(function, "lce_backward", no_backward)
    e, c, t = make_inputs(16, 50, 16, torch.float32, device)
    e.requires_grad_()
    with torch.no_grad():
        loss = linear_cross_entropy(e, c, t, impl="fused")
    assert torch.isfinite(loss)


def test_autotuners_reset_only_buffers_that_exist():
    """Triton <= 3.7 calls .zero_() on every reset_to_zero name, None included."""
    from perfsuite.kernels import forward

    plain = forward._tuned((False, False, False, False), has_avg=False, has_tile_lse=False)
    sorted_ = forward._tuned((False, False, True, False), has_avg=True, has_tile_lse=False)
    assert not (getattr(plain, "reset_to_zero", None) or [])
    assert list(getattr(sorted_, "reset_to_zero", [])) == ["LogitAvg"]
    assert plain is not sorted_  # one autotuner (and one timing) per variant
